"""StrategyMetrics: generations, tokens, refresh reasons, retries, repeated actions per agent."""

from __future__ import annotations

from typing import assert_never

import msgspec

from ctxledger.domain.events import (
    AgentConfigured,
    AgentRegistered,
    CacheUsageRecorded,
    ContextBuildingFailed,
    ContextBuildingInterrupted,
    ContextBuildingStarted,
    ContextPackBuilt,
    Event,
    FindingVerified,
    GenerationRefreshed,
    ItemPinned,
    ItemRecorded,
    ItemRemoved,
    ItemUnpinned,
    MemoryDeleted,
    MemoryMarkedStale,
    MemoryPromoted,
    MemoryRetired,
    MemoryVerified,
    RecallRendered,
    SteeringNoteAdded,
    TurnFailed,
    TurnSucceeded,
)

__all__ = ["AgentStrategyMetrics", "StrategyMetrics", "evolve_strategy_metrics"]


class AgentStrategyMetrics(msgspec.Struct, frozen=True, kw_only=True):
    """What one agent's strategy cost and how often it had to start over."""

    strategy: str = "variable"
    generations: int = 1
    builds: int = 0
    tokens_total: int = 0
    tokens_max: int = 0
    refreshes: int = 0
    rebuilds: int = 0
    refresh_reasons: dict[str, int] = {}
    retries: int = 0
    turn_failures: int = 0
    repeated_actions: int = 0
    signatures: dict[str, int] = {}


class StrategyMetrics(msgspec.Struct, frozen=True, kw_only=True):
    """Per-agent metrics, so strategies can be compared later (``ctxledger compare``)."""

    by_agent: dict[str, AgentStrategyMetrics] = {}


def _put(state: StrategyMetrics, agent_id: str, m: AgentStrategyMetrics) -> StrategyMetrics:
    return StrategyMetrics(by_agent={**state.by_agent, agent_id: m})


def evolve_strategy_metrics(state: StrategyMetrics, event: Event) -> StrategyMetrics:
    """Fold one event."""
    match event:
        case AgentRegistered(agent=agent):
            if agent.agent_id in state.by_agent:
                return state
            return _put(state, agent.agent_id, AgentStrategyMetrics())
        case ContextPackBuilt(agent_id=agent_id):
            m = state.by_agent.get(agent_id, AgentStrategyMetrics())
            return _put(
                state,
                agent_id,
                msgspec.structs.replace(
                    m,
                    strategy=event.strategy,
                    builds=m.builds + 1,
                    tokens_total=m.tokens_total + event.budget_used,
                    tokens_max=max(m.tokens_max, event.budget_used),
                ),
            )
        case GenerationRefreshed(agent_id=agent_id):
            m = state.by_agent.get(agent_id, AgentStrategyMetrics())
            key = f"{event.kind}:{event.trigger}"
            return _put(
                state,
                agent_id,
                msgspec.structs.replace(
                    m,
                    generations=m.generations + 1,
                    refreshes=m.refreshes + (event.kind == "refresh"),
                    rebuilds=m.rebuilds + (event.kind == "rebuild"),
                    refresh_reasons={**m.refresh_reasons, key: m.refresh_reasons.get(key, 0) + 1},
                ),
            )
        case TurnFailed(agent_id=agent_id):
            m = state.by_agent.get(agent_id, AgentStrategyMetrics())
            return _put(
                state,
                agent_id,
                msgspec.structs.replace(
                    m,
                    turn_failures=m.turn_failures + 1,
                    retries=m.retries + (event.error_class == "context_limit"),
                ),
            )
        case ItemRecorded(agent_id=agent_id, item=item):
            sig = item.tool_signature
            if not sig:
                return state
            m = state.by_agent.get(agent_id, AgentStrategyMetrics())
            seen = m.signatures.get(sig, 0)
            return _put(
                state,
                agent_id,
                msgspec.structs.replace(
                    m,
                    repeated_actions=m.repeated_actions + (seen > 0),
                    signatures={**m.signatures, sig: seen + 1},
                ),
            )
        case (
            AgentConfigured()
            | TurnSucceeded()
            | SteeringNoteAdded()
            | ItemPinned()
            | ItemUnpinned()
            | ItemRemoved()
            | FindingVerified()
            | ContextBuildingStarted()
            | ContextBuildingFailed()
            | ContextBuildingInterrupted()
            | CacheUsageRecorded()
            | MemoryPromoted()
            | MemoryVerified()
            | MemoryMarkedStale()
            | MemoryRetired()
            | MemoryDeleted()
            | RecallRendered()
        ):
            return state
        case _:
            assert_never(event)
