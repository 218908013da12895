"""``build_view.Candidates`` — the pool's candidates made only when the plan reads them —
answers every question exactly as the tuple ``pool.candidates()`` does, made or not: its
length, order, newest-first order, the newest one and any index or slice, over pools folded
from random histories (items recorded, pinned, verified, removed, dropped at refreshes)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxledger.adapters.testing import items
from ctxledger.domain import events as ev
from ctxledger.domain.generation_policy import keep_ids
from ctxledger.projections.build_view import Candidates
from ctxledger.projections.catalog import fold_all
from ctxledger.projections.pool import AgentPool, Pool, evolve_pool
from tests.property.test_batch_replay import histories

_AT = datetime(2026, 1, 1, tzinfo=UTC)


@st.composite
def pools(draw: st.DrawFn) -> AgentPool:
    """One agent's pool: items recorded, then some removed, verified or pinned, in any order."""
    recorded = draw(st.lists(items(), max_size=30, unique_by=lambda i: i.id))
    events: list[ev.Event] = [ev.ItemRecorded(at=_AT, agent_id="a", item=i) for i in recorded]
    ids = [i.id for i in recorded]
    if ids:
        after = st.sampled_from(
            [
                lambda i: ev.ItemRemoved(at=_AT, agent_id="a", item_id=i),
                lambda i: ev.FindingVerified(at=_AT, agent_id="a", item_id=i),
                lambda i: ev.ItemPinned(at=_AT, agent_id="a", item_id=i),
            ]
        )
        changes = draw(st.lists(st.tuples(after, st.sampled_from(ids)), max_size=20))
        events += [make(i) for make, i in changes]
    state = Pool()
    for e in events:
        state = evolve_pool(state, e)
    return state.by_agent.get("a", AgentPool())


def _check(pool: AgentPool, data: st.DataObject) -> None:
    expected = tuple(pool.candidates())
    view = Candidates(pool)
    # asked in a random order: some answers come before the tuple is made, some after
    for question in data.draw(st.permutations(["len", "reversed", "last", "keep", "all"])):
        if question == "len":
            assert len(view) == len(expected)
            assert bool(view) == bool(expected)
        elif question == "reversed":
            assert tuple(reversed(view)) == expected[::-1]
        elif question == "last":
            if expected:
                assert view[-1] == expected[-1]
        elif question == "keep":
            assert keep_ids(view) == keep_ids(expected)
        else:
            assert tuple(view) == expected
            if expected:
                i = data.draw(st.integers(-len(expected), len(expected) - 1))
                assert view[i] == expected[i]
                assert view[i:] == expected[i:]


@settings(max_examples=300, deadline=None)
@given(pools(), st.data())
def test_candidates_answer_like_the_tuple(pool: AgentPool, data: st.DataObject) -> None:
    _check(pool, data)


@settings(max_examples=100, deadline=None)
@given(histories(), st.data())
def test_candidates_of_folded_histories(seq: list[ev.Event], data: st.DataObject) -> None:
    for pool in fold_all(seq).pool.by_agent.values():
        _check(pool, data)
