"""Per-pool-version arrays: the request-independent facts the packer reads, one list per fact.

A build over a pool of *n* items used to make one ``Candidate`` object per item and pass over
the candidates several times (de-duplicate, stage, group, filter, supersede, order, drop the
tail), each pass reading fields of scattered item objects. :class:`PoolFacts` holds the same
facts once per *pool version* (the same item objects in the same order) as parallel lists in
pool order, so a build over that pool works on integer positions (``domain/ranked_pack.py``).
Memoised by the identities of the items (the entry holds the items, so no identity can be
reused while it is cached). Pure: the facts are functions of the items (and, for token
counts, of the counter).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any, TypeVar

from ctxledger.domain.memo import memo_table, remember
from ctxledger.domain.model import Decision, Item, Layer, Source
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.tiers import OVER_BUDGET, RAW_HISTORY, dropped_decision, tier_ts

__all__ = ["Omissions", "Parts", "PoolFacts", "derived_facts", "pool_facts"]

K = TypeVar("K")
V = TypeVar("V")
_L4 = Layer.L4
_STEERING_NOTE = Source.STEERING_NOTE
_MAX_VERSIONS = 2  # pool versions kept (the one being built, the one before)
Parts = tuple[list[float], list[float], list[float] | None, list[float]]
"""Retrieval's time-independent score parts of a query: base, time, role, phase."""
Omissions = tuple[list[str | None], list[bool], dict[str, bool], list[str | None]]
"""A keyed omission test's verdicts, the packable items less the omitted, per group whether
a member is omitted, and each ungrouped unforced item's reason to be dropped before packing."""


