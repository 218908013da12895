"""Inspector: manual-control history and recall group per agent, and the Context view over
the read models (generation, usage, included/excluded with reasons, composition, GC)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol, assert_never

import msgspec

from ctxledger.domain.errors import UnknownAgentError, UnknownGenerationError
from ctxledger.domain.events import (
    AgentConfigured,
    ContentErased,
    Event,
    FindingPromoted,
    FindingVerified,
    GenerationRefreshed,
    ItemPinned,
    ItemRemoved,
    ItemUnpinned,
    MemoryPromoted,
    RecallRendered,
    RecallSwitched,
    TurnFailed,
)
from ctxledger.domain.model import AgentIdentity, Decision, Generation, Item
from ctxledger.domain.settings import AgentSettings
from ctxledger.projections.context_state import ContextStates
from ctxledger.projections.drafts import Additions, AgentDrafts, Handlers, batch_of_one
from ctxledger.projections.gc_indicators import AgentIndicators, GcIndicators
from ctxledger.projections.generations import Generations
from ctxledger.projections.pool import AgentPool, Pool, verified_form

__all__ = [
    "Control",
    "ContextView",
    "GenerationDiff",
    "InspectorBatch",
    "InspectorState",
    "ItemView",
    "ViewModels",
    "control_of",
    "diff_generations",
    "evolve_inspector",
    "inspect_agent",
    "turn_error",
]


class Control(msgspec.Struct, frozen=True, kw_only=True):
    """One manual control (or refresh/rebuild) in an agent's history."""

    at: datetime
    kind: str
    target: str = ""
    detail: str = ""


class AgentInspector(msgspec.Struct, frozen=True, kw_only=True):
    controls: tuple[Control, ...] = ()
    recall: RecallRendered | None = None
    last_turn_error: str = ""


class InspectorState(msgspec.Struct, frozen=True, kw_only=True):
    """Control history and latest recall group per agent; the ledger's latest recall switch
    (``None``: never switched, recall is what the engine's memory settings say)."""

    by_agent: dict[str, AgentInspector] = {}
    recall_switch: RecallSwitched | None = None

    @property
    def recall_enabled(self) -> bool | None:
        """The recorded recall setting (``None``: never recorded)."""
        return None if self.recall_switch is None else self.recall_switch.enabled


_ControlEvent = (
    ItemPinned
    | ItemUnpinned
    | ItemRemoved
    | FindingVerified
    | FindingPromoted
    | MemoryPromoted
    | GenerationRefreshed
    | AgentConfigured
    | ContentErased
)
"""The events that add a control to their agent's history."""


def control_of(event: _ControlEvent) -> Control:
    """The control *event* adds to its agent's history."""
    match event:
        case ItemPinned(item_id=i, by=by):
            return Control(at=event.at, kind="pin", target=i, detail=by)
        case ItemUnpinned(item_id=i, by=by):
            return Control(at=event.at, kind="unpin", target=i, detail=by)
        case ItemRemoved(item_id=i, reason=r):
            return Control(at=event.at, kind="remove", target=i, detail=r)
        case FindingVerified(item_id=i, by=by):
            return Control(at=event.at, kind="verify", target=i, detail=by)
        case FindingPromoted(item_id=i, from_agent=a, from_item=o):
            return Control(at=event.at, kind="promote_finding", target=i, detail=f"{a}/{o}")
        case MemoryPromoted(item_id=i, memory_id=m):
            return Control(at=event.at, kind="promote", target=i, detail=m)
        case GenerationRefreshed():
            detail = f"{event.from_generation} → {event.to_generation}: {event.reason}"
            return Control(at=event.at, kind=f"{event.kind}:{event.trigger}", detail=detail)
        case AgentConfigured(settings=cfg, by=by):
            detail = f"strategy {cfg.strategy} · budget {cfg.budget or 'identity'}" + (
                f" · by {by}" if by else ""
            )
            return Control(at=event.at, kind="configure", detail=detail)
        case ContentErased(item_id=i, reason=r):
            return Control(at=event.at, kind="erase", target=i or "(every item)", detail=r)
        case _:
            assert_never(event)


