"""Retrieval: score the durable pool afresh for one build (overlap, task, recency, role, phase)."""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from sys import intern
from typing import overload

import msgspec

from ctxledger.domain.memo import memo_table, remember
from ctxledger.domain.model import Item, Source
from ctxledger.domain.pool_facts import Parts, PoolFacts, pool_facts
from ctxledger.domain.request import BuildRequest

__all__ = [
    "ROLE_WEIGHTS",
    "Ranked",
    "RequestTerms",
    "ScoredItem",
    "Terms",
    "item_terms",
    "request_terms",
    "retrieve",
    "score_item",
]

# Weights of the score components (documented in docs/strategies.md).
W_OVERLAP = 3.0
W_TASK = 1.5
W_RECENCY = 1.0
W_CONFIDENCE = 0.5
W_DURABILITY = 0.5
W_RELEVANCE = 0.5
PHASE_SAME = 0.25
PHASE_OTHER = -1.0
RECENCY_HALF_LIFE_HOURS = 24.0

# Per-role preference for sources, added to the score (unknown roles: no preference).
ROLE_WEIGHTS: dict[str, dict[Source, float]] = {
    "primary": {
        Source.PARENT_REPORT: 0.5,
        Source.USER_REQUIREMENT: 0.25,
        Source.REPOSITORY_SOURCE: -0.25,
        Source.TOOL_LOG: -0.25,
    },
    "worker": {
        Source.REPOSITORY_SOURCE: 0.5,
        Source.TEST_RESULT: 0.25,
        Source.VERIFIED_FACT: 0.25,
    },
    "probe": {
        Source.REPOSITORY_SOURCE: 0.25,
        Source.TOOL_LOG: 0.25,
        Source.PARENT_REPORT: -0.25,
    },
    "reviewer": {
        Source.REPOSITORY_SOURCE: 0.25,
        Source.TEST_RESULT: 0.25,
        Source.VERIFIED_FACT: 0.25,
    },
}

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
# The look-behind starts a match only at the start of a path-like run: linear, not quadratic.
_PATH = re.compile(r"(?<![\w.~/\\-])(?:[\w.~-]+[/\\])*[\w.-]+\.[A-Za-z][A-Za-z0-9]{0,7}\b")
_STOP_WORDS = (
    "the and for with this that from into not are was were has have had but you your its "
    "can should must will would all any use using when then than also only out our"
)
_STOP = frozenset(_STOP_WORDS.split())
_SCAN_HEAD = 8_192
_SCAN_TAIL = 2_048
# Above the largest pool a build scans (100k items): the memo evicts its older half when
# full, so a pool larger than the bound would miss on every item of every build (a 100k
# pool re-derived all its terms each build: ~10× slower). ~4 KB per memoised item.
_MEMO_MAX = 131_072


class ScoredItem(msgspec.Struct, frozen=True, gc=False):
    """An item with its score for one build (higher is more relevant)."""

    item: Item
    score: float


class Terms(msgspec.Struct, frozen=True, gc=False):
    """Lower-cased words and path-like tokens (and their basenames) of one text."""

    words: frozenset[str]
    paths: frozenset[str]


def _scan(text: str) -> str:
    if len(text) <= _SCAN_HEAD + _SCAN_TAIL:
        return text
    return text[:_SCAN_HEAD] + "\n" + text[-_SCAN_TAIL:]


def _text_terms(text: str) -> Terms:
    # Interned: equal terms of different items are one object, so set lookups compare by
    # identity instead of reading each item's own copy (the main cost on large pools).
    scanned = _scan(text)
    words = {intern(w.lower()) for w in _WORD.findall(scanned)}
    words.difference_update(_STOP)
    paths: set[str] = set()
    for p in _PATH.findall(scanned):
        p = p.replace("\\", "/").lstrip("./")
        if p:
            paths.add(intern(p))
            paths.add(intern(p.rsplit("/", 1)[-1]))
    return Terms(frozenset(words), frozenset(paths))


_memo: dict[str, Terms] = memo_table()


def item_terms(content: str) -> Terms:
    """Terms of an item's content (head 8 KiB + tail 2 KiB scanned), memoised by content."""
    terms = _memo.get(content)
    if terms is None:
        terms = _text_terms(content)
        remember(_memo, content, terms, _MEMO_MAX)
    return terms


