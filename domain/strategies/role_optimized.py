"""``role_optimized``: the Primary omits raw code dumps; probes omit unrelated reports."""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.domain.model import Source
from ctxledger.domain.packing import OMITTED_BY_STRATEGY, Candidate, OmitFn, PackResult
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.ranked_pack import pack
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import ScoredItem

__all__ = ["RAW_CODE_TOKENS", "RoleOptimizedStrategy"]

RAW_CODE_TOKENS = 400


class RoleOptimizedStrategy:
    """Role ``primary``: ``repository_source`` items over 400 tokens are omitted (the Primary
    reads reports, not code dumps). Role ``probe``: ``parent_report`` items whose task is not
    the request's are omitted. Other roles pack like ``variable``. Omissions are
    ``omitted_by_strategy``; pinned/mandatory items are never omitted."""

    def __init__(self, raw_code_tokens: int = RAW_CODE_TOKENS) -> None:
        self._raw_code_tokens = raw_code_tokens

    @property
    def name(self) -> str:
        return "role_optimized"

    def select(
        self, request: BuildRequest, candidates: Sequence[ScoredItem], counter: TokenCounter
    ) -> PackResult:
        role = request.role.lower()
        limit = self._raw_code_tokens
        task = request.task
        omit: OmitFn | None = None
        if role == "primary":

            def omit(c: Candidate) -> str | None:
                big_code = c.item.source is Source.REPOSITORY_SOURCE and c.tokens > limit
                return OMITTED_BY_STRATEGY if big_code else None

        elif role == "probe":

            def omit(c: Candidate) -> str | None:
                unrelated = c.item.source is Source.PARENT_REPORT and c.item.task != task
                return OMITTED_BY_STRATEGY if unrelated else None

        return pack(
            request, candidates, counter, strategy_name=self.name, omit=omit,
            omit_key=("role_optimized", role, limit, task),
        )  # fmt: skip
