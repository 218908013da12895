"""The durable item pool per agent: what retrieval scores afresh at every build."""

from __future__ import annotations

from typing import assert_never

import msgspec

from ctxledger.domain.errors import InvalidInputError
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
from ctxledger.domain.model import Item, Source

__all__ = ["AgentPool", "Pool", "evolve_pool", "steering_form", "verified_form"]

_VERIFIABLE = (Source.WORKER_FINDING, Source.UNVERIFIED_HYPOTHESIS, Source.VERIFIED_FACT)


class AgentPool(msgspec.Struct, frozen=True, kw_only=True):
    """One agent's pool. ``items`` keeps first-recording order (``seq``); ``removed`` maps an
    item id to why it left; ``built_upto`` is the count of recordings the last build saw."""

    items: dict[str, Item] = {}
    verified: dict[str, bool] = {}
    seq: dict[str, int] = {}
    seen: dict[str, int] = {}
    removed: dict[str, str] = {}
    recorded: int = 0
    built_upto: int = 0

    def candidates(self) -> list[Item]:
        """Items still in the pool, in recording order, verified ones in their verified form."""
        removed = self.removed
        verified = self.verified
        return [
            verified_form(item) if i in verified else item
            for i, item in self.items.items()
            if i not in removed
        ]

    def current(self, item_id: str) -> Item:
        """One item as it is now (verified form after an explicit verification)."""
        item = self.items[item_id]
        return verified_form(item) if item_id in self.verified else item

    def new_since_last_build(self) -> list[str]:
        return [i for i, n in self.seq.items() if n > self.built_upto and i not in self.removed]


class Pool(msgspec.Struct, frozen=True, kw_only=True):
    """Pools of every agent, keyed by agent id."""

    by_agent: dict[str, AgentPool] = {}


def check_recordable(item: Item) -> None:
    """Refuse an item no recording may add: a verified_fact not verified, an
    unverified_hypothesis claimed verified, or recalled memory (rendered by recall only)."""
    if item.source == Source.VERIFIED_FACT and not item.verified:
        raise InvalidInputError("a verified_fact must be verified; record a finding and verify it")
    if item.source == Source.UNVERIFIED_HYPOTHESIS and item.verified:
        raise InvalidInputError(
            "an unverified_hypothesis cannot be recorded verified; verify it explicitly"
        )
    if item.source == Source.RECALLED_MEMORY:
        raise InvalidInputError("recalled_memory is rendered by recall, never recorded")


def verified_form(item: Item) -> Item:
    """The item after an explicit verification: verified, and a finding becomes a fact."""
    source = Source.VERIFIED_FACT if item.source in _VERIFIABLE else item.source
    return msgspec.structs.replace(item, verified=True, source=source)


def steering_form(item: Item) -> Item:
    """A steering note as the pool holds it, however it was recorded (``SteeringNoteAdded``
    or ``ItemRecorded`` with source ``steering_note``): a pinned steering note, so it is
    forced into every pack of its stage and never dropped for room."""
    if item.pinned and item.source is Source.STEERING_NOTE:
        return item
    return msgspec.structs.replace(item, source=Source.STEERING_NOTE, pinned=True)


def _put(state: Pool, agent_id: str, pool: AgentPool) -> Pool:
    return Pool(by_agent={**state.by_agent, agent_id: pool})


def _record(pool: AgentPool, item: Item) -> AgentPool:
    n = pool.recorded + 1
    seen = {**pool.seen, item.id: pool.seen.get(item.id, 0) + 1}
    if item.id in pool.items:
        removed = pool.removed
        if item.id in removed:  # observed again after removal: it is back
            removed = {k: v for k, v in removed.items() if k != item.id}
        return msgspec.structs.replace(pool, seen=seen, removed=removed, recorded=n)
    return msgspec.structs.replace(
        pool,
        items={**pool.items, item.id: item},
        seq={**pool.seq, item.id: n},
        seen=seen,
        recorded=n,
    )


def _update_item(state: Pool, agent_id: str, item_id: str, **changes: object) -> Pool:
    pool = state.by_agent.get(agent_id)
    if pool is None or item_id not in pool.items:
        return state
    item = msgspec.structs.replace(pool.items[item_id], **changes)
    return _put(state, agent_id, msgspec.structs.replace(pool, items={**pool.items, item_id: item}))


def evolve_pool(state: Pool, event: Event) -> Pool:
    """Fold one event into the pool."""
    match event:
        case ItemRecorded(agent_id=agent_id, item=item):
            if item.source is Source.STEERING_NOTE:
                item = steering_form(item)
            return _put(state, agent_id, _record(state.by_agent.get(agent_id, AgentPool()), item))
        case SteeringNoteAdded(agent_id=agent_id, item=item):
            note = steering_form(item)
            return _put(state, agent_id, _record(state.by_agent.get(agent_id, AgentPool()), note))
        case ItemPinned(agent_id=agent_id, item_id=item_id):
            return _update_item(state, agent_id, item_id, pinned=True)
        case ItemUnpinned(agent_id=agent_id, item_id=item_id):
            return _update_item(state, agent_id, item_id, pinned=False)
        case ItemRemoved(agent_id=agent_id, item_id=item_id, reason=reason):
            pool = state.by_agent.get(agent_id)
            if pool is None or item_id not in pool.items:
                return state
            removed = {**pool.removed, item_id: reason or "removed"}
            return _put(state, agent_id, msgspec.structs.replace(pool, removed=removed))
        case FindingVerified(agent_id=agent_id, item_id=item_id):
            pool = state.by_agent.get(agent_id)
            if pool is None or item_id not in pool.items:
                return state
            if pool.items[item_id].source == Source.RECALLED_MEMORY:
                return state  # recalled memory is never a verified fact
            verified = {**pool.verified, item_id: True}
            return _put(state, agent_id, msgspec.structs.replace(pool, verified=verified))
        case ContextPackBuilt(agent_id=agent_id):
            pool = state.by_agent.get(agent_id)
            if pool is None or pool.built_upto == pool.recorded or event.purpose:
                return state  # a decision point is not the agent's prompt: nothing was "seen"
            return _put(state, agent_id, msgspec.structs.replace(pool, built_upto=pool.recorded))
        case GenerationRefreshed(agent_id=agent_id, kind="refresh", dropped=dropped):
            pool = state.by_agent.get(agent_id)
            if pool is None or not dropped:
                return state
            removed = dict(pool.removed)
            for item_id in dropped:
                if item_id in pool.items:
                    removed.setdefault(item_id, "dropped_at_refresh")
            return _put(state, agent_id, msgspec.structs.replace(pool, removed=removed))
        case (
            AgentRegistered()
            | GenerationRefreshed()
            | ContextBuildingStarted()
            | ContextBuildingFailed()
            | ContextBuildingInterrupted()
            | TurnFailed()
            | TurnSucceeded()
            | AgentConfigured()
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
