"""Turns a planned build into what the ledger records: the lifecycle events with the decision
delta, the ContextPack and the composed prompt. Pure: the same inputs give the same events."""

from __future__ import annotations

import itertools
import operator
from collections.abc import Collection, Mapping
from typing import Literal, NamedTuple

import msgspec

from ctxledger.domain import events as ev
from ctxledger.domain.generation_policy import PLANNER_VERSION, BuildPlan, EmittedContext
from ctxledger.domain.model import (
    ContextPack,
    Decision,
    Generation,
    Item,
    Layer,
    decision_delta,
    rehashed_selection,
    selection_hash,
    updated_selection_hash,
)
from ctxledger.domain.prefix import changed_segment, lcp_bytes
from ctxledger.domain.prompt import (
    PromptParts,
    compose,
    compose_append,
    volatile_tail,
    without_tail,
)
from ctxledger.domain.recall import RecallGroup
from ctxledger.domain.request import BuildRequest

_ACTION = operator.attrgetter("action")

__all__ = [
    "BuildRecord",
    "append_decisions",
    "build_started",
    "final_decisions",
    "whole_decisions",
    "record_build",
]


class BuildRecord(msgspec.Struct, frozen=True, kw_only=True):
    """The events of one build and what it produced."""

    events: tuple[ev.Event, ...]
    pack: ContextPack
    prompt: PromptParts
    kind: Literal["initial", "append", "rebuild"]
    generation: int
    message: str = ""
    expected_cached_bytes: int = 0
    stable_prompt: PromptParts | None = None
    """The prompt without its VOLATILE tail: what ``previous_prompt`` re-derives for the
    generation's next build (None for a decision point, which the generation never sees)."""
    recorded: tuple[Item, ...] = ()
    """Items the outcome records into the pool (the working set of a generation's first
    pack)."""
    opened: dict[str, Decision] | None = None
    """The generation's whole decision map, in its order, when this build is its first pack
    (a rebuild, or the first build of a new or refreshed generation): what the engine derives
    the next turn's memo from. None for any other build."""


def build_started(
    request: BuildRequest,
    *,
    pack_id: str,
    generation: int,
    watermark: float,
    counter: str,
    force_rebuild: str = "",
    overrides: tuple[str, ...] = (),
) -> ev.ContextBuildingStarted:
    """The Started event of one build: the whole request and the planner's other inputs."""
    return ev.ContextBuildingStarted(
        at=request.now,
        agent_id=request.agent_id,
        pack_id=pack_id,
        session_id=request.session_id,
        stage_id=request.stage_id,
        generation=generation,
        request=request,
        watermark=watermark,
        counter=counter,
        planner_version=PLANNER_VERSION,
        force_rebuild=force_rebuild,
        overrides=overrides,
    )


def final_decisions(
    plan: BuildPlan, previous: dict[str, Decision], verified_ids: Collection[str]
) -> dict[str, Decision]:
    """Every candidate's recorded decision: a compressed or clipped item carries its sent text,
    an included verified item is marked verified, and an append keeps the decisions emitted
    earlier in the generation as they were."""
    result = plan.result
    items_by_id = {i.id: i for i in result.items}
    decisions: dict[str, Decision] = {}
    for k, d in result.decisions.items():
        if plan.kind == "append" and previous.get(k) is d:
            decisions[k] = d  # emitted earlier in this generation: unchanged
            continue
        if d.action in ("compressed", "clipped") and k in items_by_id:
            d = msgspec.structs.replace(d, content=items_by_id[k].content)
        if d.action != "dropped" and k in verified_ids:
            d = msgspec.structs.replace(d, verified=True)
        decisions[k] = d
    return decisions


def whole_decisions(plan: BuildPlan, verified_ids: Collection[str]) -> dict[str, Decision]:
    """``final_decisions`` of a plan that is not an append (an initial pack or a rebuild),
    touching only the decisions that are not dropped: the rest (at 10k items, all but a few
    hundred) are copied in one C-level step. A property test holds it equal to
    ``final_decisions``."""
    return _whole(plan, verified_ids)[0]


