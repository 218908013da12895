"""``aggressive_refresh``: a tighter budget and no other-phase noise."""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.packing import OTHER_PHASE, Candidate, OmitFn, PackResult
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.ranked_pack import pack
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import ScoredItem

__all__ = ["BUDGET_PERCENT", "AggressiveRefreshStrategy"]

BUDGET_PERCENT = 60


class AggressiveRefreshStrategy:
    """Packs like ``variable`` against ``budget * 60 // 100`` and drops items recorded in
    another phase (both phases non-empty and different) with reason ``other_phase``."""

    def __init__(self, budget_percent: int = BUDGET_PERCENT) -> None:
        if not 0 < budget_percent <= 100:
            raise InvalidInputError("budget_percent must be in 1..100")
        self._percent = budget_percent

    @property
    def name(self) -> str:
        return "aggressive_refresh"

    def select(
        self, request: BuildRequest, candidates: Sequence[ScoredItem], counter: TokenCounter
    ) -> PackResult:
        phase = request.phase
        omit: OmitFn | None = None
        if phase:

            def omit(c: Candidate) -> str | None:
                p = c.item.phase
                return OTHER_PHASE if p and p != phase else None

        return pack(
            request,
            candidates,
            counter,
            strategy_name=self.name,
            budget=max(request.budget, 0) * self._percent // 100,
            omit=omit,
            omit_key=("other_phase", phase),
        )
