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
dropped ``other_stage`` before anything else. The specification it is held equal to, byte
for byte, is the packer over candidate objects in ``tests/oracles/packing_spec.py``
(``tests/property/test_ranked_pack.py``)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Hashable, Sequence

import msgspec

from ctxledger.domain.filling import (
    COMPRESS_MIN_ROOM,
    Filler,
    include_kept,
    kept_reserves,
)
from ctxledger.domain.model import Decision, Layer, Source
from ctxledger.domain.packing import (
    DUPLICATE,
    EXCLUDED_BY_SCOPE,
    RAW_HISTORY,
    SUPERSEDED,
    Accumulator,
    Candidate,
    OmitFn,
    PackResult,
    Unit,
    effective_budget,
    recent_first,
)
from ctxledger.domain.pool_facts import PoolFacts
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.positions import Units, as_ranked, kept_units_at, record_drops, scope_out
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
    ranked = as_ranked(request, candidates, counter, acc)
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
    """:func:`pack` over *ranked* (a pool :func:`as_ranked` made) into *acc*, within *limit*."""
    facts = ranked.facts
    scores = ranked.scores
    order = ranked.order
    items, ids, tier, ts, forced = facts.items, facts.ids, facts.tier, facts.ts, facts.forced
    group, layer, lv = facts.group, facts.layer, facts.layer_value
    group_forced, group_raw, group_tier = facts.group_forced, facts.group_raw, facts.group_tier
    tok = facts.tokens(counter)
    gmap: dict[str, list[int]] = {}  # group -> its members, in ranked order

    made = Units(facts, scores, tok, forced=forced, group_forced=group_forced, gmap=gmap)
    cand, unit = made.cand, made.unit

    def key(u: Unit) -> tuple[object, ...]:
        return u.chrono_key() if chronological else u.priority_key()

    kept_keys, kept_k, kept_g = kept_units_at(facts, request.keep_ids, forced, group_forced)
    scoped, scoped_g = scope_out(request, facts, forced, group_forced)
    clip_limit = request.scope.clip_above_tokens

    # Supersession (``supersede_latest``): the newest version per (source, source_id) among
    # the live ungrouped items and the forced ones. Unless an omission test must run item by
    # item (no key), which items are live is known before the pass below, so the pass sets
    # the superseded aside.
    raw = not raw_history
    plain = facts.plain if raw else facts.plain_with_raw  # ungrouped, not forced, packable
    # An omission test with a key: its verdicts per pool version (packable: none omitted).
    verdicts: list[str | None] | None = None
    before: list[str | None] | None = None  # each ungrouped unforced item's reason, if any
    group_omitted: dict[str, bool] = {}
    if omit is not None and omit_key is not None:
        verdicts, plain, group_omitted, before = facts.omissions(
            omit_key, omit, cand, counter=counter, raw=raw
        )
    waiting = omit is not None and verdicts is None  # groups tested once their members are known
    out: set[int] = kept_k | scoped  # units not live: kept, or dropped before packing
    gone: set[int] = set()
    if not waiting and supersede:
        gone = _superseded(facts, supersede, out, raw=raw, verdicts=verdicts)

    # One pass over the ranked order: units in order of first appearance (``make_units``;
    # a group is its first member), each put aside (kept, forced, superseded), dropped
    # before packing (raw history; a strategy's omission) or live — placed straight into its
    # tier's bucket unless the order is chronological or a group waits for its omission test.
    forced_units: list[int] = []
    # Dropped before packing, in unit order: positions and reasons side by side (a tuple
    # each would feed the collector thousands of objects per build).
    dropped: list[int] = []
    why: list[str] = []
    superseded: list[int] = []  # in the order they were live
    pending: list[int] = []  # drops of groups whose reason waits for their ranked members
    buckets: list[list[int]] = [[], [], [], [], []]
    live: list[int] = []
    late = chronological or waiting
    put = [live.append] * 5 if late else [b.append for b in buckets]
    skip = out | gone
    for k in order:
        g = group[k]
        if not g:
            if scoped and k in scoped:  # excluded by scope (when kept: below)
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
            pending.append(len(dropped))  # the reason of its first member omitted, below
            dropped.append(k)
            why.append("")
        elif waiting:
            dropped.append(k)  # tested once its members are known, below
            why.append("")
            live.append(k)
        else:
            put[group_tier[g]](k)
    if verdicts is not None:
        for at in pending:
            members = gmap[group[dropped[at]]]
            why[at] = next(filter(None, map(verdicts.__getitem__, members)), "")
    if waiting:
        assert omit is not None
        if gmap:
            dropped, why = _omit_groups(
                dropped, why, gmap, group=group, cand=cand, omit=omit, out=out
            )
        if supersede:
            gone = _superseded(facts, supersede, out, raw=raw)
            superseded = [k for k in live if k in gone]
        if out or gone:
            live = [k for k in live if k not in out and k not in gone]
        if not chronological:
            for k in live:
                g = group[k]
                buckets[group_tier[g] if g else tier[k]].append(k)
    record_drops(acc, facts, counter, gmap, dropped=dropped, why=why)
    for k in forced_units:
        f = unit(k)
        acc.include_unit(f, key(f))
    kept_list = [unit(gmap[ref][0] if isinstance(ref, str) else ref) for ref in kept_keys]
    later = kept_reserves([f.tokens for f in kept_list])
    for ref, f, held in zip(kept_keys, kept_list, later, strict=True):
        if ref in scoped_g if isinstance(ref, str) else ref in scoped:
            acc.drop_unit(f, EXCLUDED_BY_SCOPE)
        else:
            include_kept(
                f, key(f), limit=limit, acc=acc, counter=counter, clip_limit=clip_limit, held=held
            )
    if superseded:
        record_drops(
            acc, facts, counter, gmap, dropped=superseded, why=[SUPERSEDED] * len(superseded)
        )
        acc.strategies.add("supersede")

    # Packing order: by tier, each tier in ranked order (the ranked order is (-score, id),
    # so no tier needs sorting); or by (time, id) of each unit's earliest member.
    if chronological:
        ordered = _chronological(live, facts, gmap)
    else:
        ordered = [k for b in buckets for k in b]
        if request.recent:
            ordered = recent_first(ordered, request.recent, group.__getitem__)

    # Fill in packing order; once nothing more fits, the rest in one pass.
    filler = Filler(
        acc, limit, counter, clip_limit=clip_limit, chronological=chronological, dedupe=dedupe,
        compress=compress, stop_at_first_miss=stop_at_first_miss,
    )  # fmt: skip
    dedupe = dedupe and not facts.distinct_contents  # distinct texts: no duplicate is possible
    contents = facts.contents
    packed = acc.contents
    decisions = acc.decisions
    chosen = acc.selected
    over = facts.over_budget(counter)
    included = facts.included
    if clip_limit:  # scope clipping: every unit through the filler, which clips
        for at, k in enumerate(ordered):
            if filler.stopped or acc.used >= limit:
                _drop_tail(ordered, at, acc, facts, gmap=gmap, over=over, dedupe=dedupe)
                break
            filler.place(unit(k))
        return acc.result(limit)

    def include(k: int, t: int) -> None:  # acc.include(cand(k), key(…)), from the arrays
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

    # Once the room left is too small to compress into, a unit is included if it fits and
    # dropped otherwise: without duplicates to find or a first miss to stop at, the rest of
    # the order goes in one step (``_fill_small_room``).
    small_room = not dedupe and not stop_at_first_miss
    for at, k in enumerate(ordered):
        remaining = limit - acc.used
        if filler.stopped or remaining <= 0:
            _drop_tail(ordered, at, acc, facts, gmap=gmap, over=over, dedupe=dedupe)
            break
        if small_room and remaining < COMPRESS_MIN_ROOM:
            _fill_small_room(
                ordered,
                at,
                acc,
                facts,
                limit,
                gmap=gmap,
                over=over,
                tokens=tok,
                include=include,
                place=lambda k: filler.place(unit(k)),
            )
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
    return acc.result(limit)


