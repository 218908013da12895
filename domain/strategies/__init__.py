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
from ctxledger.domain.strategies.baselines import (
    KeepFirstLastStrategy,
    TrimLastStrategy,
    WindowStrategy,
)
from ctxledger.domain.strategies.full_history import FullHistoryStrategy
from ctxledger.domain.strategies.layered import LayeredStrategy
from ctxledger.domain.strategies.role_optimized import RoleOptimizedStrategy
from ctxledger.domain.strategies.summary import SummaryStrategy
from ctxledger.domain.strategies.variable import VariableStrategy

__all__ = [
    "BASELINES",
    "DEFAULT_STRATEGY",
    "KeepFirstLastStrategy",
    "TrimLastStrategy",
    "WindowStrategy",
    "is_rolling",
    "is_stateless",
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
        "trim_last": TrimLastStrategy(),
        "keep_first_last": KeepFirstLastStrategy(),
        "window": WindowStrategy(),
    }
)
BASELINES: tuple[str, ...] = ("trim_last", "keep_first_last", "window")
"""The peers' rules (``domain.strategies.baselines``): selectable like any strategy, held
apart from the engine's own (no latest-step policy, no working set, no compression)."""


def is_stateless(name: str) -> bool:
    """Whether strategy *name* re-selects from the whole pool at the full budget every build."""
    return bool(getattr(get_strategy(name), "stateless", False))


def is_rolling(name: str) -> bool:
    """Whether strategy *name*'s rebuild keeps the newer half of the closing generation."""
    return bool(getattr(get_strategy(name), "rolling", False))


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
