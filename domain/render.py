"""Provider request bodies from PromptParts: Anthropic Messages, OpenAI Chat and Responses."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, NamedTuple, NotRequired, TypedDict

import msgspec

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.prompt import SEGMENT_ORDER, PromptParts, Segment

__all__ = [
    "ANTHROPIC_MAX_BREAKPOINTS",
    "CACHE_TTLS",
    "DEFAULT_USER_TURN",
    "PROVIDERS",
    "AnthropicRendered",
    "AnthropicRequest",
    "CacheControl",
    "CacheTTL",
    "OpenAIChatRequest",
    "OpenAIResponsesRequest",
    "Provider",
    "ProviderRequest",
    "RenderNote",
    "SystemBlock",
    "anthropic_min_cacheable_tokens",
    "count_breakpoints",
    "render_anthropic",
    "to_anthropic",
    "to_openai",
    "to_openai_responses",
]

Provider = Literal["anthropic", "openai", "openai-responses"]
"""Request shapes: Anthropic Messages, OpenAI Chat Completions, OpenAI Responses."""

PROVIDERS: tuple[Provider, ...] = ("anthropic", "openai", "openai-responses")

CacheTTL = Literal["5m", "1h"]
"""Anthropic's cache lifetimes (``cache_control.ttl``); without one Anthropic uses 5 minutes."""

CACHE_TTLS: tuple[CacheTTL, ...] = ("5m", "1h")

ANTHROPIC_MAX_BREAKPOINTS = 4
"""Anthropic accepts at most four ``cache_control`` breakpoints per request."""

DEFAULT_USER_TURN = "Continue with the task described in the context above."
"""The user turn sent when the caller gives no messages (the Messages API needs one)."""

_DEFAULT_MIN_CACHEABLE = 1024
_HAIKU_MIN_CACHEABLE = 2048
_MIN_CACHEABLE_BY_MODEL: tuple[tuple[str, int], ...] = (
    ("opus-4-6", 4096),
    ("opus-4-5", 4096),
    ("haiku-4-5", 4096),
    ("sonnet-4-6", 2048),
)
"""Anthropic's minimum cacheable prompt length per model family, from the "Cache limitations"
table of Anthropic's prompt-caching guide (docs.claude.com/en/docs/build-with-claude/
prompt-caching): 1024 tokens for most models (Sonnet 4.5, Sonnet 4, Opus 4.1, Opus 4,
Sonnet 3.7), 2048 for the Haiku 3 class and Sonnet 4.6, 4096 for Opus 4.5/4.6 and Haiku 4.5.
A model not in the table: 2048 if its name says haiku, else 1024."""

_TTL_RANK: dict[str, int] = {"5m": 0, "1h": 1}


class CacheControl(TypedDict):
    """Anthropic's ``cache_control`` marker (the keys and types of the anthropic SDK's
    ``CacheControlEphemeralParam``, so a type checker takes one for the other)."""

    type: Literal["ephemeral"]
    ttl: NotRequired[CacheTTL]


class SystemBlock(TypedDict):
    """One Anthropic ``system`` text block (one prompt segment).

    It declares every key of the anthropic SDK's ``TextBlockParam`` with the same type, so
    ``client.messages.create(**request)`` type-checks under ``mypy --strict`` (a TypedDict is
    accepted for another only when it has all of the other's keys, each of the same type; a
    key the SDK allows ``None`` in must allow it here too). The engine never sets
    ``citations`` (declared only for that match) and never sets ``cache_control`` to None.
    Checked against the installed SDK by tests/integration/test_render_types.py."""

    type: Literal["text"]
    text: str
    cache_control: NotRequired[CacheControl | None]
    citations: NotRequired[Iterable[Any] | None]


class AnthropicRequest(TypedDict):
    """Anthropic Messages body: ``client.messages.create(**request)``."""

    model: str
    max_tokens: int
    messages: list[Any]
    system: NotRequired[list[SystemBlock]]
    tools: NotRequired[list[Any]]


class OpenAIChatRequest(TypedDict):
    """OpenAI Chat Completions body: ``client.chat.completions.create(**request)``."""

    model: str
    messages: list[Any]
    tools: NotRequired[list[Any]]
    prompt_cache_key: NotRequired[str]


