"""A pool on positions, for the packers that work on them (``ranked_pack``, ``layered``).

Any input is made a :class:`Ranked` pool they cover (:func:`as_ranked`); the rest are the
pieces both packers share: what the scope excludes (:func:`scope_out`), the kept units
(:func:`kept_units_at`), drops recorded from the pool's per-version decisions
(:func:`record_drops`), and ``Candidate``/``Group`` objects made only where needed
(:class:`Units`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

import msgspec

from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.packing import (
    DUPLICATE,
    EXCLUDED_BY_SCOPE,
    OTHER_STAGE,
    Accumulator,
    Candidate,
    Group,
    OmitFn,
    Unit,
    scope_excluder,
)
from ctxledger.domain.pool_facts import PoolFacts, derived_facts
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import Ranked, ScoredItem
from ctxledger.domain.tiers import dropped_decision

__all__ = [
    "Units",
    "as_ranked",
    "chronological_units",
    "kept_units_at",
    "members_of",
    "omit_groups",
    "record_drops",
    "scope_out",
    "stand_ins",
    "superseded_at",
    "verified_twins",
]

_NEG_INF = float("-inf")
_L4 = Layer.L4


def as_ranked(
    request: BuildRequest, candidates: Sequence[ScoredItem], counter: TokenCounter, acc: Accumulator
) -> tuple[Ranked, BuildRequest]:
    """*candidates* as a pool the packers over positions cover, and the request to pack it
    with: the :class:`Ranked` that ``retrieve`` returns as it is; a list of scored items (or
    a pool with a repeated id or a score that is not a number) de-duplicated by id, first
    wins, and ranked by (-score, id), a NaN score ranking last. Into *acc* first, in ranked
    order: steering notes scoped to another stage than the request's, dropped
    ``other_stage`` — pinned or not, a note for one stage never reaches another stage's
    build — then the hypotheses a verified finding states word for word (:func:`stand_ins`)."""
    if type(candidates) is Ranked:
        ranked = candidates
        if not ranked.facts.unique or math.isnan(sum(ranked.scores)):
            ranked = _ranked_list(ranked)
    else:
        ranked = _ranked_list(candidates)
    facts = ranked.facts
    stage = request.stage_id
    other = {k for k, s in facts.staged if s != stage}
    if other:
        tok = facts.tokens(counter)
        rest: list[ScoredItem] = []
        for k in ranked.order:
            if k in other:
                acc.drop_id(facts.ids[k], facts.layer_value[k], tok[k], OTHER_STAGE)
            else:
                rest.append(ScoredItem(facts.items[k], ranked.scores[k]))
        ranked = _ranked_list(rest)
    return stand_ins(request, ranked, counter, acc)


_VERIFIED = frozenset({Source.VERIFIED_FACT, Source.WORKER_FINDING})
_HYPOTHESES = frozenset({Source.WORKER_FINDING, Source.UNVERIFIED_HYPOTHESIS})
_TWINS = ("verified_twins",)


def verified_twins(facts: PoolFacts) -> dict[int, int]:
    """Per pool version: each ungrouped, unforced, unverified finding or hypothesis whose
    exact text an ungrouped verified finding also has, mapped to that finding (the one with
    the smallest id when several have it)."""
    got = facts.derived.get(_TWINS)
    if got is None:
        verified: dict[str, int] = {}
        items, ids = facts.items, facts.ids
        for k, it in enumerate(items):
            if it.verified and not it.group and it.source in _VERIFIED:
                v = verified.get(it.content)
                if v is None or ids[k] < ids[v]:
                    verified[it.content] = k
        got = facts.derived[_TWINS] = {
            k: verified[it.content]
            for k, it in enumerate(items)
            if not it.verified
            and it.source in _HYPOTHESES
            and not it.group
            and not facts.forced[k]
            and it.content in verified
        }
    assert isinstance(got, dict)
    return got


def stand_ins(
    request: BuildRequest, ranked: Ranked, counter: TokenCounter, acc: Accumulator
) -> tuple[Ranked, BuildRequest]:
    """A verified finding stands in for the hypotheses with its exact text: each is dropped
    ``duplicate`` into *acc* (in ranked order) unless the request's scope excludes its
    finding, the finding takes the best score among them (so it ranks where the best of
    them did) and a kept hypothesis's id names the finding — the prompt never shows the
    unverified version of what was verified. Returns the pool ranked again, and the request."""
    facts = ranked.facts
    twins = verified_twins(facts)
    if not twins:
        return ranked, request
    items, ids, scores = facts.items, facts.ids, ranked.scores
    excluded = scope_excluder(request.scope)
    if excluded is not None:
        twins = {h: v for h, v in twins.items() if not excluded(items[v])}
        if not twins:
            return ranked, request
    tok = facts.tokens(counter)
    best: dict[int, float] = {}
    for k in ranked.order:
        v = twins.get(k)
        if v is not None:
            acc.drop_id(ids[k], facts.layer_value[k], tok[k], DUPLICATE)
            best[v] = max(best.get(v, scores[v]), scores[k])
    acc.strategies.add("dedupe:verified")
    rest = [ScoredItem(items[k], best.get(k, scores[k])) for k in ranked.order if k not in twins]
    index = facts.index
    keep = tuple(
        ids[twins[at]] if (at := index.get(iid)) is not None and at in twins else iid
        for iid in request.keep_ids
    )
    return _ranked_list(rest), msgspec.structs.replace(request, keep_ids=keep)


def _ranked_list(candidates: Iterable[ScoredItem]) -> Ranked:
    """The first of each id among *candidates*, ranked by (-score, id); NaN ranks last."""
    items: list[Item] = []
    scores: list[float] = []
    seen: set[str] = set()
    for sc in candidates:
        item = sc.item
        if item.id in seen:
            continue
        seen.add(item.id)
        items.append(item)
        score = sc.score
        scores.append(_NEG_INF if math.isnan(score) else score)
    order = sorted(range(len(items)), key=lambda k: (-scores[k], items[k].id))
    return Ranked(derived_facts(items), order, scores)


def scope_out(
    request: BuildRequest, facts: PoolFacts, forced: list[bool], group_forced: dict[str, bool]
) -> tuple[set[int], set[str]]:
    """What the request's scope excludes (``excluded_by_scope``) among the units not
    *forced*: ungrouped items' positions, and groups with an excluded member."""
    excluded = scope_excluder(request.scope)
    items: set[int] = set()
    groups: set[str] = set()
    if excluded is not None:
        group = facts.group
        for k, item in enumerate(facts.items):
            if excluded(item):
                g = group[k]
                if not g:
                    if not forced[k]:
                        items.add(k)
                elif not group_forced[g]:
                    groups.add(g)
    return items, groups


