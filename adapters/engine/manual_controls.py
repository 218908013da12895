"""Manual controls as one tagged union, applied through the engine by one ``match``.

The CLI (``ctxledger control``) and the web inspector both build a control struct and call
:func:`apply_control`; as JSON a control is ``{"type": "Pin", "agent_id": …, "item_id": …}``.
"""

from __future__ import annotations

from typing import Annotated, assert_never

import msgspec

from ctxledger.adapters.engine import ContextEngine
from ctxledger.domain.errors import InvalidInputError

__all__ = [
    "Control",
    "ControlOutcome",
    "Pin",
    "Promote",
    "PromoteFinding",
    "Rebuild",
    "Refresh",
    "Remove",
    "Unpin",
    "Verify",
    "apply_control",
    "decode_control",
]

NonEmpty = Annotated[str, msgspec.Meta(min_length=1)]
DEFAULT_REASON = "manual"
"""The reason recorded when a remove, refresh or rebuild gives none."""


class Pin(msgspec.Struct, tag=True, frozen=True, kw_only=True):
    """Keep an item in every pack until it is unpinned."""

    agent_id: NonEmpty
    item_id: NonEmpty
    by: str = ""


class Unpin(msgspec.Struct, tag=True, frozen=True, kw_only=True):
    """Let a pinned item compete for the budget again."""

    agent_id: NonEmpty
    item_id: NonEmpty
    by: str = ""


class Remove(msgspec.Struct, tag=True, frozen=True, kw_only=True):
    """Drop an item from the pool for good (refused for pinned or mandatory items)."""

    agent_id: NonEmpty
    item_id: NonEmpty
    reason: str = DEFAULT_REASON


class Verify(msgspec.Struct, tag=True, frozen=True, kw_only=True):
    """Mark one finding as verified, with the evidence for it."""

    agent_id: NonEmpty
    item_id: NonEmpty
    by: str = ""
    evidence: str = ""


class Promote(msgspec.Struct, tag=True, frozen=True, kw_only=True):
    """Promote an item to a project-memory candidate (needs an engine with a catalog)."""

    agent_id: NonEmpty
    item_id: NonEmpty


class PromoteFinding(msgspec.Struct, tag=True, frozen=True, kw_only=True):
    """Promote a finding into a context pool (``to``: another agent; default the agent's
    parent, or the agent itself) as a structured finding with its provenance."""

    agent_id: NonEmpty
    item_id: NonEmpty
    to: str = ""
    by: str = ""


class Refresh(msgspec.Struct, tag=True, frozen=True, kw_only=True):
    """Start a new generation from durable state only (a manual refresh)."""

    agent_id: NonEmpty
    reason: str = DEFAULT_REASON


class Rebuild(msgspec.Struct, tag=True, frozen=True, kw_only=True):
    """Re-pack into a new generation below the watermark."""

    agent_id: NonEmpty
    reason: str = DEFAULT_REASON


Control = Pin | Unpin | Remove | Verify | Promote | PromoteFinding | Refresh | Rebuild
"""Every manual control; the ``type`` tag is the class name."""


class ControlOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What a control did beyond appending its events."""

    generation: int | None = None
    """The generation a refresh or rebuild started; None for the item controls."""
    message: str | None = None
    """The refresh or rebuild message; None for the item controls."""
    memory_id: str | None = None
    """The memory entry a promote created; None otherwise."""
    item_id: str | None = None
    """The pool item a finding promotion created; None otherwise."""


_DECODER = msgspec.json.Decoder(Control)


def decode_control(data: bytes | str) -> Control:
    """A control from its JSON form; anything else is an InvalidInputError naming the problem."""
    try:
        return _DECODER.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise InvalidInputError(f"invalid control: {exc}") from None


def apply_control(engine: ContextEngine, control: Control) -> ControlOutcome:
    """Append the control's events through the engine (its checks refuse bad input first)."""
    match control:
        case Pin(agent_id=agent_id, item_id=item_id, by=by):
            engine.pin(agent_id, item_id, by=by)
        case Unpin(agent_id=agent_id, item_id=item_id, by=by):
            engine.unpin(agent_id, item_id, by=by)
        case Remove(agent_id=agent_id, item_id=item_id, reason=reason):
            engine.remove(agent_id, item_id, reason=reason)
        case Verify(agent_id=agent_id, item_id=item_id, by=by, evidence=evidence):
            engine.verify_finding(agent_id, item_id, by=by, evidence=evidence)
        case Promote(agent_id=agent_id, item_id=item_id):
            return ControlOutcome(memory_id=engine.promote(agent_id, item_id))
        case PromoteFinding(agent_id=agent_id, item_id=item_id, to=to, by=by):
            return ControlOutcome(
                item_id=engine.promote_finding(agent_id, item_id, to=to, by=by).id
            )
        case Refresh(agent_id=agent_id, reason=reason):
            built = engine.refresh(agent_id, reason=reason, trigger="manual")
            return ControlOutcome(generation=built.generation, message=built.message)
        case Rebuild(agent_id=agent_id, reason=reason):
            built = engine.rebuild(agent_id, reason=reason)
            return ControlOutcome(generation=built.generation, message=built.message)
        case _:
            assert_never(control)
    return ControlOutcome()
