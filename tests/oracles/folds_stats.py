"""The pure folds of the cache-stats, GC-indicator, strategy-metric and inspector read models
(see ``tests.oracles.folds``): the oracle their batch folds are compared against."""

from __future__ import annotations

from typing import assert_never

import msgspec

from ctxledger.domain import events as ev
from ctxledger.domain.model import Layer, Source
from ctxledger.projections.cache_stats import CacheStats, CacheTotals, is_unexpected_miss
from ctxledger.projections.gc_indicators import AgentIndicators, GcIndicators
from ctxledger.projections.inspector import AgentInspector, InspectorState, control_of, turn_error
from ctxledger.projections.strategy_metrics import AgentStrategyMetrics, StrategyMetrics

__all__ = [
    "evolve_cache_stats",
    "evolve_gc_indicators",
    "evolve_inspector",
    "evolve_strategy_metrics",
]


# --- cache stats -----------------------------------------------------------------------------


def _add_usage(t: CacheTotals, e: ev.CacheUsageRecorded) -> CacheTotals:
    miss = is_unexpected_miss(e.expected_cached_tokens, e.cache_read_tokens)
    miss_segments = t.miss_segments
    if miss:
        key = t.last_changed_segment or "none"
        miss_segments = {**miss_segments, key: miss_segments.get(key, 0) + 1}
    return msgspec.structs.replace(
        t,
        miss_segments=miss_segments,
        calls=t.calls + 1,
        input_tokens=t.input_tokens + e.input_tokens,
        cache_read_tokens=t.cache_read_tokens + e.cache_read_tokens,
        cache_write_tokens=t.cache_write_tokens + e.cache_write_tokens,
        output_tokens=t.output_tokens + e.output_tokens,
        expected_cached_tokens=t.expected_cached_tokens + e.expected_cached_tokens,
        shortfall_tokens=t.shortfall_tokens
        + max(0, e.expected_cached_tokens - e.cache_read_tokens),
        unexpected_misses=t.unexpected_misses + int(miss),
    )


def _add_build(t: CacheTotals, e: ev.ContextPackBuilt) -> CacheTotals:
    return msgspec.structs.replace(
        t,
        builds=t.builds + 1,
        prompt_bytes=t.prompt_bytes + e.prompt_bytes,
        expected_cached_bytes=t.expected_cached_bytes + e.expected_cached_bytes,
        changed_segments=(
            {
                **t.changed_segments,
                e.changed_segment: t.changed_segments.get(e.changed_segment, 0) + 1,
            }
            if e.changed_segment
            else t.changed_segments
        ),
        last_changed_segment=e.changed_segment,
    )


def _update(
    state: CacheStats,
    agent_id: str,
    generation: int,
    event: ev.CacheUsageRecorded | ev.ContextPackBuilt,
) -> CacheStats:
    def add(t: CacheTotals) -> CacheTotals:
        if isinstance(event, ev.CacheUsageRecorded):
            return _add_usage(t, event)
        return _add_build(t, event)

    per_gen = state.by_generation.get(agent_id, {})
    return CacheStats(
        overall=add(state.overall),
        by_agent={**state.by_agent, agent_id: add(state.agent(agent_id))},
        by_generation={
            **state.by_generation,
            agent_id: {**per_gen, generation: add(state.generation(agent_id, generation))},
        },
    )


def evolve_cache_stats(state: CacheStats, event: ev.Event) -> CacheStats:
    """Fold one event: usage reports add tokens, built packs add prompt/expected-cached bytes."""
    match event:
        case ev.CacheUsageRecorded():
            return _update(state, event.agent_id, event.generation, event)
        case ev.ContextPackBuilt():
            return _update(state, event.agent_id, event.generation, event)
        case (
            ev.AgentRegistered()
            | ev.ItemRecorded()
            | ev.SteeringNoteAdded()
            | ev.ItemPinned()
            | ev.ItemUnpinned()
            | ev.ItemRemoved()
            | ev.FindingVerified()
            | ev.ContextBuildingStarted()
            | ev.ContextBuildingFailed()
            | ev.ContextBuildingInterrupted()
            | ev.GenerationRefreshed()
            | ev.TurnFailed()
            | ev.TurnSucceeded()
            | ev.AgentConfigured()
            | ev.MemoryPromoted()
            | ev.MemoryVerified()
            | ev.MemoryMarkedStale()
            | ev.MemoryRetired()
            | ev.MemoryDeleted()
            | ev.ContentErased()
            | ev.RecallRendered()
            | ev.FindingPromoted()
            | ev.RecallSwitched()
        ):
            return state
        case _:
            assert_never(event)


# --- GC indicators ---------------------------------------------------------------------------

_TRANSCRIPT = (Source.CONVERSATION, Source.TOOL_LOG, Source.EVENT_HISTORY)
_PROGRESS = (Source.WORKER_FINDING, Source.VERIFIED_FACT, Source.PARENT_REPORT)


