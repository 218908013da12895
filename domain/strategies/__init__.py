"""Packing strategies behind one small protocol, in an explicit registry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from ctxledger.domain.errors import UnknownStrategyError
from ctxledger.domain.model import Item
from ctxledger.domain.packing import PackResult
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import retrieve
from ctxledger.domain.strategies.aggressive_refresh import AggressiveRefreshStrategy
from ctxledger.domain.strategies.base import Strategy
from ctxledger.domain.strategies.full_history import FullHistoryStrategy
from ctxledger.domain.strategies.layered import LayeredStrategy
from ctxledger.domain.strategies.role_optimized import RoleOptimizedStrategy
from ctxledger.domain.strategies.summary import SummaryStrategy
from ctxledger.domain.strategies.variable import VariableStrategy

__all__ = [
    "DEFAULT_STRATEGY",
    "STRATEGIES",
    "AggressiveRefreshStrategy",
    "FullHistoryStrategy",
    "LayeredStrategy",
    "RoleOptimizedStrategy",
    "Strategy",
    "SummaryStrategy",
    "VariableStrategy",
    "get_strategy",
    "select_context",
    "strategy_names",
]

DEFAULT_STRATEGY = "variable"

STRATEGIES: Mapping[str, Strategy] = MappingProxyType(
    {
        "variable": VariableStrategy(),
        "full_history": FullHistoryStrategy(),
        "summary": SummaryStrategy(),
        "aggressive_refresh": AggressiveRefreshStrategy(),
        "role_optimized": RoleOptimizedStrategy(),
        "layered": LayeredStrategy(),
    }
)


def strategy_names() -> tuple[str, ...]:
    """The registered strategy names, sorted."""
    return tuple(sorted(STRATEGIES))


def get_strategy(name: str) -> Strategy:
    """The strategy registered as *name*; ``UnknownStrategyError`` names the valid ones."""
    try:
        return STRATEGIES[name]
    except KeyError:
        valid = ", ".join(strategy_names())
        raise UnknownStrategyError(
            f"unknown strategy {name[:80]!r}; valid strategies: {valid}"
        ) from None


def select_context(
    request: BuildRequest, pool: Sequence[Item], counter: TokenCounter
) -> PackResult:
    """Retrieve (score *pool* afresh) and select with ``request.strategy``."""
    strategy = get_strategy(request.strategy)
    return strategy.select(request, retrieve(request, pool), counter)
