"""The durable item pool per agent: what retrieval scores afresh at every build."""

from __future__ import annotations

import msgspec

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.events import (
    ContextPackBuilt,
    Event,
    FindingPromoted,
    FindingVerified,
    GenerationRefreshed,
    ItemPinned,
    ItemRecorded,
    ItemRemoved,
    ItemUnpinned,
    SteeringNoteAdded,
)
from ctxledger.domain.model import Item, Source
from ctxledger.projections.drafts import (
    Additions,
    AgentDrafts,
    Handlers,
    Thawed,
    agent_owned,
    batch_of_one,
    holders,
)

__all__ = ["AgentPool", "Pool", "PoolBatch", "evolve_pool", "steering_form", "verified_form"]

_VERIFIABLE = (Source.WORKER_FINDING, Source.UNVERIFIED_HYPOTHESIS, Source.VERIFIED_FACT)


class AgentPool(msgspec.Struct, frozen=True, kw_only=True):
    """One agent's pool. ``items`` keeps first-recording order (``seq``); ``removed`` maps an
    item id to why it left; ``built_upto`` is the count of recordings the last build saw;
    ``promoted`` maps each item a finding promotion stored here to its origin (agent, item)."""

    items: dict[str, Item] = {}
    verified: dict[str, bool] = {}
    promoted: dict[str, tuple[str, str]] = {}
    seq: dict[str, int] = {}
    seen: dict[str, int] = {}
    removed: dict[str, str] = {}
    recorded: int = 0
    built_upto: int = 0
    touched: tuple[str, ...] = ()
    touched_since: str = ""

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


TOUCHED_MAX = 4096
"""``AgentPool.touched`` holds at most this many ids: past it the list is cleared and
``touched_since`` emptied (no memo can be brought up to date; the next build recomputes it),
so a pool recording without building keeps a bounded read model."""


# --- the fold --------------------------------------------------------------------------------


class _PoolDraft:
    """One agent's pool during a batch. Its dicts are copied on their first change, so an
    agent recording thousands of items copies ``items``/``seq``/``seen`` once per batch
    instead of once per item (a copy per event is quadratic in one agent's recordings). Those
    three change together on every recording, so they are copied together — or not at all
    when the batch owns the model and no snapshot holds them (``_owns_recordings``): an
    engine recording and building turn after turn then never copies an agent's history."""

    __slots__ = (
        "_model",
        "_recordings_copied",
        "built_upto",
        "items",
        "promoted",
        "recorded",
        "removed",
        "seen",
        "seq",
        "source",
        "touched",
        "touched_since",
        "verified",
    )

    def __init__(self, pool: AgentPool, model: list[Pool]) -> None:
        self.source = pool
        self._model = model
        self.items = pool.items
        self.seq = pool.seq
        self.seen = pool.seen
        self._recordings_copied = False
        self.verified = Thawed(pool.verified)
        self.promoted = Thawed(pool.promoted)
        self.removed = Thawed(pool.removed)
        self.recorded = pool.recorded
        self.built_upto = pool.built_upto
        self.touched = Additions(pool.touched)
        self.touched_since = pool.touched_since

    def touch(self, item_id: str) -> None:
        """*item_id* touched: appended to ``touched``, unless that holds ``TOUCHED_MAX`` ids
        already (then ``touched`` is cleared and ``touched_since`` emptied)."""
        touched = self.touched
        if len(touched.frozen) + len(touched.added) >= TOUCHED_MAX:
            self.touched = Additions(())
            self.touched_since = ""
        else:
            touched.append(item_id)

    def _owns_recordings(self) -> bool:
        """Whether ``items``, ``seq`` and ``seen`` are reachable only through this draft: this
        agent's pool only through the batch (``agent_owned``), each dict only through that pool
        and this draft."""
        return (
            agent_owned(self._model, self)
            and holders(self.items) == 2
            and holders(self.seq) == 2
            and holders(self.seen) == 2
        )

    def edit_items(self) -> dict[str, Item]:
        """``items``, ``seq`` and ``seen`` made this batch's own; returns ``items``."""
        if not self._recordings_copied:
            if not self._owns_recordings():
                self.items = dict(self.items)
                self.seq = dict(self.seq)
                self.seen = dict(self.seen)
            self._recordings_copied = True
        return self.items

    def record(self, item: Item) -> None:
        """One recording of *item*: counted as seen, touched, and added to ``items``/``seq``
        when new, or back from ``removed`` (``edit_items`` and ``touch`` inlined: this runs
        once per recorded item of a replay)."""
        item_id = item.id
        if not self._recordings_copied:
            self.edit_items()
        items, seen = self.items, self.seen
        n = self.recorded = self.recorded + 1
        seen[item_id] = seen.get(item_id, 0) + 1
        touched = self.touched
        added = touched.added
        if len(touched.frozen) + len(added) >= TOUCHED_MAX:
            self.touched = Additions(())
            self.touched_since = ""
        else:
            added.append(item_id)
        if item_id not in items:
            items[item_id] = item
            self.seq[item_id] = n
        elif item_id in self.removed.current:  # observed again after removal: it is back
            del self.removed.edit()[item_id]

    def freeze(self) -> AgentPool:
        return AgentPool(
            items=self.items,
            verified=self.verified.current,
            promoted=self.promoted.current,
            seq=self.seq,
            seen=self.seen,
            removed=self.removed.current,
            recorded=self.recorded,
            built_upto=self.built_upto,
            touched=self.touched.freeze(),
            touched_since=self.touched_since,
        )


