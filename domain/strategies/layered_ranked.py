"""``layered`` over positions: :meth:`LayeredStrategy.select`'s one implementation.

The specification (``tests/oracles/layered_spec.py``) makes a ``Candidate`` per item, groups
them into units, and sorts the units by age for each eviction class and again for the last
resort. At 10k items a build evicts thousands of units; most of its time went to those
objects and sorts. This module takes the same steps in the same order — the same decisions
in the same order and the same items, byte for byte (``tests/property/test_layered_ranked.py``)
— on positions into the pool's arrays. What does not depend on the request is kept per pool
version (:class:`LayeredFacts`): which items the strategy forces, the units in age order
overall and per eviction class, the tool logs and conversation turns in age order, the
artifacts with several versions. A unit is an ungrouped item's position or, for a group, its
earliest member's position. Any input is made a ranked pool first
(``positions.as_ranked``: repeated ids, steering notes of other stages); the scope's
exclusions and clipping are applied here."""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ctxledger.domain.clipping import CLIP_METHOD, CLIP_REASON, clip_text
from ctxledger.domain.filling import (
    block_tokens,
    include_kept,
)
from ctxledger.domain.model import Layer, Source
from ctxledger.domain.packing import (
    DUPLICATE,
    EXCLUDED_BY_SCOPE,
    OUTSIDE_WINDOW,
    OVER_BUDGET,
    SUPERSEDED,
    Accumulator,
    PackResult,
    Unit,
)
from ctxledger.domain.pool_facts import PoolFacts
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.positions import Units, kept_units_at, record_drops, scope_out
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import Ranked

__all__ = ["LayeredFacts", "layered_facts", "select_ranked"]


class LayeredFacts:
    """The layered strategy's request-independent facts of one pool version.

    ``forced[k]``: item *k* is never dropped (pinned, mandatory, a steering note or event
    history); ``group_forced``/``group_layer``/``first``: per group, whether a member is
    forced, the members' smallest layer, the earliest member (the group's unit);
    ``by_age``: every unit, oldest first; ``evictable``: per eviction class, its units oldest
    first (each evictable layer in *evictable*'s order, its tool logs first, then the rest);
    ``logs``/``talk``: the ungrouped unforced tool logs / conversation turns oldest
    first; ``artifact[k]``: item *k* is an ungrouped unforced artifact whose ``source_id``
    has several versions in the pool."""

    __slots__ = (
        "_sizes",
        "artifact",
        "by_age",
        "evictable",
        "first",
        "forced",
        "group_forced",
        "group_layer",
        "logs",
        "talk",
    )

    def __init__(
        self, facts: PoolFacts, always_kept: frozenset[Source], evictable: tuple[Layer, ...]
    ) -> None:
        items, group, lv = facts.items, facts.group, facts.layer_value
        sources = [it.source for it in items]
        forced = [f or s in always_kept for f, s in zip(facts.forced, sources, strict=True)]
        self.forced = forced
        groups = facts.groups
        self.group_forced = {g: any(forced[k] for k in ks) for g, ks in groups.items()}
        self.group_layer = {g: min(lv[k] for k in ks) for g, ks in groups.items()}
        by_age: list[int] = []
        first: dict[str, int] = {}
        for k in facts.chronological():
            g = group[k]
            if not g:
                by_age.append(k)
            elif g not in first:
                first[g] = k
                by_age.append(k)
        self.first = first
        self.by_age = by_age
        tool_log = Source.TOOL_LOG

        values = frozenset(int(layer) for layer in evictable)

        def eviction_class(u: int) -> tuple[int, bool] | None:
            g = group[u]
            ks = groups[g] if g else (u,)
            if not all(lv[k] in values for k in ks):
                return None
            return (min(lv[k] for k in ks), all(sources[k] is tool_log for k in ks))

        classes = [eviction_class(u) for u in by_age]
        self.evictable = [
            [u for u, c in zip(by_age, classes, strict=True) if c == (int(layer), is_log)]
            for layer in evictable
            for is_log in (True, False)
        ]
        loose = [not g and not f for g, f in zip(group, forced, strict=True)]
        self.logs = [k for k in by_age if loose[k] and sources[k] is tool_log]
        self.talk = [k for k in by_age if loose[k] and sources[k] is Source.CONVERSATION]
        artifact = Source.ARTIFACT
        self.artifact = [
            lo and s is artifact and (artifact, it.source_id) in facts.versions
            for lo, s, it in zip(loose, sources, items, strict=True)
        ]
        self._sizes: dict[str, list[int]] = {}

    def sizes(self, facts: PoolFacts, counter: TokenCounter) -> list[int]:
        """Each unit's tokens at its position (a group's total at its earliest member)."""
        out = self._sizes.get(counter.name)
        if out is None:
            out = list(facts.tokens(counter))
            for g, ks in facts.groups.items():
                out[self.first[g]] = sum(out[k] for k in ks)
            self._sizes[counter.name] = out
        return out


