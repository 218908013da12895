"""Page models of the web inspector, computed from the read models (the "why" of a decision
from builds traced in the log by the same pure functions; never a new build)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from ctxledger.adapters.web.charts import (
    bar_chart,
    grouped_chart,
    layer_colour,
    source_colour,
    usage_bar,
)
from ctxledger.adapters.web.why import (
    FATES,
    FLAGS,
    LAYERS,
    SORT_KEYS,
    SOURCES,
    GenerationWhy,
    ItemQuery,
    Why,
    sort_views,
)
from ctxledger.domain.errors import (
    InvalidInputError,
    UnknownAgentError,
    UnknownGenerationError,
)
from ctxledger.domain.model import AgentIdentity, Generation, Item, Layer, Source
from ctxledger.projections.build_trace import SCORE_PARTS
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
from ctxledger.projections.pool import AgentPool, Pool, verified_form
from ctxledger.projections.strategy_metrics import AgentStrategyMetrics, StrategyMetrics

__all__ = [
    "CONTENT_LIMIT",
    "DEFAULT_PER",
    "MAX_PER",
    "AgentNode",
    "AgentRow",
    "ItemExtra",
    "Paging",
    "agent_page",
    "agents_page",
    "cache_page",
    "diff_page",
    "generation_of",
    "generation_page",
    "item_page",
    "paginate",
]

DEFAULT_PER = 50
"""Rows per page of an item, generation or cache table unless ``?per=`` says otherwise."""
MAX_PER = 500
CONTENT_LIMIT = 4000
"""Characters of an item's content a table row holds behind its ``<details>``; a longer
content says how much more there is and links to the item's own page, which shows it all."""
CONTROLS_SHOWN = 50
"""Latest manual controls and generation changes listed on an agent's page."""

_T = TypeVar("_T")


@dataclasses.dataclass(frozen=True, slots=True)
class Paging:
    """One page of a list: which rows (1-based, inclusive) of how many are shown."""

    page: int
    per: int
    total: int

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.per))

    @property
    def first(self) -> int:
        return min((self.page - 1) * self.per + 1, self.total)

    @property
    def last(self) -> int:
        return min(self.page * self.per, self.total)

    @property
    def start(self) -> int:
        return (self.page - 1) * self.per

    @property
    def split(self) -> bool:
        """More rows than one page holds: the page shows a pager."""
        return self.total > self.per


def paginate(rows: Sequence[_T], page: int, per: int) -> tuple[Sequence[_T], Paging]:
    """Rows of page *page* (1-based) of *per* rows; a page past the last is an error (400)."""
    paging = Paging(page=page, per=per, total=len(rows))
    if page > paging.pages:
        raise InvalidInputError(f"page {page} is past the last page ({paging.pages})")
    return rows[paging.start : paging.start + per], paging


_VERIFIABLE = frozenset({Source.WORKER_FINDING.value, Source.UNVERIFIED_HYPOTHESIS.value})


def _agent(states: ReadModels, agent_id: str) -> AgentGenerations:
    gens: Generations = states.generations
    found = gens.by_agent.get(agent_id)
    if found is None:
        raise UnknownAgentError(f"unknown agent {agent_id[:80]!r}")
    return found


def generation_of(states: ReadModels, agent_id: str, number: int) -> Generation:
    """Generation *number* of the agent (UnknownAgentError, UnknownGenerationError: a 404)."""
    gen = _agent(states, agent_id).generation(number)
    if gen is None:
        raise UnknownGenerationError(f"agent {agent_id[:80]!r} has no generation {number}")
    return gen


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


@dataclasses.dataclass(frozen=True, slots=True)
class AgentNode:
    """An agent on the agents page with its workers (agents naming it as ``parent``)."""

    row: AgentRow
    depth: int
    children: tuple[AgentNode, ...]


