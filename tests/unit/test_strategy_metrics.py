"""StrategyMetrics on small hand-written event sequences; every expected number is counted by
hand in the comments beside the events."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

from ctxledger.domain import events as ev
from ctxledger.domain.model import AgentIdentity, Item, Layer, Source
from ctxledger.projections.strategy_metrics import (
    AgentStrategyMetrics,
    StrategyMetrics,
    evolve_strategy_metrics,
)

AT = datetime(2026, 1, 1, tzinfo=UTC)


def fold(events: list[ev.Event]) -> StrategyMetrics:
    state = StrategyMetrics()
    for e in events:
        state = evolve_strategy_metrics(state, e)
    return state


def registered(agent_id: str = "a") -> ev.AgentRegistered:
    return ev.AgentRegistered(at=AT, agent=AgentIdentity(agent_id=agent_id, role="primary"))


def built(used: int, strategy: str = "variable", agent_id: str = "a") -> ev.ContextPackBuilt:
    return ev.ContextPackBuilt(
        at=AT, agent_id=agent_id, pack_id="p", strategy=strategy, budget_used=used
    )


def moved(
    kind: Literal["rebuild", "refresh"],
    trigger: Literal["budget", "context_limit", "manual"],
    to: int,
) -> ev.GenerationRefreshed:
    return ev.GenerationRefreshed(
        at=AT,
        agent_id="a",
        kind=kind,
        from_generation=to - 1,
        to_generation=to,
        reason="r",
        trigger=trigger,
    )


def failed(error_class: Literal["context_limit", "other"]) -> ev.TurnFailed:
    return ev.TurnFailed(at=AT, agent_id="a", error_class=error_class)


def action(item_id: str, signature: str) -> ev.ItemRecorded:
    it = Item(
        id=item_id,
        layer=Layer.L0,
        source=Source.TOOL_LOG,
        content=item_id,
        tool_signature=signature,
    )
    return ev.ItemRecorded(at=AT, agent_id="a", item=it)


def test_a_registered_agent_starts_in_generation_one_with_nothing_spent() -> None:
    m = fold([registered()]).by_agent["a"]
    assert (m.strategy, m.generations, m.builds, m.tokens_total, m.tokens_max) == (
        "variable",
        1,
        0,
        0,
        0,
    )
    assert (m.refreshes, m.rebuilds, m.retries, m.turn_failures, m.repeated_actions) == (
        0,
        0,
        0,
        0,
        0,
    )
    assert (m.refresh_reasons, m.signatures) == ({}, {})


def test_one_session_of_builds_refreshes_failures_and_repeated_actions() -> None:
    events: list[ev.Event] = [
        registered(),
        built(400),  # 1 build; 400 total; max 400
        built(700, strategy="summary"),  # 2 builds; 1100 total; max 700; strategy summary
        moved("rebuild", "budget", 2),  # generation 2; 1 rebuild
        failed("context_limit"),  # 1 failure, 1 retry
        failed("other"),  # 2 failures, still 1 retry
        moved("refresh", "context_limit", 3),  # generation 3; 1 refresh
        moved("refresh", "manual", 4),  # generation 4; 2 refreshes
        built(300),  # 3 builds; 1400 total; max still 700; strategy variable again
        action("i1", "grep x"),  # first "grep x"
        action("i2", "grep x"),  # 1 repeated
        action("i3", "grep x"),  # 2 repeated
        action("i4", "ls"),  # first "ls"
        action("i5", ""),  # no signature: not an action
        registered(),  # registering again resets nothing
        ev.TurnSucceeded(at=AT, agent_id="a"),
        ev.CacheUsageRecorded(at=AT, agent_id="a", input_tokens=10),
    ]
    assert fold(events).by_agent["a"] == AgentStrategyMetrics(
        strategy="variable",
        generations=4,
        builds=3,
        tokens_total=1400,
        tokens_max=700,
        refreshes=2,
        rebuilds=1,
        refresh_reasons={"rebuild:budget": 1, "refresh:context_limit": 1, "refresh:manual": 1},
        retries=1,
        turn_failures=2,
        repeated_actions=2,
        signatures={"grep x": 3, "ls": 1},
    )


def test_agents_are_counted_apart_even_without_registration() -> None:
    state = fold([registered(), built(100), built(50, strategy="layered", agent_id="b")])
    assert (state.by_agent["a"].builds, state.by_agent["a"].tokens_total) == (1, 100)
    b = state.by_agent["b"]
    assert (b.strategy, b.builds, b.tokens_total, b.tokens_max) == ("layered", 1, 50, 50)


def test_a_steering_note_with_a_signature_is_not_a_repeated_action() -> None:
    note = Item(
        id="n",
        layer=Layer.L1,
        source=Source.STEERING_NOTE,
        content="n",
        tool_signature="grep x",
    )
    events: list[ev.Event] = [
        registered(),
        action("i1", "grep x"),
        ev.SteeringNoteAdded(at=AT, agent_id="a", item=note),
        action("i2", "grep y"),
    ]
    assert fold(events).by_agent["a"].repeated_actions == 0