def layered_facts(
    facts: PoolFacts, always_kept: frozenset[Source], evictable: tuple[Layer, ...]
) -> LayeredFacts:
    """The layered facts of a pool version, kept with its :class:`PoolFacts`."""
    key = ("layered", always_kept, evictable)
    out = facts.derived.get(key)
    if out is None:
        out = facts.derived[key] = LayeredFacts(facts, always_kept, evictable)
    assert type(out) is LayeredFacts
    return out


def select_ranked(
    request: BuildRequest,
    ranked: Ranked,
    counter: TokenCounter,
    *,
    name: str,
    keep_last: int,
    always_kept: frozenset[Source],
    evictable: tuple[Layer, ...],
    acc: Accumulator,
    limit: int,
) -> PackResult:
    """``LayeredStrategy.select`` over *ranked* (a pool ``as_ranked`` made) into *acc*,
    within *limit* (the strategy's window, always-kept sources and eviction order are its
    arguments): units sorted in one pass, the scope's exclusions and the per-source drops,
    forced and kept units, eviction while over budget, then what is left."""
    facts = ranked.facts
    lf = layered_facts(facts, always_kept, evictable)
    ids, ts, group, lv = facts.ids, facts.ts, facts.group, facts.layer_value
    forced, group_forced, first = lf.forced, lf.group_forced, lf.first
    tok = facts.tokens(counter)
    gmap: dict[str, list[int]] = {}  # group -> its members, in ranked order
    unit = Units(
        facts, ranked.scores, tok, forced=forced, group_forced=group_forced, gmap=gmap
    ).unit

    def key(u: int) -> tuple[object, ...]:  # the specification's ``_layer_key``
        g = group[u]
        return (lf.group_layer[g] if g else lv[u], ts[u], ids[u], u)

    # Kept units (``kept_units``): a kept group is its earliest member here.
    refs, kept_k, kept_g = kept_units_at(facts, request.keep_ids, forced, group_forced)
    kept = [first[r] if isinstance(r, str) else r for r in refs]
    scoped, scoped_g = scope_out(request, facts, forced, group_forced)
    forced_units, live, excluded, artifacts = _sort_units(
        ranked, lf, gmap, kept_k=kept_k, kept_g=kept_g, scoped=scoped, scoped_g=scoped_g
    )
    drops = _Drops(acc, facts, counter, gmap)
    drops.record(excluded, EXCLUDED_BY_SCOPE)
    gone = _per_source(drops, lf, artifacts, out=kept_k | scoped, keep_last=keep_last)

    for u in forced_units:
        acc.include_unit(unit(u), key(u))
    clip_limit = request.scope.clip_above_tokens
    for ref, u in zip(refs, kept, strict=True):
        if ref in scoped_g if isinstance(ref, str) else ref in scoped:
            acc.drop_unit(unit(u), EXCLUDED_BY_SCOPE)
        else:
            include_kept(
                unit(u), key(u), limit=limit, acc=acc, counter=counter, clip_limit=clip_limit
            )

    sizes = lf.sizes(facts, counter)
    dead = gone.union(forced_units, kept, excluded)  # units that are not live
    clips: dict[int, tuple[str, int]] = {}  # scope-clipped members: text, tokens
    if clip_limit:
        sizes, clips = _clipped(
            facts, counter, clip_limit, live=[u for u in live if u not in dead], gmap=gmap,
            sizes=sizes,
        )  # fmt: skip
    total = acc.used + sum(map(sizes.__getitem__, live)) - sum(map(sizes.__getitem__, gone))
    if total > limit:
        _evict(drops, lf, evictable, sizes=sizes, dead=dead, total=total, limit=limit)
    _include_live(acc, facts, live, dead=dead, gmap=gmap, unit=unit, key=key, clips=clips)
    return acc.result(limit)