def turn_error(event: TurnFailed) -> str:
    """The agent's last turn error as the inspector shows it (at most 300 characters)."""
    text = f"{event.error_class}: {event.provider} {event.code} {event.message}".strip()
    return text[:300]


# --- the fold --------------------------------------------------------------------------------


class _InspectorDraft:
    """One agent's inspector state during a batch: controls appended to a list (not the whole
    history copied per control)."""

    __slots__ = ("controls", "last_turn_error", "recall")

    def __init__(self, a: AgentInspector) -> None:
        self.controls = Additions(a.controls)
        self.recall = a.recall
        self.last_turn_error = a.last_turn_error

    def freeze(self) -> AgentInspector:
        return AgentInspector(
            controls=self.controls.freeze(),
            recall=self.recall,
            last_turn_error=self.last_turn_error,
        )


class InspectorBatch:
    """The inspector's fold over a batch of events (see ``projections.drafts``)."""

    def __init__(self, state: InspectorState) -> None:
        self.agents = AgentDrafts(state.by_agent, _InspectorDraft, AgentInspector)
        self.recall_switch = state.recall_switch

    def handlers(self) -> Handlers:
        control = self.control
        return {
            ItemPinned: control,
            ItemUnpinned: control,
            ItemRemoved: control,
            FindingVerified: control,
            FindingPromoted: control,
            MemoryPromoted: control,
            GenerationRefreshed: control,
            AgentConfigured: control,
            ContentErased: control,
            RecallRendered: self.recall_rendered,
            RecallSwitched: self.recall_switched,
            TurnFailed: self.turn_failed,
        }

    def freeze(self) -> InspectorState:
        return InspectorState(
            by_agent=self.agents.freeze(_InspectorDraft.freeze), recall_switch=self.recall_switch
        )

    def recall_switched(self, event: RecallSwitched) -> None:
        self.recall_switch = event

    def control(self, event: _ControlEvent) -> None:
        self.agents.put(event.agent_id).controls.append(control_of(event))

    def recall_rendered(self, event: RecallRendered) -> None:
        self.agents.put(event.agent_id).recall = event

    def turn_failed(self, event: TurnFailed) -> None:
        self.agents.put(event.agent_id).last_turn_error = turn_error(event)


_EVOLVE = batch_of_one(InspectorBatch, InspectorState())


def evolve_inspector(state: InspectorState, event: Event) -> InspectorState:
    """Fold one event: ``InspectorBatch`` over a batch of one."""
    return _EVOLVE(state, event)


# --- views ------------------------------------------------------------------------------------


class ItemView(msgspec.Struct, frozen=True, kw_only=True):
    """An item as the inspector shows it: its fate in the generation and its provenance."""

    id: str
    layer: str
    source: str
    action: str
    reason: str = ""
    tokens: int = 0
    tokens_before: int = 0
    method: str = ""
    pinned: bool = False
    mandatory: bool = False
    verified: bool = False
    files: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()
    agent: str = ""
    task: str = ""
    observed_at: datetime | None = None
    preview: str = ""


class ContextView(msgspec.Struct, frozen=True, kw_only=True):
    """The seed's Context view of one agent at one generation."""

    agent: AgentIdentity
    generation: int
    generations: int
    kind: str
    reason: str
    strategy: str
    budget: int
    used: int
    utilization: float
    overflow: int
    builds: int
    included: tuple[ItemView, ...]
    excluded: tuple[ItemView, ...]
    by_layer: dict[str, int]
    by_source: dict[str, int]
    gc: dict[str, Any]
    recall: dict[str, Any]
    controls: tuple[Control, ...]
    last_turn_error: str = ""
    building: str = ""
    settings: AgentSettings = AgentSettings()
    decision_points: int = 0