class RequestTerms(msgspec.Struct, frozen=True, gc=False):
    """What a request is about, precomputed once per build."""

    words: frozenset[str]
    failure_words: frozenset[str]
    files: frozenset[str]
    file_names: frozenset[str]
    symbols: frozenset[str]
    symbol_words: frozenset[str]


def request_terms(request: BuildRequest) -> RequestTerms:
    """Words of the task, keywords and failures; files (and basenames); symbols."""
    text = " ".join((request.task, *request.keywords))
    words = set(_text_terms(text).words)
    failure_words = set(_text_terms("\n".join(request.failures)).words)
    files = frozenset(intern(f.replace("\\", "/").lstrip("./")) for f in request.files if f)
    names = frozenset(intern(f.rsplit("/", 1)[-1]) for f in files)
    symbols = frozenset(s for s in request.symbols if s)
    symbol_words = frozenset(intern(s.rsplit(".", 1)[-1].lower()) for s in symbols)
    return RequestTerms(
        words=frozenset(words),
        failure_words=frozenset(failure_words - words),
        files=files,
        file_names=names,
        symbols=symbols,
        symbol_words=symbol_words,
    )


def _timestamp(dt: datetime) -> float:
    return (dt if dt.tzinfo is not None else dt.replace(tzinfo=UTC)).timestamp()


def _clamp01(x: float) -> float:
    if math.isnan(x):
        return 0.0
    return 0.0 if x < 0.0 else 1.0 if x > 1.0 else x


_TEST_RESULT = Source.TEST_RESULT


class _Static(msgspec.Struct, frozen=True, gc=False):
    """Request-independent facts of one item object, memoised by identity."""

    item: Item
    words: frozenset[str]
    paths: frozenset[str]
    files: frozenset[str]
    ts: float | None
    base: float
    # Copies of the item fields the scoring loop reads, so it never touches the item itself
    # (on large pools, scattered item objects are the main cost).
    task: str
    phase: str
    source: Source
    symbols: tuple[str, ...]
    failure_weight: float


def _make_static(item: Item) -> _Static:
    terms = item_terms(item.content)
    return _Static(
        item,
        terms.words,
        terms.paths,
        frozenset(intern(f.replace("\\", "/").lstrip("./")) for f in item.files),
        None if item.observed_at is None else _timestamp(item.observed_at),
        W_CONFIDENCE * _clamp01(item.confidence)
        + W_DURABILITY * (int(item.durability) / 2.0)
        + W_RELEVANCE * _clamp01(item.relevance),
        item.task,
        item.phase,
        item.source,
        item.symbols,
        2.0 if (item.failure or item.source is _TEST_RESULT) else 1.0,
    )


_statics: dict[int, _Static] = memo_table()


def _static(item: Item) -> _Static:
    st = _statics.get(id(item))
    if st is None or st.item is not item:
        st = _make_static(item)
        # The entry holds the item, so its id cannot be reused while it is cached.
        remember(_statics, id(item), st, _MEMO_MAX)
    return st


_Partial = tuple[Item, float, float | None, float | None, float | None]
"""``(item, base + overlap + task, observation time, role part, phase part)``."""

_partials: dict[tuple[object, ...], dict[int, _Partial]] = memo_table()
_PARTIAL_KEYS = 8


def _partial(
    it: Item, st: _Static, *, rt: RequestTerms, task: str, role: dict[Source, float], phase: str
) -> _Partial:
    """The part of *it*'s score that does not depend on the request's time, added in the
    order ``_scores`` adds it (floating point sums are not associative)."""
    words = st.words
    overlap = 0.0
    rwords = rt.words
    if rwords and not rwords.isdisjoint(words):
        overlap = float(len(rwords.intersection(words)))
    if rt.files:
        if not rt.files.isdisjoint(st.files):
            overlap += 3.0 * len(rt.files.intersection(st.files))
        if not rt.file_names.isdisjoint(st.paths):
            overlap += len(rt.file_names.intersection(st.paths))
    if rt.symbols:
        if st.symbols:
            overlap += 2.0 * len(rt.symbols.intersection(st.symbols))
        if not rt.symbol_words.isdisjoint(words):
            overlap += len(rt.symbol_words.intersection(words))
    fwords = rt.failure_words
    if fwords and not fwords.isdisjoint(words):
        overlap += len(fwords.intersection(words)) * st.failure_weight
    score = st.base
    if overlap:
        score += W_OVERLAP * overlap / (overlap + 4.0)
    if task and st.task == task:
        score += W_TASK
    role_part = role.get(st.source, 0.0) if role else None
    phase_part = None
    if phase and st.phase:
        phase_part = PHASE_SAME if st.phase == phase else PHASE_OTHER
    return (it, score, st.ts, role_part, phase_part)


