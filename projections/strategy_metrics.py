"""StrategyMetrics: generations, tokens, refresh reasons, retries, repeated actions per agent."""

from __future__ import annotations

import msgspec

from ctxledger.domain.events import (
    AgentRegistered,
    ContextPackBuilt,
    Event,
    GenerationRefreshed,
    ItemRecorded,
    TurnFailed,
)
from ctxledger.projections.drafts import AgentDrafts, Handlers, Thawed, batch_of_one

__all__ = [
    "AgentStrategyMetrics",
    "StrategyMetrics",
    "StrategyMetricsBatch",
    "evolve_strategy_metrics",
]


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


# --- the fold --------------------------------------------------------------------------------


class _MetricsDraft:
    """One agent's metrics during a batch; the counts by reason and by tool signature are
    copied on their first change (not per event)."""

    __slots__ = AgentStrategyMetrics.__struct_fields__
    """The fields of ``AgentStrategyMetrics``."""

    def __init__(self, m: AgentStrategyMetrics) -> None:
        self.strategy = m.strategy
        self.generations = m.generations
        self.builds = m.builds
        self.tokens_total = m.tokens_total
        self.tokens_max = m.tokens_max
        self.refreshes = m.refreshes
        self.rebuilds = m.rebuilds
        self.refresh_reasons = Thawed(m.refresh_reasons)
        self.retries = m.retries
        self.turn_failures = m.turn_failures
        self.repeated_actions = m.repeated_actions
        self.signatures = Thawed(m.signatures)

    def freeze(self) -> AgentStrategyMetrics:
        return AgentStrategyMetrics(
            strategy=self.strategy,
            generations=self.generations,
            builds=self.builds,
            tokens_total=self.tokens_total,
            tokens_max=self.tokens_max,
            refreshes=self.refreshes,
            rebuilds=self.rebuilds,
            refresh_reasons=self.refresh_reasons.current,
            retries=self.retries,
            turn_failures=self.turn_failures,
            repeated_actions=self.repeated_actions,
            signatures=self.signatures.current,
        )


class StrategyMetricsBatch:
    """The strategy metrics' fold over a batch of events (see ``projections.drafts``)."""

    def __init__(self, state: StrategyMetrics) -> None:
        self.agents = AgentDrafts(state.by_agent, _MetricsDraft, AgentStrategyMetrics)
        self._opened = self.agents.drafts.get

    def handlers(self) -> Handlers:
        return {
            AgentRegistered: self.registered,
            ContextPackBuilt: self.pack_built,
            GenerationRefreshed: self.generation_refreshed,
            TurnFailed: self.turn_failed,
            ItemRecorded: self.item_recorded,
        }

    def freeze(self) -> StrategyMetrics:
        return StrategyMetrics(by_agent=self.agents.freeze(_MetricsDraft.freeze))

    def registered(self, event: AgentRegistered) -> None:
        self.agents.put(event.agent.agent_id)

    def pack_built(self, event: ContextPackBuilt) -> None:
        m = self._opened(event.agent_id)
        if m is None:
            m = self.agents.put(event.agent_id)
        m.strategy = event.strategy
        m.builds += 1
        used = event.budget_used
        m.tokens_total += used
        m.tokens_max = max(m.tokens_max, used)

    def generation_refreshed(self, event: GenerationRefreshed) -> None:
        m = self.agents.put(event.agent_id)
        m.generations += 1
        m.refreshes += event.kind == "refresh"
        m.rebuilds += event.kind == "rebuild"
        key = f"{event.kind}:{event.trigger}"
        reasons = m.refresh_reasons.edit()
        reasons[key] = reasons.get(key, 0) + 1

    def turn_failed(self, event: TurnFailed) -> None:
        m = self.agents.put(event.agent_id)
        m.turn_failures += 1
        m.retries += event.error_class == "context_limit"

    def item_recorded(self, event: ItemRecorded) -> None:
        sig = event.item.tool_signature
        if not sig:
            return
        m = self.agents.put(event.agent_id)
        signatures = m.signatures.edit()
        seen = signatures.get(sig, 0)
        m.repeated_actions += seen > 0
        signatures[sig] = seen + 1


_EVOLVE = batch_of_one(StrategyMetricsBatch, StrategyMetrics())


def evolve_strategy_metrics(state: StrategyMetrics, event: Event) -> StrategyMetrics:
    """Fold one event: ``StrategyMetricsBatch`` over a batch of one."""
    return _EVOLVE(state, event)