def _sort_units(
    ranked: Ranked,
    lf: LayeredFacts,
    gmap: dict[str, list[int]],
    *,
    kept_k: set[int],
    kept_g: set[str],
    scoped: set[int],
    scoped_g: set[str],
) -> tuple[list[int], list[int], list[int], dict[str, list[int]]]:
    """One pass over the ranked order: units in order of first appearance (a group is its
    earliest member), each forced, kept, excluded by the scope or live — ``(forced, live,
    excluded, artifacts)``, the last the live artifacts with versions by source_id. Fills
    *gmap* with each group's members in ranked order."""
    facts = ranked.facts
    items, group = facts.items, facts.group
    forced, group_forced, first, artifact = lf.forced, lf.group_forced, lf.first, lf.artifact
    forced_units: list[int] = []
    live: list[int] = []
    excluded: list[int] = []  # in unit order
    artifacts: dict[str, list[int]] = {}
    for k in ranked.order:
        g = group[k]
        if not g:
            if forced[k]:
                forced_units.append(k)
            elif k in kept_k:
                pass
            elif scoped and k in scoped:
                excluded.append(k)
            else:
                live.append(k)
                if artifact[k]:
                    artifacts.setdefault(items[k].source_id, []).append(k)
            continue
        members = gmap.get(g)
        if members is not None:
            members.append(k)
            continue
        gmap[g] = [k]
        if g in kept_g:
            continue
        if group_forced[g]:
            forced_units.append(first[g])
        elif g in scoped_g:
            excluded.append(first[g])
        else:
            live.append(first[g])
    return forced_units, live, excluded, artifacts


class _Drops:
    """Drops of units by position, recorded through the pool's shared decisions."""

    __slots__ = ("acc", "counter", "facts", "gmap")

    def __init__(
        self, acc: Accumulator, facts: PoolFacts, counter: TokenCounter, gmap: dict[str, list[int]]
    ) -> None:
        self.acc, self.facts, self.counter, self.gmap = acc, facts, counter, gmap

    def record(self, units: list[int], reason: str) -> None:
        if units:
            record_drops(
                self.acc, self.facts, self.counter, self.gmap, dropped=units,
                why=[reason] * len(units),
            )  # fmt: skip


def _per_source(
    drops: _Drops,
    lf: LayeredFacts,
    artifacts: dict[str, list[int]],
    *,
    out: set[int],
    keep_last: int,
) -> set[int]:
    """Per source: the latest artifact per source_id, tool logs de-duplicated oldest first,
    the last *keep_last* conversation turns (*out*: ungrouped items neither live nor forced).
    Returns the units dropped."""
    acc, facts = drops.acc, drops.facts
    ts, ids, contents = facts.ts, facts.ids, facts.contents
    gone: set[int] = set()
    superseded: list[int] = []
    for versions in artifacts.values():
        if len(versions) > 1:
            newest = max(versions, key=lambda k: (ts[k], ids[k]))
            superseded += (k for k in versions if k != newest)
            acc.strategies.add("artifact:latest_per_source")
    drops.record(superseded, SUPERSEDED)
    gone.update(superseded)
    logs = [k for k in lf.logs if k not in out] if out else lf.logs
    seen: set[str] = set()
    duplicates: list[int] = []
    for k in logs:
        text = contents[k]
        if text in seen:
            duplicates.append(k)
        else:
            seen.add(text)
    if duplicates:
        drops.record(duplicates, DUPLICATE)
        acc.strategies.add("tool_log:dedupe")
        gone.update(duplicates)
    talk = [k for k in lf.talk if k not in out] if out else lf.talk
    if len(talk) > keep_last:
        old = talk[: len(talk) - keep_last]
        drops.record(old, OUTSIDE_WINDOW)
        gone.update(old)
        acc.strategies.add(f"conversation:keep_last_{keep_last}")
    return gone


