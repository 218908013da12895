"""Properties of prompt composition: append-only generations, stable static prefix, breakpoints."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain.model import Durability, Item, Layer, Source
from ctxledger.domain.prompt import PromptParts, Segment, compose
from ctxledger.domain.render import to_anthropic

# Content and file names have no digits, so an ISO timestamp can only appear if it is rendered.
LETTERS = st.characters(categories=["L"]) | st.sampled_from(" \n#·-_")
TEXT = st.text(alphabet=LETTERS, max_size=30)
FILES = st.lists(
    st.text(alphabet=st.sampled_from("abcxyz/._"), min_size=1, max_size=12), max_size=2
)
WHEN = st.none() | st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
AGENT = st.sampled_from(["", "agent-1", "agent-7f3a", "worker-b2"])
ALL_SOURCES = st.sampled_from(Source)
ALL_LAYERS = st.sampled_from(Layer)
ANY_BOOL = st.booleans()

GENERATION_SOURCES = [
    s
    for s in Source
    if s
    not in (
        Source.ROLE_INSTRUCTION,
        Source.USER_REQUIREMENT,
        Source.STEERING_NOTE,
        Source.RECALLED_MEMORY,
    )
]


@st.composite
def item_st(
    draw: st.DrawFn,
    *,
    sources: st.SearchStrategy[Source] = ALL_SOURCES,
    layers: st.SearchStrategy[Layer] = ALL_LAYERS,
    pinned: st.SearchStrategy[bool] = ANY_BOOL,
) -> Item:
    return Item(
        id="unset",
        layer=draw(layers),
        source=draw(sources),
        content=draw(TEXT),
        durability=draw(st.sampled_from(Durability)),
        files=tuple(draw(FILES)),
        observed_at=draw(WHEN),
        pinned=draw(pinned),
        agent=draw(AGENT),
        task=draw(st.sampled_from(["", "t-1", "t-2"])),
    )


ROLE_ITEM = item_st(sources=st.just(Source.ROLE_INSTRUCTION))
SESSION_ITEM = st.one_of(
    item_st(sources=st.sampled_from([Source.USER_REQUIREMENT, Source.STEERING_NOTE])),
    item_st(sources=st.sampled_from(GENERATION_SOURCES), pinned=st.just(True)),
    item_st(sources=st.sampled_from(GENERATION_SOURCES), layers=st.just(Layer.L3)),
)
GENERATION_ITEM = item_st(
    sources=st.sampled_from(GENERATION_SOURCES),
    layers=st.sampled_from([Layer.L0, Layer.L1, Layer.L2, Layer.L4]),
    pinned=st.just(False),
)
VOLATILE_ITEM = item_st(sources=st.just(Source.RECALLED_MEMORY))
ANY_ITEM = item_st()


def with_ids(items: list[Item], prefix: str) -> list[Item]:
    return [msgspec.structs.replace(it, id=f"{prefix}{k}") for k, it in enumerate(items)]


class Step(msgspec.Struct, frozen=True):
    new_generation: list[Item]
    new_volatile: list[Item]
    status: str
    recall: str
    user_input: str


STEP = st.builds(
    Step,
    st.lists(GENERATION_ITEM, max_size=3),
    st.lists(VOLATILE_ITEM, max_size=1),
    TEXT,
    TEXT,
    TEXT,
)


@given(
    base=st.lists(ANY_ITEM, max_size=8),
    steps=st.lists(STEP, min_size=1, max_size=4),
    data=st.data(),
)
def test_builds_within_a_generation_only_append(
    base: list[Item], steps: list[Step], data: st.DataObject
) -> None:
    items = with_ids(base, "b")
    prev = compose(items, status="start")
    for n, step in enumerate(steps):
        added_gen = with_ids(step.new_generation, f"g{n}_")
        items = items + added_gen + with_ids(step.new_volatile, f"v{n}_")
        shuffled = data.draw(st.permutations(items))
        cur = compose(
            shuffled,
            emitted_order=prev.order,
            status=step.status,
            recall=step.recall,
            latest_user_input=step.user_input,
        )
        assert cur.stable.encode().startswith(prev.stable.encode())
        assert cur.static == prev.static
        assert cur.prefix_hash == prev.prefix_hash
        assert cur.order[: len(prev.order)] == prev.order
        assert set(cur.order[len(prev.order) :]) == {it.id for it in added_gen}
        prev = cur


@given(
    static_items=st.lists(ROLE_ITEM | SESSION_ITEM, max_size=6),
    tail_a=st.lists(GENERATION_ITEM | VOLATILE_ITEM, max_size=6),
    tail_b=st.lists(GENERATION_ITEM | VOLATILE_ITEM, max_size=6),
    texts=st.tuples(TEXT, TEXT, TEXT),
    data=st.data(),
)
def test_static_prefix_depends_only_on_role_and_session_input(
    static_items: list[Item],
    tail_a: list[Item],
    tail_b: list[Item],
    texts: tuple[str, str, str],
    data: st.DataObject,
) -> None:
    fixed = with_ids(static_items, "s")
    a = compose(fixed + with_ids(tail_a, "a"))
    items_b = data.draw(st.permutations(fixed + with_ids(tail_b, "b")))
    emitted = data.draw(st.lists(st.sampled_from([it.id for it in items_b] or ["x"]), max_size=4))
    b = compose(
        items_b, emitted_order=emitted, status=texts[0], recall=texts[1], latest_user_input=texts[2]
    )
    assert b.static == a.static
    assert b.prefix_hash == a.prefix_hash


@given(static_items=st.lists(ROLE_ITEM | SESSION_ITEM, max_size=5), extra=SESSION_ITEM)
def test_a_new_session_item_changes_the_prefix_hash(static_items: list[Item], extra: Item) -> None:
    fixed = with_ids(static_items, "s")
    before = compose(fixed)
    after = compose([*fixed, msgspec.structs.replace(extra, id="extra")])
    assert after.prefix_hash != before.prefix_hash
    assert after.segments[Segment.ROLE] == before.segments[Segment.ROLE]


@given(items=st.lists(ANY_ITEM, max_size=10), data=st.data())
def test_rendering_is_independent_of_insertion_order(
    items: list[Item], data: st.DataObject
) -> None:
    named = with_ids(items, "i")
    a = compose(named)
    b = compose(data.draw(st.permutations(named)))
    assert b.segments[Segment.ROLE] == a.segments[Segment.ROLE]
    assert b.segments[Segment.SESSION] == a.segments[Segment.SESSION]
    assert b.text == a.text  # at a refresh (no emitted order) GENERATION is sorted too


@given(
    items=st.lists(ANY_ITEM, max_size=8),
    new_ids=st.lists(st.text(alphabet="0123456789abcdef", min_size=12, max_size=12), unique=True),
    whens=st.lists(WHEN),
    agents=st.lists(AGENT),
)
def test_rendering_holds_no_timestamps_ids_or_agents(
    items: list[Item], new_ids: list[str], whens: list[datetime | None], agents: list[str]
) -> None:
    named = with_ids(items, "i")
    parts = compose(named)
    for it in named:
        if it.observed_at is not None:
            assert it.observed_at.isoformat() not in parts.text
            assert it.observed_at.date().isoformat() not in parts.text
    if len(new_ids) < len(named):
        return
    changed = [
        msgspec.structs.replace(
            it,
            id=new_ids[k],
            observed_at=whens[k] if k < len(whens) else None,
            agent=agents[k] if k < len(agents) else "other",
        )
        for k, it in enumerate(named)
    ]
    assert compose(changed).text == parts.text


@given(items=st.lists(ROLE_ITEM, max_size=4), agents=st.lists(AGENT, min_size=4, max_size=4))
def test_role_segment_is_identical_for_every_agent_of_a_role(
    items: list[Item], agents: list[str]
) -> None:
    named = with_ids(items, "r")
    one = compose([msgspec.structs.replace(it, agent=agents[0]) for it in named])
    for agent in agents[1:]:
        other = compose([msgspec.structs.replace(it, agent=agent) for it in named])
        assert other.segments[Segment.ROLE] == one.segments[Segment.ROLE]


@given(items=st.lists(ANY_ITEM, max_size=10), texts=st.tuples(TEXT, TEXT, TEXT))
def test_parts_are_the_concatenated_segments(
    items: list[Item], texts: tuple[str, str, str]
) -> None:
    p = compose(with_ids(items, "i"), status=texts[0], recall=texts[1], latest_user_input=texts[2])
    s = p.segments
    assert p.static == s[Segment.ROLE] + s[Segment.SESSION]
    assert p.dynamic == s[Segment.GENERATION] + s[Segment.VOLATILE]
    assert p.prefix_hash == hashlib.sha256(p.static.encode("utf-8")).hexdigest()


def _message_with_breakpoints(k: int) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [
        {"type": "text", "text": f"turn {n}", "cache_control": {"type": "ephemeral"}}
        for n in range(k)
    ]
    blocks.append({"type": "text", "text": "latest"})
    return {"role": "user", "content": blocks}


def _marks(value: Any) -> int:
    return json.dumps(value).count('"cache_control"')


@given(
    items=st.lists(ANY_ITEM, max_size=10),
    texts=st.tuples(TEXT, TEXT, TEXT),
    caller_marks=st.integers(min_value=0, max_value=4),
)
def test_anthropic_breakpoints_never_exceed_four(
    items: list[Item], texts: tuple[str, str, str], caller_marks: int
) -> None:
    parts = compose(
        with_ids(items, "i"), status=texts[0], recall=texts[1], latest_user_input=texts[2]
    )
    messages = [_message_with_breakpoints(caller_marks)] if caller_marks else []
    body = to_anthropic(parts, model="claude-test", max_tokens=64, messages=messages)
    assert _marks(body) <= 4
    system = body.get("system", [])
    cacheable = [
        s for s in (Segment.ROLE, Segment.SESSION, Segment.GENERATION) if parts.segments[s]
    ]
    assert _marks(system) == min(len(cacheable), 4 - caller_marks)
    if parts.segments[Segment.VOLATILE]:
        assert system[-1]["text"] == parts.segments[Segment.VOLATILE]
        assert "cache_control" not in system[-1]


@given(items=st.lists(ANY_ITEM, min_size=1, max_size=5), extra=st.integers(1, 4))
def test_anthropic_keeps_the_latest_four_of_more_caller_breakpoints(
    items: list[Item], extra: int
) -> None:
    parts: PromptParts = compose(with_ids(items, "i"))
    message = _message_with_breakpoints(4 + extra)
    body = to_anthropic(parts, model="m", max_tokens=8, messages=[message])
    assert _marks(body) == 4
    assert _marks(body.get("system", [])) == 0
    blocks = body["messages"][0]["content"]
    assert ["cache_control" in b for b in blocks] == [False] * extra + [True] * 4 + [False]
    assert _marks(message) == 4 + extra  # the caller's own message is not modified
