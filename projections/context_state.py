"""ContextState (core-context): which packs were built, and whether a build is in progress."""

from __future__ import annotations

import msgspec

from ctxledger.domain.events import (
    ContextBuildingFailed,
    ContextBuildingInterrupted,
    ContextBuildingStarted,
    ContextPackBuilt,
    Event,
)
from ctxledger.projections.drafts import Additions, AgentDrafts, Handlers, Thawed, batch_of_one

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


# --- the fold --------------------------------------------------------------------------------


class _StateDraft:
    """One agent's ContextState during a batch: built pack ids appended to a list (not the
    whole tuple copied per build)."""

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
    """Every agent's ContextState over a batch of events (see ``projections.drafts``), by the
    seed's reducer rules: Started → building_in_progress; Built → append the pack id, reset
    both flags; Failed → reset both flags; Interrupted → interrupted, building_in_progress
    false. Every other event leaves the state as it is. The reducer does not reject "illegal"
    orders (docs/events.md): a Built with no Started still records its pack id."""

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


_EVOLVE = batch_of_one(ContextStatesBatch, ContextStates())

_LIFECYCLE = (
    ContextBuildingStarted,
    ContextPackBuilt,
    ContextBuildingFailed,
    ContextBuildingInterrupted,
)


def evolve_context_states(states: ContextStates, event: Event) -> ContextStates:
    """Fold one event: ``ContextStatesBatch`` over a batch of one (lifecycle events update
    their agent's ContextState)."""
    return _EVOLVE(states, event)


def evolve_context_state(state: ContextState, event: Event) -> ContextState:
    """One agent's ContextState after *event*: the seed's reducer, total over the event union
    (the rules of ``ContextStatesBatch``; a non-lifecycle event returns *state* itself)."""
    if not isinstance(event, _LIFECYCLE):
        return state
    agent_id = event.agent_id
    return evolve_context_states(ContextStates(by_agent={agent_id: state}), event).by_agent[
        agent_id
    ]
