"""Generations read model: every generation snapshot of every agent, rebuilt by replay."""

from __future__ import annotations

from typing import assert_never

import msgspec

from ctxledger.domain.events import (
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
)
from ctxledger.domain.model import AgentIdentity, Generation, apply_decision_delta

__all__ = ["AgentGenerations", "Generations", "evolve_generations"]


class AgentGenerations(msgspec.Struct, frozen=True, kw_only=True):
    """One agent: its identity and every generation, oldest first."""

    agent: AgentIdentity
    generations: tuple[Generation, ...]

    @property
    def current(self) -> Generation:
        return self.generations[-1]

    def generation(self, number: int) -> Generation | None:
        for g in self.generations:
            if g.number == number:
                return g
        return None


class Generations(msgspec.Struct, frozen=True, kw_only=True):
    """Generations of every agent, keyed by agent id."""

    by_agent: dict[str, AgentGenerations] = {}


def _replace_current(ag: AgentGenerations, gen: Generation) -> AgentGenerations:
    return AgentGenerations(agent=ag.agent, generations=(*ag.generations[:-1], gen))


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
            return Generations(by_agent={**state.by_agent, agent.agent_id: entry})
        case ContextPackBuilt():
            ag = state.by_agent.get(event.agent_id)
            if ag is None:
                return state
            cur = ag.current
            if event.generation != cur.number:
                return state
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
            )
            return Generations(
                by_agent={**state.by_agent, event.agent_id: _replace_current(ag, gen)}
            )
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
            entry = AgentGenerations(agent=ag.agent, generations=(*ag.generations, gen))
            return Generations(by_agent={**state.by_agent, event.agent_id: entry})
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
