"""``layered`` over candidate objects: the specification ``LayeredStrategy.select`` (which
works on the pool's positions, ``domain/strategies/layered_ranked.py``) is held equal to,
byte for byte (``tests/property/test_layered_ranked.py``).

It was the strategy's path over a list of scored items until the path over positions covered
every case; it takes the steps of ``domain/strategies/layered.py``'s module docstring
literally: a ``Candidate`` per item, units of them, and sorts by age per eviction class.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.domain.clipping import CLIP_METHOD, CLIP_REASON, clip_text
from ctxledger.domain.filling import (
    block_tokens,
    include_kept,
)
from ctxledger.domain.model import Source
from ctxledger.domain.packing import (
    DUPLICATE,
    EXCLUDED_BY_SCOPE,
    OUTSIDE_WINDOW,
    OVER_BUDGET,
    SUPERSEDED,
    Accumulator,
    Candidate,
    PackResult,
    Unit,
    drop_other_stage,
    effective_budget,
    is_forced,
    make_units,
    prepare,
    scope_excluder,
)
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import ScoredItem
from ctxledger.domain.strategies.layered import (
    ALWAYS_KEPT_SOURCES,
    CONVERSATION_KEEP_LAST,
    EVICTABLE,
)
from tests.oracles.packing_spec import kept_units, verified_stand_in

__all__ = ["select"]

_TOOL_LOG = Source.TOOL_LOG
_ARTIFACT = Source.ARTIFACT
_CONVERSATION = Source.CONVERSATION
_EVICTABLE_VALUES = frozenset(int(layer) for layer in EVICTABLE)


def _forced(c: Candidate) -> bool:
    it = c.item
    return is_forced(it) or it.source in ALWAYS_KEPT_SOURCES


def _age_key(u: Unit) -> tuple[float, str, int]:
    return u.chrono_key()


def _layer_key(u: Unit) -> tuple[int, float, str, int]:
    if type(u) is Candidate:
        return (u.item.layer._value_, u.ts, u.item.id, u.index)
    return (min(m.item.layer._value_ for m in u.members), *u.chrono_key())


def _eviction_class(u: Unit) -> tuple[int, bool] | None:
    """(layer, all tool logs) of an evictable unit, ``None`` if it holds L0/L3/L4."""
    if type(u) is Candidate:
        layer = u.item.layer._value_
        return (layer, u.item.source is _TOOL_LOG) if layer in _EVICTABLE_VALUES else None
    layers = [m.item.layer._value_ for m in u.members]
    if not all(v in _EVICTABLE_VALUES for v in layers):
        return None
    return (min(layers), all(m.item.source is _TOOL_LOG for m in u.members))


def select(
    request: BuildRequest,
    candidates: Sequence[ScoredItem],
    counter: TokenCounter,
    *,
    keep_last: int = CONVERSATION_KEEP_LAST,
) -> PackResult:
    """``LayeredStrategy(keep_last).select`` over candidate objects."""
    limit = effective_budget(request)
    acc = Accumulator(counter, "layered")
    cands = drop_other_stage(prepare(candidates, counter), request.stage_id, acc)
    cands, request = verified_stand_in(request, cands, acc)
    kept, units = kept_units(make_units(cands, forced=_forced), request.keep_ids)
    excluded = scope_excluder(request.scope)
    clip_limit = request.scope.clip_above_tokens

    forced: list[Unit] = []
    live: list[Unit] = []
    for u in units:
        if u.forced:
            forced.append(u)
        elif excluded is not None and any(excluded(m.item) for m in u.members):
            acc.drop_unit(u, EXCLUDED_BY_SCOPE)
        else:
            live.append(u)

    live = _per_source(live, acc, keep_last)

    # Scope clipping of what is left (pinned/mandatory/always-kept are never clipped).
    versions: dict[str, tuple[str, int]] = {}
    if clip_limit:
        for u in live:
            for m in u.members:
                if m.tokens > clip_limit:
                    clipped = clip_text(m.item.content, m.tokens, clip_limit, counter)
                    if clipped is not None:  # counted as rendered, as a whole item is
                        text = clipped[0]
                        versions[m.item.id] = (text, block_tokens(m.item, text, counter))

    def size(u: Unit) -> int:
        if not versions:
            return u.tokens
        return sum(versions[m.item.id][1] if m.item.id in versions else m.tokens for m in u.members)

    for u in forced:
        acc.include_unit(u, _layer_key(u))
    for u in kept:
        if excluded is not None and any(excluded(m.item) for m in u.members):
            acc.drop_unit(u, EXCLUDED_BY_SCOPE)
        else:
            include_kept(
                u, _layer_key(u), limit=limit, acc=acc, counter=counter, clip_limit=clip_limit
            )
    total = acc.used + sum(size(u) for u in live)
    if total > limit:
        # Eviction order: L2 tool logs, other L2, L1 tool logs, other L1 — oldest first.
        order: dict[tuple[int, bool], list[Unit]] = {}
        for u in live:
            cls = _eviction_class(u)
            if cls is not None:
                order.setdefault(cls, []).append(u)
        evicted: set[int] = set()
        for layer in EVICTABLE:
            for is_log in (True, False):
                for u in sorted(order.get((int(layer), is_log), ()), key=_age_key):
                    if total <= limit:
                        break
                    total -= size(u)
                    evicted.add(id(u))
                    acc.drop_unit(u, OVER_BUDGET)
                    acc.strategies.add(f"evict:{layer.name}")
        # Still over: the budget is a hard limit, so L0/L3/L4 go too, oldest first.
        for u in sorted(live, key=_age_key):
            if total <= limit:
                break
            if id(u) in evicted:
                continue
            total -= size(u)
            evicted.add(id(u))
            acc.drop_unit(u, OVER_BUDGET)
            acc.strategies.add("evict:over_budget")
        if evicted:
            live = [u for u in live if id(u) not in evicted]

    for u in live:
        key = _layer_key(u)
        for m in u.members:
            v = versions.get(m.item.id) if versions else None
            if v is None:
                acc.include(m, key)
            else:
                acc.include(
                    m, key, content=v[0], tokens=v[1], action="clipped",
                    method=CLIP_METHOD, reason=CLIP_REASON,
                )  # fmt: skip
    return acc.result(limit)


def _per_source(live: list[Unit], acc: Accumulator, keep_last: int) -> list[Unit]:
    """Artifact latest per source_id, ToolLog dedupe, Conversation keep last N
    (ungrouped items only; a group is never split)."""
    artifacts: dict[str, list[Candidate]] = {}
    logs: list[Candidate] = []
    talk: list[Candidate] = []
    for u in live:
        if type(u) is not Candidate:
            continue
        src = u.item.source
        if src is _ARTIFACT and u.item.source_id:
            artifacts.setdefault(u.item.source_id, []).append(u)
        elif src is _TOOL_LOG:
            logs.append(u)
        elif src is _CONVERSATION:
            talk.append(u)
    gone: set[int] = set()
    for versions in artifacts.values():
        if len(versions) > 1:
            newest = max(versions, key=_age_key)
            for c in versions:
                if c is not newest:
                    acc.drop(c, SUPERSEDED)
                    gone.add(id(c))
            acc.strategies.add("artifact:latest_per_source")
    seen: set[str] = set()
    for c in sorted(logs, key=_age_key):
        if c.item.content in seen:
            acc.drop(c, DUPLICATE)
            gone.add(id(c))
            acc.strategies.add("tool_log:dedupe")
        else:
            seen.add(c.item.content)
    if len(talk) > keep_last:
        talk.sort(key=_age_key)
        for c in talk[: len(talk) - keep_last]:
            acc.drop(c, OUTSIDE_WINDOW)
            gone.add(id(c))
        acc.strategies.add(f"conversation:keep_last_{keep_last}")
    return [u for u in live if id(u) not in gone] if gone else live
