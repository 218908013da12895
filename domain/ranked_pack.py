"""The packer over positions: :func:`~ctxledger.domain.packing.pack` for a :class:`Ranked` pool.

The general packer (``packing.pack``) is the specification. It makes a ``Candidate`` per
item and passes over them several times; most of a large pool only passes through (a build
at 10k items includes ~650 and drops the rest ``over_budget``). This packer takes the same
steps in the same order — so it records the same decisions in the same order, byte for
byte (``tests/property/test_ranked_pack.py``) — on integer positions into the pool's
per-version arrays (``PoolFacts``): a unit is a position (an ungrouped item) or a list of
positions (a group); ``Candidate``/``Group`` objects are made only for what needs one (a
strategy's omission test, forced, kept and included units, compression attempts).

It declines (returns ``None``: the general packer runs) what it does not cover: duplicate
item ids, a scope that excludes or clips, steering notes of another stage, a score that is
not a number.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ctxledger.domain.model import Layer, Source
from ctxledger.domain.packing import (
    _COMPRESS_MAX_ATTEMPTS,
    _COMPRESS_MIN_ROOM,
    _COMPRESS_MIN_TOKENS,
    DUPLICATE,
    OVER_BUDGET,
    RAW_HISTORY,
    SUPERSEDED,
    Accumulator,
    Candidate,
    Filler,
    Group,
    OmitFn,
    PackResult,
    Unit,
    effective_budget,
    include_kept,
    scope_excluder,
)
from ctxledger.domain.packing import pack as pack_general
from ctxledger.domain.pool_facts import PoolFacts
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import Ranked, ScoredItem

__all__ = ["pack", "pack_ranked"]

_L4 = Layer.L4

Pos = int | list[int]
"""A unit: the position (in ranked order) of an ungrouped item, or the positions of a
group's members in ranked order."""


def pack(
    request: BuildRequest,
    candidates: Sequence[ScoredItem],
    counter: TokenCounter,
    *,
    strategy_name: str,
    budget: int | None = None,
    omit: OmitFn | None = None,
    chronological: bool = False,
    supersede: frozenset[Source] = frozenset({Source.ARTIFACT}),
    dedupe: bool = True,
    compress: bool = True,
    stop_at_first_miss: bool = False,
    raw_history: bool = False,
) -> PackResult:
    """``packing.pack`` (the strategies' packer): over the pool's arrays when *candidates*
    is the :class:`Ranked` that ``retrieve`` returns and :func:`pack_ranked` covers the
    case; otherwise the general packer. The same decisions either way."""
    if type(candidates) is Ranked:
        done = pack_ranked(
            request, candidates, counter, strategy_name=strategy_name, budget=budget,
            omit=omit, chronological=chronological, supersede=supersede, dedupe=dedupe,
            compress=compress, stop_at_first_miss=stop_at_first_miss, raw_history=raw_history,
        )  # fmt: skip
        if done is not None:
            return done
    return pack_general(
        request, candidates, counter, strategy_name=strategy_name, budget=budget, omit=omit,
        chronological=chronological, supersede=supersede, dedupe=dedupe, compress=compress,
        stop_at_first_miss=stop_at_first_miss, raw_history=raw_history,
    )  # fmt: skip


