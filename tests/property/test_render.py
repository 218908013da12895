"""Properties of the provider renderers with the caller's conversation and tools."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.prompt import PromptParts, Segment, compose
from ctxledger.domain.render import (
    ANTHROPIC_MAX_BREAKPOINTS,
    count_breakpoints,
    render_anthropic,
    to_openai,
    to_openai_responses,
)
from ctxledger.domain.tokens import EstimatingCounter
from tests.property.strategies_items import item_pools

MARK = {"type": "ephemeral"}
WORDS = st.text(alphabet=st.sampled_from("abc xyz\n#"), max_size=12)
CACHEABLE = (Segment.ROLE, Segment.SESSION, Segment.GENERATION)


@st.composite
def prompt_parts(draw: st.DrawFn) -> PromptParts:
    """Pools of items, sometimes with a long role instruction (so a counter finds the
    minimum cacheable prefix reached at different segments)."""
    items = draw(item_pools(max_size=8))
    filler = draw(st.sampled_from([0, 3000, 6000, 12000]))
    if filler:
        role = Item(id="role", layer=Layer.L1, source=Source.ROLE_INSTRUCTION, content="r" * filler)
        items = [*items, role]
    return compose(items, status=draw(WORDS), latest_user_input=draw(WORDS))


@st.composite
def tools(draw: st.DrawFn) -> list[dict[str, Any]]:
    marks = draw(st.lists(st.booleans(), max_size=4))
    return [
        {"name": f"tool_{i}", "input_schema": {"type": "object"}}
        | ({"cache_control": MARK} if m else {})
        for i, m in enumerate(marks)
    ]


@st.composite
def messages(draw: st.DrawFn) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, marks in enumerate(draw(st.lists(st.lists(st.booleans(), max_size=4), max_size=5))):
        role = "user" if i % 2 == 0 else "assistant"
        if not marks:
            out.append({"role": role, "content": draw(WORDS) or "."})
            continue
        block = {"type": "text", "text": draw(WORDS) or "."}
        shared = block | {"cache_control": MARK}
        # the same marked dict may be shared by several blocks (aliasing must not leak a drop)
        content = [
            shared if m and draw(st.booleans()) else block | ({"cache_control": MARK} if m else {})
            for m in marks
        ]
        out.append({"role": role, "content": content})
    return out


MODELS = st.sampled_from(["claude-sonnet-4-5", "claude-3-5-haiku", "claude-opus-4-5", "m"])


def _positions(body: dict[str, Any]) -> list[tuple[int, int, int]]:
    """Positions of the markers in a body, in cache order (tools, system, messages)."""
    found = [(0, i, 0) for i, t in enumerate(body.get("tools", [])) if "cache_control" in t]
    found += [(1, i, 0) for i, b in enumerate(body.get("system", [])) if "cache_control" in b]
    for i, m in enumerate(body["messages"]):
        content = m["content"] if isinstance(m["content"], list) else []
        found += [(2, i, j) for j, b in enumerate(content) if "cache_control" in b]
    return found


def _candidates(
    parts: PromptParts, tls: list[Any], msgs: list[Any], marked: set[Segment]
) -> list[tuple[int, int, int]]:
    """Every breakpoint that could be set, in the same coordinates as :func:`_positions`."""
    system_index = {s: k for k, s in enumerate(s for s in Segment if parts.segments[s])}
    found = [(0, i, 0) for i, t in enumerate(tls) if "cache_control" in t]
    found += sorted((1, system_index[s], 0) for s in marked)
    for i, m in enumerate(msgs):
        content = m["content"] if isinstance(m["content"], list) else []
        found += [(2, i, j) for j, b in enumerate(content) if "cache_control" in b]
    return found


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


@given(parts=prompt_parts(), tls=tools(), msgs=messages(), model=MODELS, counted=st.booleans())
def test_anthropic_keeps_the_latest_breakpoints_and_never_more_than_four(
    parts: PromptParts, tls: list[Any], msgs: list[Any], model: str, counted: bool
) -> None:
    before = json.dumps([tls, msgs])
    counter = EstimatingCounter() if counted else None
    rendered = render_anthropic(
        parts, model=model, max_tokens=8, messages=msgs, tools=tls, counter=counter
    )
    body: dict[str, Any] = dict(rendered.request)
    assert count_breakpoints(body) <= ANTHROPIC_MAX_BREAKPOINTS
    # the segment ends worth a breakpoint: all non-empty cacheable ones, less those whose
    # prefix is below the minimum (noted as such)
    below = {n.where for n in rendered.notes if "below the model's minimum" in n.reason}
    marked = {s for s in CACHEABLE if parts.segments[s] and f"system[{s.value}]" not in below}
    assert not below or counted
    candidates = _candidates(parts, tls, msgs if msgs else [], marked)
    kept = _positions(body)
    assert len(kept) == min(len(candidates), ANTHROPIC_MAX_BREAKPOINTS)
    dropped = sorted(set(candidates) - set(kept))
    assert set(kept) <= set(candidates)
    assert not dropped or max(dropped) < min(kept)  # the oldest are the ones dropped
    limit_notes = [n for n in rendered.notes if "accepts 4" in n.reason]
    assert len(limit_notes) == len(dropped)
    assert sum(n.caller for n in limit_notes) == sum(d[0] != 1 for d in dropped)
    # the caller's tools and messages: unchanged and in order (less a dropped marker), and
    # the caller's own objects are never modified
    assert json.dumps([tls, msgs]) == before
    caller_dropped = any(n.caller for n in rendered.notes)
    if msgs:
        assert _strip(body["messages"]) == _strip(msgs)
        assert (body["messages"] == msgs) or caller_dropped
    assert _strip(body.get("tools", [])) == _strip(tls)
    # VOLATILE never gets a breakpoint and ends the system prompt
    if parts.segments[Segment.VOLATILE]:
        assert body["system"][-1] == {"type": "text", "text": parts.segments[Segment.VOLATILE]}


@given(
    parts=prompt_parts(),
    calls=st.lists(st.tuples(tools(), messages()), min_size=2, max_size=3),
    model=MODELS,
)
def test_the_static_prefix_is_first_and_identical_whatever_the_conversation(
    parts: PromptParts, calls: list[tuple[list[Any], list[Any]]], model: str
) -> None:
    anthropic, chat, responses = set(), set(), set()
    for tls, msgs in calls:
        body = render_anthropic(parts, model=model, max_tokens=8, messages=msgs, tools=tls).request
        static = [b["text"] for b in body.get("system", [])[: _static_blocks(parts)]]
        assert "".join(static) == parts.static
        anthropic.add(json.dumps(static).encode())
        if parts.text or msgs:
            first = to_openai(parts, model=model, messages=msgs, tools=tls)["messages"]
            if parts.static:
                assert first[0] == {"role": "system", "content": parts.static}
            chat.add(json.dumps(first[: 1 if parts.static else 0]).encode())
            assert first[len(first) - len(msgs) :] == msgs
            resp = to_openai_responses(parts, model=model, messages=msgs, tools=tls)
            responses.add(resp.get("instructions", "").encode())
            assert resp["input"][len(resp["input"]) - len(msgs) :] == msgs
    assert len(anthropic) == 1
    assert len(chat) <= 1
    assert len(responses) <= 1


def _static_blocks(parts: PromptParts) -> int:
    return sum(1 for s in (Segment.ROLE, Segment.SESSION) if parts.segments[s])


@given(parts=prompt_parts(), tls=tools(), msgs=messages())
def test_one_hour_ttl_before_five_minute_markers_is_accepted(
    parts: PromptParts, tls: list[Any], msgs: list[Any]
) -> None:
    hour = [
        t | {"cache_control": {"type": "ephemeral", "ttl": "1h"}} if "cache_control" in t else t
        for t in tls
    ]
    body = render_anthropic(
        parts, model="m", max_tokens=8, messages=msgs, tools=hour, cache_ttl="1h"
    ).request
    assert count_breakpoints(body) <= ANTHROPIC_MAX_BREAKPOINTS
    for block in body.get("system", []):
        assert "cache_control" not in block or block["cache_control"] is not None
        assert (block.get("cache_control") or {"ttl": "1h"}).get("ttl") == "1h"