class OpenAIResponsesRequest(TypedDict):
    """OpenAI Responses body: ``client.responses.create(**request)``."""

    model: str
    input: list[Any]
    instructions: NotRequired[str]
    tools: NotRequired[list[Any]]
    prompt_cache_key: NotRequired[str]


ProviderRequest = AnthropicRequest | OpenAIChatRequest | OpenAIResponsesRequest


class RenderNote(msgspec.Struct, frozen=True, kw_only=True):
    """A breakpoint the renderer left out or removed, with where and why.

    ``where`` is a path into the request (``tools[0]``, ``system[session]``,
    ``messages[2].content[1]``); ``caller`` says whether it was the caller's own marker (then
    the request differs from what the caller passed) or one the engine would have set."""

    where: str
    reason: str
    caller: bool


class AnthropicRendered(NamedTuple):
    """An Anthropic request and the notes on the breakpoints it does not carry."""

    request: AnthropicRequest
    notes: tuple[RenderNote, ...]


def count_breakpoints(value: Any) -> int:
    """Number of ``cache_control`` markers anywhere in a JSON-like value."""
    if isinstance(value, Mapping):
        own = 1 if value.get("cache_control") is not None else 0
        return own + sum(count_breakpoints(v) for v in value.values())
    if isinstance(value, list | tuple):
        return sum(count_breakpoints(v) for v in value)
    return 0


def anthropic_min_cacheable_tokens(model: str) -> int:
    """The shortest prefix (tokens) Anthropic caches for *model*; a shorter one is not cached
    even when it ends in a breakpoint (see :data:`_MIN_CACHEABLE_BY_MODEL` for the source)."""
    name = model.lower()
    for family, tokens in _MIN_CACHEABLE_BY_MODEL:
        if family in name:
            return tokens
    return _HAIKU_MIN_CACHEABLE if "haiku" in name else _DEFAULT_MIN_CACHEABLE


Path = tuple[str | int, ...]


def _marker_paths(value: Any, path: Path) -> list[Path]:
    """Paths of the mappings holding a ``cache_control`` marker, in prompt order (a block's
    own marker after the markers inside it: it ends where its content ends)."""
    found: list[Path] = []
    if isinstance(value, Mapping):
        for key, child in value.items():
            found.extend(_marker_paths(child, (*path, str(key))))
        if value.get("cache_control") is not None:
            found.append(path)
    elif isinstance(value, list | tuple):
        for i, child in enumerate(value):
            found.extend(_marker_paths(child, (*path, i)))
    return found


def _show(path: Path) -> str:
    text = str(path[0])
    for step in path[1:]:
        text += f"[{step}]" if isinstance(step, int) else f".{step}"
    return text


def _ttl_of(marker: Any) -> str:
    ttl = marker.get("ttl") if isinstance(marker, Mapping) else None
    return ttl if isinstance(ttl, str) else "5m"


def _check_ttl(cache_ttl: str | None) -> None:
    if cache_ttl is not None and cache_ttl not in CACHE_TTLS:
        raise InvalidInputError(f"cache_ttl must be one of {CACHE_TTLS}, got {cache_ttl!r}")


def _segment_breakpoints(
    parts: PromptParts, counter: TokenCounter | None, min_tokens: int
) -> tuple[list[Segment], list[RenderNote]]:
    """The segment ends worth a breakpoint: ROLE, SESSION, GENERATION (never VOLATILE), each
    non-empty and, with a counter, only where the prefix up to it reaches *min_tokens*
    (tokens are counted lazily and no further once the minimum is reached)."""
    marked: list[Segment] = []
    notes: list[RenderNote] = []
    tokens = 0
    for segment in (Segment.ROLE, Segment.SESSION, Segment.GENERATION):
        text = parts.segments[segment]
        if not text:
            continue
        if counter is not None and tokens < min_tokens:
            tokens += counter.count(text)
            if tokens < min_tokens:
                notes.append(
                    RenderNote(
                        where=f"system[{segment.value}]",
                        reason=(
                            f"no breakpoint: the prefix up to here is {tokens} tokens, below "
                            f"the model's minimum cacheable prompt of {min_tokens}"
                        ),
                        caller=False,
                    )
                )
                continue
        marked.append(segment)
    return marked, notes


