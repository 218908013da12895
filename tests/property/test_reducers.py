"""Property tests of the reducers: the seed's rules, and fold-all == fold-in-any-batching."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from ctxledger.adapters.testing import (
    ContextStateMachine,
    events,
    lifecycle_sequences,
    reference_context_state,
)
from ctxledger.domain import events as ev
from ctxledger.projections.catalog import PROJECTIONS, fold_all, read_models
from ctxledger.projections.context_state import ContextState, evolve_context_state


def _fold(seq: list[ev.Event]) -> ContextState:
    s = ContextState()
    for e in seq:
        s = evolve_context_state(s, e)
    return s


@given(lifecycle_sequences(valid=False))
def test_reducer_equals_the_seed_rules_for_any_order(seq: list[ev.Event]) -> None:
    assert _fold(seq) == reference_context_state(seq)


@given(lifecycle_sequences(valid=True))
def test_valid_sequences_never_duplicate_pack_ids(seq: list[ev.Event]) -> None:
    built = _fold(seq).built_pack_ids
    assert len(built) == len(set(built))
    assert len(built) == sum(isinstance(e, ev.ContextPackBuilt) for e in seq)


@given(st.lists(events(), max_size=25), st.data())
def test_fold_all_equals_fold_in_any_batching(seq: list[ev.Event], data: st.DataObject) -> None:
    whole = fold_all(seq)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(seq)), max_size=5)))
    states: dict[str, Any] = {p.name: p.initial() for p in PROJECTIONS}
    start = 0
    for cut in [*cuts, len(seq)]:
        for p in PROJECTIONS:
            states[p.name] = p.fold(seq[start:cut], states[p.name])
        start = max(start, cut)
    assert read_models(states) == whole


@given(st.lists(events(), max_size=25))
def test_folds_are_deterministic(seq: list[ev.Event]) -> None:
    assert fold_all(seq) == fold_all(list(seq))


TestContextStateMachine = ContextStateMachine.TestCase
