"""The seed's ContextState reducer rules, one by one (core-context DefaultContextReducer)."""

from __future__ import annotations

from datetime import UTC, datetime

from ctxledger.domain import events as ev
from ctxledger.projections.context_state import ContextState, evolve_context_state

AT = datetime(2026, 1, 1, tzinfo=UTC)


def started(p: str = "p1") -> ev.ContextBuildingStarted:
    return ev.ContextBuildingStarted(at=AT, agent_id="a", pack_id=p)


def test_started_sets_building_in_progress() -> None:
    s = evolve_context_state(ContextState(), started())
    assert s == ContextState(built_pack_ids=(), building_in_progress=True, interrupted=False)


def test_built_appends_the_pack_id_and_resets_flags() -> None:
    s = ContextState(built_pack_ids=("p0",), building_in_progress=True, interrupted=True)
    s = evolve_context_state(s, ev.ContextPackBuilt(at=AT, agent_id="a", pack_id="p1"))
    assert s == ContextState(built_pack_ids=("p0", "p1"))


def test_failed_resets_flags_and_keeps_packs() -> None:
    s = ContextState(built_pack_ids=("p0",), building_in_progress=True, interrupted=True)
    s = evolve_context_state(s, ev.ContextBuildingFailed(at=AT, agent_id="a", pack_id="p1"))
    assert s == ContextState(built_pack_ids=("p0",))


def test_interrupted_sets_interrupted_and_clears_in_progress() -> None:
    s = evolve_context_state(ContextState(), started())
    s = evolve_context_state(s, ev.ContextBuildingInterrupted(at=AT, agent_id="a", pack_id="p1"))
    assert s == ContextState(building_in_progress=False, interrupted=True)


def test_started_after_interrupted_keeps_the_interrupted_flag() -> None:
    s = ContextState(interrupted=True)
    s = evolve_context_state(s, started("p2"))
    assert s == ContextState(building_in_progress=True, interrupted=True)


def test_illegal_built_without_start_still_records_the_pack() -> None:
    """docs/events.md: the reducer is total; orders are checked by `ctxledger audit`."""
    s = evolve_context_state(ContextState(), ev.ContextPackBuilt(at=AT, agent_id="a", pack_id="x"))
    assert s.built_pack_ids == ("x",)
    assert not s.building_in_progress


def test_unrelated_events_leave_state_unchanged() -> None:
    s = ContextState(built_pack_ids=("p",), building_in_progress=True)
    e = ev.ItemPinned(at=AT, agent_id="a", item_id="i")
    assert evolve_context_state(s, e) is s
