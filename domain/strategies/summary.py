"""``summary``: keep task state, findings and reports; omit the rest."""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.domain.model import Layer, Source
from ctxledger.domain.packing import OMITTED_BY_STRATEGY, Candidate, PackResult
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.ranked_pack import pack
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import ScoredItem

__all__ = ["KEPT_LAYERS", "KEPT_SOURCES", "SummaryStrategy"]

KEPT_LAYERS = frozenset({Layer.L1, Layer.L2})
KEPT_SOURCES = frozenset(
    {Source.PARENT_REPORT, Source.USER_REQUIREMENT, Source.STEERING_NOTE, Source.ROLE_INSTRUCTION}
)


def _omit(c: Candidate) -> str | None:
    it = c.item
    if it.layer in KEPT_LAYERS or it.source in KEPT_SOURCES:
        return None
    return OMITTED_BY_STRATEGY


class SummaryStrategy:
    """Only L1 task state, L2 findings, parent reports, requirements, steering and role
    instructions are candidates (plus anything pinned/mandatory); the rest is
    ``omitted_by_strategy``. Then packed like ``variable``."""

    @property
    def name(self) -> str:
        return "summary"

    def select(
        self, request: BuildRequest, candidates: Sequence[ScoredItem], counter: TokenCounter
    ) -> PackResult:
        return pack(
            request, candidates, counter, strategy_name=self.name, omit=_omit, omit_key="summary"
        )
