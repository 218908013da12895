"""The view of one agent's last build, brought up to date in O(changes) for the next turn.

Planning an append needs, from the whole history: what the generation emitted (each item as
sent), the candidates that have no decision yet, the forced candidates left out, the emitted
items no longer in the pool and the emitted steering notes. ``emitted_context`` and
``generation_policy.append_facts`` compute them by passes over every decision and every
candidate — the specification. A :class:`TurnMemo` holds them as of one pack; the pool lists
the ids it changed since that pack (``AgentPool.touched``), so a turn re-checks only those,
and an append advances the memo by its own decisions. Derived from the folded log alone and
held equal to the from-scratch functions by tests/property/test_turn_memo.py and the
restart-transparency machine; an engine without it (a restart) recomputes it once.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import compress, repeat
from operator import attrgetter, ne

import msgspec

from ctxledger.domain.events import ContextPackBuilt
from ctxledger.domain.generation_policy import AppendFacts, EmittedContext
from ctxledger.domain.model import Decision, Generation, Item, Source
from ctxledger.domain.packing import is_forced, other_stage
from ctxledger.projections.pool import AgentPool, verified_form

__all__ = [
    "TurnMemo",
    "TurnView",
    "advance_memo",
    "emitted_context",
    "emitted_form",
    "memo_from_scratch",
    "memo_of_decisions",
    "turn_view",
]

_DROPPED = "dropped"
_ACTION = attrgetter("action")


def emitted_form(item: Item, d: Decision) -> Item:
    """*item* as its (not dropped) decision *d* sent it: the verified form if it was verified
    then, the sent text if it was compressed or clipped."""
    if d.verified:
        item = verified_form(item)
    if d.action in ("compressed", "clipped"):
        item = msgspec.structs.replace(item, content=d.content, token_count=d.tokens_after)
    return item


def emitted_context(gen: Generation, pool: AgentPool) -> EmittedContext | None:
    """The items the generation's latest pack sent, as sent (verified form, compressed or
    clipped text), in its order; None when the generation has no pack yet."""
    if not gen.decisions:
        return None
    items = pool.items
    emitted = {
        item_id: emitted_form(items[item_id], d)
        for item_id, d in gen.decisions.items()
        if d.action != _DROPPED and item_id in items
    }
    return EmittedContext(
        generation=gen.number,
        decisions=gen.decisions,
        emitted=emitted,
        order=gen.order,
        used=max(0, gen.tokens_used - gen.reserved),
    )


class TurnMemo(msgspec.Struct, frozen=True, kw_only=True):
    """One agent's planning facts as of pack ``pack_id`` of generation ``generation``."""

    pack_id: str
    generation: int
    emitted: dict[str, Item]
    """``emitted_context(gen, pool).emitted``: never changed in place (a context holds it)."""
    included: int
    """Decisions that are not ``dropped``."""
    undecided: frozenset[str]
    """Candidates without a decision."""
    forced_dropped: frozenset[str]
    """Candidates dropped although pinned or mandatory."""
    gone: frozenset[str]
    """Emitted items that are no longer candidates (removed from the pool)."""
    notes: frozenset[str]
    """Emitted steering notes (the ones a stage change can put off stage)."""
    forced_cut: frozenset[str] = frozenset()
    """Emitted items sent clipped or compressed that are forced now (pinned after they were
    sent): a forced item is never cut, so the next build rebuilds."""


class TurnView(msgspec.Struct, frozen=True, kw_only=True):
    """A memo brought up to date with the pool and the generation it plans on."""

    memo: TurnMemo
    gen: Generation
    pool: AgentPool

    def context(self) -> EmittedContext:
        gen = self.gen
        return EmittedContext(
            generation=gen.number,
            decisions=gen.decisions,
            emitted=self.memo.emitted,
            order=gen.order,
            used=max(0, gen.tokens_used - gen.reserved),
            included=self.memo.included,
        )

    def facts(self, keep: frozenset[str], stage_id: str) -> AppendFacts:
        """``append_facts(candidates, context, keep, stage_id)`` in O(new + kept)."""
        memo, pool, decisions = self.memo, self.pool, self.gen.decisions
        chosen = set(memo.undecided)
        chosen.update(memo.forced_dropped)
        for item_id in keep:
            d = decisions.get(item_id)
            if d is not None and d.action == _DROPPED and _candidate(pool, item_id):
                chosen.add(item_id)
        emitted = memo.emitted
        return AppendFacts(
            forced_cut=len(memo.forced_cut),
            gone=len(memo.gone),
            off_stage=sum(1 for i in memo.notes if other_stage(emitted[i], stage_id)),
            new=tuple(pool.current(i) for i in sorted(chosen, key=pool.seq.__getitem__)),
        )


_CUT = ("clipped", "compressed")


def _candidate(pool: AgentPool, item_id: str) -> bool:
    return item_id in pool.items and item_id not in pool.removed


def _forced(pool: AgentPool, item_id: str) -> bool:
    return is_forced(pool.items[item_id])


