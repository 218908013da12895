"""The registry of read models: name → (initial state, evolve), used by replay and runners."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import msgspec

from ctxledger.domain.events import EVENT_TYPES, Event
from ctxledger.projections.cache_stats import CacheStats, CacheStatsBatch, evolve_cache_stats
from ctxledger.projections.context_state import (
    ContextStates,
    ContextStatesBatch,
    evolve_context_states,
)
from ctxledger.projections.drafts import BatchFold
from ctxledger.projections.gc_indicators import (
    GcIndicators,
    GcIndicatorsBatch,
    evolve_gc_indicators,
)
from ctxledger.projections.generations import Generations, GenerationsBatch, evolve_generations
from ctxledger.projections.generations_stored import decode_generations, encode_generations
from ctxledger.projections.inspector import InspectorBatch, InspectorState, evolve_inspector
from ctxledger.projections.pool import Pool, PoolBatch, evolve_pool
from ctxledger.projections.strategy_metrics import (
    StrategyMetrics,
    StrategyMetricsBatch,
    evolve_strategy_metrics,
)

__all__ = [
    "PROJECTIONS",
    "Projection",
    "ReadModels",
    "StoredForm",
    "fold",
    "fold_all",
    "read_models",
]

S = TypeVar("S", bound=msgspec.Struct)


@dataclass(frozen=True)
class StoredForm(Generic[S]):
    """A read model's own stored bytes: ``decode(encode(state)) == state``."""

    encode: Callable[[S], bytes]
    decode: Callable[[bytes], S]


@dataclass(frozen=True)
class Projection(Generic[S]):
    """A named fold with its initial state.

    ``batch`` (optional) is the projection's fold: a batch of events folded into drafts
    without per-event copies (``projections.batch.fold_batch``); ``evolve`` folds one event,
    and for a projection with ``batch`` it is that fold over a batch of one
    (``projections.drafts.batch_of_one``). The event types the batch's handlers name are
    ``acts_on``, the only events ``evolve`` does not return the state for unchanged. Without
    ``batch``, every event goes to ``evolve``. (The pure folds that were the specification
    are the oracle of the property tests, in ``tests/oracles``.)"""

    name: str
    state_type: type[S]
    evolve: Callable[[S, Event], S]
    batch: Callable[[S], BatchFold[S]] | None = None
    stored: StoredForm[S] | None = None
    """How the model is stored when it is not as its JSON (a smaller form that decodes to an
    equal model)."""
    acts_on: frozenset[type[Event]] = field(init=False)

    def __post_init__(self) -> None:
        types = (
            frozenset(EVENT_TYPES.values())
            if self.batch is None
            else frozenset(self.batch(self.initial()).handlers())
        )
        object.__setattr__(self, "acts_on", types)

    def initial(self) -> S:
        return self.state_type()

    def fold(self, events: Iterable[Event], state: S | None = None) -> S:
        result = self.initial() if state is None else state
        evolve = self.evolve
        for event in events:
            result = evolve(result, event)
        return result


PROJECTIONS: tuple[Projection[Any], ...] = (
    Projection("context_state", ContextStates, evolve_context_states, ContextStatesBatch),
    Projection(
        "generations",
        Generations,
        evolve_generations,
        GenerationsBatch,
        StoredForm(encode_generations, decode_generations),
    ),
    Projection("cache_stats", CacheStats, evolve_cache_stats, CacheStatsBatch),
    Projection("pool", Pool, evolve_pool, PoolBatch),
    Projection("gc_indicators", GcIndicators, evolve_gc_indicators, GcIndicatorsBatch),
    Projection("strategy_metrics", StrategyMetrics, evolve_strategy_metrics, StrategyMetricsBatch),
    Projection("inspector", InspectorState, evolve_inspector, InspectorBatch),
)
"""Every persisted read model, in a fixed order."""


class ReadModels(msgspec.Struct, frozen=True, kw_only=True):
    """Every read model at one log position, one typed field per projection.

    Field names are the projection names (the persisted format stays one row per name);
    a model left out is the projection's initial state.
    """

    context_state: ContextStates = msgspec.field(default_factory=ContextStates)
    generations: Generations = msgspec.field(default_factory=Generations)
    cache_stats: CacheStats = msgspec.field(default_factory=CacheStats)
    pool: Pool = msgspec.field(default_factory=Pool)
    gc_indicators: GcIndicators = msgspec.field(default_factory=GcIndicators)
    strategy_metrics: StrategyMetrics = msgspec.field(default_factory=StrategyMetrics)
    inspector: InspectorState = msgspec.field(default_factory=InspectorState)


if ReadModels.__struct_fields__ != tuple(p.name for p in PROJECTIONS):  # pragma: no cover
    raise TypeError("ReadModels must have one field per projection, in PROJECTIONS order")


def read_models(states: Mapping[str, Any]) -> ReadModels:
    """The typed read models of a name → state mapping (a missing name is its initial state)."""
    return ReadModels(
        **{name: states[name] for name in ReadModels.__struct_fields__ if name in states}
    )


def fold(projection: Projection[S], events: Iterable[Event]) -> S:
    """Fold *events* from the projection's initial state."""
    return projection.fold(events)


def fold_all(events: Iterable[Event]) -> ReadModels:
    """Fold every registered projection over *events* in one pass."""
    states: dict[str, Any] = {p.name: p.initial() for p in PROJECTIONS}
    for event in events:
        for p in PROJECTIONS:
            states[p.name] = p.evolve(states[p.name], event)
    return read_models(states)