def pack_ranked(
    request: BuildRequest,
    ranked: Ranked,
    counter: TokenCounter,
    *,
    strategy_name: str,
    budget: int | None,
    omit: OmitFn | None,
    chronological: bool,
    supersede: frozenset[Source],
    dedupe: bool,
    compress: bool,
    stop_at_first_miss: bool,
    raw_history: bool,
) -> PackResult | None:
    """``packing.pack`` with the same arguments over *ranked*, or ``None`` when it declines."""
    facts = ranked.facts
    scope = request.scope
    if not facts.unique or scope.clip_above_tokens or scope_excluder(scope) is not None:
        return None
    stage = request.stage_id
    if any(s != stage for _, s in facts.staged):
        return None  # a steering note of another stage is dropped first: the general path
    scores = ranked.scores
    if math.isnan(sum(scores)):  # a NaN score: the ranked order is not (-score, id) order
        return None
    limit = effective_budget(request, budget)
    acc = Accumulator(counter, strategy_name)
    order = ranked.order
    items, ids, tier, ts, forced = facts.items, facts.ids, facts.tier, facts.ts, facts.forced
    group, layer, plain = facts.group, facts.layer, facts.plain
    tok = facts.tokens(counter)

    def cand(u: int) -> Candidate:
        k = order[u]
        return Candidate(items[k], scores[k], tok[k], u, tier[k], ts[k], forced[k])

    def unit(x: Pos) -> Unit:
        if not isinstance(x, list):
            return cand(x)
        first = cand(x[0])
        grp = Group(group[order[x[0]]], first, first.forced)
        for v in x[1:]:
            c = cand(v)
            grp.members.append(c)
            grp.forced = grp.forced or c.forced
        return grp

    def key(u: Unit) -> tuple[object, ...]:
        return u.chrono_key() if chronological else u.priority_key()

    # Units in order of first appearance (``make_units``).
    n = len(order)
    units: list[Pos]
    gmap: dict[str, list[int]] = {}
    pos = [0] * n  # pool position -> ranked position
    if facts.groups:
        units = []
        append = units.append
        for u, k in enumerate(order):
            pos[k] = u
            g = group[k]
            if g:
                m = gmap.get(g)
                if m is None:
                    gmap[g] = m = [u]
                    append(m)
                else:
                    m.append(u)
            else:
                append(u)
    else:
        units = list(range(n))
        for u, k in enumerate(order):
            pos[k] = u

    # Kept units (``kept_units``): the non-forced units holding a kept id, by rank.
    kept: list[Pos] = []
    out: set[int] = set()  # ranked positions of ungrouped items kept or dropped before packing
    if request.keep_ids:
        rank = {iid: r for r, iid in enumerate(request.keep_ids)}  # the last occurrence ranks
        for iid in sorted(rank, key=rank.__getitem__):
            at = facts.index.get(iid)
            if at is None:
                continue
            k = at
            g = group[k]
            if g:
                members = gmap[g]
                if facts.group_forced[g] or any(y is members for y in kept):
                    continue
                kept.append(members)
                _remove_list(units, members)
            elif not forced[k]:
                kept.append(pos[k])
                units.remove(pos[k])
                out.add(pos[k])

    # Forced units aside; drops before packing (raw history, the strategy's omissions).
    forced_units: list[Pos] = []
    live: list[Pos] = []
    keep = live.append
    for x in units:
        if not isinstance(x, list):
            k = order[x]
            if plain[k] and omit is None:
                keep(x)
                continue
            if forced[k]:
                forced_units.append(x)
                continue
            reason: str | None = None
            if not raw_history and layer[k] is _L4:
                reason = RAW_HISTORY
            elif omit is not None:
                reason = omit(cand(x))
            if reason:
                acc.drop_id(ids[k], layer[k], tok[k], reason)
                out.add(x)
            else:
                keep(x)
            continue
        g = group[order[x[0]]]
        if facts.group_forced[g]:
            forced_units.append(x)
            continue
        reason = None
        if not raw_history and facts.group_raw[g]:
            reason = RAW_HISTORY
        elif omit is not None:
            for v in x:
                reason = omit(cand(v))
                if reason:
                    break
        if reason:
            for v in x:
                k = order[v]
                acc.drop_id(ids[k], layer[k], tok[k], reason)
        else:
            keep(x)
    for x in forced_units:
        f = unit(x)
        acc.include_unit(f, key(f))
    for x in kept:
        f = unit(x)
        include_kept(f, key(f), limit=limit, acc=acc, counter=counter, clip_limit=0)

    # Supersession (``supersede_latest``): the newest version per (source, source_id).
    gone: set[int] = set()
    if supersede and facts.versions:
        for (source, _), ks in facts.versions.items():
            if source not in supersede:
                continue
            newest: tuple[float, str] | None = None
            eligible: list[int] = []
            for k in ks:
                if group[k]:
                    continue
                if not forced[k]:
                    if pos[k] in out:
                        continue
                    eligible.append(k)
                version = (ts[k], ids[k])
                if newest is None or version > newest:
                    newest = version
            gone.update(pos[k] for k in eligible if (ts[k], ids[k]) != newest)
        if gone:
            for v in sorted(gone):
                k = order[v]
                acc.drop_id(ids[k], layer[k], tok[k], SUPERSEDED)
            acc.strategies.add("supersede")

    ordered = _ordered(live, gone, facts, order, pos, chronological=chronological)

    # Fill in packing order; once nothing more fits, the rest in one pass.
    filler = Filler(
        acc, limit, counter, clip_limit=0, chronological=chronological, dedupe=dedupe,
        compress=compress, stop_at_first_miss=stop_at_first_miss,
    )  # fmt: skip
    contents = facts.contents
    packed = acc.contents
    for at, x in enumerate(ordered):
        if filler.stopped or acc.used >= limit:
            _drop_tail(ordered, at, acc, ranked, counter, dedupe=dedupe)
            break
        if isinstance(x, list):
            filler.place(unit(x))
            continue
        k = order[x]
        if dedupe and contents[k] in packed:
            acc.drop_id(ids[k], layer[k], tok[k], DUPLICATE)
            acc.strategies.add("dedupe")
            continue
        t = tok[k]
        remaining = limit - acc.used
        if remaining > 0 and t <= remaining:
            c = cand(x)
            acc.include(c, key(c))
        elif remaining <= 0 or (
            not compress
            or filler.attempts >= _COMPRESS_MAX_ATTEMPTS
            or remaining < _COMPRESS_MIN_ROOM
            or t <= _COMPRESS_MIN_TOKENS
        ):
            acc.drop_id(ids[k], layer[k], t, OVER_BUDGET)
            if stop_at_first_miss:
                filler.stopped = True
        else:
            filler.place(cand(x))
    return acc.result(limit)