class _Sets:
    """The memo's id sets while they are updated (copied once)."""

    def __init__(self, memo: TurnMemo) -> None:
        self.undecided = set(memo.undecided)
        self.forced_dropped = set(memo.forced_dropped)
        self.gone = set(memo.gone)
        self.notes = set(memo.notes)
        self.forced_cut = set(memo.forced_cut)

    def place(
        self, pool: AgentPool, item_id: str, d: Decision | None, emitted: dict[str, Item]
    ) -> None:
        """Put *item_id* in the sets it belongs to now."""
        candidate = _candidate(pool, item_id)
        _mark(self.undecided, item_id, candidate and d is None)
        dropped = d is not None and d.action == _DROPPED
        _mark(self.forced_dropped, item_id, candidate and dropped and _forced(pool, item_id))
        sent = emitted.get(item_id)
        _mark(self.gone, item_id, sent is not None and not candidate)
        _mark(self.notes, item_id, sent is not None and sent.source is Source.STEERING_NOTE)
        cut = sent is not None and d is not None and d.action in _CUT
        _mark(self.forced_cut, item_id, cut and candidate and _forced(pool, item_id))

    def memo(
        self, pack_id: str, generation: int, emitted: dict[str, Item], included: int
    ) -> TurnMemo:
        return TurnMemo(
            pack_id=pack_id,
            generation=generation,
            emitted=emitted,
            included=included,
            undecided=frozenset(self.undecided),
            forced_dropped=frozenset(self.forced_dropped),
            gone=frozenset(self.gone),
            notes=frozenset(self.notes),
            forced_cut=frozenset(self.forced_cut),
        )


def _mark(ids: set[str], item_id: str, member: bool) -> None:
    if member:
        ids.add(item_id)
    else:
        ids.discard(item_id)


def memo_from_scratch(gen: Generation, pool: AgentPool) -> TurnMemo | None:
    """The memo of the generation's latest pack by passes over every decision and candidate
    (None before the generation's first pack)."""
    if not gen.decisions:
        return None
    return memo_of_decisions(gen.decisions, pool, pack_id=gen.last_pack_id, generation=gen.number)


def memo_of_decisions(
    decisions: Mapping[str, Decision],
    pool: AgentPool,
    *,
    pack_id: str,
    generation: int,
    added: Mapping[str, Item] | None = None,
) -> TurnMemo:
    """The memo of pack *pack_id* of generation *generation*, whose decisions (all of the
    generation's, in its order) are *decisions*, over *pool* — by set operations and C
    iterators over the whole history: it runs once per generation (by the build that opens
    it, for the turns after it), on a rebuild the budget forced and once after a restart."""
    items, removed = pool.items, pool.removed.keys()
    if added:  # items the pack's own outcome records (a working set): the pool after it
        items = {**items, **added}
    sent = [*compress(decisions, map(ne, map(_ACTION, decisions.values()), repeat(_DROPPED)))]
    emitted = {i: emitted_form(items[i], decisions[i]) for i in sent if i in items}
    forced = set(compress(items, map(is_forced, items.values())))
    return TurnMemo(
        pack_id=pack_id,
        generation=generation,
        emitted=emitted,
        included=len(sent),
        undecided=frozenset(items.keys() - decisions.keys() - removed),
        forced_dropped=frozenset(forced.intersection(decisions.keys()).difference(sent, removed)),
        gone=frozenset(emitted.keys() & removed),
        notes=frozenset(i for i, it in emitted.items() if it.source is Source.STEERING_NOTE),
        forced_cut=frozenset(
            i
            for i, it in emitted.items()
            if decisions[i].action in _CUT and i not in removed and is_forced(it)
        ),
    )


def turn_view(memo: TurnMemo | None, gen: Generation, pool: AgentPool) -> TurnView | None:
    """The view the next build plans on: *memo* brought up to date by the ids the pool
    touched since its pack, or recomputed when it describes another pack (or is None). None
    before the generation's first pack."""
    if not gen.decisions:
        return None
    if (
        memo is None
        or memo.generation != gen.number
        or memo.pack_id != gen.last_pack_id
        or pool.touched_since != memo.pack_id
    ):
        fresh = memo_from_scratch(gen, pool)
        return None if fresh is None else TurnView(memo=fresh, gen=gen, pool=pool)
    if not pool.touched:
        return TurnView(memo=memo, gen=gen, pool=pool)
    decisions = gen.decisions
    emitted = memo.emitted
    sets = _Sets(memo)
    for item_id in dict.fromkeys(pool.touched):
        d = decisions.get(item_id)
        if d is not None and d.action != _DROPPED and item_id in pool.items:
            form = emitted_form(pool.items[item_id], d)
            if emitted.get(item_id) != form:
                if emitted is memo.emitted:
                    emitted = dict(emitted)
                emitted[item_id] = form  # an emitted id keeps its place
        sets.place(pool, item_id, d, emitted)
    fresh = sets.memo(memo.pack_id, memo.generation, emitted, memo.included)
    return TurnView(memo=fresh, gen=gen, pool=pool)


def advance_memo(view: TurnView, built: ContextPackBuilt) -> TurnMemo | None:
    """The memo after *built*, an append planned on *view* (the pool is unchanged by a build).
    None where the delta cannot be replayed in place — an item emitted again at its earlier
    place, a retired decision, another generation: the next turn recomputes it."""
    memo, gen, pool = view.memo, view.gen, view.pool
    if built.generation != gen.number or built.retired or built.purpose:
        return None
    previous = gen.decisions
    emitted = dict(memo.emitted)
    included = memo.included
    sets = _Sets(memo)
    for d in built.decisions:
        item_id = d.item_id
        before = previous.get(item_id)
        was_in = before is not None and before.action != _DROPPED
        now_in = d.action != _DROPPED
        if now_in and before is not None and not was_in:
            return None  # it would be emitted at its old decision's place, not at the end
        included += now_in - was_in
        if now_in:
            emitted[item_id] = emitted_form(pool.items[item_id], d)
        else:
            emitted.pop(item_id, None)
        sets.place(pool, item_id, d, emitted)
    return sets.memo(built.pack_id, gen.number, emitted, included)
