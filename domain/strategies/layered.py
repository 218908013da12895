"""``layered``: the core-context DefaultContextPackBuilder + DefaultContextCompressor.

1. pinned = steering notes + event history (+ anything pinned/mandatory): never dropped;
2. scope exclusions and clipping as in every strategy;
3. per-source compression — SteeringNote, EventHistory: keep all; Artifact: keep the latest
   per ``source_id`` (older ``superseded``); ToolLog: identical content de-duplicated (the
   first kept, later ``duplicate``); Conversation: keep the last N (older
   ``outside_conversation_window``); other sources pass through;
4. layer eviction while over budget: L2 first, then L1 — within a layer tool logs oldest
   first, then the rest oldest first. L0, L3 and L4 are never evicted, so a layered pack may
   exceed the budget: the excess is recorded as ``overflow``.

Grouped items are never compressed per source and are evicted only as a whole group (a
group with a member in L0/L3/L4 is never evicted).
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.domain.model import Layer, Source
from ctxledger.domain.packing import (
    CLIP_METHOD,
    CLIP_REASON,
    DUPLICATE,
    EXCLUDED_BY_SCOPE,
    OUTSIDE_WINDOW,
    OVER_BUDGET,
    SUPERSEDED,
    Accumulator,
    Candidate,
    PackResult,
    Unit,
    clip_text,
    effective_budget,
    make_units,
    prepare,
    scope_excluder,
)
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import ScoredItem

__all__ = ["ALWAYS_KEPT_SOURCES", "CONVERSATION_KEEP_LAST", "EVICTABLE", "LayeredStrategy"]

CONVERSATION_KEEP_LAST = 20
ALWAYS_KEPT_SOURCES = frozenset({Source.STEERING_NOTE, Source.EVENT_HISTORY})
EVICTABLE = (Layer.L2, Layer.L1)  # eviction order; L0, L3, L4 are never evicted


def _forced(c: Candidate) -> bool:
    it = c.item
    return it.pinned or it.mandatory or it.source in ALWAYS_KEPT_SOURCES


def _age_key(u: Unit) -> tuple[float, str, int]:
    return u.chrono_key()


def _layer_key(u: Unit) -> tuple[int, float, str, int]:
    return (min(int(m.item.layer) for m in u.members), *u.chrono_key())


class LayeredStrategy:
    """The core-context pack builder and compressor (see the module docstring)."""

    def __init__(self, conversation_keep_last: int = CONVERSATION_KEEP_LAST) -> None:
        if conversation_keep_last < 0:
            raise ValueError("conversation_keep_last must not be negative")
        self._keep_last = conversation_keep_last

    @property
    def name(self) -> str:
        return "layered"

    def select(
        self, request: BuildRequest, candidates: Sequence[ScoredItem], counter: TokenCounter
    ) -> PackResult:
        limit = effective_budget(request)
        acc = Accumulator(counter, self.name)
        units = make_units(prepare(candidates, counter), forced=_forced)
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
                        if clipped is not None:
                            versions[m.item.id] = clipped

        def size(u: Unit) -> int:
            return sum(
                versions[m.item.id][1] if m.item.id in versions else m.tokens for m in u.members
            )

        total = sum(u.tokens for u in forced) + sum(size(u) for u in live)
        if total > limit:
            evicted: set[int] = set()
            for layer in EVICTABLE:
                pool = [
                    u
                    for u in live
                    if all(m.item.layer in EVICTABLE for m in u.members)
                    and min(int(m.item.layer) for m in u.members) == layer
                ]
                logs = sorted(
                    (u for u in pool if all(m.item.source is Source.TOOL_LOG for m in u.members)),
                    key=_age_key,
                )
                rest = sorted(
                    (
                        u
                        for u in pool
                        if not all(m.item.source is Source.TOOL_LOG for m in u.members)
                    ),
                    key=_age_key,
                )
                for u in (*logs, *rest):
                    if total <= limit:
                        break
                    total -= size(u)
                    evicted.add(id(u))
                    acc.drop_unit(u, OVER_BUDGET)
                    acc.strategies.add(f"evict:{layer.name}")
                if total <= limit:
                    break
            live = [u for u in live if id(u) not in evicted]

        for u in forced:
            acc.include_unit(u, _layer_key(u))
        for u in live:
            key = _layer_key(u)
            for m in u.members:
                v = versions.get(m.item.id)
                if v is None:
                    acc.include(m, key)
                else:
                    acc.include(
                        m, key, content=v[0], tokens=v[1], action="clipped",
                        method=CLIP_METHOD, reason=CLIP_REASON,
                    )  # fmt: skip
        return acc.result(limit)

    def _per_source(self, live: list[Unit], acc: Accumulator) -> list[Unit]:
        """Artifact latest per source_id, ToolLog dedupe, Conversation keep last N."""
        latest: dict[str, tuple[float, str, int]] = {}
        conversations: list[Unit] = []
        for u in live:
            if u.group:
                continue
            it = u.members[0].item
            if it.source is Source.ARTIFACT and it.source_id:
                k = u.chrono_key()
                if it.source_id not in latest or k > latest[it.source_id]:
                    latest[it.source_id] = k
            elif it.source is Source.CONVERSATION:
                conversations.append(u)
        conversations.sort(key=_age_key)
        cut = max(0, len(conversations) - self._keep_last)
        old_talk = {id(u) for u in conversations[:cut]}

        kept: list[Unit] = []
        seen_logs: set[str] = set()
        for u in sorted(live, key=_age_key):
            it = u.members[0].item
            if not u.group:
                if it.source is Source.ARTIFACT and it.source_id:
                    if u.chrono_key() != latest[it.source_id]:
                        acc.drop_unit(u, SUPERSEDED)
                        acc.strategies.add("artifact:latest_per_source")
                        continue
                elif it.source is Source.TOOL_LOG:
                    if it.content in seen_logs:
                        acc.drop_unit(u, DUPLICATE)
                        acc.strategies.add("tool_log:dedupe")
                        continue
                    seen_logs.add(it.content)
                elif id(u) in old_talk:
                    acc.drop_unit(u, OUTSIDE_WINDOW)
                    acc.strategies.add(f"conversation:keep_last_{self._keep_last}")
                    continue
            kept.append(u)
        return kept
