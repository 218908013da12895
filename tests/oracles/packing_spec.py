"""The general packer over candidate objects: the specification ``ranked_pack.pack`` is held
equal to, byte for byte (``tests/property/test_ranked_pack.py``).

It was the product's general path (``domain/packing.pack``) until the packer over positions
covered every case; it takes the steps of ``domain/packing.py``'s module docstring literally:
a ``Candidate`` per item, units of them, several passes, and sorts.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from itertools import pairwise

import msgspec

from ctxledger.domain.filling import (
    Filler,
    include_kept,
    kept_reserves,
)
from ctxledger.domain.model import Decision, Layer, Source
from ctxledger.domain.packing import (
    DUPLICATE,
    EXCLUDED_BY_SCOPE,
    OVER_BUDGET,
    RAW_HISTORY,
    SUPERSEDED,
    Accumulator,
    Candidate,
    OmitFn,
    PackResult,
    Unit,
    drop_other_stage,
    effective_budget,
    make_units,
    prepare,
    recent_first,
    scope_excluder,
)
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import ScoredItem
from ctxledger.domain.tiers import dropped_decision

__all__ = ["kept_units", "pack", "supersede_latest", "verified_stand_in"]

_L4 = Layer.L4


_VERIFIED = (Source.VERIFIED_FACT, Source.WORKER_FINDING)
_HYPOTHESES = (Source.WORKER_FINDING, Source.UNVERIFIED_HYPOTHESIS)


def verified_stand_in(
    request: BuildRequest, cands: list[Candidate], acc: Accumulator
) -> tuple[list[Candidate], BuildRequest]:
    """A verified finding stands in for the hypotheses with its exact text: of the
    ungrouped verified findings with a text, the one with the smallest id; each ungrouped,
    unforced, unverified finding or hypothesis with that text is dropped ``duplicate`` (in
    candidate order) unless the scope excludes the finding, which takes the best score among
    them; kept ids of the dropped name the finding; the rest is ranked again."""
    finding: dict[str, Candidate] = {}
    for c in cands:
        it = c.item
        if it.verified and not it.group and it.source in _VERIFIED:
            known = finding.get(it.content)
            if known is None or it.id < known.item.id:
                finding[it.content] = c
    excluded = scope_excluder(request.scope)
    named: dict[str, str] = {}
    for c in cands:
        it = c.item
        if it.verified or it.group or c.forced or it.source not in _HYPOTHESES:
            continue
        f = finding.get(it.content)
        if f is None or (excluded is not None and excluded(f.item)):
            continue
        acc.drop(c, DUPLICATE)
        named[it.id] = f.item.id
        f.score = max(f.score, c.score)
    if not named:
        return cands, request
    acc.strategies.add("dedupe:verified")
    rest = sorted((c for c in cands if c.item.id not in named), key=lambda c: (-c.score, c.item.id))
    keep = tuple(named.get(iid, iid) for iid in request.keep_ids)
    return rest, msgspec.structs.replace(request, keep_ids=keep)


def _presorted(cands: Sequence[Candidate]) -> bool:
    """Whether *cands* are in (-score, id) order (retrieval's order)."""
    return not any(
        b.score > a.score or (b.score == a.score and b.item.id < a.item.id)
        for a, b in pairwise(cands)
    )


_over_budget: dict[str, Decision] = {}
"""The latest ``over_budget`` decision per item id: the tail of a build drops thousands."""


def supersede_latest(
    units: list[Unit], forced: Iterable[Unit], sources: frozenset[Source], acc: Accumulator
) -> list[Unit]:
    """Keep only the newest (observed_at, then id) item per (source, source_id) among
    ungrouped units of *sources*; older ones are dropped ``superseded``. Forced units count
    as versions but are never dropped."""
    eligible = [
        u for u in units if type(u) is Candidate and u.item.source_id and u.item.source in sources
    ]
    if not eligible:
        return units
    newest: dict[tuple[Source, str], tuple[float, str]] = {}
    for u in (*forced, *eligible):
        if type(u) is Candidate and u.item.source_id and u.item.source in sources:
            k = (u.item.source, u.item.source_id)
            v = (u.ts, u.item.id)
            if k not in newest or v > newest[k]:
                newest[k] = v
    gone: set[int] = set()
    for u in eligible:
        it = u.item
        if newest[(it.source, it.source_id)] != (u.ts, it.id):
            acc.drop(u, SUPERSEDED)
            gone.add(id(u))
    if not gone:
        return units
    acc.strategies.add("supersede")
    return [u for u in units if id(u) not in gone]


def kept_units(units: list[Unit], keep_ids: Sequence[str]) -> tuple[list[Unit], list[Unit]]:
    """``(kept, rest)``: the non-forced units holding a kept id, most important first (the
    order of ``keep_ids``), and the others in their order."""
    if not keep_ids:
        return [], units
    rank = {iid: n for n, iid in enumerate(keep_ids)}
    kept: list[tuple[int, Unit]] = []
    rest: list[Unit] = []
    for u in units:
        found = [rank[m.item.id] for m in u.members if m.item.id in rank]
        if found and not u.forced:
            kept.append((min(found), u))
        else:
            rest.append(u)
    kept.sort(key=lambda p: p[0])
    return [u for _, u in kept], rest


def _unit_group(u: Unit) -> str:
    return "" if type(u) is Candidate else u.group


def _ordered(units: list[Unit], chronological: bool, presorted: bool) -> list[Unit]:
    """Units in packing order: (tier, -score, id, index), or (time, id, index).

    Units come in order of first appearance; with *presorted* candidates (retrieval order)
    each unit's first member is its best-scored one, so every tier bucket is already in
    order and the common case is one linear pass."""
    if chronological:
        return sorted(units, key=lambda u: u.chrono_key())
    buckets: list[list[Unit]] = [[], [], [], [], []]
    for u in units:
        if type(u) is Candidate:
            buckets[u.tier].append(u)
        else:
            buckets[min(c.tier for c in u.members)].append(u)
    out: list[Unit] = []
    for b in buckets:
        if b:
            if not presorted:
                b.sort(key=lambda u: u.priority_key())
            out.extend(b)
    return out


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
    """Pack *candidates* into the budget (``budget`` overrides the request's, e.g. tighter).

    ``omit`` gives a strategy's own drop reason for a candidate (never applied to forced
    units; one omitted member drops its whole group). ``chronological`` orders by
    ``observed_at`` instead of (tier, score, id); ``stop_at_first_miss`` stops filling at the
    first unit that does not fit; without ``raw_history`` raw-history (L4) items never reach
    the prompt (seed 000: observability only), dropped ``raw_history``. Pure and
    deterministic.
    """
    limit = effective_budget(request, budget)
    acc = Accumulator(counter, strategy_name)
    cands = drop_other_stage(prepare(candidates, counter), request.stage_id, acc)
    cands, request = verified_stand_in(request, cands, acc)
    presorted = _presorted(cands)
    kept, units = kept_units(make_units(cands), request.keep_ids)
    excluded = scope_excluder(request.scope)
    clip_limit = request.scope.clip_above_tokens

    forced_units: list[Unit] = []
    live: list[Unit] = []
    for u in units:
        if u.forced:
            forced_units.append(u)
            continue
        reason: str | None = None
        if type(u) is Candidate:  # one member: no generator per unit (most units)
            if excluded is not None and excluded(u.item):
                reason = EXCLUDED_BY_SCOPE
            elif not raw_history and u.item.layer is _L4:
                reason = RAW_HISTORY
            elif omit is not None:
                reason = omit(u)
            if reason:
                acc.drop(u, reason)
            else:
                live.append(u)
            continue
        unit_members = u.members
        if excluded is not None and any(excluded(m.item) for m in unit_members):
            reason = EXCLUDED_BY_SCOPE
        elif not raw_history and any(m.item.layer is _L4 for m in unit_members):
            reason = RAW_HISTORY
        elif omit is not None:
            for m in unit_members:
                reason = omit(m)
                if reason:
                    break
        if reason:
            acc.drop_unit(u, reason)
        else:
            live.append(u)
    for u in forced_units:
        acc.include_unit(u, u.chrono_key() if chronological else u.priority_key())
    later = kept_reserves([u.tokens for u in kept])
    for u, held in zip(kept, later, strict=True):
        if excluded is not None and any(excluded(m.item) for m in u.members):
            acc.drop_unit(u, EXCLUDED_BY_SCOPE)
        else:
            key = u.chrono_key() if chronological else u.priority_key()
            include_kept(
                u, key, limit=limit, acc=acc, counter=counter, clip_limit=clip_limit, held=held
            )
    if supersede:
        live = supersede_latest(live, forced_units, supersede, acc)

    ordered = _ordered(live, chronological, presorted)
    if request.recent and not chronological:
        ordered = recent_first(ordered, request.recent, _unit_group)
    filler = Filler(
        acc, limit, counter, clip_limit=clip_limit, chronological=chronological, dedupe=dedupe,
        compress=compress, stop_at_first_miss=stop_at_first_miss,
    )  # fmt: skip
    for at, u in enumerate(ordered):
        if filler.stopped or acc.used >= limit:  # nothing more fits: the rest in one pass
            _drop_tail(ordered, at, acc, dedupe=dedupe)
            break
        filler.place(u)
    return acc.result(limit)


def _drop_tail(units: list[Unit], start: int, acc: Accumulator, *, dedupe: bool) -> None:
    """``pack``'s loop for ``units[start:]`` once nothing more can be included (the budget is
    used up, or a stop-at-first-miss strategy stopped): a candidate whose text is already in
    the pack is a duplicate, every other member is dropped over budget."""
    contents = acc.contents
    decisions = acc.decisions
    truncated = acc.truncated
    over = _over_budget
    layers: set[Layer] = set()
    dropped = 0
    for u in units[start:]:
        if type(u) is Candidate:
            if dedupe and u.item.content in contents:
                acc.drop(u, DUPLICATE)
                acc.strategies.add("dedupe")
                continue
            members: Sequence[Candidate] = (u,)
        else:
            members = u.members
        for m in members:
            item = m.item
            iid = item.id
            d = over.get(iid)
            if d is None or d.tokens_before != m.tokens:
                d = dropped_decision(iid, OVER_BUDGET, m.tokens)
                over[iid] = d
            decisions[iid] = d
            layers.add(item.layer)
        dropped += len(members)
    acc.dropped += dropped
    truncated.update(layer._value_ for layer in layers)
