"""``variable`` (default): layer + score packing in priority tiers."""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.domain.packing import PackResult
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.ranked_pack import pack
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import ScoredItem

__all__ = ["VariableStrategy"]


class VariableStrategy:
    """Pinned/mandatory first, then tiers 1–4 by score; compress or drop what does not fit."""

    @property
    def name(self) -> str:
        return "variable"

    def select(
        self, request: BuildRequest, candidates: Sequence[ScoredItem], counter: TokenCounter
    ) -> PackResult:
        return pack(request, candidates, counter, strategy_name=self.name)
