"""Provider request bodies from PromptParts: Anthropic Messages and OpenAI Chat, as plain dicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.prompt import SEGMENT_ORDER, PromptParts, Segment

__all__ = [
    "ANTHROPIC_MAX_BREAKPOINTS",
    "DEFAULT_USER_TURN",
    "count_breakpoints",
    "to_anthropic",
    "to_openai",
]

ANTHROPIC_MAX_BREAKPOINTS = 4
"""Anthropic accepts at most four ``cache_control`` breakpoints per request."""

DEFAULT_USER_TURN = "Continue with the task described in the context above."
"""The user turn sent when the caller gives no messages (the Messages API needs one)."""

_EPHEMERAL = {"type": "ephemeral"}


def count_breakpoints(value: Any) -> int:
    """Number of ``cache_control`` markers anywhere in a JSON-like value."""
    if isinstance(value, Mapping):
        own = 1 if value.get("cache_control") is not None else 0
        return own + sum(count_breakpoints(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(count_breakpoints(v) for v in value)
    return 0


def _breakpoint_segments(parts: PromptParts, budget: int) -> set[Segment]:
    """Which segment ends get a breakpoint, best first, at most ``budget`` of them.

    Never VOLATILE (it changes every prompt; caching it only pays cache writes). Priority: the
    end of GENERATION (longest prefix reused within a generation), the end of the static prefix
    (survives a refresh), then the end of ROLE (shared by every agent of the role)."""
    non_empty = [s for s in (Segment.ROLE, Segment.SESSION) if parts.segments[s]]
    ranked: list[Segment] = []
    if parts.segments[Segment.GENERATION]:
        ranked.append(Segment.GENERATION)
    ranked.extend(reversed(non_empty))
    return set(ranked[: max(budget, 0)])


def to_anthropic(
    parts: PromptParts,
    *,
    model: str,
    max_tokens: int,
    messages: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """An Anthropic Messages request body.

    ``system`` is one text block per non-empty segment, in prompt order, with an ephemeral
    ``cache_control`` breakpoint at the end of ROLE, SESSION and GENERATION (never VOLATILE).
    Breakpoints already present in ``messages`` count against Anthropic's limit of four: the
    lowest-priority segment breakpoints are left out so the request never holds more than four.
    With no ``messages``, a single user turn :data:`DEFAULT_USER_TURN` is sent.

    Raises InvalidInputError when ``messages`` alone hold more than four breakpoints or
    ``max_tokens`` is not positive.
    """
    if max_tokens <= 0:
        raise InvalidInputError(f"max_tokens must be positive, got {max_tokens}")
    caller = [dict(m) for m in messages] or [{"role": "user", "content": DEFAULT_USER_TURN}]
    used = count_breakpoints(caller)
    if used > ANTHROPIC_MAX_BREAKPOINTS:
        raise InvalidInputError(
            f"messages hold {used} cache_control breakpoints; Anthropic accepts at most "
            f"{ANTHROPIC_MAX_BREAKPOINTS}"
        )
    marked = _breakpoint_segments(parts, ANTHROPIC_MAX_BREAKPOINTS - used)
    system: list[dict[str, Any]] = []
    for segment in SEGMENT_ORDER:
        text = parts.segments[segment]
        if not text:
            continue
        block: dict[str, Any] = {"type": "text", "text": text}
        if segment in marked:
            block["cache_control"] = dict(_EPHEMERAL)
        system.append(block)
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens, "messages": caller}
    if system:
        body["system"] = system
    return body


def to_openai(
    parts: PromptParts,
    *,
    model: str,
    messages: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """An OpenAI Chat Completions request body, stable prefix first.

    A ``system`` message holds ``parts.static``, then a ``user`` message holds
    ``parts.dynamic``, then the caller's ``messages``; empty parts are left out. OpenAI caches
    prompt prefixes automatically, so the order alone makes the static part cacheable.

    Raises InvalidInputError when the request would have no message at all.
    """
    body_messages: list[dict[str, Any]] = []
    if parts.static:
        body_messages.append({"role": "system", "content": parts.static})
    if parts.dynamic:
        body_messages.append({"role": "user", "content": parts.dynamic})
    body_messages.extend(dict(m) for m in messages)
    if not body_messages:
        raise InvalidInputError("empty prompt: nothing to send")
    return {"model": model, "messages": body_messages}
