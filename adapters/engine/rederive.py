"""``audit --rederive``: re-run the pure planner for every recorded build, on the state folded
up to its ContextBuildingStarted and with its recorded request, and compare selections."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable

import msgspec

from ctxledger.adapters.ledger import Recorded
from ctxledger.adapters.tokens import counter_named
from ctxledger.domain import events as ev
from ctxledger.domain.generation_policy import PLANNER_VERSION
from ctxledger.domain.model import Decision, selection_matches
from ctxledger.domain.ports import TokenCounter
from ctxledger.projections.build_view import BuildView, build_view, rederive_decisions
from ctxledger.projections.generations import Generations, evolve_generations
from ctxledger.projections.pool import AgentPool, Pool, evolve_pool

__all__ = ["Mismatch", "RederiveReport", "first_difference", "rederive"]


class Mismatch(msgspec.Struct, frozen=True, kw_only=True):
    """A build whose re-derived selection differs from the recorded one."""

    position: int
    agent_id: str
    generation: int
    pack_id: str
    first_difference: str


class RederiveReport(msgspec.Struct, frozen=True, kw_only=True):
    """What ``audit --rederive`` found. ``not_rederivable`` counts builds that cannot be re-run
    here, by reason (another planner version, no recorded request, an unknown tokenizer)."""

    builds: int
    rederived: int
    mismatches: int
    not_rederivable: int
    mismatch_details: tuple[Mismatch, ...] = ()
    not_rederivable_reasons: dict[str, int] = {}


def first_difference(recorded: dict[str, Decision], rederived: dict[str, Decision]) -> str:
    """The first item (in id order) whose decision differs, said in one line."""
    for item_id in sorted(set(recorded) | set(rederived)):
        a, b = recorded.get(item_id), rederived.get(item_id)
        if a == b:
            continue
        was = f"{a.action}/{a.reason}" if a else "absent"
        now = f"{b.action}/{b.reason}" if b else "absent"
        return f"item {item_id[:80]}: recorded {was}, re-derived {now}"
    return "the selection hash differs with equal decisions"


class _Pending(msgspec.Struct, frozen=True, kw_only=True):
    started: ev.ContextBuildingStarted
    view: BuildView
    erased: bool = False
    """Some candidate's text was erased since (crypto-shredding): it cannot be re-planned."""


def _pending_of(
    event: ev.ContextBuildingStarted,
    gens: Generations,
    pool: Pool,
    erased: Collection[tuple[str, str]],
) -> _Pending | None:
    """What a Started build will be re-planned on: the state folded up to it."""
    ag = gens.by_agent.get(event.agent_id)
    if ag is None:
        return None
    agent_pool = pool.by_agent.get(event.agent_id, AgentPool())
    purpose = event.request.purpose if event.request is not None else ""
    view = build_view(ag.current, agent_pool, purpose)
    gone = bool(erased) and any((event.agent_id, i) in erased for i in agent_pool.items)
    return _Pending(started=event, view=view, erased=gone)


def _why_not_rederivable(
    found: _Pending | None,
    counters: dict[str, TokenCounter | None],
    counter_for: Callable[[str], TokenCounter | None],
) -> str:
    """Why a build cannot be re-planned (empty: it can; its counter is then in *counters*)."""
    if found is None or found.started.request is None:
        return "no recorded request"
    started = found.started
    if found.erased:
        return "content erased"
    if started.planner_version != PLANNER_VERSION:
        return f"planner version {started.planner_version} (this is {PLANNER_VERSION})"
    if started.counter not in counters:
        counters[started.counter] = counter_for(started.counter)
    if counters[started.counter] is None:
        return f"tokenizer {started.counter[:60]!r} not available"
    return ""


def _mismatch(
    position: int,
    event: ev.ContextPackBuilt,
    gens: Generations,
    decisions: dict[str, Decision],
) -> Mismatch:
    recorded = (
        {d.item_id: d for d in event.decisions}
        if event.purpose
        else gens.by_agent[event.agent_id].current.decisions
    )
    return Mismatch(
        position=position,
        agent_id=event.agent_id,
        generation=event.generation,
        pack_id=event.pack_id,
        first_difference=first_difference(recorded, decisions),
    )


def rederive(
    records: Iterable[Recorded],
    *,
    counter_for: Callable[[str], TokenCounter | None] = counter_named,
    on_event: Callable[[int], None] | None = None,
    erased: Collection[tuple[str, str]] = (),
) -> RederiveReport:
    """Replay *records* (the whole log, or whole streams) once, re-running the planner at
    every ContextPackBuilt. A build one of whose candidates' text was *erased* ((agent, item)
    pairs whose content keys were destroyed) is counted as not re-derivable: the planner
    read text that no longer exists."""
    gens = Generations()
    pool = Pool()
    pending: dict[str, _Pending] = {}
    counters: dict[str, TokenCounter | None] = {}
    reasons: Counter[str] = Counter()
    details: list[Mismatch] = []
    builds = rederived = 0
    for rec in records:
        event = rec.event
        gens = evolve_generations(gens, event)
        pool = evolve_pool(pool, event)
        if on_event is not None:
            on_event(rec.position)
        if isinstance(event, ev.ContextBuildingStarted):
            held = _pending_of(event, gens, pool, erased)
            if held is not None:
                pending[event.pack_id] = held
            continue
        if isinstance(event, ev.ContextBuildingFailed | ev.ContextBuildingInterrupted):
            pending.pop(event.pack_id, None)
            continue
        if not isinstance(event, ev.ContextPackBuilt):
            continue
        builds += 1
        found = pending.pop(event.pack_id, None)
        why_not = _why_not_rederivable(found, counters, counter_for)
        if why_not:
            reasons[why_not] += 1
            continue
        assert found is not None  # (narrowing: _why_not_rederivable checked these)
        started, request, counter = (
            found.started,
            found.started.request,
            counters[found.started.counter],
        )
        assert request is not None
        assert counter is not None
        decisions = rederive_decisions(
            found.view,
            request,
            reserve=event.reserved,
            counter=counter,
            watermark=started.watermark,
            force_rebuild=started.force_rebuild,
        )
        rederived += 1
        if not selection_matches(decisions, event.selection_hash):
            details.append(_mismatch(rec.position, event, gens, decisions))
    return RederiveReport(
        builds=builds,
        rederived=rederived,
        mismatches=len(details),
        not_rederivable=sum(reasons.values()),
        mismatch_details=tuple(details),
        not_rederivable_reasons=dict(reasons),
    )
