"""The shared packer: fit scored candidates into a token budget with one decision per candidate.

Order of work (every strategy goes through the same steps, with its own options):

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
from ctxledger.domain.compression import compress_text
from ctxledger.domain.errors import BudgetError
from ctxledger.domain.memo import memo_table, remember
from ctxledger.domain.model import CompressionMetadata, Decision, Item, Layer, Source
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.prompt import render_block
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.retrieval import ScoredItem
from ctxledger.domain.tiers import (
    DROP_MEMO_MAX,
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
    "block_tokens",
    "is_forced",
    "kept_reserves",
    "recent_first",
    "clip_text",
    "clip_marker",
    "drop_other_stage",
    "include_kept",
    "kept_units",
    "effective_budget",
    "make_units",
    "other_stage",
    "pack",
    "prepare",
    "priority_tier",
    "scope_excluder",
    "supersede_latest",
]

# Reason codes of dropped decisions.
_COMPRESS_MIN_TOKENS = 64  # smaller items are dropped, not compressed
COMPRESS_MIN_ROOM = 16  # do not try to compress into less room than this
_COMPRESS_MAX_ATTEMPTS = 32  # per build: bounds the work on huge pools with tiny budgets
_NEG_INF = float("-inf")
_KEPT_MIN_ROOM = 24  # a kept unit gets at least this much room, or it is dropped over_budget


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
_L4 = Layer.L4
_TOOL_LOG = Source.TOOL_LOG
_CONVERSATION = Source.CONVERSATION
_WORKER_FINDING = Source.WORKER_FINDING
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
    return _prepare(candidates, counter)[0]


def _prepare(
    candidates: Sequence[ScoredItem], counter: TokenCounter
) -> tuple[list[Candidate], bool]:
    """:func:`prepare`, plus whether the input was already in (-score, id) order."""
    out: list[Candidate] = []
    append = out.append
    statics = tier_memo
    make = Candidate
    ordered = True
    prev_score = float("inf")
    prev_id = ""
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
        score = sc.score
        if ordered and (score > prev_score or (score == prev_score and iid < prev_id)):
            ordered = False
        prev_score, prev_id = score, iid
        tokens = item.token_count
        if tokens <= 0:
            tokens = counter.count(item.content)
        append(make(item, score, tokens, index, st[1], st[2], st[4]))
    return out, ordered


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


_over_budget: dict[str, Decision] = memo_table()
"""The latest ``over_budget`` decision per item id: the tail of a build drops thousands."""


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


_KEPT_RESERVE = 256  # room held for each later kept unit while an earlier one is clipped


def kept_reserves(sizes: Sequence[int]) -> list[int]:
    """For each kept unit (most important first, of *sizes* tokens), the room held for the
    kept units after it — each up to :data:`_KEPT_RESERVE` — so that clipping the newest
    step to fit leaves the recent failures room too."""
    out: list[int] = []
    after = 0
    for size in reversed(sizes):
        out.append(after)
        after += min(size, _KEPT_RESERVE)
    out.reverse()
    return out


def include_kept(
    u: Unit,
    key: tuple[object, ...],
    *,
    limit: int,
    acc: Accumulator,
    counter: TokenCounter,
    clip_limit: int = 0,
    held: int = 0,
) -> None:
    """Include a kept unit in the room left, never past *limit*: whole when it fits; else a
    failure is first reduced to its key lines (heuristic extraction) and whatever still does
    not fit is head/tail-clipped (reason ``kept_clipped``). Dropped ``over_budget`` only when
    the room left is below a few tokens (forced content filled the budget). A unit that does
    not fit whole leaves *held* tokens to the kept units after it (``kept_reserves``) when
    it still gets its minimum room."""
    members = u.members
    versions = [_version(m, clip_limit, counter) for m in members]
    room = limit - acc.used
    if sum(v[1] for v in versions) <= room:
        acc.include_versions(members, versions, key)
        return
    headers = [block_tokens(m.item, "", counter) for m in members]
    allowance = sum(headers)
    if held and room - held - allowance >= _KEPT_MIN_ROOM * len(members):
        room -= held  # the kept units after this one keep *held* tokens, this one enough
    if room - allowance < _KEPT_MIN_ROOM * len(members):
        acc.drop_unit(u, OVER_BUDGET)
        return
    # (text, tokens, method) of each member after key-line extraction of failures
    shrunk: list[tuple[str, int, str]] = []
    for m, (text, t) in zip(members, versions, strict=True):
        body = m.item.content if text is None else text
        method = "" if text is None else CLIP_METHOD
        if m.item.failure and t > _COMPRESS_MIN_TOKENS:
            c = compress_text(body)
            if c is not None:
                ct = counter.count(c.text)
                if ct < t:
                    body, t, method = c.text, ct, c.method
        shrunk.append((body, t, method))
    total = sum(s[1] for s in shrunk)
    # the agent's own command (its conversation turn) stays whole while its output can give
    # up the room: an output cut short is marked, a command cut short misleads
    whole = [m.item.source is _CONVERSATION for m in members]
    spoken = sum(s[1] for s, w in zip(shrunk, whole, strict=True) if w)
    others = total - spoken
    if not any(whole) or all(whole) or spoken + allowance + _KEPT_MIN_ROOM > room:
        whole = [False] * len(members)
        spoken, others = 0, total
    final: list[tuple[str, int, str]] = []
    for (body, t, method), keep_whole in zip(shrunk, whole, strict=True):
        if not keep_whole and total + allowance > room:
            share = max(1, (room - allowance - spoken) * t // max(others, 1))
            clipped = clip_text(body, t, share, counter)
            if clipped is not None:
                body, t = clipped
                method = f"{method}+{CLIP_METHOD}" if method else CLIP_METHOD
        final.append((body, t, method))
    # a cut member is counted as rendered (its block header included), as a whole one is
    final = [
        (body, block_tokens(m.item, body, counter) if method else t, method)
        for m, (body, t, method) in zip(members, final, strict=True)
    ]
    if sum(f[1] for f in final) > room:
        acc.drop_unit(u, OVER_BUDGET)
        return
    for m, (body, t, method) in zip(members, final, strict=True):
        if not method:
            acc.include(m, key)
            continue
        action = "clipped" if method.endswith(CLIP_METHOD) else "compressed"
        acc.include(
            m, key, content=body, tokens=t, action=action, method=method, reason=KEPT_CLIPPED
        )


def block_tokens(item: Item, content: str, counter: TokenCounter) -> int:
    """Tokens of *item*'s block carrying *content* (a clipped or compressed version)."""
    return counter.count(render_block(item, content))


