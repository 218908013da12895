"""Why each decision: every recorded build of one agent traced from the log (its request, the
candidates it scored, the budget it packed to), the score's parts and the prompt it composed."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import msgspec

from ctxledger.domain import events as ev
from ctxledger.domain.model import Durability, Item
from ctxledger.domain.packing import priority_tier
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.prompt import PromptParts
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import score_item
from ctxledger.projections.build_view import DECISION_POINT, BuildView, build_view, decide_build
from ctxledger.projections.generations import Generations, evolve_generations
from ctxledger.projections.pool import AgentPool, Pool, evolve_pool

__all__ = [
    "SCORE_PARTS",
    "BuildTrace",
    "PromptTrace",
    "ScoreParts",
    "agent_of",
    "packing_key",
    "rederive_prompt",
    "score_parts",
    "trace_builds",
]

SCORE_PARTS: tuple[str, ...] = (
    "overlap",
    "recency",
    "role",
    "phase",
    "task",
    "confidence",
    "durability",
    "relevance",
)
"""The parts of a retrieval score, in the order pages show them."""


class ScoreParts(msgspec.Struct, frozen=True, kw_only=True):
    """One item's retrieval score for one recorded request and what each part adds to it.

    ``total`` is :func:`~ctxledger.domain.retrieval.score_item` itself; each part is the total
    less the score of the same item (or request) with that part's input neutralised, so every
    number comes from the pure scoring function (the parts sum to the total up to rounding)."""

    total: float
    overlap: float
    recency: float
    role: float
    phase: float
    task: float
    confidence: float
    durability: float
    relevance: float

    def part(self, name: str) -> float:
        """A part by name (one of :data:`SCORE_PARTS`, or ``total``)."""
        value: float = getattr(self, name)
        return value


def score_parts(item: Item, request: BuildRequest) -> ScoreParts:
    """The score of *item* for *request* and its parts, each measured by the pure scoring
    function with that part's input taken away: overlap (the content, files and symbols),
    recency (the observation time), role (the request's role), phase and task (the item's),
    confidence, durability and relevance (set to their lowest)."""
    total = score_item(item, request)
    replace = msgspec.structs.replace

    def less(**changes: object) -> float:
        return total - score_item(replace(item, **changes), request)

    return ScoreParts(
        total=total,
        overlap=less(content="", files=(), symbols=()),
        recency=less(observed_at=None),
        role=total - score_item(item, replace(request, role="")),
        phase=less(phase=""),
        task=less(task=""),
        confidence=less(confidence=0.0),
        durability=less(durability=Durability.EPHEMERAL),
        relevance=less(relevance=0.0),
    )


def packing_key(item: Item, score: float, chronological: bool) -> tuple[object, ...]:
    """The order packing takes candidates in: (tier, -score, id), or (observed time, id) for
    a chronological strategy (``full_history``)."""
    if chronological:
        at = item.observed_at
        return (0 if at is None else 1, at.timestamp() if at is not None else 0.0, item.id)
    return (priority_tier(item), -score, item.id)


BuildKind = Literal["initial", "append", "rebuild", "decision point", "unknown"]


class BuildTrace(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded build: its Started (None when the log has none), its ContextPackBuilt,
    what kind of plan it was and what it packed against.

    ``pack_budget`` is the request's budget less the VOLATILE reserve; ``packed_to`` what the
    strategy packed against: the pack budget (a first build), the room the generation had
    left (an append: ``pack_budget - emitted_before``) or ``pack_budget × watermark`` (a
    rebuild). ``view`` (the planner's inputs at the Started) is kept only for the builds the
    caller asked for."""

    position: int
    built: ev.ContextPackBuilt
    started: ev.ContextBuildingStarted | None
    kind: BuildKind
    pack_budget: int
    packed_to: int
    emitted_before: int
    recall: ev.RecallRendered | None = None
    view: BuildView | None = None

    @property
    def request(self) -> BuildRequest | None:
        return self.started.request if self.started is not None else None

    @property
    def watermark(self) -> float:
        return self.started.watermark if self.started is not None else 0.0


class _Open(msgspec.Struct, frozen=True, kw_only=True):
    started: ev.ContextBuildingStarted
    generation: int
    emitted_before: int
    had_pack: bool
    view: BuildView | None


def agent_of(event: ev.Event) -> str:
    """The agent an event belongs to (every event names one)."""
    if isinstance(event, ev.AgentRegistered):
        return event.agent.agent_id
    agent: str = getattr(event, "agent_id", "")
    return agent


def _plan_figures(
    opened: _Open | None, built: ev.ContextPackBuilt
) -> tuple[BuildKind, int, int, int]:
    pack_budget = max(1, built.budget_limit - built.reserved)
    if opened is None or opened.started.request is None:
        return "unknown", pack_budget, pack_budget, 0
    started = opened.started
    if started.request is not None and started.request.purpose == DECISION_POINT:
        return "decision point", pack_budget, pack_budget, 0
    if built.generation != opened.generation:
        target = max(1, int(pack_budget * started.watermark))
        return "rebuild", pack_budget, target, opened.emitted_before
    if not opened.had_pack:
        return "initial", pack_budget, pack_budget, 0
    room = max(1, pack_budget - opened.emitted_before)
    return "append", pack_budget, room, opened.emitted_before


