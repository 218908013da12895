"""The one small protocol every packing strategy implements."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ctxledger.domain.packing import PackResult
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import ScoredItem

__all__ = ["Strategy"]


class Strategy(Protocol):
    """Selects what goes into one pack: a decision for every candidate, within the budget
    (pinned/mandatory overflow and, for ``layered``, never-evicted layers are recorded)."""

    @property
    def name(self) -> str: ...

    def select(
        self, request: BuildRequest, candidates: Sequence[ScoredItem], counter: TokenCounter
    ) -> PackResult: ...
