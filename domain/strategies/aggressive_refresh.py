"""``aggressive_refresh``: a tighter budget and no other-phase noise."""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.packing import OTHER_PHASE, Candidate, OmitFn, PackResult, is_forced
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.ranked_pack import pack
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import ScoredItem

__all__ = ["BUDGET_PERCENT", "AggressiveRefreshStrategy", "tighter"]

BUDGET_PERCENT = 60


def tighter(
    budget: int, candidates: Sequence[ScoredItem], percent: int, counter: TokenCounter
) -> int:
    """The forced items' tokens (each id once, as packing counts them) plus *percent* of the
    room the budget leaves beside them: forced content is sent whatever the budget, so
    cutting the budget below it would only cut the newest step."""
    seen: set[str] = set()
    forced = 0
    for sc in candidates:
        item = sc.item
        if item.id in seen:
            continue
        seen.add(item.id)
        if is_forced(item):
            forced += item.token_count if item.token_count > 0 else counter.count(item.content)
    room = max(0, max(budget, 0) - forced)
    return min(max(budget, 0), forced + room * percent // 100)


class AggressiveRefreshStrategy:
    """Packs like ``variable`` against its forced content plus 60 % of the room beside it
    (:func:`tighter`) and drops items recorded in another phase (both phases non-empty and
    different) with reason ``other_phase``."""

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
            budget=tighter(request.budget, candidates, self._percent, counter),
            omit=omit,
            omit_key=("other_phase", phase),
        )