class PoolFacts:
    """Facts of a pool's items in pool order (``k`` is a position in the pool).

    ``tier``/``ts``/``forced`` are the packer's priority tier, observation time and
    pinned-or-mandatory; ``plain[k]`` says item *k* is ungrouped, not forced and not raw
    history (most items: the packer's fast case); ``groups`` maps a group name to its
    members' positions and ``group_tier``/``group_forced``/``group_raw`` to the group's
    smallest tier, whether any member is forced, whether any member is raw history (L4);
    ``versions`` maps ``(source, source_id)`` to the positions of its versions when there
    are two or more; ``staged`` lists steering notes scoped to a stage as ``(k, stage)``.
    """

    __slots__ = (
        "_all_versions",
        "_chrono",
        "_dropped_as",
        "_included",
        "_omissions",
        "_token_prefix",
        "_tokens",
        "contents",
        "derived",
        "distinct_contents",
        "forced",
        "group",
        "group_forced",
        "group_raw",
        "group_tier",
        "groups",
        "ids",
        "index",
        "items",
        "layer",
        "layer_value",
        "orders",
        "partial_prefix",
        "partials",
        "plain",
        "plain_with_raw",
        "staged",
        "tier",
        "ts",
        "unique",
        "versions",
    )

    def __init__(self, items: Sequence[Item]) -> None:

        items = list(items)
        statics = [tier_ts(it) for it in items]
        self.items = items
        self.ids = [st[3] for st in statics]
        self.tier = [st[1] for st in statics]
        self.ts = [st[2] for st in statics]
        self.forced = [st[4] for st in statics]
        self.group = [it.group for it in items]
        self.layer = [it.layer for it in items]
        self.layer_value = [layer._value_ for layer in self.layer]  # ints hash in C, enums do not
        self.contents = [it.content for it in items]
        self.index = dict(zip(self.ids, range(len(items)), strict=True))
        self.unique = len(self.index) == len(items)
        self.plain = [
            not g and not f and layer is not _L4
            for g, f, layer in zip(self.group, self.forced, self.layer, strict=True)
        ]
        self.plain_with_raw = [
            not g and not f for g, f in zip(self.group, self.forced, strict=True)
        ]
        self.distinct_contents = len(set(self.contents)) == len(items)
        groups: dict[str, list[int]] = {}
        versions: dict[tuple[Source, str], list[int]] = {}
        staged: list[tuple[int, str]] = []
        for k, it in enumerate(items):
            if it.group:
                groups.setdefault(it.group, []).append(k)
            if it.source_id:
                versions.setdefault((it.source, it.source_id), []).append(k)
            if it.source is _STEERING_NOTE and it.stage:
                staged.append((k, it.stage))
        self.groups = groups
        self.group_tier: dict[str, int] = {}
        self.group_forced: dict[str, bool] = {}
        self.group_raw: dict[str, bool] = {}
        self._summarise(groups)
        self._all_versions = versions
        self.versions = {key: ks for key, ks in versions.items() if len(ks) > 1}
        self.staged = staged
        self._tokens: dict[str, list[int]] = {}
        self._token_prefix: dict[str, list[int]] = {}
        """Per counter, the tokens of a prefix of the items (a version this one extends)."""
        self._chrono: list[int] | None = None
        self._included: dict[tuple[int, int], Decision] = {}
        self._dropped_as: dict[tuple[str, str], list[Decision | None]] = {}
        self._omissions: dict[Hashable, Omissions] = {}
        # Retrieval's, per query (terms, task, role, phase): the time-independent score parts
        # as arrays (base, time, role, phase; None if an item is undated), and the last order.
        self.partials: dict[tuple[object, ...], Parts | None] = {}
        self.partial_prefix: dict[tuple[object, ...], Parts | None] = {}
        """Per query, the parts of a prefix of the items (a version this one extends)."""
        self.orders: dict[tuple[object, ...], list[int]] = {}
        # A strategy's own facts of this pool version, by the strategy's key.
        self.derived: dict[Hashable, object] = {}

    def tokens(self, counter: TokenCounter) -> list[int]:
        """Each item's tokens: ``Item.token_count`` when > 0, else *counter*'s count."""
        out = self._tokens.get(counter.name)
        if out is None:
            known = self._token_prefix.get(counter.name, [])
            rest = self.items[len(known) :]
            out = [
                *known,
                *(t if t > 0 else counter.count(it.content)
                  for t, it in zip((it.token_count for it in rest), rest, strict=True)),
            ]  # fmt: skip
            self._tokens[counter.name] = out
        return out

    def extended(self, items: list[Item]) -> PoolFacts:
        """The facts of *items*, whose first ``len(self.items)`` are this version's items (the
        same objects, in order): this version's facts extended by those of the rest instead
        of derived again over the whole pool (a turn records an item, then a rebuild reads the
        new version). Equal to ``PoolFacts(items)`` — held so by a property test. What a
        version keeps per strategy, per query or per omission test is made again as needed,
        but for each query's last ranked order (the new items appended: any start sorts to
        the same order), its score parts (``partial_prefix``: retrieval adds the new items')
        and the decisions made so far, shared by position."""
        n = len(self.items)
        rest = PoolFacts(items[n:])
        out = PoolFacts.__new__(PoolFacts)
        out.items = items
        for name in ("ids", "tier", "ts", "forced", "group", "layer", "layer_value", "contents",
                     "plain", "plain_with_raw"):  # fmt: skip
            setattr(out, name, getattr(self, name) + getattr(rest, name))
        out.index = {**self.index, **{i: k + n for i, k in rest.index.items()}}
        out.unique = len(out.index) == len(items)
        out.distinct_contents = len(set(out.contents)) == len(items)
        out.groups = _joined(self.groups, rest.groups, n)
        out.group_tier, out.group_forced = dict(self.group_tier), dict(self.group_forced)
        out.group_raw = dict(self.group_raw)
        out._summarise({g: out.groups[g] for g in rest.groups})  # the groups that grew
        versions = out._all_versions = _joined(self._all_versions, rest._all_versions, n)
        out.versions = {key: ks for key, ks in versions.items() if len(ks) > 1}
        out.staged = [*self.staged, *((k + n, stage) for k, stage in rest.staged)]
        out._tokens = {}
        out._token_prefix = _carried(self._token_prefix, list(self._tokens.items()))
        out._chrono = None
        out._included = dict(self._included)
        added = [None] * len(rest.items)
        carried = list(self._dropped_as.items())  # (a snapshot: builds of other threads add)
        out._dropped_as = {key: [*made, *added] for key, made in carried}
        out._omissions = {}
        out.partials = {}
        out.partial_prefix = _carried(self.partial_prefix, list(self.partials.items()))
        fresh = range(n, len(items))
        out.orders = {key: [*order, *fresh] for key, order in list(self.orders.items())}
        out.derived = {}
        return out

    def _summarise(self, groups: dict[str, list[int]]) -> None:
        """Each of *groups*' smallest tier, whether a member is forced, whether one is raw
        history (L4), into ``group_tier``/``group_forced``/``group_raw``."""
        for g, ks in groups.items():
            self.group_tier[g] = min(self.tier[k] for k in ks)
            self.group_forced[g] = any(self.forced[k] for k in ks)
            self.group_raw[g] = any(self.layer[k] is _L4 for k in ks)

    def over_budget(self, counter: TokenCounter) -> list[Decision]:
        """Each item's ``over_budget`` decision (the tail of a build drops thousands): the
        ``dropped_as`` list of that reason, made whole."""

        made = self.dropped_as(OVER_BUDGET, counter)
        if None in made:
            made[:] = [
                d or dropped_decision(iid, OVER_BUDGET, t)
                for d, iid, t in zip(made, self.ids, self.tokens(counter), strict=True)
            ]
        return made  # type: ignore[return-value]  # (no None left)

    def dropped_as(self, reason: str, counter: TokenCounter) -> list[Decision | None]:
        """Each item's decision dropped for *reason*, filled in by the packer as it drops
        (``None``: not made yet) and shared by the builds over this pool version."""
        out = self._dropped_as.get((reason, counter.name))
        if out is None:
            out = self._dropped_as[reason, counter.name] = [None] * len(self.items)
        return out

    def included(self, k: int, tokens: int) -> Decision:
        """Item *k*'s ``included`` decision at *tokens* (shared between builds: immutable)."""
        d = self._included.get((k, tokens))
        if d is None:
            d = self._included[k, tokens] = Decision(
                item_id=self.ids[k], action="included", tokens_before=tokens, tokens_after=tokens
            )
        return d

    def omissions(
        self,
        key: Hashable,
        omit: Callable[[Any], str | None],
        cand: Callable[[int], Any],
        *,
        counter: TokenCounter,
        raw: bool,
    ) -> Omissions:
        """A keyed omission test's verdicts (reason or None per item), the packable items
        less the omitted (with *raw*, raw history is not packable), per group whether a
        member is omitted, and the reason each ungrouped unforced item is dropped before
        packing (raw history first, with *raw*; else its verdict) — memoised per *key* (the
        test's name and parameters), counter and *raw*."""

        key = (key, counter.name, raw)
        out = self._omissions.get(key)
        if out is None:
            verdicts = [omit(cand(k)) or None for k in range(len(self.items))]
            plain = self.plain if raw else self.plain_with_raw
            out = (
                verdicts,
                [p and v is None for p, v in zip(plain, verdicts, strict=True)],
                {g: any(verdicts[k] for k in ks) for g, ks in self.groups.items()},
                [
                    None if g or f else RAW_HISTORY if raw and layer is Layer.L4 else v
                    for g, f, layer, v in zip(
                        self.group, self.forced, self.layer, verdicts, strict=True
                    )
                ],
            )
            remember(self._omissions, key, out, 8)
        return out

    def chronological(self) -> list[int]:
        """Positions by (observation time, id): the chronological packing order."""
        if self._chrono is None:
            ts, ids = self.ts, self.ids
            self._chrono = sorted(range(len(ids)), key=lambda k: (ts[k], ids[k]))
        return self._chrono