def _whole(plan: BuildPlan, verified_ids: Collection[str]) -> tuple[dict[str, Decision], list[str]]:
    """``whole_decisions`` and the ids of the decisions that are not dropped, in order (a
    rebuild's carried ids and its included count: one pass over the decisions for all)."""
    result = plan.result
    decisions = dict(result.decisions)
    sent_mask = map(operator.ne, map(_ACTION, decisions.values()), itertools.repeat("dropped"))
    sent = [*itertools.compress(decisions, sent_mask)]
    if not sent:
        return decisions, sent
    items_by_id = {i.id: i for i in result.items}
    for k in sent:
        d = decisions[k]
        if d.action in ("compressed", "clipped") and k in items_by_id:
            d = msgspec.structs.replace(d, content=items_by_id[k].content)
        if k in verified_ids:
            d = msgspec.structs.replace(d, verified=True)
        decisions[k] = d
    return decisions, sent


def append_decisions(
    plan: BuildPlan, previous: dict[str, Decision], verified_ids: Collection[str]
) -> tuple[dict[str, Decision], tuple[Decision, ...]]:
    """``final_decisions`` and the changed part of ``decision_delta`` of an append, in
    O(appended): only the append's own decisions are new (an append retires nothing), and
    the delta keeps the order ``decision_delta`` gives (earlier candidates in their previous
    order, then the new ones). A property test holds it equal to the two general functions."""
    added = plan.appended
    if added is None:
        raise ValueError("append_decisions needs an append plan")
    items_by_id = {i.id: i for i in added.items}
    decisions = dict(plan.result.decisions)
    for k, d in added.decisions.items():
        if d.action in ("compressed", "clipped") and k in items_by_id:
            d = msgspec.structs.replace(d, content=items_by_id[k].content)
        if d.action != "dropped" and k in verified_ids:
            d = msgspec.structs.replace(d, verified=True)
        decisions[k] = d
    earlier = [k for k in added.decisions if k in previous]
    if len(earlier) > 1:
        position = {k: n for n, k in enumerate(previous)}
        earlier.sort(key=position.__getitem__)
    fresh = [k for k in added.decisions if k not in previous]
    changed = tuple(decisions[k] for k in (*earlier, *fresh) if previous.get(k) != decisions[k])
    return decisions, changed


def _included(
    plan: BuildPlan,
    ctx: EmittedContext | None,
    decisions: dict[str, Decision],
    changed: tuple[Decision, ...],
    previous: dict[str, Decision],
) -> int:
    """The decisions that are not ``dropped``: an append with a counted context adds its
    delta to the count (O(appended)); any other build counts them all."""
    if plan.kind == "append" and ctx is not None and ctx.included is not None:
        count = ctx.included
        for d in changed:
            before = previous.get(d.item_id)
            count += (d.action != "dropped") - (before is not None and before.action != "dropped")
        return count
    return len(decisions) - operator.countOf(map(_ACTION, decisions.values()), "dropped")


class _Decided(NamedTuple):
    """A build's decisions against the generation's previous pack (what ``_decided`` gives)."""

    decisions: dict[str, Decision]
    changed: tuple[Decision, ...]
    retired: tuple[str, ...]
    selection: str
    previous: dict[str, Decision]
    """The previous pack's decisions the delta is against (none for a rebuild)."""
    sent: list[str] | None
    """The ids not dropped, in order (None for an append, which counts them otherwise)."""
    opened: dict[str, Decision] | None
    """The whole decision map when the build is the generation's first pack, else None."""


def _decided(plan: BuildPlan, gen: Generation, verified_ids: Collection[str]) -> _Decided:
    """The build's recorded decisions and their delta against the previous pack of the
    generation: an append's in O(appended); any other build's whole map (a rebuild's against
    nothing: it opens a new generation, and so does a first pack); and the new selection
    hash, derived from the generation's last one when it can be, else hashed afresh."""
    previous = gen.decisions if plan.kind != "rebuild" else {}
    sent: list[str] | None = None
    opened: dict[str, Decision] | None = None
    if plan.kind == "append":
        decisions, changed = append_decisions(plan, previous, verified_ids)
        retired: tuple[str, ...] = ()
        replaced = [previous[d.item_id] for d in changed if d.item_id in previous]
        selection = updated_selection_hash(gen.selection_hash, replaced, changed)
    else:
        decisions, sent = _whole(plan, verified_ids)
        changed, retired = decision_delta(previous, decisions)
        if not previous:  # the generation's first pack: its decisions are these
            opened = decisions
        # the new selection hashed from the generation's last one (a rebuild's too: what it
        # keeps of the closing generation's decisions is not digested again)
        delta = (changed, retired) if previous is gen.decisions else None
        selection = rehashed_selection(gen.selection_hash, gen.decisions, decisions, delta)
    if selection is None:
        selection = selection_hash(decisions)
    return _Decided(decisions, changed, retired, selection, previous, sent, opened)