class PoolBatch:
    """The pool's fold over a batch of events (see ``projections.drafts``)."""

    def __init__(self, state: Pool) -> None:
        model = [state]
        """The model before the batch, held only here (``_PoolDraft._owns_recordings`` counts
        its holders; the drafts hold this list, not the batch: no reference cycle keeps a
        finished batch, and the model it held, alive)."""
        self.agents = AgentDrafts(state.by_agent, lambda pool: _PoolDraft(pool, model), AgentPool)
        self._opened = self.agents.drafts.get

    def handlers(self) -> Handlers:
        return {
            ItemRecorded: self.item_recorded,
            SteeringNoteAdded: self.steering_note_added,
            ItemPinned: self.item_pinned,
            ItemUnpinned: self.item_unpinned,
            ItemRemoved: self.item_removed,
            FindingVerified: self.finding_verified,
            FindingPromoted: self.finding_promoted,
            ContextPackBuilt: self.pack_built,
            GenerationRefreshed: self.generation_refreshed,
        }

    def freeze(self) -> Pool:
        return Pool(by_agent=self.agents.freeze(_PoolDraft.freeze))

    def _holding(self, agent_id: str, item_id: str) -> _PoolDraft | None:
        """The agent's draft if its pool holds *item_id* (events about other items are no-ops)."""
        pool = self.agents.get(agent_id)
        return pool if pool is not None and item_id in pool.items else None

    def item_recorded(self, event: ItemRecorded) -> None:
        item = event.item
        if item.source is Source.STEERING_NOTE:
            item = steering_form(item)
        pool = self._opened(event.agent_id)
        if pool is None:
            pool = self.agents.put(event.agent_id)
        pool.record(item)

    def steering_note_added(self, event: SteeringNoteAdded) -> None:
        self.agents.put(event.agent_id).record(steering_form(event.item))

    def _set_pinned(self, agent_id: str, item_id: str, pinned: bool) -> None:
        pool = self._holding(agent_id, item_id)
        if pool is not None:
            items = pool.edit_items()
            items[item_id] = msgspec.structs.replace(items[item_id], pinned=pinned)
            pool.touch(item_id)

    def item_pinned(self, event: ItemPinned) -> None:
        self._set_pinned(event.agent_id, event.item_id, True)

    def item_unpinned(self, event: ItemUnpinned) -> None:
        self._set_pinned(event.agent_id, event.item_id, False)

    def item_removed(self, event: ItemRemoved) -> None:
        pool = self._holding(event.agent_id, event.item_id)
        if pool is not None:
            pool.removed.edit()[event.item_id] = event.reason or "removed"
            pool.touch(event.item_id)

    def finding_verified(self, event: FindingVerified) -> None:
        pool = self._holding(event.agent_id, event.item_id)
        if pool is not None and pool.items[event.item_id].source != Source.RECALLED_MEMORY:
            pool.verified.edit()[event.item_id] = True
            pool.touch(event.item_id)

    def finding_promoted(self, event: FindingPromoted) -> None:
        pool = self._holding(event.agent_id, event.item_id)
        if pool is not None:
            pool.promoted.edit()[event.item_id] = (event.from_agent, event.from_item)

    def pack_built(self, event: ContextPackBuilt) -> None:
        pool = self.agents.get(event.agent_id)
        if pool is not None and not event.purpose:
            pool.built_upto = pool.recorded
            pool.touched = Additions(())
            pool.touched_since = event.pack_id

    def generation_refreshed(self, event: GenerationRefreshed) -> None:
        if event.kind != "refresh" or not event.dropped:
            return
        pool = self.agents.get(event.agent_id)
        if pool is None:
            return
        items = pool.items
        dropped = [item_id for item_id in event.dropped if item_id in items]
        if dropped:
            removed = pool.removed.edit()
            for item_id in dropped:
                removed.setdefault(item_id, "dropped_at_refresh")
                pool.touch(item_id)


_EVOLVE = batch_of_one(PoolBatch, Pool())


def evolve_pool(state: Pool, event: Event) -> Pool:
    """Fold one event into the pool: ``PoolBatch`` over a batch of one."""
    return _EVOLVE(state, event)
