"""Page models of the web inspector, computed from the read models only (never a build)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from ctxledger.adapters.web.charts import (
    bar_chart,
    grouped_chart,
    layer_colour,
    source_colour,
    usage_bar,
)
from ctxledger.domain.errors import CtxLedgerError, UnknownAgentError
from ctxledger.domain.memory import MEMORY_STATES, MemoryEntry
from ctxledger.domain.model import AgentIdentity, Generation, Item, Source
from ctxledger.projections.cache_stats import CacheStats, CacheTotals
from ctxledger.projections.catalog import ReadModels
from ctxledger.projections.context_state import ContextState, ContextStates
from ctxledger.projections.generations import AgentGenerations, Generations
from ctxledger.projections.inspector import (
    AgentInspector,
    InspectorState,
    ItemView,
    diff_generations,
    inspect_agent,
)
from ctxledger.projections.pool import AgentPool, Pool
from ctxledger.projections.strategy_metrics import AgentStrategyMetrics, StrategyMetrics

__all__ = [
    "AgentRow",
    "ItemExtra",
    "MemoryListing",
    "agent_page",
    "agents_page",
    "cache_page",
    "diff_page",
    "generation_page",
    "memory_page",
]

_VERIFIABLE = frozenset({Source.WORKER_FINDING.value, Source.UNVERIFIED_HYPOTHESIS.value})


def _agent(states: ReadModels, agent_id: str) -> AgentGenerations:
    gens: Generations = states.generations
    found = gens.by_agent.get(agent_id)
    if found is None:
        raise UnknownAgentError(f"unknown agent {agent_id[:80]!r}")
    return found


def _pool(states: ReadModels, agent_id: str) -> AgentPool:
    pool: Pool = states.pool
    return pool.by_agent.get(agent_id, AgentPool())


def _cache(states: ReadModels) -> CacheStats:
    stats: CacheStats = states.cache_stats
    return stats


@dataclasses.dataclass(frozen=True, slots=True)
class AgentRow:
    """One agent on the agents list."""

    agent: AgentIdentity
    generations: int
    current: Generation
    state: ContextState
    cache: CacheTotals
    metrics: AgentStrategyMetrics


def agents_page(states: ReadModels) -> dict[str, Any]:
    """Every agent with its current generation, build state and cache figures."""
    gens: Generations = states.generations
    ctx: ContextStates = states.context_state
    metrics: StrategyMetrics = states.strategy_metrics
    cache = _cache(states)
    rows = [
        AgentRow(
            agent=ag.agent,
            generations=len(ag.generations),
            current=ag.current,
            state=ctx.by_agent.get(agent_id, ContextState()),
            cache=cache.agent(agent_id),
            metrics=metrics.by_agent.get(agent_id, AgentStrategyMetrics()),
        )
        for agent_id, ag in sorted(gens.by_agent.items())
    ]
    return {"agents": rows, "overall": cache.overall}


def agent_page(states: ReadModels, agent_id: str) -> dict[str, Any]:
    """An agent's identity and its timeline of generations with the reason of each change."""
    ag = _agent(states, agent_id)
    ctx: ContextStates = states.context_state
    metrics: StrategyMetrics = states.strategy_metrics
    inspector: InspectorState = states.inspector
    ai = inspector.by_agent.get(agent_id, AgentInspector())
    numbers = [g.number for g in ag.generations]
    chart = grouped_chart(
        [f"g{n}" for n in numbers],
        [
            ("tokens used", "#2563eb", [float(g.tokens_used) for g in ag.generations]),
            ("budget", "#cbd5e1", [float(g.budget) for g in ag.generations]),
        ],
    )
    current = ag.current.number
    return {
        "agent": ag.agent,
        "generations": ag.generations,
        "current": current,
        "state": ctx.by_agent.get(agent_id, ContextState()),
        "building": ctx.building_pack(agent_id),
        "settings": ag.settings,
        "metrics": metrics.by_agent.get(agent_id, AgentStrategyMetrics()),
        "controls": ai.controls,
        "last_turn_error": ai.last_turn_error,
        "chart": chart,
        "numbers": numbers,
        "diff_from": numbers[-2] if len(numbers) > 1 else current,
        "diff_to": current,
    }


@dataclasses.dataclass(frozen=True, slots=True)
class ItemExtra:
    """What the pool says about an item now: provenance the view omits and control state."""

    in_pool: bool
    removed: str
    pinned: bool
    mandatory: bool
    verifiable: bool
    durability: str
    confidence: float
    relevance: float
    source_id: str
    stage: str
    phase: str


def _extra(pool: AgentPool, item_id: str) -> ItemExtra:
    item: Item | None = pool.items.get(item_id)
    if item is None:
        return ItemExtra(
            in_pool=False,
            removed="not in the pool",
            pinned=False,
            mandatory=False,
            verifiable=False,
            durability="",
            confidence=0.0,
            relevance=0.0,
            source_id="",
            stage="",
            phase="",
        )
    removed = pool.removed.get(item_id, "")
    return ItemExtra(
        in_pool=not removed,
        removed=removed,
        pinned=item.pinned,
        mandatory=item.mandatory,
        verifiable=not item.verified and item.source.value in _VERIFIABLE,
        durability=item.durability.name.lower(),
        confidence=item.confidence,
        relevance=item.relevance,
        source_id=item.source_id,
        stage=item.stage,
        phase=item.phase,
    )