def _opening_events(
    *,
    agent_id: str,
    plan: BuildPlan,
    request: BuildRequest,
    gen: Generation,
    pack_id: str,
    group: RecallGroup | None,
    force_rebuild: str,
    carried: list[str] | None,
) -> list[ev.Event]:
    """The events recorded ahead of the pack: a rebuild's GenerationRefreshed (from the
    generation to the next one, triggered by hand or by the budget, with the *carried* ids),
    the ItemRecorded of a working set the plan extracted (the pool holds it for the
    generation's next builds) and the RecallRendered of a rendered recall *group*."""
    now = request.now
    events: list[ev.Event] = []
    if plan.kind == "rebuild":
        events.append(
            ev.GenerationRefreshed(
                at=now,
                agent_id=agent_id,
                kind="rebuild",
                from_generation=gen.number,
                to_generation=gen.number + 1,
                reason=plan.reason,
                trigger="manual" if force_rebuild else "budget",
                phase=request.phase,
                strategy=request.strategy,
                budget=request.budget,
                carried=tuple(carried or ()),
            )
        )
    if plan.working_set is not None:
        events.append(ev.ItemRecorded(at=now, agent_id=agent_id, item=plan.working_set))
    if group is not None:
        events.append(
            ev.RecallRendered(
                at=now,
                agent_id=agent_id,
                pack_id=pack_id,
                memory_ids=group.memory_ids,
                skipped=dict(group.skipped),
                tokens=group.tokens,
                bytes=group.bytes,
            )
        )
    return events


class _Prompted(NamedTuple):
    """A build's prompt (what ``_prompt`` gives)."""

    prompt: PromptParts
    appended: tuple[str, ...]
    """The GENERATION ids the prompt appends to the generation's order."""
    stable: PromptParts | None
    """The prompt without its VOLATILE tail (None for a decision point)."""


def _prompt(
    *,
    plan: BuildPlan,
    request: BuildRequest,
    gen: Generation,
    ctx: EmittedContext | None,
    number: int,
    previous_prompt: PromptParts | None,
    group: RecallGroup | None,
    latest_user_input: str,
    chronology: Mapping[str, int] | None,
) -> _Prompted:
    """The build's prompt, with its status line and recall: an append extends the previous
    prompt when that prompt has the generation's order; any other build composes it whole
    (an append in the emitted order with the static part it sent, a rebuild with a
    ``chronology`` in recording order), appending what the generation's order lacks (a
    rebuild: all of it). A decision point keeps no stable prompt."""
    result = plan.result
    status = (
        f"Generation {number} · {result.used}/{request.budget} tokens · strategy {request.strategy}"
    )
    recall = group.text if group is not None else ""
    prompt = None
    if (
        plan.appended is not None
        and previous_prompt is not None
        and previous_prompt.order == gen.order
    ):
        prompt = compose_append(
            previous_prompt,
            plan.appended.items,
            status=status,
            recall=recall,
            latest_user_input=latest_user_input,
            chronology=chronology,
        )
    if prompt is not None:
        appended = prompt.order[len(gen.order) :]
    else:
        static_ids = None
        if plan.kind == "append" and ctx is not None:
            static_ids = frozenset(ctx.emitted) - frozenset(ctx.order)
        prompt = compose(
            result.items,
            emitted_order=(
                plan.emitted_order if plan.kind == "append" or chronology is None else ()
            ),
            chronology=chronology,
            static_ids=static_ids,
            recall=recall,
            status=status,
            latest_user_input=latest_user_input,
        )
        previous_order = set(gen.order) if plan.kind != "rebuild" else set()
        appended = tuple(i for i in prompt.order if i not in previous_order)
    stable = (
        None
        if request.purpose
        else without_tail(
            prompt,
            volatile_tail(status=status, recall=recall, latest_user_input=latest_user_input),
        )
    )
    return _Prompted(prompt, appended, stable)


