"""The registry of read models: name → (initial state, evolve), used by replay and runners."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import msgspec

from ctxledger.domain.events import Event
from ctxledger.projections.cache_stats import CacheStats, evolve_cache_stats
from ctxledger.projections.context_state import ContextStates, evolve_context_states
from ctxledger.projections.gc_indicators import GcIndicators, evolve_gc_indicators
from ctxledger.projections.generations import Generations, evolve_generations
from ctxledger.projections.inspector import InspectorState, evolve_inspector
from ctxledger.projections.pool import Pool, evolve_pool
from ctxledger.projections.strategy_metrics import StrategyMetrics, evolve_strategy_metrics

__all__ = ["PROJECTIONS", "Projection", "fold", "fold_all"]

S = TypeVar("S", bound=msgspec.Struct)


@dataclass(frozen=True)
class Projection(Generic[S]):
    """A named pure fold with its initial state."""

    name: str
    state_type: type[S]
    evolve: Callable[[S, Event], S]

    def initial(self) -> S:
        return self.state_type()

    def fold(self, events: Iterable[Event], state: S | None = None) -> S:
        result = self.initial() if state is None else state
        evolve = self.evolve
        for event in events:
            result = evolve(result, event)
        return result


PROJECTIONS: tuple[Projection[Any], ...] = (
    Projection("context_state", ContextStates, evolve_context_states),
    Projection("generations", Generations, evolve_generations),
    Projection("cache_stats", CacheStats, evolve_cache_stats),
    Projection("pool", Pool, evolve_pool),
    Projection("gc_indicators", GcIndicators, evolve_gc_indicators),
    Projection("strategy_metrics", StrategyMetrics, evolve_strategy_metrics),
    Projection("inspector", InspectorState, evolve_inspector),
)
"""Every persisted read model, in a fixed order."""


def fold(projection: Projection[S], events: Iterable[Event]) -> S:
    """Fold *events* from the projection's initial state."""
    return projection.fold(events)


def fold_all(events: Iterable[Event]) -> dict[str, Any]:
    """Fold every registered projection over *events* in one pass."""
    states: dict[str, Any] = {p.name: p.initial() for p in PROJECTIONS}
    for event in events:
        for p in PROJECTIONS:
            states[p.name] = p.evolve(states[p.name], event)
    return states