class Units:
    """``Candidate``/``Group`` objects for the few positions that need one (an omission
    test, forced and kept units, compression attempts); *forced* and *group_forced* are the
    packer's own (a strategy may force more), *gmap* a group's members in ranked order."""

    __slots__ = ("_facts", "_forced", "_gmap", "_group_forced", "_scores", "_tokens")

    def __init__(
        self,
        facts: PoolFacts,
        scores: list[float],
        tokens: list[int],
        *,
        forced: list[bool],
        group_forced: dict[str, bool],
        gmap: dict[str, list[int]],
    ) -> None:
        self._facts = facts
        self._scores = scores
        self._tokens = tokens
        self._forced = forced
        self._group_forced = group_forced
        self._gmap = gmap

    def cand(self, k: int) -> Candidate:
        """Item *k* as a candidate (its index: its pool position)."""
        f = self._facts
        return Candidate(
            f.items[k], self._scores[k], self._tokens[k], k, f.tier[k], f.ts[k], self._forced[k]
        )

    def unit(self, k: int) -> Unit:
        """The unit at *k*: item *k*, or its whole group (members in ranked order)."""
        g = self._facts.group[k]
        if not g:
            return self.cand(k)
        members = [self.cand(m) for m in self._gmap[g]]
        grp = Group(g, members[0], self._group_forced[g])
        grp.members = members
        return grp


def kept_units_at(
    facts: PoolFacts, keep_ids: Sequence[str], forced: list[bool], group_forced: dict[str, bool]
) -> tuple[list[int | str], set[int], set[str]]:
    """``packing.kept_units`` on positions: the units holding a kept id and not *forced*
    (per item, and per group in *group_forced*), most important first — each an ungrouped
    item's position or a group's name — and the two kinds as sets."""
    kept: list[int | str] = []
    kept_k: set[int] = set()
    kept_g: set[str] = set()
    if keep_ids:
        group = facts.group
        rank = {iid: r for r, iid in enumerate(keep_ids)}  # the last occurrence ranks
        for iid in sorted(rank, key=rank.__getitem__):
            at = facts.index.get(iid)
            if at is None:
                continue
            g = group[at]
            if g:
                if not group_forced[g] and g not in kept_g:
                    kept_g.add(g)
                    kept.append(g)
            elif not forced[at]:
                kept_k.add(at)
                kept.append(at)
    return kept, kept_k, kept_g


def record_drops(
    acc: Accumulator,
    facts: PoolFacts,
    counter: TokenCounter,
    gmap: dict[str, list[int]],
    *,
    dropped: list[int],
    why: list[str],
) -> None:
    """``acc.drop_id`` for each member of each unit in *dropped* with its reason in *why*,
    in order, with the decisions shared per pool version and reason."""
    ids, lv, group, tok = facts.ids, facts.layer_value, facts.group, facts.tokens(counter)
    flat, reasons = dropped, why
    if any(map(group.__getitem__, dropped)):  # a group's members, each with its reason
        flat, reasons = [], []
        for k, reason in zip(dropped, why, strict=True):
            g = group[k]
            if g:
                members = gmap[g]
                flat += members
                reasons += [reason] * len(members)
            else:
                flat.append(k)
                reasons.append(reason)
    made_for = {reason: facts.dropped_as(reason, counter) for reason in set(reasons)}
    made = [made_for[r][m] for r, m in zip(reasons, flat, strict=True)]
    if None in made:
        for i, (r, m) in enumerate(zip(reasons, flat, strict=True)):
            if made[i] is None:
                made[i] = made_for[r][m] = dropped_decision(ids[m], r, tok[m])
    # (no None left in *made*)
    acc.decisions.update(zip(map(ids.__getitem__, flat), made, strict=True))  # type: ignore[arg-type]
    acc.dropped += len(flat)
    if EXCLUDED_BY_SCOPE in made_for:  # (a strategy's own reason could say so)
        acc.truncated.update(
            lv[m] for r, m in zip(reasons, flat, strict=True) if r != EXCLUDED_BY_SCOPE
        )
    else:
        acc.truncated.update(map(lv.__getitem__, flat))


def superseded_at(
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


def omit_groups(
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


def chronological_units(live: list[int], facts: PoolFacts, gmap: dict[str, list[int]]) -> list[int]:
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


def members_of(units: list[int], group: list[str], gmap: dict[str, list[int]]) -> list[int]:
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