def _remove_list(units: list[Pos], x: list[int]) -> None:
    for i, y in enumerate(units):
        if y is x:
            del units[i]
            return


def _ordered(
    live: list[Pos],
    gone: set[int],
    facts: PoolFacts,
    order: list[int],
    pos: list[int],
    *,
    chronological: bool,
) -> list[Pos]:
    """Live units (less the superseded) in packing order: by tier, each tier in ranked order
    (the ranked order is (-score, id), so no tier needs sorting); or by (time, id) of each
    unit's earliest member."""
    tier, group, group_tier = facts.tier, facts.group, facts.group_tier
    if not chronological:
        buckets: list[list[Pos]] = [[], [], [], [], []]
        for x in live:
            if isinstance(x, list):
                buckets[group_tier[group[order[x[0]]]]].append(x)
            elif not gone or x not in gone:
                buckets[tier[order[x]]].append(x)
        return [x for b in buckets for x in b]
    n = len(order)
    mark = bytearray(n)
    lists: dict[str, list[int]] = {}
    for x in live:
        if isinstance(x, list):
            lists[group[order[x[0]]]] = x
        elif x not in gone:
            mark[x] = 1
    out: list[Pos] = []
    for k in facts.chronological():
        g = group[k]
        if g:
            members = lists.pop(g, None)
            if members is not None:
                out.append(members)
        elif mark[pos[k]]:
            out.append(pos[k])
    return out


def _drop_tail(
    ordered: list[Pos],
    start: int,
    acc: Accumulator,
    ranked: Ranked,
    counter: TokenCounter,
    *,
    dedupe: bool,
) -> None:
    """``packing._drop_tail`` over positions: a duplicate of packed text is ``duplicate``,
    every other member ``over_budget``."""
    facts = ranked.facts
    order, ids, layer, contents = ranked.order, facts.ids, facts.layer, facts.contents
    over = facts.over_budget(counter)
    packed = acc.contents
    decisions = acc.decisions
    layers: set[Layer] = set()
    add = layers.add
    dropped = 0
    for x in ordered[start:]:
        if not isinstance(x, list):
            k = order[x]
            if dedupe and contents[k] in packed:
                acc.drop_id(ids[k], layer[k], over[k].tokens_before, DUPLICATE)
                acc.strategies.add("dedupe")
                continue
            decisions[ids[k]] = over[k]
            add(layer[k])
            dropped += 1
            continue
        for v in x:
            k = order[v]
            decisions[ids[k]] = over[k]
            add(layer[k])
            dropped += 1
    acc.dropped += dropped
    acc.truncated.update(v._value_ for v in layers)