def _partial_entries(request: BuildRequest, pool: Sequence[Item]) -> list[_Partial]:
    """Each item's ``_partial`` for *request* (memoised per query and item object)."""
    rt = request_terms(request)
    role = ROLE_WEIGHTS.get(request.role.lower()) or {}
    key = (rt, request.task, request.role.lower(), request.phase)
    table = _partials.get(key)
    if table is None:
        table = remember(_partials, key, {}, _PARTIAL_KEYS)
    out: list[_Partial] = []
    for it in pool:
        entry = table.get(id(it))
        if entry is None or entry[0] is not it:
            entry = _partial(
                it, _static(it), rt=rt, task=request.task, role=role, phase=request.phase
            )
            remember(table, id(it), entry, _MEMO_MAX)  # holds the item: its id stays unique
        out.append(entry)
    return out


def _scores(request: BuildRequest, pool: Sequence[Item]) -> list[float]:
    """Every item's score. The request-independent facts are memoised per item object
    (``_static``) and the part that depends on the request's terms, task, role and phase but
    not on its time per (those terms, item object) (``_partial``): a build over the same pool
    with the same query computes only recency. Equal to computing every part afresh
    (tests/property/test_retrieval_memo.py)."""
    now_ts = _timestamp(request.now)
    w_recency = W_RECENCY
    per_second = 1.0 / (3600.0 * RECENCY_HALF_LIFE_HOURS)
    out: list[float] = []
    append = out.append
    for entry in _partial_entries(request, pool):
        _, score, ts, role_part, phase_part = entry
        if ts is not None:
            age = now_ts - ts
            score += w_recency / (1.0 + age * per_second) if age > 0 else w_recency
        if role_part is not None:
            score += role_part
        if phase_part is not None:
            score += phase_part
        append(score)
    return out


def score_item(item: Item, request: BuildRequest) -> float:
    """The retrieval score of one item for one request (pure, deterministic).

    Sum of: overlap with the request (files ×3, basenames and symbol words ×1, symbols ×2,
    task/keyword words ×1, failure words ×1 or ×2 on failures/test results) squashed as
    ``3·o/(o+4)``; ``1.5`` for the request's task; recency ``1/(1+age_h/24)``; ``0.5`` ×
    confidence, durability/2 and relevance each; the role's source weight; ``+0.25`` same
    phase, ``-1`` other phase.
    """
    return _scores(request, (item,))[0]


class Ranked(Sequence[ScoredItem]):
    """The scored pool, best first, as a sequence of :class:`ScoredItem` made only when read.

    Also holds what it was made from — the pool's :class:`PoolFacts` (pool order), ``order``
    (pool positions, best first) and ``scores`` (pool order) — so the packer can work on
    positions instead of one object per item (``domain/ranked_pack.py``)."""

    __slots__ = ("_scored", "facts", "order", "scores")

    def __init__(self, facts: PoolFacts, order: list[int], scores: list[float]) -> None:
        self.facts = facts
        self.order = order
        self.scores = scores
        self._scored: list[ScoredItem] | None = None

    def _made(self) -> list[ScoredItem]:
        if self._scored is None:
            items, scores = self.facts.items, self.scores
            self._scored = [ScoredItem(items[k], scores[k]) for k in self.order]
        return self._scored

    def __len__(self) -> int:
        return len(self.order)

    @overload
    def __getitem__(self, index: int) -> ScoredItem: ...
    @overload
    def __getitem__(self, index: slice) -> list[ScoredItem]: ...
    def __getitem__(self, index: int | slice) -> ScoredItem | list[ScoredItem]:
        return self._made()[index]

    def __iter__(self) -> Iterator[ScoredItem]:
        return iter(self._made())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Ranked | list | tuple):
            return list(self) == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # a sequence compared by value

    def __repr__(self) -> str:
        return f"Ranked({self._made()!r})"