def _carried(known: dict[K, V], newer: list[tuple[K, V]]) -> dict[K, V]:
    """What a version knows of a prefix of its items (per counter its token counts, per
    query its score parts), carried to a version that extends it: what it carried, with its
    own (*newer*) replacing that, the newest ``_PREFIX_MAX`` kept."""
    out = dict(known)
    for key, parts in newer:
        out.pop(key, None)
        out[key] = parts
    if len(out) > _PREFIX_MAX:
        out = dict(list(out.items())[-_PREFIX_MAX:])
    return out


_PREFIX_MAX = 16
"""Counters or queries a version carries to the next (as many queries as it remembers)."""


def _joined(known: dict[K, list[int]], added: dict[K, list[int]], n: int) -> dict[K, list[int]]:
    """Positions by key of a pool's first *n* items (*known*) and of the items after them
    (*added*, counted from 0), as one map in first-appearance order (a new dict; the lists
    of keys *added* lacks are shared: nothing changes them once made)."""
    out = dict(known)
    for key, ks in added.items():
        out[key] = [*known.get(key, ()), *(k + n for k in ks)]
    return out


_facts: dict[tuple[int, ...], PoolFacts] = memo_table()


def pool_facts(items: Sequence[Item]) -> PoolFacts:
    """The facts of *items*, memoised per pool version (the same item objects in order); a
    version that extends a remembered one (items appended) extends its facts."""
    key = tuple(map(id, items))
    facts = _facts.get(key)
    if facts is None:
        base = _extends(key)
        made = PoolFacts(items) if base is None else base.extended(list(items))
        facts = remember(_facts, key, made, _MAX_VERSIONS)
    return facts


_derived: dict[tuple[int, ...], PoolFacts] = memo_table()


def derived_facts(items: Sequence[Item]) -> PoolFacts:
    """The facts of a pool derived from a pool version for one build (ids de-duplicated,
    steering notes of other stages left out), memoised apart from the pool versions: a
    derived pool never extends one nor is extended."""
    key = tuple(map(id, items))
    facts = _derived.get(key)
    if facts is None:
        facts = remember(_derived, key, PoolFacts(items), _MAX_VERSIONS)
    return facts


def _extends(key: tuple[int, ...]) -> PoolFacts | None:
    """The newest remembered version whose items begin *key* (the identities of a pool's
    items: a remembered entry holds its items, so its identities are not reused)."""
    for known, facts in reversed(list(_facts.items())):  # (another thread may add one)
        if 0 < len(known) < len(key) and key[: len(known)] == known:
            return facts
    return None