def _obsolete(phases: dict[str, int], current: str) -> int:
    if not current:
        return 0
    return sum(n for p, n in phases.items() if p and p != current)


def _enter_phase(state: GcIndicators, agent_id: str, phase: str) -> GcIndicators:
    """The agent works in *phase* from now on (an empty phase leaves the current one)."""
    cur = state.by_agent.get(agent_id, AgentIndicators())
    if not phase or phase == cur.phase:
        return state
    new = msgspec.structs.replace(
        cur, phase=phase, obsolete_phase_items=_obsolete(cur.phases, phase)
    )
    return GcIndicators(by_agent={**state.by_agent, agent_id: new})


def _indicators_recorded(state: GcIndicators, event: ev.ItemRecorded) -> GcIndicators:
    agent_id, item = event.agent_id, event.item
    cur = state.by_agent.get(agent_id, AgentIndicators())
    sig = item.tool_signature
    repeated = cur.repeated_tool_signatures
    failed_rep = cur.repeated_failed_edits
    signatures = cur.signatures
    failed = cur.failed_signatures
    if sig:
        repeated += 1 if sig in signatures else 0
        signatures = {**signatures, sig: signatures.get(sig, 0) + 1}
        if item.failure:
            failed_rep += 1 if sig in failed else 0
            failed = {**failed, sig: failed.get(sig, 0) + 1}
    phases = cur.phases
    if item.phase:
        phases = {**phases, item.phase: phases.get(item.phase, 0) + 1}
    tokens = item.token_count
    transcript = item.source in _TRANSCRIPT or item.layer == Layer.L4
    new = msgspec.structs.replace(
        cur,
        repeated_tool_signatures=repeated,
        repeated_failed_edits=failed_rep,
        signatures=signatures,
        failed_signatures=failed,
        phases=phases,
        obsolete_phase_items=_obsolete(phases, cur.phase),
        recorded_tokens=cur.recorded_tokens + tokens,
        transcript_tokens=cur.transcript_tokens + (tokens if transcript else 0),
        builds_since_progress=0 if item.source in _PROGRESS else cur.builds_since_progress,
    )
    return GcIndicators(by_agent={**state.by_agent, agent_id: new})


def evolve_gc_indicators(state: GcIndicators, event: ev.Event) -> GcIndicators:
    """Fold one event."""
    match event:
        case ev.ItemRecorded():
            return _indicators_recorded(state, event)
        case ev.ContextPackBuilt(agent_id=agent_id):
            cur = state.by_agent.get(agent_id, AgentIndicators())
            util = event.budget_used / event.budget_limit if event.budget_limit else 0.0
            new = msgspec.structs.replace(
                cur, utilization=util, builds_since_progress=cur.builds_since_progress + 1
            )
            return GcIndicators(by_agent={**state.by_agent, agent_id: new})
        case ev.GenerationRefreshed(agent_id=agent_id, phase=phase):
            return _enter_phase(state, agent_id, phase)
        case ev.ContextBuildingStarted(agent_id=agent_id, request=request):
            # Every build names its phase, so the first generation has one too.
            return _enter_phase(state, agent_id, request.phase if request is not None else "")
        case ev.FindingVerified(agent_id=agent_id):
            found = state.by_agent.get(agent_id)
            if found is None:
                return state
            new = msgspec.structs.replace(found, builds_since_progress=0)
            return GcIndicators(by_agent={**state.by_agent, agent_id: new})
        case (
            ev.AgentRegistered()
            | ev.SteeringNoteAdded()
            | ev.ItemPinned()
            | ev.ItemUnpinned()
            | ev.ItemRemoved()
            | ev.ContextBuildingFailed()
            | ev.ContextBuildingInterrupted()
            | ev.TurnFailed()
            | ev.TurnSucceeded()
            | ev.AgentConfigured()
            | ev.CacheUsageRecorded()
            | ev.MemoryPromoted()
            | ev.MemoryVerified()
            | ev.MemoryMarkedStale()
            | ev.MemoryRetired()
            | ev.MemoryDeleted()
            | ev.ContentErased()
            | ev.RecallRendered()
            | ev.FindingPromoted()
            | ev.RecallSwitched()
        ):
            return state
        case _:
            assert_never(event)


# --- strategy metrics ------------------------------------------------------------------------


def _put(state: StrategyMetrics, agent_id: str, m: AgentStrategyMetrics) -> StrategyMetrics:
    return StrategyMetrics(by_agent={**state.by_agent, agent_id: m})


def _metrics_built(state: StrategyMetrics, event: ev.ContextPackBuilt) -> StrategyMetrics:
    m = state.by_agent.get(event.agent_id, AgentStrategyMetrics())
    changed = msgspec.structs.replace(
        m,
        strategy=event.strategy,
        builds=m.builds + 1,
        tokens_total=m.tokens_total + event.budget_used,
        tokens_max=max(m.tokens_max, event.budget_used),
    )
    return _put(state, event.agent_id, changed)


