"""The packer: fit a scored pool into a token budget, one decision per item, on positions.

The rules are those of ``domain/packing.py``'s module docstring; this module applies them on
positions into the pool's per-version arrays (``PoolFacts``) instead of one object per item
(a build at 10k items includes ~650 and drops the rest ``over_budget``): a unit is an
ungrouped item's position, or a group's first member in ranked order standing for the group;
``Candidate``/``Group`` objects are made only for what needs one (a strategy's omission
test, forced and kept units, groups that fit or may be compressed, compression attempts).
A candidate's ``index`` is its pool position: it only breaks ties of equal ids, which this
packer never sees.

Any input is first made a :class:`Ranked` pool this packer covers (:func:`as_ranked`): a
list of scored items is de-duplicated by id (first wins) and ranked by (-score, id), a score
that is not a number ranking last; steering notes of another stage than the request's are
dropped ``other_stage`` before anything else, then the hypotheses a verified finding states
word for word (``duplicate``: the finding stands in for them). The specification it is held equal to, byte
for byte, is the packer over candidate objects in ``tests/oracles/packing_spec.py``
(``tests/property/test_ranked_pack.py``)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

import msgspec

from ctxledger.domain.filling import (
    COMPRESS_MIN_ROOM,
    Filler,
    drop_tail,
    fill_small_room,
    include_kept,
    kept_reserves,
)
from ctxledger.domain.model import Layer, Source
from ctxledger.domain.packing import (
    DUPLICATE,
    EXCLUDED_BY_SCOPE,
    RAW_HISTORY,
    SUPERSEDED,
    Accumulator,
    OmitFn,
    PackResult,
    Unit,
    effective_budget,
    recent_first,
)
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.positions import (
    Units,
    as_ranked,
    chronological_units,
    kept_units_at,
    omit_groups,
    record_drops,
    scope_out,
    superseded_at,
)
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import Ranked, ScoredItem

__all__ = ["pack", "pack_ranked"]

_L4 = Layer.L4


def pack(
    request: BuildRequest,
    candidates: Sequence[ScoredItem],
    counter: TokenCounter,
    *,
    strategy_name: str,
    budget: int | None = None,
    omit: OmitFn | None = None,
    omit_key: Hashable | None = None,
    chronological: bool = False,
    supersede: frozenset[Source] = frozenset({Source.ARTIFACT}),
    dedupe: bool = True,
    compress: bool = True,
    stop_at_first_miss: bool = False,
    raw_history: bool = False,
) -> PackResult:
    """Pack *candidates* into the budget (``budget`` overrides the request's, e.g. tighter).

    ``omit`` gives a strategy's own drop reason for a candidate (never applied to forced
    units; one omitted member drops its whole group); ``omit_key`` names that test and its
    parameters (hashable) when it reads only a candidate's item and tokens: its verdicts are
    then memoised per pool version. ``chronological`` orders by ``observed_at`` instead of
    (tier, score, id); ``stop_at_first_miss`` stops filling at the first unit that does not
    fit; without ``raw_history`` raw-history (L4) items never reach the prompt (seed 000:
    observability only), dropped ``raw_history``. Pure and deterministic."""
    limit = effective_budget(request, budget)
    acc = Accumulator(counter, strategy_name)
    ranked, request = as_ranked(request, candidates, counter, acc)
    return pack_ranked(
        request, ranked, counter, acc=acc, limit=limit, omit=omit, omit_key=omit_key,
        chronological=chronological, supersede=supersede, dedupe=dedupe, compress=compress,
        stop_at_first_miss=stop_at_first_miss, raw_history=raw_history,
    )  # fmt: skip


def pack_ranked(
    request: BuildRequest,
    ranked: Ranked,
    counter: TokenCounter,
    *,
    acc: Accumulator,
    limit: int,
    omit: OmitFn | None,
    chronological: bool,
    supersede: frozenset[Source],
    dedupe: bool,
    compress: bool,
    stop_at_first_miss: bool,
    raw_history: bool,
    omit_key: Hashable | None = None,
) -> PackResult:
    """:func:`pack` over *ranked* (a pool :func:`as_ranked` made) into *acc*, within *limit*:
    the units sorted in one pass over the ranked order, the drops before packing and the
    forced, kept and superseded units recorded, then the fill in packing order."""
    run = _Run(
        request, ranked, counter, acc=acc, omit=omit, omit_key=omit_key,
        chronological=chronological, raw_history=raw_history,
    )  # fmt: skip
    run.sort_units(supersede)
    run.put_aside(limit)
    filler = Filler(
        acc, limit, counter, clip_limit=run.clip_limit, chronological=chronological,
        dedupe=dedupe, compress=compress, stop_at_first_miss=stop_at_first_miss,
    )  # fmt: skip
    ordered = run.ordered()
    # distinct texts: no duplicate is possible
    dedupe = dedupe and not ranked.facts.distinct_contents
    if run.clip_limit:
        run.fill_clipped(ordered, filler, limit, dedupe=dedupe)
    else:
        run.fill(ordered, filler, limit, dedupe=dedupe, stop_at_first_miss=stop_at_first_miss)
    return acc.result(limit)


class _Run:
    """One :func:`pack_ranked` over positions: its inputs and the units as they are sorted."""

    __slots__ = (
        "acc",
        "before",
        "buckets",
        "cand",
        "chronological",
        "clip_limit",
        "counter",
        "dropped",
        "facts",
        "forced_units",
        "gmap",
        "group_omitted",
        "kept_g",
        "kept_k",
        "kept_keys",
        "live",
        "omit",
        "order",
        "out",
        "plain",
        "raw",
        "request",
        "scoped",
        "scoped_g",
        "scores",
        "superseded",
        "tok",
        "unit",
        "verdicts",
        "waiting",
        "why",
    )  # fmt: skip

    def __init__(
        self,
        request: BuildRequest,
        ranked: Ranked,
        counter: TokenCounter,
        *,
        acc: Accumulator,
        omit: OmitFn | None,
        omit_key: Hashable | None,
        chronological: bool,
        raw_history: bool,
    ) -> None:
        facts = ranked.facts
        self.request, self.facts, self.counter, self.acc = request, facts, counter, acc
        self.scores, self.order = ranked.scores, ranked.order
        self.omit, self.chronological = omit, chronological
        forced, group_forced = facts.forced, facts.group_forced
        self.tok = tok = facts.tokens(counter)
        self.gmap: dict[str, list[int]] = {}  # group -> its members, in ranked order
        made = Units(
            facts, self.scores, tok, forced=forced, group_forced=group_forced, gmap=self.gmap
        )
        self.cand, self.unit = made.cand, made.unit
        self.kept_keys, self.kept_k, self.kept_g = kept_units_at(
            facts, request.keep_ids, forced, group_forced
        )
        self.scoped, self.scoped_g = scope_out(request, facts, forced, group_forced)
        self.clip_limit = request.scope.clip_above_tokens
        self.raw = raw = not raw_history
        self.plain = facts.plain if raw else facts.plain_with_raw  # ungrouped, not forced, packable
        # An omission test with a key: its verdicts per pool version (packable: none omitted).
        self.verdicts: list[str | None] | None = None
        self.before: list[str | None] | None = None  # each ungrouped unforced item's reason
        self.group_omitted: dict[str, bool] = {}
        if omit is not None and omit_key is not None:
            self.verdicts, self.plain, self.group_omitted, self.before = facts.omissions(
                omit_key, omit, self.cand, counter=counter, raw=raw
            )
        # Groups tested once their members are known (an omission test without a key).
        self.waiting = omit is not None and self.verdicts is None
        self.out: set[int] = self.kept_k | self.scoped  # not live: kept, or dropped before packing
        self.forced_units: list[int] = []
        # Dropped before packing, in unit order: positions and reasons side by side (a tuple
        # each would feed the collector thousands of objects per build).
        self.dropped: list[int] = []
        self.why: list[str] = []
        self.superseded: list[int] = []  # in the order they were live
        self.buckets: list[list[int]] = [[], [], [], [], []]
        self.live: list[int] = []

    def key(self, u: Unit) -> tuple[object, ...]:
        return u.chrono_key() if self.chronological else u.priority_key()

    def sort_units(self, supersede: frozenset[Source]) -> None:
        """Supersession (the newest version per (source, source_id) among the live
        ungrouped items and the forced ones), then one pass over the ranked order. Unless an
        omission test must run item by item (no key), which items are live is known before
        the pass, so the pass sets the superseded aside."""
        gone: set[int] = set()
        if not self.waiting and supersede:
            gone = superseded_at(
                self.facts, supersede, self.out, raw=self.raw, verdicts=self.verdicts
            )
        pending = self._pass(gone)
        if self.verdicts is not None:
            verdicts, gmap, group, dropped = (
                self.verdicts,
                self.gmap,
                self.facts.group,
                self.dropped,
            )
            for at in pending:
                members = gmap[group[dropped[at]]]
                self.why[at] = next(filter(None, map(verdicts.__getitem__, members)), "")
        if self.waiting:
            self._settle_waiting(supersede)

    def _pass(self, gone: set[int]) -> list[int]:
        """Units in order of first appearance (a group: its first member), each put aside
        (kept, forced, superseded), dropped before packing (scope, raw history, omission) or
        live, into its tier's bucket unless chronological or waiting for an omission test.
        Returns the drops of groups whose reason waits for their ranked members."""
        facts, gmap, omit, verdicts, before = self.facts, self.gmap, self.omit, self.verdicts, self.before  # fmt: skip
        tier, forced, group, layer = facts.tier, facts.forced, facts.group, facts.layer
        group_forced, group_raw, group_tier = facts.group_forced, facts.group_raw, facts.group_tier
        kept_k, kept_g, scoped, scoped_g = self.kept_k, self.kept_g, self.scoped, self.scoped_g
        plain, raw, waiting, out, cand = self.plain, self.raw, self.waiting, self.out, self.cand
        forced_units, dropped, why = self.forced_units, self.dropped, self.why
        superseded, live, group_omitted = self.superseded, self.live, self.group_omitted
        pending: list[int] = []
        late = self.chronological or waiting
        put = [live.append] * 5 if late else [b.append for b in self.buckets]
        skip = out | gone
        for k in self.order:
            g = group[k]
            if not g:
                if scoped and k in scoped:  # excluded by scope (when kept: in put_aside)
                    if k not in kept_k:
                        dropped.append(k)
                        why.append(EXCLUDED_BY_SCOPE)
                elif plain[k] and not waiting:
                    if k not in skip:
                        put[tier[k]](k)
                    elif k in gone:
                        superseded.append(k)
                elif before is not None and (reason := before[k]):
                    # Dropped before packing, unless kept (with verdicts no omission test
                    # waits, so ``out`` is not read again and needs no entry).
                    if k not in kept_k:
                        dropped.append(k)
                        why.append(reason)
                elif forced[k]:
                    forced_units.append(k)
                elif k in kept_k:
                    pass
                else:
                    reason = RAW_HISTORY if raw and layer[k] is _L4 else None
                    if reason is None and omit is not None:
                        reason = omit(cand(k)) if verdicts is None else verdicts[k]
                    if reason:
                        dropped.append(k)
                        why.append(reason)
                        out.add(k)
                    else:
                        put[tier[k]](k)
                continue
            members = gmap.get(g)
            if members is not None:
                members.append(k)
                continue
            gmap[g] = [k]
            if g in kept_g:
                continue
            if group_forced[g]:
                forced_units.append(k)
            elif g in scoped_g:
                dropped.append(k)
                why.append(EXCLUDED_BY_SCOPE)
            elif raw and group_raw[g]:
                dropped.append(k)
                why.append(RAW_HISTORY)
            elif group_omitted.get(g):
                pending.append(len(dropped))  # the reason of its first member omitted
                dropped.append(k)
                why.append("")
            elif waiting:
                dropped.append(k)  # tested once its members are known (_settle_waiting)
                why.append("")
                live.append(k)
            else:
                put[group_tier[g]](k)
        return pending

    def _settle_waiting(self, supersede: frozenset[Source]) -> None:
        """The omission tests of groups, in ranked member order, now that their members are
        known; then supersession among what is live, and the live units into their tiers."""
        assert self.omit is not None
        facts, group, out = self.facts, self.facts.group, self.out
        if self.gmap:
            self.dropped, self.why = omit_groups(
                self.dropped, self.why, self.gmap, group=group, cand=self.cand, omit=self.omit,
                out=out,
            )  # fmt: skip
        live = self.live
        gone: set[int] = set()
        if supersede:
            gone = superseded_at(facts, supersede, out, raw=self.raw)
            self.superseded = [k for k in live if k in gone]
        if out or gone:
            live = self.live = [k for k in live if k not in out and k not in gone]
        if not self.chronological:
            tier, group_tier, buckets = facts.tier, facts.group_tier, self.buckets
            for k in live:
                g = group[k]
                buckets[group_tier[g] if g else tier[k]].append(k)

    def put_aside(self, limit: int) -> None:
        """The drops before packing, then the forced units (whole, even over budget), the
        kept ones (clipped to the room left; dropped when the scope excludes them) and the
        superseded versions."""
        acc, facts, counter, gmap, unit, key = (
            self.acc,
            self.facts,
            self.counter,
            self.gmap,
            self.unit,
            self.key,
        )
        record_drops(acc, facts, counter, gmap, dropped=self.dropped, why=self.why)
        for k in self.forced_units:
            f = unit(k)
            acc.include_unit(f, key(f))
        kept_keys = self.kept_keys
        kept_list = [unit(gmap[ref][0] if isinstance(ref, str) else ref) for ref in kept_keys]
        later = kept_reserves([f.tokens for f in kept_list])
        for ref, f, held in zip(kept_keys, kept_list, later, strict=True):
            if ref in self.scoped_g if isinstance(ref, str) else ref in self.scoped:
                acc.drop_unit(f, EXCLUDED_BY_SCOPE)
            else:
                include_kept(
                    f, key(f), limit=limit, acc=acc, counter=counter,
                    clip_limit=self.clip_limit, held=held,
                )  # fmt: skip
        superseded = self.superseded
        if superseded:
            record_drops(
                acc, facts, counter, gmap, dropped=superseded, why=[SUPERSEDED] * len(superseded)
            )
            acc.strategies.add("supersede")

    def ordered(self) -> list[int]:
        """Packing order: by tier, each tier in ranked order (the ranked order is (-score,
        id), so no tier needs sorting), recent groups first; or by (time, id) of each unit's
        earliest member."""
        if self.chronological:
            return chronological_units(self.live, self.facts, self.gmap)
        ordered = [k for b in self.buckets for k in b]
        recent = self.request.recent
        if recent:
            ordered = recent_first(ordered, recent, self.facts.group.__getitem__)
        return ordered

    def fill_clipped(self, ordered: list[int], filler: Filler, limit: int, *, dedupe: bool) -> None:
        """Scope clipping: every unit through the filler, which clips; once nothing more
        fits, the rest in one pass."""
        acc, unit, over = self.acc, self.unit, self.facts.over_budget(self.counter)
        for at, k in enumerate(ordered):
            if filler.stopped or acc.used >= limit:
                drop_tail(ordered, at, acc, self.facts, gmap=self.gmap, over=over, dedupe=dedupe)
                break
            filler.place(unit(k))

    def fill(
        self,
        ordered: list[int],
        filler: Filler,
        limit: int,
        *,
        dedupe: bool,
        stop_at_first_miss: bool,
    ) -> None:
        """The fill in packing order, includes and drops written from the arrays; once the
        room left is too small to compress into, a unit is included if it fits and dropped
        otherwise — without duplicates to find or a first miss to stop at, the rest of the
        order goes in one step (``fill_small_room``); once nothing more fits, the rest in
        one pass (``_drop_tail``)."""
        acc, facts, gmap, unit, cand, tok = (
            self.acc,
            self.facts,
            self.gmap,
            self.unit,
            self.cand,
            self.tok,
        )
        ids, group, lv, contents = facts.ids, facts.group, facts.layer_value, facts.contents
        packed, decisions = acc.contents, acc.decisions
        over = facts.over_budget(self.counter)
        include = self._includer()
        small_room = not dedupe and not stop_at_first_miss
        for at, k in enumerate(ordered):
            remaining = limit - acc.used
            if filler.stopped or remaining <= 0:
                drop_tail(ordered, at, acc, facts, gmap=gmap, over=over, dedupe=dedupe)
                break
            if small_room and remaining < COMPRESS_MIN_ROOM:
                fill_small_room(
                    ordered, at, acc, facts, limit, gmap=gmap, over=over, tokens=tok,
                    include=include, place=lambda k: filler.place(unit(k)),
                )  # fmt: skip
                break
            g = group[k]
            if g:
                members = gmap[g]
                total = sum(map(tok.__getitem__, members))
                if total <= remaining or filler.may_compress(total, remaining):
                    filler.place(unit(k))
                    continue
                for m in members:  # acc.drop_unit(…, OVER_BUDGET), from the array
                    decisions[ids[m]] = over[m]
                    acc.truncated.add(lv[m])
                acc.dropped += len(members)
                if stop_at_first_miss:
                    filler.stopped = True
                continue
            if dedupe and contents[k] in packed:
                acc.drop_id(ids[k], lv[k], tok[k], DUPLICATE)
                acc.strategies.add("dedupe")
                continue
            t = tok[k]
            if t <= remaining:
                include(k, t)
            elif not filler.may_compress(t, remaining):
                decisions[ids[k]] = over[k]  # acc.drop_id(…, OVER_BUDGET), from the array
                acc.dropped += 1
                acc.truncated.add(lv[k])
                if stop_at_first_miss:
                    filler.stopped = True
            else:
                filler.place(cand(k))

    def _includer(self) -> Callable[[int, int], None]:
        """``acc.include(cand(k), key(…))`` from the arrays, for item *k* of *t* tokens."""
        acc, facts, scores, chronological = self.acc, self.facts, self.scores, self.chronological
        items, ids, ts, tier, contents = (
            facts.items,
            facts.ids,
            facts.ts,
            facts.tier,
            facts.contents,
        )
        packed, decisions, chosen, included = (
            acc.contents,
            acc.decisions,
            acc.selected,
            facts.included,
        )

        def include(k: int, t: int) -> None:
            item = items[k]
            packed.add(contents[k])
            if item.token_count != t:
                item = msgspec.structs.replace(item, token_count=t)
            iid = ids[k]
            chosen.append(
                ((ts[k], iid, k) if chronological else (tier[k], -scores[k], iid, k), k, item)
            )
            acc.used += t
            decisions[iid] = included(k, t)

        return include