def _preview(text: str, n: int = 120) -> str:
    one = " ".join(text.split())
    return one if len(one) <= n else one[: n - 1] + "…"


def _shown(pool: AgentPool, item_id: str, d: Decision) -> Item | None:
    """The item as the prompt shows it: in its verified form once the pool holds it verified
    (or the pack sent it verified), so a view never calls a verified finding unverified."""
    item = pool.items.get(item_id)
    if item is None:
        return None
    return verified_form(item) if d.verified or item_id in pool.verified else item


def _item_view(item: Item | None, item_id: str, d: Decision) -> ItemView:
    if item is None:
        return ItemView(id=item_id, layer="?", source="?", action=d.action, reason=d.reason)
    tokens = d.tokens_after or item.token_count
    return ItemView(
        id=item_id,
        layer=item.layer.name,
        source=item.source.value,
        action=d.action,
        reason=d.reason,
        tokens=0 if d.action == "dropped" else tokens,
        tokens_before=d.tokens_before or item.token_count,
        method=d.method,
        pinned=item.pinned,
        mandatory=item.mandatory,
        verified=item.verified,
        files=item.files,
        symbols=item.symbols,
        agent=item.agent,
        task=item.task,
        observed_at=item.observed_at,
        preview=_preview(d.content or item.content),
    )


class ViewModels(Protocol):
    """The read models the views below read; ``catalog.ReadModels`` is one (catalog imports
    this module, so the views name this protocol instead of importing it)."""

    @property
    def generations(self) -> Generations: ...
    @property
    def pool(self) -> Pool: ...
    @property
    def gc_indicators(self) -> GcIndicators: ...
    @property
    def inspector(self) -> InspectorState: ...
    @property
    def context_state(self) -> ContextStates: ...


def _generation(
    models: ViewModels, agent_id: str, number: int | None
) -> tuple[AgentIdentity, Generation, int]:
    gens: Generations = models.generations
    ag = gens.by_agent.get(agent_id)
    if ag is None:
        raise UnknownAgentError(f"unknown agent {agent_id[:80]!r}")
    gen = ag.current if number is None else ag.generation(number)
    if gen is None:
        raise UnknownGenerationError(
            f"agent {agent_id!r} has no generation {number} (it has 1–{ag.current.number})"
        )
    return ag.agent, gen, len(ag.generations)


def _gc_dict(ind: AgentIndicators | None) -> dict[str, Any]:
    if ind is None:
        return {}
    return {
        "utilization": round(ind.utilization, 4),
        "repeated_tool_signatures": ind.repeated_tool_signatures,
        "repeated_failed_edits": ind.repeated_failed_edits,
        "builds_since_progress": ind.builds_since_progress,
        "obsolete_phase_items": ind.obsolete_phase_items,
        "transcript_bloat": round(ind.transcript_bloat, 4),
    }


