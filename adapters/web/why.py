"""Page models for "why": each decision's tier, score parts and the budget its build packed to,
item sorting and filters, and the prompt a build composed, split into its segments."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ctxledger.domain.errors import InvalidInputError, UnknownAgentError
from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.packing import priority_tier
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.prompt import SEGMENT_ORDER, PromptParts
from ctxledger.domain.render import render_anthropic
from ctxledger.domain.retrieval import score_item
from ctxledger.projections.build_trace import (
    SCORE_PARTS,
    BuildTrace,
    ScoreParts,
    packing_key,
    rederive_prompt,
    score_parts,
)
from ctxledger.projections.cache_stats import CacheStats
from ctxledger.projections.catalog import ReadModels
from ctxledger.projections.generations import Generations
from ctxledger.projections.inspector import ItemView

__all__ = [
    "CHRONOLOGICAL_STRATEGIES",
    "FATES",
    "FLAGS",
    "LAYERS",
    "SORT_KEYS",
    "SOURCES",
    "BuildFacts",
    "GenerationWhy",
    "ItemQuery",
    "Why",
    "prompt_page",
    "sort_views",
]

CHRONOLOGICAL_STRATEGIES = frozenset({"full_history"})
"""Strategies that pack in observation order instead of (tier, score, id)."""
SORT_KEYS: tuple[str, ...] = (
    "id",
    "layer",
    "source",
    "tokens",
    "fate",
    "tier",
    "score",
    *SCORE_PARTS,
)
FATES: tuple[str, ...] = ("included", "compressed", "clipped", "dropped")
FLAGS: tuple[str, ...] = ("pinned", "mandatory", "verified")
LAYERS: tuple[str, ...] = tuple(layer.name for layer in Layer)
SOURCES: tuple[str, ...] = tuple(s.value for s in Source)
_SCORED = frozenset({"tier", "score", *SCORE_PARTS})


@dataclasses.dataclass(frozen=True, slots=True)
class ItemQuery:
    """``?sort=…&dir=…&fate=…&layer=…&source=…&flag=…`` of an item table, validated."""

    sort: str = ""
    descending: bool = False
    fate: str = ""
    layer: str = ""
    source: str = ""
    flag: str = ""

    @classmethod
    def parse(cls, params: Mapping[str, Sequence[str]]) -> ItemQuery:
        """From the query's values per name; an unknown value or a repeated name is a 400
        (InvalidInputError)."""
        allowed = {
            "sort": SORT_KEYS,
            "dir": ("asc", "desc"),
            "fate": FATES,
            "layer": LAYERS,
            "source": SOURCES,
            "flag": FLAGS,
        }
        got: dict[str, str] = {}
        for name, choices in allowed.items():
            values = params.get(name, ())
            if len(values) > 1:
                raise InvalidInputError(f"{name} is given {len(values)} times")
            if not values or values[0] == "":
                continue
            if values[0] not in choices:
                raise InvalidInputError(
                    f"{name} must be one of {', '.join(choices)}, not {values[0][:40]!r}"
                )
            got[name] = values[0]
        if "dir" in got and "sort" not in got:
            raise InvalidInputError("dir needs sort")
        return cls(
            sort=got.get("sort", ""),
            descending=got.get("dir") == "desc",
            fate=got.get("fate", ""),
            layer=got.get("layer", ""),
            source=got.get("source", ""),
            flag=got.get("flag", ""),
        )

    def params(self) -> dict[str, str]:
        """The non-default parameters, for links that keep them."""
        out: dict[str, str] = {}
        if self.sort:
            out["sort"] = self.sort
            out["dir"] = "desc" if self.descending else "asc"
        for name in ("fate", "layer", "source", "flag"):
            value: str = getattr(self, name)
            if value:
                out[name] = value
        return out

    def sorted_by(self, key: str) -> dict[str, str]:
        """The parameters of a column header's link: sort by *key*, flipping the direction
        when the table is already sorted by it."""
        out = {k: v for k, v in self.params().items() if k not in ("sort", "dir")}
        flip = self.sort == key and not self.descending
        return {"sort": key, "dir": "desc" if flip else "asc", **out}

    @property
    def filtered(self) -> bool:
        return bool(self.fate or self.layer or self.source or self.flag)

    @property
    def needs_scores(self) -> bool:
        return self.sort in _SCORED

    def keep(self, v: ItemView) -> bool:
        if self.fate and v.action != self.fate:
            return False
        if self.layer and v.layer != self.layer:
            return False
        if self.source and v.source != self.source:
            return False
        return not self.flag or bool(getattr(v, self.flag))


@dataclasses.dataclass(frozen=True, slots=True)
class BuildFacts:
    """One build as the generation page lists it."""

    pack_id: str
    position: int
    kind: str
    strategy: str
    pack_budget: int
    packed_to: int
    emitted_before: int
    watermark: float
    budget_limit: int
    reserved: int
    used: int
    changed_segment: str
    index: int = 1
    """The build's place in its generation (1 = the generation's first)."""


def build_facts(t: BuildTrace, index: int = 1) -> BuildFacts:
    b = t.built
    return BuildFacts(
        index=index,
        pack_id=b.pack_id,
        position=t.position,
        kind=t.kind,
        strategy=b.strategy,
        pack_budget=t.pack_budget,
        packed_to=t.packed_to,
        emitted_before=t.emitted_before,
        watermark=t.watermark,
        budget_limit=b.budget_limit,
        reserved=b.reserved,
        used=b.budget_used,
        changed_segment=b.changed_segment,
    )


@dataclasses.dataclass(frozen=True, slots=True)
class Marginal:
    """The last item the deciding build included, in packing order, and its tokens."""

    item_id: str
    tokens: int
    score: float
    tier: int


@dataclasses.dataclass(frozen=True, slots=True)
class Why:
    """Why one item has its fate: its tier and score parts for the recorded request of the
    build that decided it, and that build."""

    tier: int
    parts: ScoreParts
    build: BuildFacts
    marginal: Marginal | None

    def value(self, key: str) -> float:
        return (
            float(self.tier)
            if key == "tier"
            else self.parts.part("total" if key == "score" else key)
        )


class GenerationWhy:
    """The builds of one generation and, per item, the build whose ContextPackBuilt last
    decided it (the generation's first pack decides every candidate; an append only its new
    ones). Scores are computed when asked and kept."""

    def __init__(self, traces: Sequence[BuildTrace]) -> None:
        self.traces = tuple(traces)
        self.builds = tuple(build_facts(t, k) for k, t in enumerate(traces, 1))
        self._facts = dict(zip((t.built.pack_id for t in traces), self.builds, strict=True))
        self._decider: dict[str, BuildTrace] = {}
        for t in traces:
            for d in t.built.decisions:
                self._decider[d.item_id] = t
        self._candidates: dict[str, dict[str, Item]] = {}
        self._marginal: dict[str, Marginal | None] = {}
        self._memo: dict[str, Why | None] = {}

    def _pool(self, t: BuildTrace) -> dict[str, Item]:
        found = self._candidates.get(t.built.pack_id)
        if found is None:
            found = {i.id: i for i in t.view.candidates} if t.view is not None else {}
            self._candidates[t.built.pack_id] = found
        return found

    def _marginal_of(self, t: BuildTrace) -> Marginal | None:
        pack_id = t.built.pack_id
        if pack_id in self._marginal:
            return self._marginal[pack_id]
        request = t.request
        pool = self._pool(t)
        best: tuple[tuple[object, ...], Marginal] | None = None
        if request is not None:
            chrono = request.strategy in CHRONOLOGICAL_STRATEGIES
            for d in t.built.decisions:
                item = pool.get(d.item_id)
                if d.action == "dropped" or item is None:
                    continue
                score = score_item(item, request)
                key = packing_key(item, score, chrono)
                if best is None or key > best[0]:
                    best = (key, Marginal(d.item_id, d.tokens_after, score, priority_tier(item)))
        found = best[1] if best is not None else None
        self._marginal[pack_id] = found
        return found

    def why(self, v: ItemView) -> Why | None:
        """The item's why, or None when its deciding build has no recorded request."""
        if v.id in self._memo:
            return self._memo[v.id]
        found: Why | None = None
        t = self._decider.get(v.id)
        request = t.request if t is not None else None
        item = self._pool(t).get(v.id) if t is not None else None
        if t is not None and request is not None and item is not None:
            found = Why(
                tier=priority_tier(item),
                parts=score_parts(item, request),
                build=self._facts[t.built.pack_id],
                marginal=self._marginal_of(t) if v.action == "dropped" else None,
            )
        self._memo[v.id] = found
        return found


