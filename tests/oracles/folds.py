"""The pure folds of the read models: ``evolve_x(state, event) -> state``, one new frozen
state per event, every dict it changes copied. The product keeps one fold per projection
(its batch fold, ``projections.drafts``; its ``evolve_x`` is that fold over a batch of one);
these were its specification and stay the oracle the property tests compare it against.

This module holds the pool, generations and context-state folds, and ``fold_all``/``fold``
over every oracle; ``tests.oracles.folds_stats`` the four others."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, assert_never

import msgspec

from ctxledger.domain import events as ev
from ctxledger.domain.model import Generation, Item, Source, apply_decision_delta
from ctxledger.domain.request import Scope
from ctxledger.projections.catalog import Projection, ReadModels, read_models
from ctxledger.projections.context_state import ContextState, ContextStates
from ctxledger.projections.generations import AgentGenerations, Generations, pack_figures
from ctxledger.projections.pool import TOUCHED_MAX, AgentPool, Pool, steering_form
from tests.oracles.folds_stats import (
    evolve_cache_stats,
    evolve_gc_indicators,
    evolve_inspector,
    evolve_strategy_metrics,
)

__all__ = [
    "ORACLES",
    "evolve_cache_stats",
    "evolve_context_state",
    "evolve_context_states",
    "evolve_gc_indicators",
    "evolve_generations",
    "evolve_inspector",
    "evolve_pool",
    "evolve_strategy_metrics",
    "fold",
    "fold_all",
]


# --- pool ------------------------------------------------------------------------------------


def _touch(pool: AgentPool, *item_ids: str) -> dict[str, object]:
    """``touched``/``touched_since`` after touching *item_ids*, in order."""
    touched, since = pool.touched, pool.touched_since
    for item_id in item_ids:
        if len(touched) >= TOUCHED_MAX:
            touched, since = (), ""
        else:
            touched = (*touched, item_id)
    return {"touched": touched, "touched_since": since}


def _put(state: Pool, agent_id: str, pool: AgentPool) -> Pool:
    return Pool(by_agent={**state.by_agent, agent_id: pool})


def _record(pool: AgentPool, item: Item) -> AgentPool:
    n = pool.recorded + 1
    seen = {**pool.seen, item.id: pool.seen.get(item.id, 0) + 1}
    if item.id in pool.items:
        removed = pool.removed
        if item.id in removed:  # observed again after removal: it is back
            removed = {k: v for k, v in removed.items() if k != item.id}
        return msgspec.structs.replace(
            pool, seen=seen, removed=removed, recorded=n, **_touch(pool, item.id)
        )
    return msgspec.structs.replace(
        pool,
        items={**pool.items, item.id: item},
        seq={**pool.seq, item.id: n},
        seen=seen,
        recorded=n,
        **_touch(pool, item.id),
    )


def _update_item(state: Pool, agent_id: str, item_id: str, **changes: object) -> Pool:
    pool = state.by_agent.get(agent_id)
    if pool is None or item_id not in pool.items:
        return state
    item = msgspec.structs.replace(pool.items[item_id], **changes)
    items = {**pool.items, item_id: item}
    return _put(
        state, agent_id, msgspec.structs.replace(pool, items=items, **_touch(pool, item_id))
    )


def _pool_marked(state: Pool, event: ev.ItemRemoved | ev.FindingVerified) -> Pool:
    """An item removed or verified (a no-op for an item the pool does not hold)."""
    agent_id, item_id = event.agent_id, event.item_id
    pool = state.by_agent.get(agent_id)
    if pool is None or item_id not in pool.items:
        return state
    if isinstance(event, ev.ItemRemoved):
        removed = {**pool.removed, item_id: event.reason or "removed"}
        changed = msgspec.structs.replace(pool, removed=removed, **_touch(pool, item_id))
        return _put(state, agent_id, changed)
    if pool.items[item_id].source == Source.RECALLED_MEMORY:
        return state  # recalled memory is never a verified fact
    verified = {**pool.verified, item_id: True}
    return _put(
        state, agent_id, msgspec.structs.replace(pool, verified=verified, **_touch(pool, item_id))
    )


def _pool_built(state: Pool, event: ev.ContextPackBuilt) -> Pool:
    pool = state.by_agent.get(event.agent_id)
    if pool is None or event.purpose:
        return state  # a decision point is not the agent's prompt: nothing was "seen"
    if (pool.built_upto, pool.touched, pool.touched_since) == (pool.recorded, (), event.pack_id):
        return state
    changed = msgspec.structs.replace(
        pool, built_upto=pool.recorded, touched=(), touched_since=event.pack_id
    )
    return _put(state, event.agent_id, changed)


def _pool_refreshed(state: Pool, event: ev.GenerationRefreshed) -> Pool:
    pool = state.by_agent.get(event.agent_id)
    if pool is None or event.kind != "refresh" or not event.dropped:
        return state
    removed = dict(pool.removed)
    hit = tuple(item_id for item_id in event.dropped if item_id in pool.items)
    for item_id in hit:
        removed.setdefault(item_id, "dropped_at_refresh")
    changed = msgspec.structs.replace(pool, removed=removed, **_touch(pool, *hit))
    return _put(state, event.agent_id, changed)


def evolve_pool(state: Pool, event: ev.Event) -> Pool:
    """Fold one event into the pool."""
    match event:
        case ev.ItemRecorded(agent_id=agent_id, item=item):
            if item.source is Source.STEERING_NOTE:
                item = steering_form(item)
            return _put(state, agent_id, _record(state.by_agent.get(agent_id, AgentPool()), item))
        case ev.SteeringNoteAdded(agent_id=agent_id, item=item):
            note = steering_form(item)
            return _put(state, agent_id, _record(state.by_agent.get(agent_id, AgentPool()), note))
        case ev.ItemPinned(agent_id=agent_id, item_id=item_id):
            return _update_item(state, agent_id, item_id, pinned=True)
        case ev.ItemUnpinned(agent_id=agent_id, item_id=item_id):
            return _update_item(state, agent_id, item_id, pinned=False)
        case ev.ItemRemoved() | ev.FindingVerified():
            return _pool_marked(state, event)
        case ev.ContextPackBuilt():
            return _pool_built(state, event)
        case ev.GenerationRefreshed():
            return _pool_refreshed(state, event)
        case ev.FindingPromoted(agent_id=agent_id, item_id=item_id):
            pool = state.by_agent.get(agent_id)
            if pool is None or item_id not in pool.items:
                return state
            promoted = {**pool.promoted, item_id: (event.from_agent, event.from_item)}
            return _put(state, agent_id, msgspec.structs.replace(pool, promoted=promoted))
        case (
            ev.AgentRegistered()
            | ev.ContextBuildingStarted()
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
            | ev.RecallSwitched()
        ):
            return state
        case _:
            assert_never(event)


# --- generations -----------------------------------------------------------------------------


def _replace_current(ag: AgentGenerations, gen: Generation) -> AgentGenerations:
    return msgspec.structs.replace(ag, generations=(*ag.generations[:-1], gen))


def _with_agent(state: Generations, agent_id: str, ag: AgentGenerations) -> Generations:
    return Generations(by_agent={**state.by_agent, agent_id: ag})


def _next_order(
    order: tuple[str, ...], appended: tuple[str, ...], retired: tuple[str, ...]
) -> tuple[str, ...]:
    if retired:
        gone = set(retired)
        order = tuple(i for i in order if i not in gone)
    return order + appended if appended else order


def _generations_built(state: Generations, event: ev.ContextPackBuilt) -> Generations:
    ag = state.by_agent.get(event.agent_id)
    if ag is None:
        return state
    cur = ag.current
    if event.generation != cur.number:
        return state
    if event.purpose == "decision_point":  # a view of its own: the prompt is unchanged
        dp = msgspec.structs.replace(cur, decision_points=cur.decision_points + 1)
        return _with_agent(state, event.agent_id, _replace_current(ag, dp))
    gen = msgspec.structs.replace(
        pack_figures(cur, event),
        decisions=apply_decision_delta(cur.decisions, event.decisions, event.retired),
        order=_next_order(cur.order, event.order_appended, event.retired),
    )
    updated = _replace_current(ag, gen)
    if cur.builds == 0:  # the generation's first pack fixes its scope
        scope = ag.last_request.scope if ag.last_request is not None else Scope()
        updated = msgspec.structs.replace(updated, scope=scope)
    return _with_agent(state, event.agent_id, updated)


def _generations_refreshed(state: Generations, event: ev.GenerationRefreshed) -> Generations:
    ag = state.by_agent.get(event.agent_id)
    if ag is None:
        return state
    gen = Generation(
        number=event.to_generation,
        kind=event.kind,
        reason=event.reason,
        trigger=event.trigger,
        phase=event.phase,
        strategy=event.strategy,
        budget=event.budget,
    )
    streak = ag.refresh_streak + (1 if event.kind == "refresh" else 0)
    learned = event.kind == "refresh" and event.trigger == "context_limit"
    entry = msgspec.structs.replace(
        ag,
        generations=(*ag.generations, gen),
        refresh_streak=streak,
        scope=Scope(),
        window=event.budget if learned and event.budget else ag.window,
    )
    return _with_agent(state, event.agent_id, entry)


def _generations_usage(state: Generations, event: ev.CacheUsageRecorded) -> Generations:
    ag = state.by_agent.get(event.agent_id)
    if ag is None:
        return state
    sent = event.input_tokens + event.cache_read_tokens + event.cache_write_tokens
    window = 0 if ag.window and sent > ag.window else ag.window
    if ag.refresh_streak == 0 and window == ag.window:
        return state
    changed = msgspec.structs.replace(ag, refresh_streak=0, window=window)
    return _with_agent(state, event.agent_id, changed)


def evolve_generations(state: Generations, event: ev.Event) -> Generations:
    """Fold one event. Events for agents never registered are ignored (the audit reports them)."""
    match event:
        case ev.AgentRegistered(agent=agent):
            if agent.agent_id in state.by_agent:
                return state
            first = Generation(number=1, kind="initial", budget=agent.budget)
            entry = AgentGenerations(agent=agent, generations=(first,))
            return _with_agent(state, agent.agent_id, entry)
        case ev.AgentConfigured(agent_id=aid, settings=settings):
            ag = state.by_agent.get(aid)
            if ag is None:
                return state
            window = 0 if settings.budget != ag.settings.budget else ag.window
            return _with_agent(
                state, aid, msgspec.structs.replace(ag, settings=settings, window=window)
            )
        case ev.ContextBuildingStarted(agent_id=aid, request=request) if request is not None:
            ag = state.by_agent.get(aid)
            if ag is None:
                return state
            return _with_agent(state, aid, msgspec.structs.replace(ag, last_request=request))
        case ev.CacheUsageRecorded():
            return _generations_usage(state, event)
        case ev.TurnSucceeded(agent_id=aid):
            ag = state.by_agent.get(aid)
            if ag is None or ag.refresh_streak == 0:
                return state
            return _with_agent(state, aid, msgspec.structs.replace(ag, refresh_streak=0))
        case ev.ContextPackBuilt():
            return _generations_built(state, event)
        case ev.GenerationRefreshed():
            return _generations_refreshed(state, event)
        case (
            ev.ItemRecorded()
            | ev.SteeringNoteAdded()
            | ev.ItemPinned()
            | ev.ItemUnpinned()
            | ev.ItemRemoved()
            | ev.FindingVerified()
            | ev.ContextBuildingStarted()
            | ev.ContextBuildingFailed()
            | ev.ContextBuildingInterrupted()
            | ev.TurnFailed()
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


# --- context state ---------------------------------------------------------------------------


def evolve_context_state(state: ContextState, event: ev.Event) -> ContextState:
    """The seed's reducer, total over the event union.

    Started → building_in_progress; Built → append the pack id, reset both flags;
    Failed → reset both flags; Interrupted → interrupted, building_in_progress false.
    Every other event leaves the state as it is. The reducer does not reject "illegal"
    orders (docs/events.md): a Built with no Started still records its pack id.
    """
    match event:
        case ev.ContextBuildingStarted():
            return msgspec.structs.replace(state, building_in_progress=True)
        case ev.ContextPackBuilt(pack_id=pack_id):
            return ContextState(built_pack_ids=(*state.built_pack_ids, pack_id))
        case ev.ContextBuildingFailed():
            return msgspec.structs.replace(state, building_in_progress=False, interrupted=False)
        case ev.ContextBuildingInterrupted():
            return msgspec.structs.replace(state, building_in_progress=False, interrupted=True)
        case (
            ev.AgentRegistered()
            | ev.ItemRecorded()
            | ev.SteeringNoteAdded()
            | ev.ItemPinned()
            | ev.ItemUnpinned()
            | ev.ItemRemoved()
            | ev.FindingVerified()
            | ev.GenerationRefreshed()
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


_LIFECYCLE = (
    ev.ContextBuildingStarted,
    ev.ContextPackBuilt,
    ev.ContextBuildingFailed,
    ev.ContextBuildingInterrupted,
)


def evolve_context_states(states: ContextStates, event: ev.Event) -> ContextStates:
    """Route lifecycle events to their agent's ContextState."""
    if not isinstance(event, _LIFECYCLE):
        return states
    agent_id = event.agent_id
    current = states.by_agent.get(agent_id, ContextState())
    updated = evolve_context_state(current, event)
    building = states.building
    if isinstance(event, ev.ContextBuildingStarted):
        building = {**building, agent_id: event.pack_id}
    elif agent_id in building:
        building = {k: v for k, v in building.items() if k != agent_id}
    if updated is current and building is states.building:
        return states
    return ContextStates(by_agent={**states.by_agent, agent_id: updated}, building=building)


# --- every oracle ----------------------------------------------------------------------------


ORACLES: dict[str, Callable[[Any, ev.Event], Any]] = {
    "context_state": evolve_context_states,
    "generations": evolve_generations,
    "cache_stats": evolve_cache_stats,
    "pool": evolve_pool,
    "gc_indicators": evolve_gc_indicators,
    "strategy_metrics": evolve_strategy_metrics,
    "inspector": evolve_inspector,
}
"""Projection name → its pure fold, for every projection of ``catalog.PROJECTIONS``."""


def fold(projection: Projection[Any], events: Iterable[ev.Event], state: Any = None) -> Any:
    """The pure fold of *projection* over *events*, from *state* (default: its initial one)."""
    result = projection.initial() if state is None else state
    evolve = ORACLES[projection.name]
    for event in events:
        result = evolve(result, event)
    return result


def fold_all(events: Iterable[ev.Event]) -> ReadModels:
    """Every read model after *events*, by the pure folds, in one pass."""
    states: dict[str, Any] = {name: getattr(ReadModels(), name) for name in ORACLES}
    for event in events:
        for name, evolve in ORACLES.items():
            states[name] = evolve(states[name], event)
    return read_models(states)