def trace_builds(
    events: Iterable[tuple[int, ev.Event]],
    agent_id: str,
    *,
    keep_view: Callable[[ev.ContextBuildingStarted], bool] | None = None,
    until: int | None = None,
) -> list[BuildTrace]:
    """Every ContextPackBuilt of *agent_id* in *events* (``(position, event)`` pairs, the
    whole log or the agent's own events) with its Started and plan figures, folding the
    agent's generations and pool as ``audit --rederive`` does. ``keep_view`` says which
    builds keep their planner inputs (a view holds the whole pool); ``until`` stops after
    the build at that log position."""
    gens = Generations()
    pool = Pool()
    opened: dict[str, _Open] = {}
    recalls: dict[str, ev.RecallRendered] = {}
    traces: list[BuildTrace] = []
    for position, event in events:
        if agent_of(event) != agent_id:
            continue
        gens = evolve_generations(gens, event)
        pool = evolve_pool(pool, event)
        if isinstance(event, ev.ContextBuildingStarted):
            ag = gens.by_agent.get(agent_id)
            if ag is not None:
                gen = ag.current
                view = None
                if keep_view is not None and keep_view(event):
                    purpose = event.request.purpose if event.request is not None else ""
                    view = build_view(gen, pool.by_agent.get(agent_id, AgentPool()), purpose)
                opened[event.pack_id] = _Open(
                    started=event,
                    generation=gen.number,
                    emitted_before=max(0, gen.tokens_used - gen.reserved),
                    had_pack=bool(gen.decisions),
                    view=view,
                )
        elif isinstance(event, ev.ContextBuildingFailed | ev.ContextBuildingInterrupted):
            opened.pop(event.pack_id, None)
        elif isinstance(event, ev.RecallRendered) and event.pack_id:
            recalls[event.pack_id] = event
        elif isinstance(event, ev.ContextPackBuilt):
            found = opened.pop(event.pack_id, None)
            kind, pack_budget, packed_to, before = _plan_figures(found, event)
            traces.append(
                BuildTrace(
                    position=position,
                    built=event,
                    started=found.started if found is not None else None,
                    kind=kind,
                    pack_budget=pack_budget,
                    packed_to=packed_to,
                    emitted_before=before,
                    recall=recalls.pop(event.pack_id, None),
                    view=found.view if found is not None else None,
                )
            )
            if until is not None and position >= until:
                break
    return traces


class PromptTrace(msgspec.Struct, frozen=True, kw_only=True):
    """The prompt one build composed, re-derived from the log, or why it cannot be.

    ``prompt`` is set only when the re-derived prompt matches what the build recorded: the
    selection hash, the prefix hash and the prompt's length in bytes."""

    prompt: PromptParts | None
    problem: str = ""


def rederive_prompt(
    trace: BuildTrace, counter_for: Callable[[str], TokenCounter | None]
) -> PromptTrace:
    """Re-run the build's pure decision (plan, then compose) on its recorded inputs, as
    ``audit --rederive`` does, and check the result against the recorded ContextPackBuilt."""
    started, view, built = trace.started, trace.view, trace.built
    if started is None or started.request is None:
        return PromptTrace(prompt=None, problem="the log holds no recorded request for this build")
    if view is None:
        return PromptTrace(prompt=None, problem="the build's planner inputs were not traced")
    if trace.recall is not None and trace.recall.memory_ids:
        return PromptTrace(
            prompt=None,
            problem=(
                "the build rendered a recalled-memory group; the ledger keeps its memory ids,"
                " not its text"
            ),
        )
    counter = counter_for(started.counter)
    if counter is None:
        return PromptTrace(
            prompt=None, problem=f"tokenizer {started.counter[:60]!r} is not available here"
        )
    try:
        record = decide_build(
            view,
            started.request,
            pack_id=started.pack_id,
            reserve=built.reserved,
            counter=counter,
            watermark=started.watermark,
            force_rebuild=started.force_rebuild,
        )
    except (ValueError, LookupError) as exc:
        return PromptTrace(prompt=None, problem=f"the planner refused the recorded inputs: {exc}")
    prompt = record.prompt
    rebuilt = next(e for e in record.events if isinstance(e, ev.ContextPackBuilt))
    checks: Sequence[tuple[bool, str]] = (
        (
            rebuilt.selection_hash == built.selection_hash,
            "the re-derived selection differs from the recorded one",
        ),
        (prompt.prefix_hash == built.prefix_hash, "the re-derived static prefix differs"),
        (
            len(prompt.text.encode("utf-8")) == built.prompt_bytes,
            f"the re-derived prompt has {len(prompt.text.encode('utf-8'))} bytes, the build"
            f" recorded {built.prompt_bytes} (a latest user input is not recorded)",
        ),
    )
    for ok, problem in checks:
        if not ok:
            return PromptTrace(prompt=None, problem=problem)
    return PromptTrace(prompt=prompt)