def _superseded(
    facts: PoolFacts,
    supersede: frozenset[Source],
    out: set[int],
    *,
    raw: bool,
    verdicts: list[str | None] | None = None,
) -> set[int]:
    """The live ungrouped items of *supersede*'s sources that a newer version (observed_at,
    then id) replaces, among live ungrouped items and forced ones; *out* are not live, nor
    (with *raw*) raw history, nor what *verdicts* omit."""
    group, forced, layer, ts, ids = facts.group, facts.forced, facts.layer, facts.ts, facts.ids
    gone: set[int] = set()
    for (source, _), ks in facts.versions.items():
        if source not in supersede:
            continue
        newest: tuple[float, str] | None = None
        eligible: list[int] = []
        for k in ks:
            if group[k]:
                continue
            if not forced[k]:
                if k in out or (raw and layer[k] is _L4) or (verdicts and verdicts[k]):
                    continue
                eligible.append(k)
            version = (ts[k], ids[k])
            if newest is None or version > newest:
                newest = version
        gone.update(k for k in eligible if (ts[k], ids[k]) != newest)
    return gone


def _omit_groups(
    dropped: list[int],
    why: list[str],
    gmap: dict[str, list[int]],
    *,
    group: list[str],
    cand: Callable[[int], Candidate],
    omit: OmitFn,
    out: set[int],
) -> tuple[list[int], list[str]]:
    """The drops, with the groups whose omission test waited for their members (no reason
    yet) tested now — in ranked member order, the first member's reason dropping the whole
    group (its first member then joins *out*) — or left out when none omits."""
    keep_k: list[int] = []
    keep_why: list[str] = []
    for k, reason in zip(dropped, why, strict=True):
        if not reason:
            found = next(filter(None, (omit(cand(m)) for m in gmap[group[k]])), None)
            if found is None:
                continue
            reason = found
            out.add(k)
        keep_k.append(k)
        keep_why.append(reason)
    return keep_k, keep_why