def sort_views(
    views_: Sequence[ItemView], query: ItemQuery, why: Callable[[ItemView], Why | None]
) -> list[ItemView]:
    """*views_* filtered and sorted by the query (stable; items without a score last)."""
    kept = [v for v in views_ if query.keep(v)]
    key = query.sort
    if not key:
        return kept
    if key in _SCORED:
        scored = [(v, why(v)) for v in kept]
        has = [(v, w.value(key)) for v, w in scored if w is not None]
        has.sort(key=lambda p: p[1], reverse=query.descending)
        return [v for v, _ in has] + [v for v, w in scored if w is None]
    getters: dict[str, Callable[[ItemView], Any]] = {
        "id": lambda v: v.id,
        "layer": lambda v: v.layer,
        "source": lambda v: v.source,
        "tokens": lambda v: v.tokens_before if v.action == "dropped" else v.tokens,
        "fate": lambda v: (v.action, v.reason),
    }
    return sorted(kept, key=getters[key], reverse=query.descending)


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentView:
    """One segment of a re-derived prompt."""

    name: str
    text: str
    tokens: int
    breakpoint: bool
    note: str
    changed: bool | None


def prompt_page(
    states: ReadModels,
    agent_id: str,
    traces: Sequence[BuildTrace],
    pack_id: str,
    counter_for: Callable[[str], TokenCounter | None],
) -> dict[str, Any]:
    """The prompt one build composed, re-derived from the log, by segment: tokens, where the
    Anthropic renderer puts its cache breakpoints, what changed since the previous build."""
    gens: Generations = states.generations
    ag = gens.by_agent.get(agent_id)
    if ag is None:
        raise UnknownAgentError(f"unknown agent {agent_id[:80]!r}")
    at = next((k for k, t in enumerate(traces) if t.built.pack_id == pack_id), None)
    if at is None:
        raise UnknownAgentError(f"agent {agent_id[:80]!r} has no build {pack_id[:80]!r}")
    trace = traces[at]
    previous = next(
        (t for t in reversed(traces[:at]) if t.kind not in ("decision point", "unknown")), None
    )
    result = rederive_prompt(trace, counter_for)
    before = rederive_prompt(previous, counter_for) if previous is not None else None
    counter = counter_for(trace.started.counter) if trace.started is not None else None
    prompt: PromptParts | None = result.prompt
    segments: list[SegmentView] = []
    notes: list[str] = []
    model = ag.agent.model or "claude"
    if prompt is not None:
        rendered = render_anthropic(prompt, model=model, max_tokens=1, counter=counter)
        marked = [
            s for s in SEGMENT_ORDER if prompt.segments[s]
        ]  # one system block per non-empty segment, in order
        blocks = rendered.request.get("system", [])
        notes_by = {n.where: n.reason for n in rendered.notes}
        prior = before.prompt if before is not None else None
        for s in SEGMENT_ORDER:
            text = prompt.segments[s]
            has_mark = False
            if s in marked:
                has_mark = "cache_control" in blocks[marked.index(s)]
            segments.append(
                SegmentView(
                    name=s.value.upper(),
                    text=text,
                    tokens=counter.count(text) if counter is not None and text else 0,
                    breakpoint=has_mark,
                    note=notes_by.get(f"system[{s.value}]", ""),
                    changed=None if prior is None else prior.segments[s] != text,
                )
            )
        notes = [f"{n.where}: {n.reason}" for n in rendered.notes]
    cache: CacheStats = states.cache_stats
    totals = cache.generation(agent_id, trace.built.generation)
    return {
        "agent": ag.agent,
        "trace": trace,
        "facts": build_facts(trace),
        "generation": ag.generation(trace.built.generation) or ag.current,
        "previous": previous,
        "previous_ok": before is not None and before.prompt is not None,
        "problem": result.problem,
        "prompt": prompt,
        "segments": segments,
        "notes": notes,
        "model": model,
        "appended": trace.built.order_appended,
        "miss_segments": totals.miss_segments,
        "cache": totals,
    }
