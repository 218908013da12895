"""``full_history``: chronological fill, including raw history, until the budget is reached."""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.domain.packing import PackResult
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.ranked_pack import pack
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import ScoredItem

__all__ = ["FullHistoryStrategy"]


class FullHistoryStrategy:
    """The transcript baseline: oldest first (``observed_at``, then id; undated items first),
    every layer including L4; stops at the first item that does not fit — everything after
    it is ``over_budget``. No supersession and no compression; scope still applies."""

    @property
    def name(self) -> str:
        return "full_history"

    def select(
        self, request: BuildRequest, candidates: Sequence[ScoredItem], counter: TokenCounter
    ) -> PackResult:
        return pack(
            request,
            candidates,
            counter,
            strategy_name=self.name,
            chronological=True,
            supersede=frozenset(),
            compress=False,
            stop_at_first_miss=True,
            raw_history=True,
        )