def _metrics_refreshed(state: StrategyMetrics, event: ev.GenerationRefreshed) -> StrategyMetrics:
    m = state.by_agent.get(event.agent_id, AgentStrategyMetrics())
    key = f"{event.kind}:{event.trigger}"
    changed = msgspec.structs.replace(
        m,
        generations=m.generations + 1,
        refreshes=m.refreshes + (event.kind == "refresh"),
        rebuilds=m.rebuilds + (event.kind == "rebuild"),
        refresh_reasons={**m.refresh_reasons, key: m.refresh_reasons.get(key, 0) + 1},
    )
    return _put(state, event.agent_id, changed)


def evolve_strategy_metrics(state: StrategyMetrics, event: ev.Event) -> StrategyMetrics:
    """Fold one event."""
    match event:
        case ev.AgentRegistered(agent=agent):
            if agent.agent_id in state.by_agent:
                return state
            return _put(state, agent.agent_id, AgentStrategyMetrics())
        case ev.ContextPackBuilt():
            return _metrics_built(state, event)
        case ev.GenerationRefreshed():
            return _metrics_refreshed(state, event)
        case ev.TurnFailed(agent_id=agent_id):
            m = state.by_agent.get(agent_id, AgentStrategyMetrics())
            changed = msgspec.structs.replace(
                m,
                turn_failures=m.turn_failures + 1,
                retries=m.retries + (event.error_class == "context_limit"),
            )
            return _put(state, agent_id, changed)
        case ev.ItemRecorded(agent_id=agent_id, item=item):
            sig = item.tool_signature
            if not sig:
                return state
            m = state.by_agent.get(agent_id, AgentStrategyMetrics())
            seen = m.signatures.get(sig, 0)
            changed = msgspec.structs.replace(
                m,
                repeated_actions=m.repeated_actions + (seen > 0),
                signatures={**m.signatures, sig: seen + 1},
            )
            return _put(state, agent_id, changed)
        case (
            ev.AgentConfigured()
            | ev.TurnSucceeded()
            | ev.SteeringNoteAdded()
            | ev.ItemPinned()
            | ev.ItemUnpinned()
            | ev.ItemRemoved()
            | ev.FindingVerified()
            | ev.ContextBuildingStarted()
            | ev.ContextBuildingFailed()
            | ev.ContextBuildingInterrupted()
            | ev.CacheUsageRecorded()
            | ev.MemoryPromoted()
            | ev.MemoryVerified()
            | ev.MemoryMarkedStale()
            | ev.MemoryRetired()
            | ev.MemoryDeleted()
            | ev.ContentErased()
            | ev.RecallRendered()
            | ev.FindingPromoted()
            | ev.RecallSwitched()
        ):
            return state
        case _:
            assert_never(event)


# --- inspector -------------------------------------------------------------------------------


def _inspector_put(state: InspectorState, agent_id: str, a: AgentInspector) -> InspectorState:
    return msgspec.structs.replace(state, by_agent={**state.by_agent, agent_id: a})


def evolve_inspector(state: InspectorState, event: ev.Event) -> InspectorState:
    """Fold one event."""
    match event:
        case (
            ev.ItemPinned()
            | ev.ItemUnpinned()
            | ev.ItemRemoved()
            | ev.FindingVerified()
            | ev.FindingPromoted()
            | ev.MemoryPromoted()
            | ev.GenerationRefreshed()
            | ev.AgentConfigured()
            | ev.ContentErased()
        ):
            cur = state.by_agent.get(event.agent_id, AgentInspector())
            new = msgspec.structs.replace(cur, controls=(*cur.controls, control_of(event)))
            return _inspector_put(state, event.agent_id, new)
        case ev.RecallRendered(agent_id=a):
            cur = state.by_agent.get(a, AgentInspector())
            return _inspector_put(state, a, msgspec.structs.replace(cur, recall=event))
        case ev.TurnFailed(agent_id=a):
            cur = state.by_agent.get(a, AgentInspector())
            new = msgspec.structs.replace(cur, last_turn_error=turn_error(event))
            return _inspector_put(state, a, new)
        case ev.RecallSwitched():
            return msgspec.structs.replace(state, recall_switch=event)
        case (
            ev.AgentRegistered()
            | ev.ItemRecorded()
            | ev.SteeringNoteAdded()
            | ev.ContextBuildingStarted()
            | ev.ContextPackBuilt()
            | ev.ContextBuildingFailed()
            | ev.ContextBuildingInterrupted()
            | ev.CacheUsageRecorded()
            | ev.TurnSucceeded()
            | ev.MemoryVerified()
            | ev.MemoryMarkedStale()
            | ev.MemoryRetired()
            | ev.MemoryDeleted()
        ):
            return state
        case _:
            assert_never(event)
