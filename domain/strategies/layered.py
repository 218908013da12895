"""``layered``: the core-context DefaultContextPackBuilder + DefaultContextCompressor.

1. pinned = steering notes + event history (+ anything pinned/mandatory): never dropped;
2. scope exclusions, clipping and steering notes of other stages (``other_stage``) as in
   every strategy;
3. per-source compression — SteeringNote, EventHistory: keep all; Artifact: keep the latest
   per ``source_id`` (older ``superseded``); ToolLog: identical content de-duplicated (the
   first kept, later ``duplicate``); Conversation: keep the last N (older
   ``outside_conversation_window``); other sources pass through;
4. layer eviction while over budget: L2 first, then L1 — within a layer tool logs oldest
   first, then the rest oldest first. L0, L3 and L4 are evicted only when that is not
   enough (the budget is a hard limit: only pinned content may exceed it, recorded as
   ``overflow``), oldest first, and never the kept units of the latest-step policy (the
   newest step's group and the last failures), which are included right after the pinned
   content, clipped to the room left when they do not fit whole.

Grouped items are never compressed per source and are evicted only as a whole group (a
group with a member in L0/L3/L4 belongs to no eviction class: it goes only as a last resort).

Given the ``Ranked`` pool that ``retrieve`` returns, ``select`` takes the same steps on
positions (``layered_ranked.select_ranked``, with facts kept per pool version); the path over
a list of scored items below is the specification it is held equal to.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.domain.clipping import CLIP_METHOD, CLIP_REASON, clip_text
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import Layer, Source
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
    block_tokens,
    drop_other_stage,
    effective_budget,
    include_kept,
    is_forced,
    kept_units,
    make_units,
    prepare,
    scope_excluder,
)
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import Ranked, ScoredItem
from ctxledger.domain.strategies.layered_ranked import select_ranked

__all__ = ["ALWAYS_KEPT_SOURCES", "CONVERSATION_KEEP_LAST", "EVICTABLE", "LayeredStrategy"]

CONVERSATION_KEEP_LAST = 20
ALWAYS_KEPT_SOURCES = frozenset({Source.STEERING_NOTE, Source.EVENT_HISTORY})
EVICTABLE = (Layer.L2, Layer.L1)  # eviction order; L0, L3, L4 are never evicted


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


class LayeredStrategy:
    """The core-context pack builder and compressor (see the module docstring)."""

    def __init__(self, conversation_keep_last: int = CONVERSATION_KEEP_LAST) -> None:
        if conversation_keep_last < 0:
            raise InvalidInputError("conversation_keep_last must not be negative")
        self._keep_last = conversation_keep_last

    @property
    def name(self) -> str:
        return "layered"

    def select(
        self, request: BuildRequest, candidates: Sequence[ScoredItem], counter: TokenCounter
    ) -> PackResult:
        if type(candidates) is Ranked:
            done = select_ranked(
                request, candidates, counter, name=self.name, keep_last=self._keep_last,
                always_kept=ALWAYS_KEPT_SOURCES, evictable=EVICTABLE,
            )  # fmt: skip
            if done is not None:
                return done
        limit = effective_budget(request)
        acc = Accumulator(counter, self.name)
        cands = drop_other_stage(prepare(candidates, counter), request.stage_id, acc)
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

        live = self._per_source(live, acc)

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
            return sum(
                versions[m.item.id][1] if m.item.id in versions else m.tokens for m in u.members
            )

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

    def _per_source(self, live: list[Unit], acc: Accumulator) -> list[Unit]:
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
        if len(talk) > self._keep_last:
            talk.sort(key=_age_key)
            for c in talk[: len(talk) - self._keep_last]:
                acc.drop(c, OUTSIDE_WINDOW)
                gone.add(id(c))
            acc.strategies.add(f"conversation:keep_last_{self._keep_last}")
        return [u for u in live if id(u) not in gone] if gone else live