def _chronological(live: list[int], facts: PoolFacts, gmap: dict[str, list[int]]) -> list[int]:
    """Live units by (time, id) of each unit's earliest member."""
    group = facts.group
    wanted = set(live)
    out: list[int] = []
    for k in facts.chronological():
        g = group[k]
        if g:
            first = gmap[g][0]
            if first in wanted:
                wanted.discard(first)
                out.append(first)
        elif k in wanted:
            out.append(k)
    return out


def _fill_small_room(
    ordered: list[int],
    start: int,
    acc: Accumulator,
    facts: PoolFacts,
    limit: int,
    *,
    gmap: dict[str, list[int]],
    over: list[Decision],
    tokens: list[int],
    include: Callable[[int, int], None],
    place: Callable[[int], None],
) -> None:
    """The fill from *start* on when the room left is below what compression needs (and
    the packer neither de-duplicates nor stops at a first miss): each unit is included if
    it fits the room then left, else dropped ``over_budget``. Every member's decision is
    written ``over_budget`` first, in order; the few units whose first member alone fits
    the room at *start* (a group's total is no less) are then tried in order, an inclusion
    overwriting its decisions in place — the same decisions in the same order."""
    lv, group, ids = facts.layer_value, facts.group, facts.ids
    tail = ordered[start:]
    flat = _members(tail, group, gmap)
    acc.decisions.update(zip(map(ids.__getitem__, flat), map(over.__getitem__, flat), strict=True))
    room = limit - acc.used
    taken: list[int] = []  # the members included
    for k in itertools.compress(tail, map(room.__ge__, map(tokens.__getitem__, tail))):
        remaining = limit - acc.used
        if remaining <= 0:
            break
        g = group[k]
        if g:
            members = gmap[g]
            if sum(map(tokens.__getitem__, members)) <= remaining:
                place(k)
                taken += members
        elif tokens[k] <= remaining:
            include(k, tokens[k])
            taken.append(k)
    acc.dropped += len(flat) - len(taken)
    layers = list(map(lv.__getitem__, flat))
    if taken:
        kept = list(map(lv.__getitem__, taken))
        acc.truncated.update(v for v in set(layers) if layers.count(v) > kept.count(v))
    else:
        acc.truncated.update(layers)


def _drop_tail(
    ordered: list[int],
    start: int,
    acc: Accumulator,
    facts: PoolFacts,
    *,
    gmap: dict[str, list[int]],
    over: list[Decision],
    dedupe: bool,
) -> None:
    """``packing._drop_tail`` over pool positions: a duplicate of packed text is
    ``duplicate``, every other member ``over_budget``."""
    ids, lv, contents, group = facts.ids, facts.layer_value, facts.contents, facts.group
    decisions = acc.decisions
    tail = ordered[start:]
    if not dedupe:
        flat = _members(tail, group, gmap)
        decisions.update(zip(map(ids.__getitem__, flat), map(over.__getitem__, flat), strict=True))
        acc.dropped += len(flat)
        acc.truncated.update(map(lv.__getitem__, flat))
        return
    packed = acc.contents
    members: list[int] = []  # of the groups in the tail
    dropped = len(tail)
    for k in tail:
        g = group[k]
        if g:
            ms = gmap[g]
            members += ms
            for m in ms:
                decisions[ids[m]] = over[m]
            dropped += len(ms) - 1
        elif dedupe and contents[k] in packed:
            acc.drop_id(ids[k], lv[k], over[k].tokens_before, DUPLICATE)
            acc.strategies.add("dedupe")
            dropped -= 1
        else:
            decisions[ids[k]] = over[k]
    acc.dropped += dropped
    acc.truncated.update(map(lv.__getitem__, tail), map(lv.__getitem__, members))


def _members(units: list[int], group: list[str], gmap: dict[str, list[int]]) -> list[int]:
    """The members of *units* in order: an ungrouped item's position, a group's members
    in ranked order (*units* itself when no unit is a group)."""
    if not any(map(group.__getitem__, units)):
        return units
    flat: list[int] = []
    for k in units:
        g = group[k]
        if g:
            flat += gmap[g]
        else:
            flat.append(k)
    return flat
