"""Retrieval: score the durable pool afresh for one build (overlap, task, recency, role, phase)."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from datetime import UTC, datetime

import msgspec

from ctxledger.domain.model import Item, Source
from ctxledger.domain.request import BuildRequest

__all__ = [
    "ROLE_WEIGHTS",
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
_PATH = re.compile(r"[A-Za-z0-9_.~-]*[/\\]?[A-Za-z0-9_.-]+\.[A-Za-z][A-Za-z0-9]{0,7}\b")
_STOP_WORDS = (
    "the and for with this that from into not are was were has have had but you your its "
    "can should must will would all any use using when then than also only out our"
)
_STOP = frozenset(_STOP_WORDS.split())
_SCAN_HEAD = 8_192
_SCAN_TAIL = 2_048
_MEMO_MAX = 100_000


class ScoredItem(msgspec.Struct, frozen=True):
    """An item with its score for one build (higher is more relevant)."""

    item: Item
    score: float


class Terms(msgspec.Struct, frozen=True):
    """Lower-cased words and path-like tokens (and their basenames) of one text."""

    words: frozenset[str]
    paths: frozenset[str]


def _scan(text: str) -> str:
    if len(text) <= _SCAN_HEAD + _SCAN_TAIL:
        return text
    return text[:_SCAN_HEAD] + "\n" + text[-_SCAN_TAIL:]


def _text_terms(text: str) -> Terms:
    scanned = _scan(text)
    words = {w.lower() for w in _WORD.findall(scanned)}
    words.difference_update(_STOP)
    paths: set[str] = set()
    for p in _PATH.findall(scanned):
        p = p.replace("\\", "/").lstrip("./")
        if p:
            paths.add(p)
            paths.add(p.rsplit("/", 1)[-1])
    return Terms(frozenset(words), frozenset(paths))


_memo: dict[str, Terms] = {}


def item_terms(content: str) -> Terms:
    """Terms of an item's content (head 8 KiB + tail 2 KiB scanned), memoised by content."""
    terms = _memo.get(content)
    if terms is None:
        terms = _text_terms(content)
        if len(_memo) >= _MEMO_MAX:
            for key in list(_memo)[: _MEMO_MAX // 2]:
                del _memo[key]
        _memo[content] = terms
    return terms


class RequestTerms(msgspec.Struct, frozen=True):
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
    files = frozenset(f.replace("\\", "/").lstrip("./") for f in request.files if f)
    names = frozenset(f.rsplit("/", 1)[-1] for f in files)
    symbols = frozenset(s for s in request.symbols if s)
    symbol_words = frozenset(s.rsplit(".", 1)[-1].lower() for s in symbols)
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


class _Static:
    """Request-independent facts of one item object, memoised by identity."""

    __slots__ = ("base", "files", "item", "paths", "ts", "words")

    def __init__(self, item: Item) -> None:
        terms = item_terms(item.content)
        self.item = item
        self.words = terms.words
        self.paths = terms.paths
        self.files = frozenset(f.replace("\\", "/").lstrip("./") for f in item.files)
        self.ts = None if item.observed_at is None else _timestamp(item.observed_at)
        self.base = (
            W_CONFIDENCE * _clamp01(item.confidence)
            + W_DURABILITY * (int(item.durability) / 2.0)
            + W_RELEVANCE * _clamp01(item.relevance)
        )


_statics: dict[int, _Static] = {}


def _static(item: Item) -> _Static:
    st = _statics.get(id(item))
    if st is None or st.item is not item:
        st = _Static(item)
        if len(_statics) >= _MEMO_MAX:
            for key in list(_statics)[: _MEMO_MAX // 2]:
                del _statics[key]
        _statics[id(item)] = st  # holds the item, so its id cannot be reused meanwhile
    return st


def _scores(request: BuildRequest, pool: Sequence[Item]) -> list[float]:
    rt = request_terms(request)
    now_ts = _timestamp(request.now)
    task = request.task
    phase = request.phase
    role = ROLE_WEIGHTS.get(request.role.lower()) or {}
    rwords = rt.words
    fwords = rt.failure_words
    rfiles = rt.files
    rnames = rt.file_names
    rsyms = rt.symbols
    rsymw = rt.symbol_words
    statics = _statics
    out: list[float] = []
    append = out.append
    for it in pool:
        st = statics.get(id(it))
        if st is None or st.item is not it:
            st = _static(it)
        words = st.words
        overlap = float(len(rwords.intersection(words))) if rwords else 0.0
        if rfiles:
            overlap += 3.0 * len(rfiles.intersection(st.files)) + len(rnames.intersection(st.paths))
        if rsyms:
            overlap += 2.0 * len(rsyms.intersection(it.symbols)) + len(rsymw.intersection(words))
        if fwords:
            hits = len(fwords.intersection(words))
            if hits:
                overlap += hits * (2.0 if (it.failure or it.source is _TEST_RESULT) else 1.0)
        score = st.base
        if overlap:
            score += W_OVERLAP * overlap / (overlap + 4.0)
        if task and it.task == task:
            score += W_TASK
        if st.ts is not None:
            age_h = (now_ts - st.ts) / 3600.0
            score += W_RECENCY / (1.0 + age_h / RECENCY_HALF_LIFE_HOURS) if age_h > 0 else W_RECENCY
        if role:
            score += role.get(it.source, 0.0)
        if phase and it.phase:
            score += PHASE_SAME if it.phase == phase else PHASE_OTHER
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


def retrieve(request: BuildRequest, pool: Sequence[Item]) -> list[ScoredItem]:
    """Score every pool item for *request*; best first, ties broken by item id (then pool
    order). Request-independent facts are memoised per item object, so rebuilding over the
    same pool is cheap."""
    scores = _scores(request, pool)
    neg = [-x for x in scores]
    order = sorted(range(len(pool)), key=neg.__getitem__)
    # Break score ties by (id, pool index): only runs of equal scores need re-sorting.
    i, n = 0, len(order)
    while i < n:
        j = i + 1
        s = neg[order[i]]
        while j < n and neg[order[j]] == s:
            j += 1
        if j - i > 1:
            order[i:j] = sorted(order[i:j], key=lambda k: (pool[k].id, k))
        i = j
    return [ScoredItem(pool[k], scores[k]) for k in order]
