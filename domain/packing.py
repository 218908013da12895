"""The packer's rules and parts: candidates, units, the accumulator of decisions, the filler.

The packer itself (``domain/ranked_pack.pack``, every strategy's) fits a scored pool into a
token budget with one decision per item. Order of work (every strategy goes through the same
steps, with its own options):

1. candidates are de-duplicated by id (first wins) and their tokens resolved
   (``Item.token_count`` when > 0, else the counter);
2. items sharing a non-empty ``group`` form one unit — included, dropped or compressed whole;
3. forced units (any member pinned, mandatory or a role instruction) are included verbatim,
   even over budget —
   the excess is recorded as ``overflow``, never hidden;
4. other units may be dropped before packing: ``excluded_by_scope`` (BuildRequest.scope),
   a strategy's own reason (``omitted_by_strategy``, ``other_phase``…), ``superseded``;
   a steering note scoped to another stage than the request's leaves first, even when
   pinned (``other_stage``): a note for one stage is never sent to another;
5. kept units (``BuildRequest.keep_ids``: the latest step and the last failures) come next,
   skipping strategy omissions: whole when they fit the room left, else failures reduced to
   their key lines and the rest head/tail-clipped to it (reason ``kept_clipped``); dropped
   ``over_budget`` only when forced content leaves them less than a few tokens;
6. the rest are taken in priority order (tier, then score, then id — or chronologically),
   ``duplicate`` content is skipped, scope clipping applied, and each unit is included whole,
   compressed (heuristic extraction) or dropped ``over_budget``. Nothing but forced units can
   push ``used`` above the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import ClassVar, TypeVar

import msgspec

from ctxledger.domain.clipping import CLIP_METHOD, CLIP_REASON, clip_marker, clip_text
from ctxledger.domain.errors import BudgetError
from ctxledger.domain.model import CompressionMetadata, Decision, Item, Layer, Source
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.retrieval import ScoredItem
from ctxledger.domain.tiers import (
    DROP_REASONS,
    DUPLICATE,
    EXCLUDED_BY_SCOPE,
    KEPT_CLIPPED,
    OMITTED_BY_STRATEGY,
    OTHER_PHASE,
    OTHER_STAGE,
    OUTSIDE_WINDOW,
    OVER_BUDGET,
    RAW_HISTORY,
    SUPERSEDED,
    dropped_decision,
    is_forced,
    priority_tier,
    tier_memo,
    tier_ts,
)

__all__ = [
    "CLIP_METHOD",
    "CLIP_REASON",
    "DROP_REASONS",
    "DUPLICATE",
    "EXCLUDED_BY_SCOPE",
    "OMITTED_BY_STRATEGY",
    "OTHER_PHASE",
    "OTHER_STAGE",
    "KEPT_CLIPPED",
    "OUTSIDE_WINDOW",
    "OVER_BUDGET",
    "RAW_HISTORY",
    "SUPERSEDED",
    "Accumulator",
    "Candidate",
    "Group",
    "OmitFn",
    "PackResult",
    "Unit",
    "is_forced",
    "recent_first",
    "clip_text",
    "clip_marker",
    "drop_other_stage",
    "effective_budget",
    "make_units",
    "other_stage",
    "prepare",
    "priority_tier",
    "scope_excluder",
]


# Reason codes of dropped decisions.
class PackResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a strategy selected, and the fate of every candidate.

    ``items`` are the selected items in prompt order — compressed/clipped ones carry their new
    content and ``token_count``; ``budget`` is the budget the strategy packed against (may be
    tighter than the request's) and ``overflow = max(0, used - budget)``.
    """

    items: tuple[Item, ...]
    decisions: dict[str, Decision]
    used: int
    budget: int
    overflow: int
    metadata: CompressionMetadata
    counter: str
    strategy: str

    def by_layer(self) -> dict[Layer, tuple[Item, ...]]:
        """The selected items per layer (for ``ContextPack.layers``), in pack order."""
        out: dict[Layer, list[Item]] = {}
        for it in self.items:
            out.setdefault(it.layer, []).append(it)
        return {layer: tuple(out[layer]) for layer in sorted(out)}


_L1 = Layer.L1
_L3 = Layer.L3
_RECALLED_MEMORY = Source.RECALLED_MEMORY
_PARENT_REPORT = Source.PARENT_REPORT
_STEERING_NOTE = Source.STEERING_NOTE


