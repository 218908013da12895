"""Steering notes: however they were recorded they are pinned and never dropped for room, and
a note scoped to one stage never reaches another stage's build."""

from __future__ import annotations

from datetime import datetime

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.adapters.testing import aware_datetimes, items
from ctxledger.domain.events import Event, ItemRecorded, SteeringNoteAdded
from ctxledger.domain.generation_policy import BuildPlan, EmittedContext, plan_build
from ctxledger.domain.model import Item, Source, item_id_for
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.strategies import STRATEGIES
from ctxledger.domain.tokens import EstimatingCounter
from ctxledger.projections.pool import AgentPool, Pool, evolve_pool
from tests.property.strategies_items import build_requests, item_pools

COUNTER = EstimatingCounter()
NAMES = sorted(STRATEGIES)
STAGES = ("", "plan", "fix")
IN = ("included", "compressed", "clipped")


def with_source(source: Source) -> st.SearchStrategy[Item]:
    """Items of one source, id content-addressed like the engine's. (``items(sources=…)``
    cannot take a strategy: it tests the strategy's truth, which Hypothesis warns about.)"""
    return items().map(
        lambda it: msgspec.structs.replace(
            it, source=source, id=item_id_for(it.layer, source, it.content)
        )
    )


def fold(events: list[Event]) -> AgentPool:
    state = Pool()
    for e in events:
        state = evolve_pool(state, e)
    return state.by_agent.get("a", AgentPool())


# --- recorded either way, the same forced note --------------------------------------------------


@given(
    with_source(Source.STEERING_NOTE),
    st.lists(items(), max_size=5),
    aware_datetimes(),
)
def test_a_steering_note_recorded_as_an_item_equals_one_added_as_a_note(
    note: Item, earlier: list[Item], at: datetime
) -> None:
    before: list[Event] = [ItemRecorded(at=at, agent_id="a", item=i) for i in earlier]
    recorded = fold([*before, ItemRecorded(at=at, agent_id="a", item=note)])
    added = fold([*before, SteeringNoteAdded(at=at, agent_id="a", item=note)])
    assert recorded.candidates() == added.candidates()
    if note.id not in {i.id for i in earlier}:  # otherwise the first recording stands
        assert recorded.current(note.id) == msgspec.structs.replace(note, pinned=True)


@given(items(), aware_datetimes())
def test_a_note_added_as_a_note_is_a_pinned_steering_note(item: Item, at: datetime) -> None:
    got = fold([SteeringNoteAdded(at=at, agent_id="a", item=item)]).current(item.id)
    assert got == msgspec.structs.replace(item, source=Source.STEERING_NOTE, pinned=True)


@given(st.sampled_from([s for s in Source if s is not Source.STEERING_NOTE]).flatmap(with_source))
def test_other_recorded_items_are_not_forced(item: Item) -> None:
    at = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    assert fold([ItemRecorded(at=at, agent_id="a", item=item)]).current(item.id) == item


# --- scoped to a stage ----------------------------------------------------------------------


@st.composite
def staged_pools(draw: st.DrawFn) -> list[Item]:
    """Pools where about half the items are steering notes, scoped to a stage or to none,
    recorded pinned or not (the pool pins them either way)."""
    out = []
    for it in draw(item_pools(max_size=20)):
        if draw(st.booleans()):
            it = msgspec.structs.replace(
                it,
                source=Source.STEERING_NOTE,
                stage=draw(st.sampled_from(STAGES)),
                pinned=draw(st.booleans()),
            )
        out.append(it)
    return out


def candidates(pool: list[Item]) -> list[Item]:
    at = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
    return fold([ItemRecorded(at=at, agent_id="a", item=i) for i in pool]).candidates()


def of_another_stage(item: Item, stage_id: str) -> bool:
    return item.source is Source.STEERING_NOTE and item.stage not in ("", stage_id)


def check_stage(plan: BuildPlan, cands: list[Item], stage_id: str) -> None:
    res = plan.result
    sent = {it.id: it for it in res.items}
    for it in cands:
        if it.source is not Source.STEERING_NOTE:
            continue
        d = res.decisions[it.id]
        if of_another_stage(it, stage_id):
            assert it.id not in sent
            assert (d.action, d.reason) == ("dropped", "other_stage")
        else:  # this stage's or every stage's: pinned, so sent whole
            assert d.action == "included", d
            assert sent[it.id].content == it.content


@given(staged_pools(), build_requests(), st.sampled_from(NAMES), st.sampled_from(STAGES))
def test_no_steering_note_of_another_stage_is_included(
    pool: list[Item], request: BuildRequest, name: str, stage_id: str
) -> None:
    request = msgspec.structs.replace(request, strategy=name, stage_id=stage_id)
    cands = candidates(pool)
    check_stage(plan_build(request, cands, None, COUNTER), cands, stage_id)


@given(
    staged_pools(),
    build_requests(),
    st.sampled_from(NAMES),
    st.sampled_from(STAGES),
    st.sampled_from(STAGES),
)
def test_a_stage_change_within_a_generation_leaves_the_old_stages_notes_behind(
    pool: list[Item], request: BuildRequest, name: str, first: str, then: str
) -> None:
    cands = candidates(pool)
    one = msgspec.structs.replace(request, strategy=name, stage_id=first)
    res = plan_build(one, cands, None, COUNTER).result
    ctx = EmittedContext(
        generation=1,
        decisions=res.decisions,
        emitted={it.id: it for it in res.items},
        order=tuple(it.id for it in res.items),
        used=res.used,
    )
    two = msgspec.structs.replace(one, stage_id=then)
    plan = plan_build(two, cands, ctx, COUNTER)
    check_stage(plan, cands, then)
    if any(of_another_stage(it, then) for it in ctx.emitted.values()):
        assert plan.kind == "rebuild"
        assert plan.reason.startswith("other_stage:")
