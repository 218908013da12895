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

``select`` takes these steps on positions into the pool's arrays
(``layered_ranked.select_ranked``, with facts kept per pool version), over any input made a
ranked pool first (``ranked_pack.as_ranked``); the same steps over candidate objects,
``tests/oracles/layered_spec.py``, are the specification it is held equal to.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import Layer, Source
from ctxledger.domain.packing import Accumulator, PackResult, effective_budget
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.positions import as_ranked
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import ScoredItem
from ctxledger.domain.strategies.layered_ranked import select_ranked

__all__ = ["ALWAYS_KEPT_SOURCES", "CONVERSATION_KEEP_LAST", "EVICTABLE", "LayeredStrategy"]

CONVERSATION_KEEP_LAST = 20
ALWAYS_KEPT_SOURCES = frozenset({Source.STEERING_NOTE, Source.EVENT_HISTORY})
EVICTABLE = (Layer.L2, Layer.L1)  # eviction order; L0, L3, L4 are never evicted


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
        limit = effective_budget(request)
        acc = Accumulator(counter, self.name)
        ranked, request = as_ranked(request, candidates, counter, acc)
        return select_ranked(
            request, ranked, counter, name=self.name, keep_last=self._keep_last,
            always_kept=ALWAYS_KEPT_SOURCES, evictable=EVICTABLE, acc=acc, limit=limit,
        )  # fmt: skip