def _version(c: Candidate, clip_limit: int, counter: TokenCounter) -> tuple[str | None, int]:
    """The scope-clipped content and tokens (as rendered) of a candidate (``None`` content:
    unchanged)."""
    if clip_limit and c.tokens > clip_limit:
        clipped = clip_text(c.item.content, c.tokens, clip_limit, counter)
        if clipped is not None:
            return clipped[0], block_tokens(c.item, clipped[0], counter)
    return None, c.tokens


U = TypeVar("U")


def _unit_group(u: Unit) -> str:
    return "" if type(u) is Candidate else u.group


def recent_first(ordered: list[U], recent: Sequence[str], group_of: Callable[[U], str]) -> list[U]:
    """*ordered* with the units of the *recent* groups first, in the order of *recent* (the
    newest step first), the others after them in their order."""
    rank = {g: n for n, g in enumerate(recent)}
    front = [u for u in ordered if group_of(u) in rank]
    if not front:
        return ordered
    front.sort(key=lambda u: rank[group_of(u)])
    return front + [u for u in ordered if group_of(u) not in rank]


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


class Filler:
    """``pack``'s main loop for one unit at a time, in packing order: include it whole (or
    scope-clipped), compressed, or drop it (``duplicate``, ``over_budget``). Shared by the
    general packer and the ranked one (``domain/ranked_pack.py``)."""

    __slots__ = (
        "acc",
        "attempts",
        "chronological",
        "clip_limit",
        "compress",
        "counter",
        "dedupe",
        "limit",
        "stop_at_first_miss",
        "stopped",
    )

    def __init__(
        self,
        acc: Accumulator,
        limit: int,
        counter: TokenCounter,
        *,
        clip_limit: int,
        chronological: bool,
        dedupe: bool,
        compress: bool,
        stop_at_first_miss: bool,
    ) -> None:
        self.acc = acc
        self.limit = limit
        self.counter = counter
        self.clip_limit = clip_limit
        self.chronological = chronological
        self.dedupe = dedupe
        self.compress = compress
        self.stop_at_first_miss = stop_at_first_miss
        self.attempts = 0
        self.stopped = False  # a stop-at-first-miss strategy missed: the rest is the tail

    def may_compress(self, tokens: int, remaining: int) -> bool:
        """Whether a unit of *tokens* that does not fit *remaining* gets a compression
        attempt (compression on, attempts left, enough room, a unit big enough)."""
        return (
            self.compress
            and self.attempts < _COMPRESS_MAX_ATTEMPTS
            and remaining >= COMPRESS_MIN_ROOM
            and tokens > _COMPRESS_MIN_TOKENS
        )

    def place(self, u: Unit) -> None:
        acc, limit, clip_limit, counter = self.acc, self.limit, self.clip_limit, self.counter
        if type(u) is Candidate:
            if self.dedupe and u.item.content in acc.contents:
                acc.drop(u, DUPLICATE)
                acc.strategies.add("dedupe")
                return
            remaining = limit - acc.used
            if remaining <= 0 or (
                u.tokens > remaining
                and not clip_limit
                and not self.may_compress(u.tokens, remaining)
            ):
                acc.drop(u, OVER_BUDGET)
                if self.stop_at_first_miss:
                    self.stopped = True
                return
            members: Sequence[Candidate] = (u,)
        else:
            remaining = limit - acc.used
            if remaining <= 0:
                acc.drop_unit(u, OVER_BUDGET)
                return
            members = u.members
        key = u.chrono_key() if self.chronological else u.priority_key()
        versions = [_version(m, clip_limit, counter) for m in members]
        total = sum(v[1] for v in versions)
        if total <= remaining:
            acc.include_versions(members, versions, key)
            return
        if self.may_compress(total, remaining):
            self.attempts += 1
            packed = _compress_unit(members, versions, clip_limit, counter)
            if packed is not None and sum(p[1] for p in packed) <= remaining:
                for m, (text, t, action, method) in zip(members, packed, strict=True):
                    if action == "included":
                        acc.include(m, key)
                    else:
                        acc.include(
                            m, key, content=text, tokens=t, action=action, method=method,
                            reason=OVER_BUDGET if action == "compressed" else CLIP_REASON,
                        )  # fmt: skip
                return
        acc.drop_unit(u, OVER_BUDGET)
        if self.stop_at_first_miss:
            self.stopped = True


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
    cands, presorted = _prepare(candidates, counter)
    kept, units = kept_units(
        make_units(drop_other_stage(cands, request.stage_id, acc)), request.keep_ids
    )
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
                remember(over, iid, d, DROP_MEMO_MAX)
            decisions[iid] = d
            layers.add(item.layer)
        dropped += len(members)
    acc.dropped += dropped
    truncated.update(layer._value_ for layer in layers)


def _compress_unit(
    members: Sequence[Candidate],
    versions: list[tuple[str | None, int]],
    clip_limit: int,
    counter: TokenCounter,
) -> list[tuple[str | None, int, str, str]] | None:
    """Compressed versions of a unit's members, or ``None`` if nothing got smaller."""
    out: list[tuple[str | None, int, str, str]] = []
    gained = False
    for m, (text, t) in zip(members, versions, strict=True):
        c = compress_text(m.item.content) if m.tokens > _COMPRESS_MIN_TOKENS else None
        if c is not None:
            ct = counter.count(c.text)
            ctext, method = c.text, c.method
            if clip_limit and ct > clip_limit:
                clipped = clip_text(ctext, ct, clip_limit, counter)
                if clipped is not None:
                    ctext, ct = clipped
                    method = f"{method}+{CLIP_METHOD}"
            ct = block_tokens(m.item, ctext, counter)
            if ct < t:
                out.append((ctext, ct, "compressed", method))
                gained = True
                continue
        out.append((text, t, "included" if text is None else "clipped", CLIP_METHOD))
    return out if gained else None