def generation_page(states: ReadModels, agent_id: str, number: int) -> dict[str, Any]:
    """The Context view of one generation: usage, composition, items and their fates."""
    view = inspect_agent(states, agent_id, number)
    ag = _agent(states, agent_id)
    gen = ag.generation(number)
    pool = _pool(states, agent_id)
    numbers = [g.number for g in ag.generations]
    at = numbers.index(view.generation)
    whole = tuple(v for v in view.included if v.action == "included")
    reshaped = tuple(v for v in view.included if v.action != "included")
    shown: tuple[ItemView, ...] = (*view.included, *view.excluded)
    return {
        "view": view,
        "gen": gen,
        "usage": usage_bar(view.used, view.budget),
        "layer_chart": bar_chart(
            view.by_layer, colours={k: layer_colour(k) for k in view.by_layer}
        ),
        "source_chart": bar_chart(
            view.by_source, colours={k: source_colour(k) for k in view.by_source}
        ),
        "whole": whole,
        "reshaped": reshaped,
        "dropped": view.excluded,
        "extras": {v.id: _extra(pool, v.id) for v in shown},
        "previous": numbers[at - 1] if at > 0 else None,
        "next": numbers[at + 1] if at + 1 < len(numbers) else None,
        "is_current": view.generation == ag.current.number,
        "cache": _cache(states).generation(agent_id, view.generation),
    }


def diff_page(states: ReadModels, agent_id: str, a: int, b: int) -> dict[str, Any]:
    """What entered, left, was compressed or clipped between generations *a* and *b*."""
    d = diff_generations(states, agent_id, a, b)
    ag = _agent(states, agent_id)
    return {
        "agent": ag.agent,
        "diff": d,
        "numbers": [g.number for g in ag.generations],
        "delta": d.tokens_to - d.tokens_from,
    }


def cache_page(states: ReadModels) -> dict[str, Any]:
    """Hit rate per agent and generation, and expected vs reported cached tokens."""
    cache = _cache(states)
    gens: Generations = states.generations
    agents = []
    for agent_id in sorted(set(cache.by_agent) | set(gens.by_agent)):
        per_gen = sorted(cache.by_generation.get(agent_id, {}).items())
        labels = [f"g{n}" for n, _ in per_gen]
        agents.append(
            {
                "agent_id": agent_id,
                "totals": cache.agent(agent_id),
                "rows": per_gen,
                "hit_chart": grouped_chart(
                    labels,
                    [("hit rate", "#059669", [t.hit_rate for _, t in per_gen])],
                    percent=True,
                ),
                "tokens_chart": grouped_chart(
                    labels,
                    [
                        (
                            "expected cached",
                            "#94a3b8",
                            [float(t.expected_cached_tokens) for _, t in per_gen],
                        ),
                        (
                            "reported cache read",
                            "#2563eb",
                            [float(t.cache_read_tokens) for _, t in per_gen],
                        ),
                    ],
                ),
            }
        )
    return {"overall": cache.overall, "agents": agents}


@dataclasses.dataclass(frozen=True, slots=True)
class MemoryListing:
    """The catalog's entries (read-only), or why there are none to show."""

    status: str
    detail: str = ""
    entries: tuple[MemoryEntry, ...] = ()
    counts: tuple[tuple[str, int], ...] = ()


def list_catalog(path: Path | None) -> MemoryListing:
    """Entries of the project-memory catalog at *path* through its public API, read only.

    Never creates a catalog: a missing file is reported, not made."""
    if path is None:
        return MemoryListing(status="not_configured", detail="start the server with --catalog PATH")
    try:
        from ctxledger.adapters.memory_catalog import MemoryCatalog
    except ImportError:  # pragma: no cover - the module ships with the package
        return MemoryListing(status="unavailable", detail="the memory catalog module is missing")
    if not path.is_file():
        return MemoryListing(status="missing", detail=f"no catalog file at {path}")
    try:
        with MemoryCatalog.open(path, intake=None) as catalog:
            entries = tuple(catalog.list())
    except (CtxLedgerError, OSError) as exc:
        return MemoryListing(status="error", detail=str(exc)[:300])
    except Exception as exc:  # sqlite3.Error and friends: show, never crash the page
        return MemoryListing(status="error", detail=f"{type(exc).__name__}: {str(exc)[:300]}")
    counts = tuple((s, sum(e.state == s for e in entries)) for s in MEMORY_STATES)
    return MemoryListing(status="ok", entries=entries, counts=counts)


def memory_page(states: ReadModels, catalog: Path | None) -> dict[str, Any]:
    """Catalog entries and states, plus the promotions the ledger recorded."""
    inspector: InspectorState = states.inspector
    promotions = [
        (agent_id, c)
        for agent_id, ai in sorted(inspector.by_agent.items())
        for c in ai.controls
        if c.kind == "promote"
    ]
    return {"listing": list_catalog(catalog), "promotions": promotions}