def _tree(rows: Sequence[AgentRow]) -> tuple[AgentNode, ...]:
    """Roots (no parent, or a parent not in the ledger) with their workers below, by id;
    an agent on a parent cycle is shown once, as a root."""
    known = {r.agent.agent_id for r in rows}
    children: dict[str, list[AgentRow]] = {}
    for r in rows:
        children.setdefault(r.agent.parent, []).append(r)
    placed: set[str] = set()

    def node(r: AgentRow, depth: int) -> AgentNode:
        placed.add(r.agent.agent_id)
        below = [c for c in children.get(r.agent.agent_id, []) if c.agent.agent_id not in placed]
        placed.update(c.agent.agent_id for c in below)
        return AgentNode(r, depth, tuple(node(c, depth + 1) for c in below))

    roots = [node(r, 0) for r in rows if not r.agent.parent or r.agent.parent not in known]
    roots += [node(r, 0) for r in rows if r.agent.agent_id not in placed]
    return tuple(roots)


def _walk(nodes: Sequence[AgentNode]) -> list[AgentNode]:
    out: list[AgentNode] = []
    for n in nodes:
        out.append(n)
        out.extend(_walk(n.children))
    return out


AGENT_SORT_KEYS: dict[str, Callable[[AgentRow], Any]] = {
    "agent": lambda r: r.agent.agent_id,
    "role": lambda r: r.agent.role,
    "generations": lambda r: r.generations,
    "tokens": lambda r: r.current.tokens_used,
    "builds": lambda r: r.current.builds,
    "refreshes": lambda r: r.metrics.refreshes,
    "rebuilds": lambda r: r.metrics.rebuilds,
    "hit_rate": lambda r: r.cache.hit_rate if r.cache.calls else -1.0,
}
"""The agents list's sort keys (``?sort=…&dir=asc|desc``): workers stay below their parent,
each level sorted; ties by agent id."""


def agents_page(
    states: ReadModels, *, sort: str = "agent", descending: bool = False
) -> dict[str, Any]:
    """Every agent with its current generation, build state and cache figures, as a tree of
    parents and their workers, each level sorted by *sort* (a key of AGENT_SORT_KEYS)."""
    key = AGENT_SORT_KEYS.get(sort)
    if key is None:
        raise InvalidInputError(f"unknown sort key {sort[:40]!r}")
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
    rows.sort(key=key, reverse=descending)  # stable: ties keep the id order
    tree = _tree(rows)
    return {
        "agents": _walk(tree),
        "tree": tree,
        "overall": cache.overall,
        "sort": sort,
        "descending": descending,
    }