def _at(container: list[Any], path: Path) -> Any:
    node: Any = container
    for step in path:
        node = node[step]
    return node


class _Mark(NamedTuple):
    """One breakpoint in cache order: the caller's (``path``) or a segment end (``segment``)."""

    where: str
    path: Path | None
    segment: Segment | None
    ttl: str


def _without_marker(node: Any, path: Path) -> Any:
    """A copy of *node* without the ``cache_control`` at *path*: only the containers on the
    path are copied (shallowly), so the caller's objects and shared sub-objects are untouched."""
    if not path:
        stripped = dict(node)
        del stripped["cache_control"]
        return stripped
    step, rest = path[0], path[1:]
    copied: Any = dict(node) if isinstance(node, Mapping) else list(node)
    copied[step] = _without_marker(node[step], rest)
    return copied


def render_anthropic(
    parts: PromptParts,
    *,
    model: str,
    max_tokens: int,
    messages: Sequence[Any] = (),
    tools: Sequence[Any] | None = None,
    cache_ttl: CacheTTL | None = None,
    counter: TokenCounter | None = None,
) -> AnthropicRendered:
    """An Anthropic Messages request and notes on the breakpoints it does not carry.

    Anthropic caches in the order tools → system → messages. The caller's ``tools`` come
    first, then ``system``: one text block per non-empty segment, in prompt order, with a
    breakpoint at the end of ROLE, SESSION and GENERATION (never VOLATILE), then the caller's
    ``messages`` (a single :data:`DEFAULT_USER_TURN` when there are none). With a *counter*, a
    segment end whose prefix is shorter than :func:`anthropic_min_cacheable_tokens` gets no
    breakpoint. Breakpoints are counted across tools + system + messages; above four, the
    oldest (earliest in cache order) are dropped first, the caller's included. ``cache_ttl``
    sets ``ttl`` on the engine's breakpoints. Every breakpoint left out is a :class:`RenderNote`.

    Raises InvalidInputError when ``max_tokens`` is not positive, ``cache_ttl`` is not a
    known TTL, or a kept breakpoint has a longer TTL than one before it (Anthropic requires
    longer-lived entries first).
    """
    if max_tokens <= 0:
        raise InvalidInputError(f"max_tokens must be positive, got {max_tokens}")
    _check_ttl(cache_ttl)
    caller_tools = list(tools or ())
    caller = list(messages) or [{"role": "user", "content": DEFAULT_USER_TURN}]
    marked, notes = _segment_breakpoints(parts, counter, anthropic_min_cacheable_tokens(model))
    marker: CacheControl = {"type": "ephemeral"}
    if cache_ttl is not None:
        marker["ttl"] = cache_ttl
    order = [
        _Mark(_show(p), p, None, _ttl_of(_at(caller_tools, p[1:])["cache_control"]))
        for p in _marker_paths(caller_tools, ("tools",))
    ]
    order += [_Mark(f"system[{s.value}]", None, s, cache_ttl or "5m") for s in marked]
    order += [
        _Mark(_show(p), p, None, _ttl_of(_at(caller, p[1:])["cache_control"]))
        for p in _marker_paths(caller, ("messages",))
    ]
    excess = max(len(order) - ANTHROPIC_MAX_BREAKPOINTS, 0)
    reason = (
        f"{len(order)} breakpoints across tools + system + messages, Anthropic accepts "
        f"{ANTHROPIC_MAX_BREAKPOINTS}: the oldest are dropped first (a later breakpoint also "
        "caches everything before it)"
    )
    for mark in order[:excess]:
        notes.append(RenderNote(where=mark.where, reason=reason, caller=mark.path is not None))
        if mark.segment is not None:
            marked.remove(mark.segment)
        elif mark.path is not None:
            where = caller_tools if mark.path[0] == "tools" else caller
            where[:] = _without_marker(where, mark.path[1:])
    kept = order[excess:]
    for before, after in itertools.pairwise(kept):
        if _TTL_RANK.get(after.ttl, 0) > _TTL_RANK.get(before.ttl, 0):
            raise InvalidInputError(
                f"breakpoint {after.where} (ttl {after.ttl}) follows {before.where} "
                f"(ttl {before.ttl}); Anthropic requires longer-lived cache entries first"
            )
    system: list[SystemBlock] = []
    for segment in SEGMENT_ORDER:
        text = parts.segments[segment]
        if not text:
            continue
        block: SystemBlock = {"type": "text", "text": text}
        if segment in marked:
            block["cache_control"] = marker.copy()
        system.append(block)
    body: AnthropicRequest = {"model": model, "max_tokens": max_tokens, "messages": caller}
    if caller_tools:
        body["tools"] = caller_tools
    if system:
        body["system"] = system
    return AnthropicRendered(body, tuple(notes))