def inspect_agent(models: ViewModels, agent_id: str, generation: int | None = None) -> ContextView:
    """The Context view, read from the read models only (never re-runs a build)."""
    agent, gen, count = _generation(models, agent_id, generation)
    pool = models.pool.by_agent.get(agent_id, AgentPool())
    included: list[ItemView] = []
    excluded: list[ItemView] = []
    by_layer: dict[str, int] = {}
    by_source: dict[str, int] = {}
    order = {item_id: n for n, item_id in enumerate(gen.order)}
    for item_id, d in sorted(gen.decisions.items(), key=lambda kv: (order.get(kv[0], -1), kv[0])):
        view = _item_view(_shown(pool, item_id, d), item_id, d)
        if d.action == "dropped":
            excluded.append(view)
        else:
            included.append(view)
            by_layer[view.layer] = by_layer.get(view.layer, 0) + view.tokens
            by_source[view.source] = by_source.get(view.source, 0) + view.tokens
    if gen.reserved:  # tokens held for the status line, recall group and user input
        by_layer["volatile_tail"] = gen.reserved
        by_source["volatile_tail"] = gen.reserved
    inspector = models.inspector
    ai = inspector.by_agent.get(agent_id, AgentInspector())
    gc: GcIndicators = models.gc_indicators
    recall: dict[str, Any] = {}
    if ai.recall is not None:
        recall = {
            "memory_ids": list(ai.recall.memory_ids),
            "skipped": dict(ai.recall.skipped),
            "tokens": ai.recall.tokens,
            "bytes": ai.recall.bytes,
        }
    return ContextView(
        agent=agent,
        generation=gen.number,
        generations=count,
        kind=gen.kind,
        reason=gen.reason,
        strategy=gen.strategy,
        budget=gen.budget,
        used=gen.tokens_used,
        utilization=round(gen.tokens_used / gen.budget, 4) if gen.budget else 0.0,
        overflow=gen.overflow,
        builds=gen.builds,
        included=tuple(included),
        excluded=tuple(excluded),
        by_layer=dict(sorted(by_layer.items())),
        by_source=dict(sorted(by_source.items())),
        gc=_gc_dict(gc.by_agent.get(agent_id)),
        recall=recall,
        controls=ai.controls,
        last_turn_error=ai.last_turn_error,
        building=models.context_state.building_pack(agent_id),
        decision_points=gen.decision_points,
        settings=models.generations.by_agent[agent_id].settings,
    )


class GenerationDiff(msgspec.Struct, frozen=True, kw_only=True):
    """What changed between two generations of one agent, and why."""

    agent_id: str
    from_generation: int
    to_generation: int
    reasons: tuple[str, ...]
    entered: tuple[ItemView, ...]
    left: tuple[ItemView, ...]
    compressed: tuple[ItemView, ...]
    clipped: tuple[ItemView, ...]
    tokens_from: int
    tokens_to: int


def diff_generations(models: ViewModels, agent_id: str, a: int, b: int) -> GenerationDiff:
    """Items that entered, left, were compressed or clipped between generations *a* and *b*."""
    _, ga, _ = _generation(models, agent_id, a)
    _, gb, _ = _generation(models, agent_id, b)
    pool = models.pool.by_agent.get(agent_id, AgentPool())
    gens: Generations = models.generations
    lo, hi = min(a, b), max(a, b)
    reasons = tuple(
        f"{g.number}: {g.kind} ({g.trigger or 'initial'}) {g.reason}".strip()
        for g in gens.by_agent[agent_id].generations
        if lo < g.number <= hi
    )

    def kept(g: Generation) -> dict[str, Decision]:
        return {k: d for k, d in g.decisions.items() if d.action != "dropped"}

    ka, kb = kept(ga), kept(gb)
    entered = tuple(
        _item_view(_shown(pool, k, d), k, d) for k, d in sorted(kb.items()) if k not in ka
    )
    left_items = []
    for k in sorted(ka):
        if k in kb:
            continue
        why = gb.decisions.get(k) or Decision(
            item_id=k, action="dropped", reason="not a candidate (removed or dropped at refresh)"
        )
        left_items.append(_item_view(_shown(pool, k, why), k, why))
    compressed = tuple(
        _item_view(_shown(pool, k, d), k, d)
        for k, d in sorted(kb.items())
        if d.action == "compressed" and (ka.get(k) is None or ka[k].action != "compressed")
    )
    clipped = tuple(
        _item_view(_shown(pool, k, d), k, d)
        for k, d in sorted(kb.items())
        if d.action == "clipped" and (ka.get(k) is None or ka[k].action != "clipped")
    )
    return GenerationDiff(
        agent_id=agent_id,
        from_generation=a,
        to_generation=b,
        reasons=reasons,
        entered=entered,
        left=tuple(left_items),
        compressed=compressed,
        clipped=clipped,
        tokens_from=ga.tokens_used,
        tokens_to=gb.tokens_used,
    )