def retrieve(request: BuildRequest, pool: Sequence[Item]) -> Ranked:
    """Score every pool item for *request*; best first, ties broken by item id (then pool
    order). Request-independent facts are memoised per item object, so rebuilding over the
    same pool is cheap."""
    facts = pool_facts(pool)
    items = facts.items
    key = _query_key(request)
    scores = _pool_scores(request, facts, key)
    neg = [-x for x in scores]
    # Sorting the order of the last build over this pool version and query: nearly sorted
    # when only the time moved (a refresh after a failed call), and the result is the same
    # from any start — ties are broken below.
    last = facts.orders.get(key)
    order = sorted(range(len(items)) if last is None else last, key=neg.__getitem__)
    if len(set(neg)) < len(neg):
        # Break score ties by (id, pool index); equal scores are contiguous in ``order``.
        ids = facts.ids
        ranked = [neg[k] for k in order]
        for value, n in Counter(neg).items():
            if n > 1:
                lo = bisect_left(ranked, value)
                order[lo : lo + n] = sorted(order[lo : lo + n], key=lambda k: (ids[k], k))
    remember(facts.orders, key, order, _FACTS_MEMO_MAX)
    return Ranked(facts, order, scores)


_FACTS_MEMO_MAX = 16  # per pool version: a few queries' partial scores and last orders


def _query_key(request: BuildRequest) -> tuple[object, ...]:
    """What the time-independent part of a score depends on (besides the item)."""
    return (request_terms(request), request.task, request.role.lower(), request.phase)


def _parts(request: BuildRequest, facts: PoolFacts, key: tuple[object, ...]) -> Parts | None:
    """The time-independent score parts of every item of the pool version, as arrays (None
    when an item is undated); when the version extends one whose parts for *key* are known
    (``partial_prefix``), those followed by the parts of the items recorded since."""
    before: Parts | None = None
    if key in facts.partial_prefix:
        before = facts.partial_prefix[key]
        if before is None:  # an undated item among the ones before
            return None
    start = len(before[0]) if before is not None else 0
    entries = _partial_entries(request, facts.items[start:] if start else facts.items)
    if any(e[2] is None for e in entries):
        return None
    base = [e[1] for e in entries]
    stamps = [e[2] or 0.0 for e in entries]  # (all dated)
    phase = [0.0 if e[4] is None else e[4] for e in entries]
    if before is None or not start:
        role = None if entries and entries[0][3] is None else [e[3] or 0.0 for e in entries]
        return base, stamps, role, phase
    # the role part is None for every item or for none (the key holds the role)
    role = None if before[2] is None else before[2] + [e[3] or 0.0 for e in entries]
    return before[0] + base, before[1] + stamps, role, before[3] + phase


def _pool_scores(request: BuildRequest, facts: PoolFacts, key: tuple[object, ...]) -> list[float]:
    """``_scores`` over a pool version, from its per-query arrays of time-independent parts:
    one comprehension adding recency, role and phase in ``_scores``' order. A missing phase
    part adds 0.0, which leaves any score but -0.0 unchanged (a score is never -0.0: a sum
    that cancels to zero is +0.0). Undated items take ``_scores``' path."""
    if key in facts.partials:
        parts = facts.partials[key]
    else:
        parts = _parts(request, facts, key)
        remember(facts.partials, key, parts, _FACTS_MEMO_MAX)
    if parts is None:
        return _scores(request, facts.items)
    base, stamps_at, role_at, phase_at = parts
    now = _timestamp(request.now)
    w = W_RECENCY
    per_second = 1.0 / (3600.0 * RECENCY_HALF_LIFE_HOURS)
    if role_at is None:
        return [
            (s + (w / (1.0 + a * per_second) if (a := now - t) > 0 else w)) + p
            for s, t, p in zip(base, stamps_at, phase_at, strict=True)
        ]
    return [
        ((s + (w / (1.0 + a * per_second) if (a := now - t) > 0 else w)) + r) + p
        for s, t, r, p in zip(base, stamps_at, role_at, phase_at, strict=True)
    ]