def agent_page(
    states: ReadModels, agent_id: str, *, page: int = 1, per: int = DEFAULT_PER
) -> dict[str, Any]:
    """An agent's identity and its timeline of generations (one page of them) with the
    reason of each change."""
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
    shown, paging = paginate(ag.generations, page, per)
    return {
        "agent": ag.agent,
        "generations": shown,
        "paging": paging,
        "total_generations": len(ag.generations),
        "current": current,
        "state": ctx.by_agent.get(agent_id, ContextState()),
        "building": ctx.building_pack(agent_id),
        "settings": ag.settings,
        "metrics": metrics.by_agent.get(agent_id, AgentStrategyMetrics()),
        "controls": ai.controls[-CONTROLS_SHOWN:],
        "controls_total": len(ai.controls),
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


@dataclasses.dataclass(frozen=True, slots=True)
class ItemRow:
    """One row of an item table: the view, the pool's extras, the whole content as the
    prompt showed it (up to ``CONTENT_LIMIT`` characters, ``more`` beyond) and the
    provenance that differs from the agent's own."""

    view: ItemView
    extra: ItemExtra
    content: str
    more: int
    provenance: tuple[tuple[str, str], ...]
    why: Why | None = None

    @property
    def expandable(self) -> bool:
        """The summary (the one-line preview) does not already say everything."""
        return self.more > 0 or self.content != self.view.preview


def _content(pool: AgentPool, gen: Generation | None, item_id: str) -> str:
    """The item's text as the generation's pack showed it (a compressed or clipped form when
    the decision holds one), else as the pool holds it (verified form once verified)."""
    d = gen.decisions.get(item_id) if gen is not None else None
    if d is not None and d.content:
        return d.content
    item = pool.items.get(item_id)
    if item is None:
        return ""
    return verified_form(item).content if item_id in pool.verified else item.content


def _provenance(v: ItemView, x: ItemExtra, agent: AgentIdentity) -> tuple[tuple[str, str], ...]:
    """Provenance facts worth a column: agent and task only when they differ from the
    agent's own (they repeat on every row otherwise)."""
    facts: list[tuple[str, str]] = []
    if v.agent and v.agent != agent.agent_id:
        facts.append(("agent", v.agent))
    if v.task and v.task != agent.task:
        facts.append(("task", v.task))
    if x.stage:
        facts.append(("stage", x.stage))
    if x.phase:
        facts.append(("phase", x.phase))
    if v.files:
        facts.append(("files", ", ".join(v.files)))
    if v.symbols:
        facts.append(("symbols", ", ".join(v.symbols)))
    if x.durability:
        facts.append(("durability", f"{x.durability} · confidence {x.confidence:g}"))
    if x.source_id:
        facts.append(("source id", x.source_id))
    return tuple(facts)


def _rows(
    views_: Sequence[ItemView],
    pool: AgentPool,
    gen: Generation | None,
    agent: AgentIdentity,
    why: GenerationWhy | None = None,
) -> list[ItemRow]:
    rows = []
    for v in views_:
        x = _extra(pool, v.id)
        text = _content(pool, gen, v.id)
        rows.append(
            ItemRow(
                view=v,
                extra=x,
                content=text[:CONTENT_LIMIT],
                more=max(0, len(text) - CONTENT_LIMIT),
                provenance=_provenance(v, x, agent),
                why=why.why(v) if why is not None else None,
            )
        )
    return rows


def _sections(
    groups: Sequence[tuple[str, Sequence[ItemView]]], page: int, per: int
) -> tuple[dict[str, Sequence[ItemView]], Paging]:
    """One pager over several item lists shown in order (e.g. included, reshaped,
    dropped): each list gets the part of the page's rows that fall in it."""
    everything = [(name, v) for name, views_ in groups for v in views_]
    shown, paging = paginate(everything, page, per)
    out: dict[str, list[ItemView]] = {name: [] for name, _ in groups}
    for name, v in shown:
        out[name].append(v)
    return dict(out), paging


def _layers(by_layer: dict[str, int]) -> dict[str, int]:
    """Tokens per layer with every layer present, 0 for one the pack holds nothing of."""
    out = {layer.name: by_layer.get(layer.name, 0) for layer in Layer}
    out.update((k, v) for k, v in by_layer.items() if k not in out)
    return out


def generation_page(
    states: ReadModels,
    agent_id: str,
    number: int,
    *,
    page: int = 1,
    per: int = DEFAULT_PER,
    query: ItemQuery | None = None,
    why: GenerationWhy | None = None,
) -> dict[str, Any]:
    """The Context view of one generation: usage, composition, items and their fates (one
    page of items, in the order included, compressed/clipped, dropped), each with why (its
    tier and score parts for the recorded request of the build that decided it), filtered
    and sorted by *query*."""
    view = inspect_agent(states, agent_id, number)
    ag = _agent(states, agent_id)
    gen = ag.generation(number)
    pool = _pool(states, agent_id)
    numbers = [g.number for g in ag.generations]
    at = numbers.index(view.generation)
    query = query or ItemQuery()
    if query.needs_scores and why is None:
        raise InvalidInputError(f"sorting by {query.sort} needs the builds' recorded requests")
    score_of = why.why if why is not None else (lambda _v: None)
    whole = tuple(sort_views([v for v in view.included if v.action == "included"], query, score_of))
    reshaped = tuple(
        sort_views([v for v in view.included if v.action != "included"], query, score_of)
    )
    dropped = tuple(sort_views(view.excluded, query, score_of))
    parts, paging = _sections(
        [("whole", whole), ("reshaped", reshaped), ("dropped", dropped)], page, per
    )
    layers = _layers(view.by_layer)
    return {
        "view": view,
        "gen": gen,
        "usage": usage_bar(view.used, view.budget),
        "layer_chart": bar_chart(layers, colours={k: layer_colour(k) for k in layers}),
        "source_chart": bar_chart(
            view.by_source, colours={k: source_colour(k) for k in view.by_source}
        ),
        "whole": whole,
        "reshaped": reshaped,
        "dropped": dropped,
        "rows": {k: _rows(v, pool, gen, view.agent, why) for k, v in parts.items()},
        "paging": paging,
        "drop_reasons": sorted(Counter(v.reason or "—" for v in dropped).items()),
        "query": query,
        "builds": why.builds if why is not None else (),
        "score_parts": SCORE_PARTS,
        "sort_keys": SORT_KEYS,
        "fates": FATES,
        "flags": FLAGS,
        "layers": LAYERS,
        "sources": SOURCES,
        "previous": numbers[at - 1] if at > 0 else None,
        "next": numbers[at + 1] if at + 1 < len(numbers) else None,
        "is_current": view.generation == ag.current.number,
        "cache": _cache(states).generation(agent_id, view.generation),
    }


def item_page(states: ReadModels, agent_id: str, item_id: str) -> dict[str, Any]:
    """One item of an agent's pool, whole: content, provenance and its fate per generation."""
    ag = _agent(states, agent_id)
    pool = _pool(states, agent_id)
    item = pool.items.get(item_id)
    if item is None:
        raise UnknownAgentError(f"agent {agent_id[:80]!r} has no item {item_id[:80]!r}")
    fates = [(g.number, g.decisions[item_id]) for g in ag.generations if item_id in g.decisions]
    return {
        "agent": ag.agent,
        "item": item,
        "item_id": item_id,
        "extra": _extra(pool, item_id),
        "content": _content(pool, None, item_id),
        "fates": fates,
    }


def diff_page(
    states: ReadModels, agent_id: str, a: int, b: int, *, page: int = 1, per: int = DEFAULT_PER
) -> dict[str, Any]:
    """What entered, left, was compressed or clipped between generations *a* and *b* (one
    page of those items, in that order)."""
    d = diff_generations(states, agent_id, a, b)
    ag = _agent(states, agent_id)
    pool = _pool(states, agent_id)
    groups = [
        ("entered", d.entered),
        ("left", d.left),
        ("compressed", d.compressed),
        ("clipped", d.clipped),
    ]
    parts, paging = _sections(groups, page, per)
    gen_b = ag.generation(b)
    gen_a = ag.generation(a)
    rows = {k: _rows(v, pool, gen_a if k == "left" else gen_b, ag.agent) for k, v in parts.items()}
    return {
        "agent": ag.agent,
        "diff": d,
        "numbers": [g.number for g in ag.generations],
        "delta": d.tokens_to - d.tokens_from,
        "rows": rows,
        "paging": paging,
    }


def cache_page(states: ReadModels, *, page: int = 1, per: int = DEFAULT_PER) -> dict[str, Any]:
    """Hit rate per agent and generation, and expected vs reported cached tokens (the charts
    over every generation, the tables one page of generations per agent)."""
    cache = _cache(states)
    gens: Generations = states.generations
    agents = []
    for agent_id in sorted(set(cache.by_agent) | set(gens.by_agent)):
        per_gen = sorted(cache.by_generation.get(agent_id, {}).items())
        labels = [f"g{n}" for n, _ in per_gen]
        shown, paging = paginate(per_gen, min(page, Paging(1, per, len(per_gen)).pages), per)
        agents.append(
            {
                "agent_id": agent_id,
                "totals": cache.agent(agent_id),
                "rows": shown,
                "paging": paging,
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
