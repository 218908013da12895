"""Generations read model: every generation snapshot of every agent, rebuilt by replay."""

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
from ctxledger.domain.model import AgentIdentity, Generation, apply_decision_delta
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.settings import AgentSettings

__all__ = ["AgentGenerations", "Generations", "evolve_generations"]


class AgentGenerations(msgspec.Struct, frozen=True, kw_only=True):
    """One agent: its identity, its settings and every generation, oldest first.

    ``settings`` is the latest ``AgentConfigured``; ``last_request`` the request of the
    latest recorded build (its query — task, phase, files… — is what a refresh or rebuild
    re-asks); ``scope`` the scope the current generation was built with (fixed within it);
    ``refresh_streak`` the refreshes since the last successful turn; ``window`` the budget cap
    the last context-limit refresh learned (0: none), cleared by an explicit budget
    (``AgentConfigured`` changing it) and by a successful turn larger than it."""

    agent: AgentIdentity
    generations: tuple[Generation, ...]
    settings: AgentSettings = AgentSettings()
    last_request: BuildRequest | None = None
    scope: Scope = Scope()
    refresh_streak: int = 0
    window: int = 0

    @property
    def current(self) -> Generation:
        return self.generations[-1]

    @property
    def window_cap(self) -> int:
        """The budget cap a context-limit refresh learned for this agent (0: none)."""
        return self.window

    def generation(self, number: int) -> Generation | None:
        for g in self.generations:
            if g.number == number:
                return g
        return None


class Generations(msgspec.Struct, frozen=True, kw_only=True):
    """Generations of every agent, keyed by agent id."""

    by_agent: dict[str, AgentGenerations] = {}


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


def evolve_generations(state: Generations, event: Event) -> Generations:
    """Fold one event. Events for agents never registered are ignored (the audit reports them)."""
    match event:
        case AgentRegistered(agent=agent):
            if agent.agent_id in state.by_agent:
                return state
            first = Generation(number=1, kind="initial", budget=agent.budget)
            entry = AgentGenerations(agent=agent, generations=(first,))
            return _with_agent(state, agent.agent_id, entry)
        case AgentConfigured(agent_id=aid, settings=settings):
            ag = state.by_agent.get(aid)
            if ag is None:
                return state
            window = 0 if settings.budget != ag.settings.budget else ag.window
            return _with_agent(
                state, aid, msgspec.structs.replace(ag, settings=settings, window=window)
            )
        case ContextBuildingStarted(agent_id=aid, request=request) if request is not None:
            ag = state.by_agent.get(aid)
            if ag is None:
                return state
            return _with_agent(state, aid, msgspec.structs.replace(ag, last_request=request))
        case CacheUsageRecorded(agent_id=aid):
            ag = state.by_agent.get(aid)
            if ag is None:
                return state
            sent = event.input_tokens + event.cache_read_tokens + event.cache_write_tokens
            window = 0 if ag.window and sent > ag.window else ag.window
            if ag.refresh_streak == 0 and window == ag.window:
                return state
            return _with_agent(
                state, aid, msgspec.structs.replace(ag, refresh_streak=0, window=window)
            )
        case TurnSucceeded(agent_id=aid):
            ag = state.by_agent.get(aid)
            if ag is None or ag.refresh_streak == 0:
                return state
            return _with_agent(state, aid, msgspec.structs.replace(ag, refresh_streak=0))
        case ContextPackBuilt():
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
                cur,
                strategy=event.strategy,
                budget=event.budget_limit,
                tokens_used=event.budget_used,
                reserved=event.reserved,
                overflow=event.overflow,
                builds=cur.builds + 1,
                last_pack_id=event.pack_id,
                selection_hash=event.selection_hash,
                decisions=apply_decision_delta(cur.decisions, event.decisions, event.retired),
                order=_next_order(cur.order, event.order_appended, event.retired),
                prompt_bytes=event.prompt_bytes,
                expected_cached_bytes=event.expected_cached_bytes,
            )
            updated = _replace_current(ag, gen)
            if cur.builds == 0:  # the generation's first pack fixes its scope
                scope = ag.last_request.scope if ag.last_request is not None else Scope()
                updated = msgspec.structs.replace(updated, scope=scope)
            return _with_agent(state, event.agent_id, updated)
        case GenerationRefreshed():
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
        case (
            ItemRecorded()
            | SteeringNoteAdded()
            | ItemPinned()
            | ItemUnpinned()
            | ItemRemoved()
            | FindingVerified()
            | ContextBuildingStarted()
            | ContextBuildingFailed()
            | ContextBuildingInterrupted()
            | TurnFailed()
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