def _packed(
    *,
    agent_id: str,
    plan: BuildPlan,
    request: BuildRequest,
    ctx: EmittedContext | None,
    pack_id: str,
    number: int,
    reserve: int,
    decided: _Decided,
    prompted: _Prompted,
    previous_prompt: PromptParts | None,
) -> tuple[ContextPack, ev.ContextPackBuilt]:
    """The ContextPack the build produced (its items by layer, its budget with the *reserve*
    and overflow, every decision) and its ContextPackBuilt: the decisions that changed and
    the ids retired, the GENERATION ids appended, the selection hash, the included count and
    the prompt's cache expectations (prefix hash, size, the bytes expected cached: the
    longest common prefix with the previous prompt's stable part, the changed segment)."""
    result = plan.result
    prompt = prompted.prompt
    prompt_bytes = prompt.text.encode("utf-8")
    prev = previous_prompt
    expected = lcp_bytes(prev.stable.encode("utf-8"), prompt_bytes) if prev else 0
    layers: dict[Layer, list[Item]] = {}
    for item in result.items:
        layers.setdefault(item.layer, []).append(item)
    pack = ContextPack(
        id=pack_id,
        session_id=request.session_id,
        stage_id=request.stage_id,
        agent_id=agent_id,
        generation=number,
        layers={k: tuple(v) for k, v in sorted(layers.items())},
        budget_used=result.used + reserve,
        budget_limit=request.budget,
        compression_metadata=result.metadata,
        decisions=tuple(decided.decisions.values()),
        overflow=max(0, result.used + reserve - request.budget),
        counter=result.counter,
        strategy=request.strategy,
        prefix_hash=prompt.prefix_hash,
    )
    built = ev.ContextPackBuilt(
        at=request.now,
        agent_id=agent_id,
        pack_id=pack_id,
        generation=number,
        strategy=request.strategy,
        counter=result.counter,
        budget_limit=request.budget,
        budget_used=pack.budget_used,
        reserved=reserve,
        overflow=pack.overflow,
        decisions=decided.changed,
        retired=decided.retired,
        order_appended=prompted.appended,
        selection_hash=decided.selection,
        included_count=(
            len(decided.sent)
            if decided.sent is not None  # (a build that is not an append listed them)
            else _included(plan, ctx, decided.decisions, decided.changed, decided.previous)
        ),
        compression=result.metadata,
        prefix_hash=prompt.prefix_hash,
        prompt_bytes=len(prompt_bytes),
        expected_cached_bytes=expected,
        changed_segment=changed_segment(prev, prompt) if prev else "",
        purpose=request.purpose,
    )
    return pack, built


def record_build(
    *,
    agent_id: str,
    plan: BuildPlan,
    request: BuildRequest,
    gen: Generation,
    ctx: EmittedContext | None,
    pack_id: str,
    reserve: int,
    verified_ids: Collection[str],
    previous_prompt: PromptParts | None,
    group: RecallGroup | None,
    latest_user_input: str,
    force_rebuild: str,
    chronology: Mapping[str, int] | None = None,
) -> BuildRecord:
    """The outcome events of one planned build (its Started is recorded before planning):
    GenerationRefreshed (a rebuild), RecallRendered (when recall is recorded) and
    ContextPackBuilt carrying only the decisions that changed since the previous pack of the
    generation, the GENERATION ids appended, the selection hash and the prompt's cache
    expectations. ``previous_prompt`` is the generation's previous prompt; only its stable
    part (static + GENERATION) counts towards the expected cached bytes. With a
    ``chronology`` (item id → recording sequence) new GENERATION items follow in recording
    order and a rebuild lays its whole GENERATION segment out in that order (a transcript:
    an item re-included by the rebuild sits where the agent saw it, not after the newest)."""
    decided = _decided(plan, gen, verified_ids)
    number = gen.number + 1 if plan.kind == "rebuild" else gen.number
    events = _opening_events(
        agent_id=agent_id,
        plan=plan,
        request=request,
        gen=gen,
        pack_id=pack_id,
        group=group,
        force_rebuild=force_rebuild,
        carried=decided.sent,
    )
    prompted = _prompt(
        plan=plan,
        request=request,
        gen=gen,
        ctx=ctx,
        number=number,
        previous_prompt=previous_prompt,
        group=group,
        latest_user_input=latest_user_input,
        chronology=chronology,
    )
    pack, built = _packed(
        agent_id=agent_id,
        plan=plan,
        request=request,
        ctx=ctx,
        pack_id=pack_id,
        number=number,
        reserve=reserve,
        decided=decided,
        prompted=prompted,
        previous_prompt=previous_prompt,
    )
    events.append(built)
    message = ""
    if plan.kind == "rebuild":
        message = f"Context rebuilt · Generation {gen.number} → {number} · Reason: {plan.reason}"
    return BuildRecord(
        events=tuple(events),
        pack=pack,
        prompt=prompted.prompt,
        kind=plan.kind,
        generation=number,
        message=message,
        expected_cached_bytes=built.expected_cached_bytes,
        opened=None if request.purpose else decided.opened,
        recorded=() if plan.working_set is None else (plan.working_set,),
        stable_prompt=prompted.stable,
    )
