"""ContextState (core-context): which packs were built, and whether a build is in progress."""

from __future__ import annotations

from typing import assert_never

import msgspec

from ctxledger.domain.events import (
    AgentConfigured,
    AgentRegistered,
    CacheUsageRecorded,
    ContentErased,
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
from ctxledger.projections.drafts import Additions, AgentDrafts, Handlers, Thawed

__all__ = [
    "ContextState",
    "ContextStates",
    "ContextStatesBatch",
    "evolve_context_state",
    "evolve_context_states",
]


class ContextState(msgspec.Struct, frozen=True, kw_only=True):
    """Build status of one agent's context."""

    built_pack_ids: tuple[str, ...] = ()
    building_in_progress: bool = False
    interrupted: bool = False


def evolve_context_state(state: ContextState, event: Event) -> ContextState:
    """The seed's reducer, total over the event union.

    Started → building_in_progress; Built → append the pack id, reset both flags;
    Failed → reset both flags; Interrupted → interrupted, building_in_progress false.
    Every other event leaves the state as it is. The reducer does not reject "illegal"
    orders (docs/events.md): a Built with no Started still records its pack id.
    """
    match event:
        case ContextBuildingStarted():
            return msgspec.structs.replace(state, building_in_progress=True)
        case ContextPackBuilt(pack_id=pack_id):
            return ContextState(built_pack_ids=(*state.built_pack_ids, pack_id))
        case ContextBuildingFailed():
            return msgspec.structs.replace(state, building_in_progress=False, interrupted=False)
        case ContextBuildingInterrupted():
            return msgspec.structs.replace(state, building_in_progress=False, interrupted=True)
        case (
            AgentRegistered()
            | ItemRecorded()
            | SteeringNoteAdded()
            | ItemPinned()
            | ItemUnpinned()
            | ItemRemoved()
            | FindingVerified()
            | GenerationRefreshed()
            | TurnFailed()
            | TurnSucceeded()
            | AgentConfigured()
            | CacheUsageRecorded()
            | MemoryPromoted()
            | MemoryVerified()
            | MemoryMarkedStale()
            | MemoryRetired()
            | MemoryDeleted()
            | ContentErased()
            | RecallRendered()
        ):
            return state
        case _:
            assert_never(event)


class ContextStates(msgspec.Struct, frozen=True, kw_only=True):
    """ContextState of every agent, keyed by agent id, and the pack id of each build in
    flight (``building``: a Started with no outcome yet, by agent id)."""

    by_agent: dict[str, ContextState] = {}
    building: dict[str, str] = {}

    def building_pack(self, agent_id: str) -> str:
        """The pack id of the agent's build in flight, or ``""``."""
        return self.building.get(agent_id, "")


_LIFECYCLE = (
    ContextBuildingStarted,
    ContextPackBuilt,
    ContextBuildingFailed,
    ContextBuildingInterrupted,
)


def evolve_context_states(states: ContextStates, event: Event) -> ContextStates:
    """Route lifecycle events to their agent's ContextState."""
    if not isinstance(event, _LIFECYCLE):
        return states
    agent_id = event.agent_id
    current = states.by_agent.get(agent_id, ContextState())
    updated = evolve_context_state(current, event)
    building = states.building
    if isinstance(event, ContextBuildingStarted):
        building = {**building, agent_id: event.pack_id}
    elif agent_id in building:
        building = {k: v for k, v in building.items() if k != agent_id}
    if updated is current and building is states.building:
        return states
    return ContextStates(by_agent={**states.by_agent, agent_id: updated}, building=building)


# --- batch fold ------------------------------------------------------------------------------


class _StateDraft:
    """One agent's ContextState during a batch: built pack ids appended to a list (the pure
    fold copies the whole tuple per build)."""

    __slots__ = ("building_in_progress", "built", "interrupted")

    def __init__(self, state: ContextState) -> None:
        self.built = Additions(state.built_pack_ids)
        self.building_in_progress = state.building_in_progress
        self.interrupted = state.interrupted

    def freeze(self) -> ContextState:
        return ContextState(
            built_pack_ids=self.built.freeze(),
            building_in_progress=self.building_in_progress,
            interrupted=self.interrupted,
        )


class ContextStatesBatch:
    """``evolve_context_states`` over a batch of events (see ``projections.drafts``)."""

    def __init__(self, state: ContextStates) -> None:
        self.agents = AgentDrafts(state.by_agent, _StateDraft, ContextState)
        self._opened = self.agents.drafts.get
        self.building = Thawed(state.building)

    def handlers(self) -> Handlers:
        return {
            ContextBuildingStarted: self.started,
            ContextPackBuilt: self.built,
            ContextBuildingFailed: self.failed,
            ContextBuildingInterrupted: self.interrupted,
        }

    def freeze(self) -> ContextStates:
        return ContextStates(
            by_agent=self.agents.freeze(_StateDraft.freeze), building=self.building.current
        )

    def _finished(self, agent_id: str) -> _StateDraft:
        """The agent's build is over: no longer in flight."""
        if agent_id in self.building.current:
            del self.building.edit()[agent_id]
        draft = self._opened(agent_id)
        if draft is None:
            draft = self.agents.put(agent_id)
        draft.building_in_progress = False
        return draft

    def started(self, event: ContextBuildingStarted) -> None:
        self.building.edit()[event.agent_id] = event.pack_id
        draft = self._opened(event.agent_id)
        if draft is None:
            draft = self.agents.put(event.agent_id)
        draft.building_in_progress = True

    def built(self, event: ContextPackBuilt) -> None:
        draft = self._finished(event.agent_id)
        draft.built.append(event.pack_id)
        draft.interrupted = False

    def failed(self, event: ContextBuildingFailed) -> None:
        self._finished(event.agent_id).interrupted = False

    def interrupted(self, event: ContextBuildingInterrupted) -> None:
        self._finished(event.agent_id).interrupted = True