class Candidate(msgspec.Struct, gc=False):
    """One candidate during packing. An ungrouped candidate is its own packing unit.

    Not tracked by the garbage collector (it cannot be part of a reference cycle), which
    keeps collections cheap when a build creates one per pool item."""

    item: Item
    score: float
    tokens: int
    index: int
    tier: int
    ts: float
    forced: bool

    group: ClassVar[str] = ""  # an ungrouped candidate (Group has the name)

    @property
    def members(self) -> tuple[Candidate, ...]:
        return (self,)

    def priority_key(self) -> tuple[int, float, str, int]:
        return (self.tier, -self.score, self.item.id, self.index)

    def chrono_key(self) -> tuple[float, str, int]:
        return (self.ts, self.item.id, self.index)


class Group:
    """Candidates sharing a non-empty ``Item.group``: included, dropped or compressed whole."""

    __slots__ = ("forced", "group", "members")

    def __init__(self, group: str, first: Candidate, forced: bool) -> None:
        self.group = group
        self.members: list[Candidate] = [first]
        self.forced = forced

    @property
    def tokens(self) -> int:
        return sum(m.tokens for m in self.members)

    def priority_key(self) -> tuple[int, float, str, int]:
        """(best tier, then the key of the best-scored member: -score, id, index)."""
        m = self.members
        best = min(m, key=lambda c: (-c.score, c.item.id, c.index))
        return (min(c.tier for c in m), -best.score, best.item.id, best.index)

    def chrono_key(self) -> tuple[float, str, int]:
        return min(c.chrono_key() for c in self.members)


Unit = Candidate | Group
OmitFn = Callable[[Candidate], str | None]


def effective_budget(request: BuildRequest, budget: int | None = None) -> int:
    """The budget to pack against; the request's must be positive."""
    if request.budget <= 0:
        raise BudgetError(f"token budget must be positive, got {request.budget}")
    limit = request.budget if budget is None else budget
    if limit < 0:
        raise BudgetError(f"effective budget must not be negative, got {limit}")
    return limit


def prepare(candidates: Sequence[ScoredItem], counter: TokenCounter) -> list[Candidate]:
    """Candidates with resolved token counts (``Item.token_count`` when > 0, else the
    counter), de-duplicated by item id (first wins)."""
    out: list[Candidate] = []
    append = out.append
    statics = tier_memo
    make = Candidate
    unique = len({sc.item.id for sc in candidates}) == len(candidates)
    seen: set[str] = set()
    for index, sc in enumerate(candidates):
        item = sc.item
        st = statics.get(id(item))
        if st is None or st[0] is not item:
            st = tier_ts(item)
        iid = st[3]
        if not unique:
            if iid in seen:
                continue
            seen.add(iid)
        tokens = item.token_count
        if tokens <= 0:
            tokens = counter.count(item.content)
        append(make(item, sc.score, tokens, index, st[1], st[2], st[4]))
    return out


def make_units(
    cands: Iterable[Candidate], forced: Callable[[Candidate], bool] | None = None
) -> list[Unit]:
    """Units in order of first appearance: ungrouped candidates are their own unit, grouped
    ones are collected into a :class:`Group` (forced if any member is). ``forced``
    overrides which candidates are forced (default: pinned or mandatory)."""
    units: list[Unit] = []
    groups: dict[str, Group] = {}
    for c in cands:
        if forced is not None:
            c.forced = forced(c)
        g = c.item.group
        if not g:
            units.append(c)
            continue
        grp = groups.get(g)
        if grp is None:
            grp = groups[g] = Group(g, c, c.forced)
            units.append(grp)
        else:
            grp.members.append(c)
            grp.forced = grp.forced or c.forced
    return units


def scope_excluder(scope: Scope) -> Callable[[Item], bool] | None:
    """A predicate telling whether *scope* excludes an item, or ``None`` if it excludes none."""
    layers = frozenset(scope.layers)
    sources = frozenset(scope.sources)
    no_memory = scope.exclude_project_memory
    deps = None if scope.dependency_task_ids is None else frozenset(scope.dependency_task_ids)
    if not layers and not sources and not no_memory and deps is None:
        return None

    def excluded(item: Item) -> bool:
        if layers and item.layer not in layers:
            return True
        if sources and item.source not in sources:
            return True
        if no_memory and (item.layer is _L3 or item.source is _RECALLED_MEMORY):
            return True
        return deps is not None and item.source is _PARENT_REPORT and item.task not in deps

    return excluded