def to_anthropic(
    parts: PromptParts,
    *,
    model: str,
    max_tokens: int,
    messages: Sequence[Any] = (),
    tools: Sequence[Any] | None = None,
    cache_ttl: CacheTTL | None = None,
    counter: TokenCounter | None = None,
) -> AnthropicRequest:
    """The request of :func:`render_anthropic`, without its notes."""
    return render_anthropic(
        parts,
        model=model,
        max_tokens=max_tokens,
        messages=messages,
        tools=tools,
        cache_ttl=cache_ttl,
        counter=counter,
    ).request


def _check_cache_key(prompt_cache_key: str | None) -> None:
    if prompt_cache_key is not None and not prompt_cache_key:
        raise InvalidInputError("prompt_cache_key must be a non-empty string")


def to_openai(
    parts: PromptParts,
    *,
    model: str,
    messages: Sequence[Any] = (),
    tools: Sequence[Any] | None = None,
    prompt_cache_key: str | None = None,
) -> OpenAIChatRequest:
    """An OpenAI Chat Completions request body, stable prefix first.

    A ``system`` message holds ``parts.static``, then a ``user`` message holds
    ``parts.dynamic``, then the caller's ``messages`` unchanged; empty parts are left out.
    ``tools`` (Chat Completions' own shape) go in the ``tools`` field, and
    ``prompt_cache_key`` in its own field. OpenAI caches prompt prefixes automatically, so the
    order alone makes the static part cacheable.

    Raises InvalidInputError when the request would have no message at all.
    """
    _check_cache_key(prompt_cache_key)
    body_messages: list[Any] = []
    if parts.static:
        body_messages.append({"role": "system", "content": parts.static})
    if parts.dynamic:
        body_messages.append({"role": "user", "content": parts.dynamic})
    body_messages.extend(messages)
    if not body_messages:
        raise InvalidInputError("empty prompt: nothing to send")
    body: OpenAIChatRequest = {"model": model, "messages": body_messages}
    if tools:
        body["tools"] = list(tools)
    if prompt_cache_key is not None:
        body["prompt_cache_key"] = prompt_cache_key
    return body


def to_openai_responses(
    parts: PromptParts,
    *,
    model: str,
    messages: Sequence[Any] = (),
    tools: Sequence[Any] | None = None,
    prompt_cache_key: str | None = None,
) -> OpenAIResponsesRequest:
    """An OpenAI Responses request body, stable prefix first.

    ``instructions`` holds ``parts.static`` (the Responses API puts it first, as the system
    message, so it is the cached prefix); ``input`` is a ``user`` item with ``parts.dynamic``,
    then the caller's input items (``messages``) unchanged. ``tools`` (the Responses shape) and
    ``prompt_cache_key`` go in their own fields.

    Raises InvalidInputError when the request would hold nothing at all.
    """
    _check_cache_key(prompt_cache_key)
    items: list[Any] = []
    if parts.dynamic:
        items.append({"role": "user", "content": parts.dynamic})
    items.extend(messages)
    if not items and not parts.static:
        raise InvalidInputError("empty prompt: nothing to send")
    body: OpenAIResponsesRequest = {"model": model, "input": items}
    if parts.static:
        body["instructions"] = parts.static
    if tools:
        body["tools"] = list(tools)
    if prompt_cache_key is not None:
        body["prompt_cache_key"] = prompt_cache_key
    return body