def _evict(
    drops: _Drops,
    lf: LayeredFacts,
    evictable: tuple[Layer, ...],
    *,
    sizes: list[int],
    dead: set[int],
    total: int,
    limit: int,
) -> None:
    """Eviction while over budget: per class oldest first, then anything left oldest
    first (the budget is a hard limit). The evicted join *dead*."""
    acc = drops.acc
    evicted: list[int] = []
    classes = [layer for layer in evictable for _ in (True, False)]
    for layer, units in zip(classes, lf.evictable, strict=True):
        if total <= limit:
            break
        before = len(evicted)
        for u in units:
            if total <= limit:
                break
            if u not in dead:
                total -= sizes[u]
                evicted.append(u)
        if len(evicted) > before:
            acc.strategies.add(f"evict:{layer.name}")
    if total > limit:
        out = dead.union(evicted)
        before = len(evicted)
        for u in lf.by_age:
            if total <= limit:
                break
            if u not in out:
                total -= sizes[u]
                evicted.append(u)
        if len(evicted) > before:
            acc.strategies.add("evict:over_budget")
    drops.record(evicted, OVER_BUDGET)
    dead.update(evicted)


def _include_live(
    acc: Accumulator,
    facts: PoolFacts,
    live: list[int],
    *,
    dead: set[int],
    gmap: dict[str, list[int]],
    unit: Callable[[int], Unit],
    key: Callable[[int], tuple[object, ...]],
    clips: dict[int, tuple[str, int]],
) -> None:
    """What is left, in ranked unit order: included whole, or as scope-clipped versions."""
    items, ids, ts, group, lv = facts.items, facts.ids, facts.ts, facts.group, facts.layer_value
    tok = facts.tokens(acc.counter)
    chosen, decisions, included = acc.selected, acc.decisions, facts.included
    used = acc.used
    for u in live:
        if u in dead:
            continue
        g = group[u]
        if clips and any(m in clips for m in (gmap[g] if g else (u,))):
            acc.used = used
            _include_clipped(acc, unit(u), key(u), clips)
            used = acc.used
            continue
        if g:
            acc.used = used
            acc.include_unit(unit(u), key(u))
            used = acc.used
            continue
        t = tok[u]
        item = items[u]
        if item.token_count != t:
            item = msgspec.structs.replace(item, token_count=t)
        chosen.append(((lv[u], ts[u], ids[u], u), u, item))
        used += t
        decisions[ids[u]] = included(u, t)
    acc.used = used


def _clipped(
    facts: PoolFacts,
    counter: TokenCounter,
    clip_limit: int,
    *,
    live: list[int],
    gmap: dict[str, list[int]],
    sizes: list[int],
) -> tuple[list[int], dict[int, tuple[str, int]]]:
    """Scope clipping of the *live* units (pinned, mandatory and always-kept content is
    never clipped): each member over *clip_limit* tokens clipped to it, counted as rendered
    (as a whole item is), and the units' sizes with the clipped versions."""
    tok, items, group = facts.tokens(counter), facts.items, facts.group
    versions: dict[int, tuple[str, int]] = {}
    resized = sizes
    for u in live:
        g = group[u]
        members = gmap[g] if g else (u,)
        changed = False
        for m in members:
            if tok[m] > clip_limit:
                clipped = clip_text(items[m].content, tok[m], clip_limit, counter)
                if clipped is not None:
                    text = clipped[0]
                    versions[m] = (text, block_tokens(items[m], text, counter))
                    changed = True
        if changed:
            if resized is sizes:
                resized = list(sizes)
            resized[u] = sum(versions[m][1] if m in versions else tok[m] for m in members)
    return resized, versions


def _include_clipped(
    acc: Accumulator, u: Unit, key: tuple[object, ...], versions: dict[int, tuple[str, int]]
) -> None:
    """Include unit *u*, its scope-clipped members as their clipped versions."""
    for m in u.members:
        v = versions.get(m.index)
        if v is None:
            acc.include(m, key)
        else:
            acc.include(
                m, key, content=v[0], tokens=v[1], action="clipped",
                method=CLIP_METHOD, reason=CLIP_REASON,
            )  # fmt: skip