class Accumulator:
    """Collects decisions and selected items of one build, then makes the PackResult."""

    __slots__ = (
        "contents",
        "counter",
        "decisions",
        "dropped",
        "selected",
        "strategies",
        "strategy",
        "truncated",
        "used",
    )

    def __init__(self, counter: TokenCounter, strategy: str) -> None:
        self.counter = counter
        self.strategy = strategy
        self.decisions: dict[str, Decision] = {}
        self.selected: list[tuple[tuple[object, ...], int, Item]] = []  # (key, index, item)
        self.used = 0
        self.dropped = 0
        self.strategies: set[str] = set()
        self.truncated: set[int] = set()
        self.contents: set[str] = set()

    def include(
        self,
        c: Candidate,
        key: tuple[object, ...],
        *,
        content: str | None = None,
        tokens: int | None = None,
        action: str = "included",
        method: str = "",
        reason: str = "",
    ) -> None:
        """Select *c* whole, or (``content``/``tokens``) as a compressed or clipped version."""
        item = c.item
        self.contents.add(item.content)
        after = c.tokens if tokens is None else tokens
        if content is not None and content != item.content:
            item = msgspec.structs.replace(item, content=content, token_count=after)
            self.truncated.add(int(item.layer))
        elif item.token_count != after:
            item = msgspec.structs.replace(item, token_count=after)
        self.selected.append((key, c.index, item))
        self.used += after
        if action == "included":
            self.decisions[item.id] = Decision(
                item_id=item.id, action="included", tokens_before=c.tokens, tokens_after=after
            )
        else:
            self.decisions[item.id] = Decision(
                item_id=item.id,
                action="compressed" if action == "compressed" else "clipped",
                reason=reason,
                method=method,
                tokens_before=c.tokens,
                tokens_after=after,
            )
            self.strategies.add(method)

    def include_versions(
        self,
        members: Sequence[Candidate],
        versions: Sequence[tuple[str | None, int]],
        key: tuple[object, ...],
    ) -> None:
        """Include each member whole (``None`` text) or as its scope-clipped version."""
        for m, (text, t) in zip(members, versions, strict=True):
            if text is None:
                self.include(m, key)
            else:
                self.include(
                    m, key, content=text, tokens=t, action="clipped",
                    method=CLIP_METHOD, reason=CLIP_REASON,
                )  # fmt: skip

    def include_unit(self, u: Unit, key: tuple[object, ...]) -> None:
        for m in u.members:
            self.include(m, key)

    def drop(self, c: Candidate, reason: str) -> None:
        item = c.item
        self.drop_id(item.id, item.layer._value_, c.tokens, reason)

    def drop_id(self, item_id: str, layer: int, tokens: int, reason: str) -> None:
        """:meth:`drop` from an item's facts (the ranked packer has no candidate object);
        *layer* is the layer's value."""
        self.decisions[item_id] = dropped_decision(item_id, reason, tokens)
        self.dropped += 1
        if reason != EXCLUDED_BY_SCOPE:
            self.truncated.add(layer)

    def drop_unit(self, u: Unit, reason: str) -> None:
        for m in u.members:
            self.drop(m, reason)

    def result(self, budget: int) -> PackResult:
        self.selected.sort(key=lambda s: (s[0], s[2].id))
        return PackResult(
            items=tuple(s[2] for s in self.selected),
            decisions=self.decisions,
            used=self.used,
            budget=budget,
            overflow=max(0, self.used - budget),
            metadata=CompressionMetadata(
                strategies_applied=(self.strategy, *sorted(self.strategies - {self.strategy})),
                layers_truncated=tuple(Layer(v) for v in sorted(self.truncated)),
                entries_dropped=self.dropped,
            ),
            counter=self.counter.name,
            strategy=self.strategy,
        )


def other_stage(item: Item, stage_id: str) -> bool:
    """Whether *item* is a steering note scoped to a stage (``Item.stage``) other than
    *stage_id*, the stage being built."""
    return item.source is _STEERING_NOTE and item.stage not in ("", stage_id)


def drop_other_stage(cands: list[Candidate], stage_id: str, acc: Accumulator) -> list[Candidate]:
    """*cands* without the steering notes of other stages, each dropped ``other_stage`` —
    pinned or not: a note scoped to one stage never reaches another stage's build."""
    # A steering note is always tier 0 or 1: the tier test skips most candidates cheaply.
    gone = [c for c in cands if c.tier <= 1 and other_stage(c.item, stage_id)]
    if not gone:
        return cands
    for c in gone:
        acc.drop(c, OTHER_STAGE)
    left = {id(c) for c in gone}
    return [c for c in cands if id(c) not in left]


U = TypeVar("U")


def recent_first(ordered: list[U], recent: Sequence[str], group_of: Callable[[U], str]) -> list[U]:
    """*ordered* with the units of the *recent* groups first, in the order of *recent* (the
    newest step first), the others after them in their order."""
    rank = {g: n for n, g in enumerate(recent)}
    front = [u for u in ordered if group_of(u) in rank]
    if not front:
        return ordered
    front.sort(key=lambda u: rank[group_of(u)])
    return front + [u for u in ordered if group_of(u) not in rank]
