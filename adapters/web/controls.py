"""Manual-control forms of the web inspector: parse, check, and apply through the engine."""

from __future__ import annotations

import dataclasses
import hmac
from collections.abc import Mapping
from typing import Final
from urllib.parse import parse_qs, urlsplit

from ctxledger.adapters.engine.manual_controls import (
    Control,
    Pin,
    Promote,
    Rebuild,
    Refresh,
    Remove,
    Unpin,
    Verify,
)
from ctxledger.domain.memory import is_memory_id
from ctxledger.projections.pool import AgentPool

__all__ = [
    "ACTIONS",
    "ITEM_ACTIONS",
    "MEMORY_ACTIONS",
    "MAX_FORM_BYTES",
    "ControlForm",
    "FormError",
    "check_item",
    "check_origin",
    "check_token",
    "control_of",
    "parse_control",
    "parse_form",
    "parse_memory_control",
]

ACTIONS: Final = ("refresh", "rebuild", "pin", "unpin", "remove", "promote", "verify")
ITEM_ACTIONS: Final = frozenset({"pin", "unpin", "remove", "promote", "verify"})
MEMORY_ACTIONS: Final = ("verify",)
MAX_FORM_BYTES: Final = 16 * 1024
_FIELDS: Final = frozenset(
    {"csrf_token", "action", "item_id", "memory_id", "reason", "evidence", "next"}
)
_LIMITS: Final = {"item_id": 200, "memory_id": 80, "reason": 200, "evidence": 500, "next": 500}
MANUAL_REASON: Final = "no reason given"


class FormError(Exception):
    """A refused form: the HTTP status and a one-line reason; nothing was written."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def parse_form(body: bytes, content_type: str) -> dict[str, str]:
    """The fields of an ``application/x-www-form-urlencoded`` body, each given at most once."""
    media = content_type.split(";", 1)[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        raise FormError(400, "the form must be application/x-www-form-urlencoded")
    if len(body) > MAX_FORM_BYTES:
        raise FormError(400, f"the form is larger than {MAX_FORM_BYTES} bytes")
    try:
        text = body.decode("utf-8")
        parsed = parse_qs(
            text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=16
        )
    except (UnicodeDecodeError, ValueError):
        raise FormError(400, "the form body is not valid UTF-8 form encoding") from None
    fields: dict[str, str] = {}
    for name, values in parsed.items():
        if name not in _FIELDS:
            raise FormError(400, f"unknown form field {name[:40]!r}")
        if len(values) != 1:
            raise FormError(400, f"form field {name!r} given more than once")
        fields[name] = values[0]
    return fields


def check_token(fields: Mapping[str, str], token: str) -> None:
    """Refuse (403) a form without the server's secret token; constant-time comparison."""
    given = fields.get("csrf_token", "")
    if not given or not hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8")):
        raise FormError(403, "missing or invalid CSRF token")


def check_origin(origin: str | None, fetch_site: str | None, own_origin: str) -> None:
    """Refuse (403) a request a browser marks as coming from another site."""
    if fetch_site is not None and fetch_site.lower() == "cross-site":
        raise FormError(403, "cross-site request refused")
    if origin is None:
        return
    parts = urlsplit(origin)
    if origin == "null" or f"{parts.scheme}://{parts.netloc}".lower() != own_origin.lower():
        raise FormError(403, "cross-origin request refused")


@dataclasses.dataclass(frozen=True, slots=True)
class ControlForm:
    """A validated manual-control request."""

    action: str
    item_id: str = ""
    memory_id: str = ""
    reason: str = ""
    evidence: str = ""
    next: str = ""


def _clean(name: str, value: str) -> str:
    value = value.strip()
    if len(value) > _LIMITS[name]:
        raise FormError(400, f"{name} is longer than {_LIMITS[name]} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise FormError(400, f"{name} contains control characters")
    return value


def _safe_next(value: str) -> str:
    """A local inspector path to return to, or "" (never another host)."""
    if not value.startswith("/agents/") or "//" in value or "\\" in value:
        return ""
    return value


def parse_control(fields: Mapping[str, str]) -> ControlForm:
    """Validate the fields of a control form (400 with the reason on any problem)."""
    action = fields.get("action", "")
    if action not in ACTIONS:
        expected = ", ".join(ACTIONS)
        raise FormError(400, f"unknown action {action[:40]!r}; expected one of {expected}")
    item_id = _clean("item_id", fields.get("item_id", ""))
    if action in ITEM_ACTIONS and not item_id:
        raise FormError(400, f"{action} needs an item_id")
    if action not in ITEM_ACTIONS and item_id:
        raise FormError(400, f"{action} takes no item_id")
    if fields.get("memory_id"):
        raise FormError(400, f"{action} takes no memory_id")
    return ControlForm(
        action=action,
        item_id=item_id,
        reason=_clean("reason", fields.get("reason", "")),
        evidence=_clean("evidence", fields.get("evidence", "")),
        next=_safe_next(_clean("next", fields.get("next", ""))),
    )


def parse_memory_control(fields: Mapping[str, str]) -> ControlForm:
    """Validate a memory control form: ``verify`` of one well-formed memory id."""
    action = fields.get("action", "")
    if action not in MEMORY_ACTIONS:
        raise FormError(400, f"unknown memory action {action[:40]!r}; expected verify")
    memory_id = _clean("memory_id", fields.get("memory_id", ""))
    if not is_memory_id(memory_id):
        raise FormError(400, f"malformed memory_id {memory_id[:40]!r}")
    if fields.get("item_id"):
        raise FormError(400, "a memory control takes no item_id")
    return ControlForm(
        action=action,
        memory_id=memory_id,
        reason=_clean("reason", fields.get("reason", "")),
        next="",
    )


def check_item(pool: AgentPool, form: ControlForm) -> None:
    """The item must be in the agent's pool now (400 otherwise), before anything is written."""
    if form.action not in ITEM_ACTIONS:
        return
    if form.item_id not in pool.items:
        raise FormError(400, f"the agent has no item {form.item_id[:80]!r}")
    removed = pool.removed.get(form.item_id)
    if removed:
        raise FormError(400, f"item {form.item_id[:80]!r} was removed ({removed})")
    item = pool.items[form.item_id]
    if form.action == "remove" and (item.pinned or item.mandatory):
        raise FormError(400, f"item {form.item_id[:80]!r} is pinned or mandatory; unpin it first")


def control_of(agent_id: str, form: ControlForm, actor: str) -> Control:
    """The control struct of a validated form (``apply_control`` appends its events). The
    *actor* (``web-inspector@address[#session]``) is the ``by`` of pin, unpin and verify; a
    remove, refresh or rebuild, which record no ``by``, carry it in their reason."""
    reason = f"{form.reason or MANUAL_REASON} (by {actor})"
    match form.action:
        case "refresh":
            return Refresh(agent_id=agent_id, reason=reason)
        case "rebuild":
            return Rebuild(agent_id=agent_id, reason=reason)
        case "pin":
            return Pin(agent_id=agent_id, item_id=form.item_id, by=actor)
        case "unpin":
            return Unpin(agent_id=agent_id, item_id=form.item_id, by=actor)
        case "remove":
            return Remove(agent_id=agent_id, item_id=form.item_id, reason=reason)
        case "verify":
            return Verify(agent_id=agent_id, item_id=form.item_id, by=actor, evidence=form.evidence)
        case "promote":  # the body goes to the catalog, the ledger gets MemoryPromoted
            return Promote(agent_id=agent_id, item_id=form.item_id)
        case _:
            raise FormError(400, f"unknown action {form.action[:40]!r}")
