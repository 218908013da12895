"""GC indicators on small hand-written event sequences; every expected number is counted by
hand in the comments beside the events."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ctxledger.domain import events as ev
from ctxledger.domain.model import AgentIdentity, Item, Layer, Source
from ctxledger.domain.request import BuildRequest
from ctxledger.projections.gc_indicators import (
    AgentIndicators,
    GcIndicators,
    evolve_gc_indicators,
)

AT = datetime(2026, 1, 1, tzinfo=UTC)


def fold(events: list[ev.Event]) -> GcIndicators:
    state = GcIndicators()
    for e in events:
        state = evolve_gc_indicators(state, e)
    return state


def item(
    item_id: str,
    source: Source,
    tokens: int,
    *,
    phase: str = "",
    signature: str = "",
    failure: bool = False,
    layer: Layer = Layer.L0,
) -> ev.ItemRecorded:
    return ev.ItemRecorded(
        at=AT,
        agent_id="a",
        item=Item(
            id=item_id,
            layer=layer,
            source=source,
            content=item_id,
            token_count=tokens,
            phase=phase,
            tool_signature=signature,
            failure=failure,
        ),
    )


def started(phase: str, agent_id: str = "a") -> ev.ContextBuildingStarted:
    request = BuildRequest(agent_id=agent_id, budget=1000, now=AT, phase=phase)
    return ev.ContextBuildingStarted(at=AT, agent_id=agent_id, pack_id="p", request=request)


def built(used: int, limit: int) -> ev.ContextPackBuilt:
    return ev.ContextPackBuilt(
        at=AT, agent_id="a", pack_id="p", budget_used=used, budget_limit=limit
    )


def refreshed(phase: str) -> ev.GenerationRefreshed:
    return ev.GenerationRefreshed(
        at=AT,
        agent_id="a",
        kind="refresh",
        from_generation=1,
        to_generation=2,
        reason="context limit",
        trigger="context_limit",
        phase=phase,
    )


REGISTERED = ev.AgentRegistered(at=AT, agent=AgentIdentity(agent_id="a", role="primary"))


def test_obsolete_phase_items_count_within_the_first_generation() -> None:
    state = fold(
        [
            REGISTERED,
            started("explore"),  # the first build names the phase: explore
            item("i1", Source.TOOL_LOG, 10, phase="explore"),
            item("i2", Source.TOOL_LOG, 10, phase="edit"),  # 1 item of another phase
            item("i3", Source.TOOL_LOG, 10, phase="edit"),  # 2
            item("i4", Source.TOOL_LOG, 10),  # no phase: never obsolete
        ]
    )
    assert state.by_agent["a"].obsolete_phase_items == 2
    assert state.by_agent["a"].phase == "explore"


def test_every_indicator_on_one_session() -> None:
    events: list[ev.Event] = [
        REGISTERED,
        started("explore"),
        # transcript 100 of 100; signature "grep foo" first seen
        item("i1", Source.TOOL_LOG, 100, phase="explore", signature="grep foo"),
        # transcript 150 of 150; "grep foo" again: 1 repeated signature
        item("i2", Source.TOOL_LOG, 50, phase="explore", signature="grep foo"),
        # a failed test run: not transcript (150 of 350); obsolete 1 (edit ≠ explore)
        item("i3", Source.TEST_RESULT, 200, phase="edit", signature="pytest", failure=True),
        # the same failure again: 2 repeated signatures, 1 repeated failed edit; obsolete 2
        item("i4", Source.TEST_RESULT, 200, phase="edit", signature="pytest", failure=True),
        built(450, 1000),  # utilization 0.45; 1 build since progress
        built(1200, 1000),  # utilization 1.2 (overflow); 2 builds since progress
    ]
    one = fold(events).by_agent["a"]
    assert one == AgentIndicators(
        utilization=1.2,
        repeated_tool_signatures=2,
        repeated_failed_edits=1,
        builds_since_progress=2,
        obsolete_phase_items=2,
        transcript_tokens=150,
        recorded_tokens=550,
        phase="explore",
        signatures={"grep foo": 2, "pytest": 2},
        failed_signatures={"pytest": 2},
        phases={"explore": 2, "edit": 2},
    )
    assert one.transcript_bloat == pytest.approx(150 / 550)

    events += [
        # a finding is progress: 0 builds since; L2 finding, 100 more recorded tokens (650)
        item("i5", Source.WORKER_FINDING, 100, layer=Layer.L2),
        built(500, 1000),  # 1 build since progress; utilization 0.5
        # an L4 conversation is transcript: 190 of 690
        item("i6", Source.CONVERSATION, 40, layer=Layer.L4, phase="verify"),
        started("verify"),  # explore 2 + edit 2 are obsolete now
    ]
    two = fold(events).by_agent["a"]
    assert (two.utilization, two.builds_since_progress) == (0.5, 1)
    assert (two.transcript_tokens, two.recorded_tokens) == (190, 690)
    assert (two.phase, two.obsolete_phase_items) == ("verify", 4)
    assert two.phases == {"explore": 2, "edit": 2, "verify": 1}

    events += [
        refreshed("edit"),  # explore 2 + verify 1
        started(""),  # a build that names no phase keeps the current one
        built(300, 1000),  # 2 builds since progress
        ev.FindingVerified(at=AT, agent_id="a", item_id="i5"),  # a verification is progress
    ]
    three = fold(events).by_agent["a"]
    assert (three.phase, three.obsolete_phase_items) == ("edit", 3)
    assert (three.utilization, three.builds_since_progress) == (0.3, 0)


def test_a_pack_without_a_budget_has_zero_utilization_and_agents_are_separate() -> None:
    other = ev.ContextPackBuilt(at=AT, agent_id="b", pack_id="q", budget_used=10, budget_limit=0)
    state = fold([built(250, 1000), other, started("edit", agent_id="b")])
    assert state.by_agent["a"].utilization == 0.25
    assert state.by_agent["b"].utilization == 0.0
    assert state.by_agent["b"].builds_since_progress == 1
    assert state.by_agent["b"].phase == "edit"
    assert state.by_agent["a"].phase == ""


def test_untouched_agents_have_no_indicators() -> None:
    assert fold([REGISTERED]).by_agent == {}
    # Verifying for an agent with no indicators yet creates none.
    assert fold([ev.FindingVerified(at=AT, agent_id="z", item_id="i")]).by_agent == {}
