"""What one agent's next build is planned on, read from the folded log alone."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import datetime
from typing import Literal, overload

import msgspec

from ctxledger.domain.build_policy import latest_step_ids
from ctxledger.domain.build_record import BuildRecord, final_decisions, record_build
from ctxledger.domain.events import GenerationRefreshed
from ctxledger.domain.generation_policy import (
    BuildPlan,
    EmittedContext,
    plan_build,
)
from ctxledger.domain.model import Decision, Generation, Item
from ctxledger.domain.packing import is_forced
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.prompt import PromptParts, compose
from ctxledger.domain.recall import RecallGroup
from ctxledger.domain.refresh_policy import learned_window, refresh_split
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.turn_errors import TurnError
from ctxledger.domain.working_set import is_working_set
from ctxledger.projections.pool import AgentPool, verified_form
from ctxledger.projections.turn_memo import TurnMemo, TurnView, emitted_context, turn_view

__all__ = [
    "DECISION_POINT",
    "BuildView",
    "build_view",
    "turn_build_view",
    "decide_build",
    "emitted_context",
    "plan_view",
    "previous_prompt",
    "rederive_decisions",
    "refresh_generation",
    "volatile_reserve",
]

JOIN_SLACK = 4
"""Tokens of margin for BPE merges where rendered blocks are joined."""


class BuildView(msgspec.Struct, frozen=True, kw_only=True):
    """The planner's inputs from state: the pool's candidates, what the current generation
    has emitted (None before its first pack), the verified ids and the generation itself."""

    generation: Generation
    candidates: Sequence[Item]
    """``pool.candidates()`` (a ``Candidates``: made only if the plan reads it)."""
    emitted: EmittedContext | None
    verified_ids: frozenset[str]
    seq: dict[str, int] = {}
    """The pool's recording sequence per item id (the order new GENERATION blocks follow)."""
    history: dict[str, Item] = {}
    """Every item the agent recorded, removed ones too, in recording order (what a
    generation's first pack extracts the working set from)."""
    turn: TurnView | None = None
    """The engine's turn memo brought up to date (None: the append's facts are computed by
    passes over the candidates — the specification both are held equal to)."""


def previous_prompt(ctx: EmittedContext | None) -> PromptParts | None:
    """The previous prompt of the generation re-derived by the pure ``compose``: its static
    part and GENERATION segment are exact; its VOLATILE tail (recall group, status line,
    user input) is left empty, so cache expectations never count on the tail."""
    if ctx is None:
        return None
    static_ids = frozenset(ctx.emitted) - frozenset(ctx.order)
    return compose(ctx.emitted.values(), emitted_order=ctx.order, static_ids=static_ids)


DECISION_POINT = "decision_point"


class Candidates(Sequence[Item]):
    """``pool.candidates()`` of one pool snapshot as a sequence, made on first use: an append
    planned from the turn memo never reads the candidates, so a turn does not copy the
    history into a tuple it would not look at. Holding the snapshot keeps it unchanged
    (a fold copies what a snapshot still holds: ``projections.drafts.holders``)."""

    __slots__ = ("_items", "_pool")

    def __init__(self, pool: AgentPool) -> None:
        self._pool = pool
        self._items: tuple[Item, ...] | None = None

    def _all(self) -> tuple[Item, ...]:
        items = self._items
        if items is None:
            pool = self._pool
            if not pool.removed and not pool.verified:  # a copy in C, not a Python pass
                items = tuple(pool.items.values())
            else:
                items = tuple(pool.candidates())
            self._items = items
        return items

    def __len__(self) -> int:
        pool = self._pool
        if self._items is None and not pool.removed:
            return len(pool.items)
        return len(self._all())

    def __iter__(self) -> Iterator[Item]:
        return iter(self._all())

    def __reversed__(self) -> Iterator[Item]:
        """Newest first, without making the sequence (the latest-step policy reads only the
        newest few)."""
        if self._items is not None:
            return reversed(self._items)
        pool = self._pool
        removed, verified = pool.removed, pool.verified
        return (
            verified_form(item) if i in verified else item
            for i, item in reversed(pool.items.items())
            if i not in removed
        )

    @overload
    def __getitem__(self, index: int) -> Item: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Item, ...]: ...

    def __getitem__(self, index: int | slice) -> Item | tuple[Item, ...]:
        if index == -1 and self._items is None:
            for item in reversed(self):
                return item
            raise IndexError("no candidates")
        return self._all()[index]


def build_view(gen: Generation, pool: AgentPool, purpose: str = "") -> BuildView:
    """The view of one agent at the current stream version. A decision point is built on its
    own: as if nothing were emitted (it never appends to or rebuilds the generation)."""
    if purpose == DECISION_POINT:
        return BuildView(
            generation=Generation(number=gen.number),
            candidates=Candidates(pool),
            emitted=None,
            verified_ids=frozenset(pool.verified),
            seq=pool.seq,
        )
    return BuildView(
        generation=gen,
        candidates=Candidates(pool),
        emitted=emitted_context(gen, pool),
        verified_ids=frozenset(pool.verified),
        seq=pool.seq,
        history=pool.items,
    )


def turn_build_view(
    gen: Generation, pool: AgentPool, purpose: str, memo: TurnMemo | None
) -> BuildView:
    """``build_view`` from the engine's turn memo of the generation's last pack (see
    ``projections.turn_memo``): O(changes since that pack) instead of passes over the
    history; the view plans and records exactly like ``build_view``'s."""
    if purpose == DECISION_POINT:
        return build_view(gen, pool, purpose)
    turn = turn_view(memo, gen, pool)
    return BuildView(
        generation=gen,
        candidates=Candidates(pool),
        emitted=turn.context() if turn is not None else None,
        verified_ids=frozenset(pool.verified),
        seq=pool.seq,
        history=pool.items,
        turn=turn,
    )


def plan_view(
    view: BuildView,
    request: BuildRequest,
    *,
    reserve: int,
    counter: TokenCounter,
    watermark: float,
    force_rebuild: str = "",
) -> BuildPlan:
    """Plan a build on *view*: the pack gets the request's budget less the VOLATILE reserve."""
    pack_request = msgspec.structs.replace(request, budget=max(1, request.budget - reserve))
    return plan_build(
        pack_request,
        view.candidates,
        view.emitted,
        counter,
        watermark=watermark,
        force_rebuild=force_rebuild,
        facts=view.turn.facts if view.turn is not None else None,
        chronology=view.seq,
        history=view.history,
    )


def decide_build(
    view: BuildView,
    request: BuildRequest,
    *,
    pack_id: str,
    reserve: int,
    counter: TokenCounter,
    watermark: float,
    force_rebuild: str = "",
    group: RecallGroup | None = None,
    latest_user_input: str = "",
    previous: PromptParts | None = None,
) -> BuildRecord:
    """The whole pure decision of one build: plan it and turn the plan into its outcome events.
    *previous* is ``previous_prompt(view.emitted)`` when the caller kept it from the
    generation's last build (``BuildRecord.stable_prompt``); None: it is re-derived."""
    plan = plan_view(
        view,
        request,
        reserve=reserve,
        counter=counter,
        watermark=watermark,
        force_rebuild=force_rebuild,
    )
    return record_build(
        agent_id=request.agent_id,
        plan=plan,
        request=request,
        gen=view.generation,
        ctx=view.emitted,
        pack_id=pack_id,
        reserve=reserve,
        verified_ids=view.verified_ids,
        previous_prompt=previous if previous is not None else previous_prompt(view.emitted),
        group=group,
        latest_user_input=latest_user_input,
        force_rebuild=force_rebuild,
        chronology=view.seq,
    )


def rederive_decisions(
    view: BuildView,
    request: BuildRequest,
    *,
    reserve: int,
    counter: TokenCounter,
    watermark: float,
    force_rebuild: str = "",
) -> dict[str, Decision]:
    """Every candidate's decision as the planner makes it again (what ``audit --rederive``
    hashes and compares with the recorded selection)."""
    plan = plan_view(
        view,
        request,
        reserve=reserve,
        counter=counter,
        watermark=watermark,
        force_rebuild=force_rebuild,
    )
    previous = view.generation.decisions if plan.kind == "append" else {}
    return final_decisions(plan, previous, view.verified_ids)


def volatile_reserve(
    request: BuildRequest,
    number: int,
    group: RecallGroup | None,
    user_input: str,
    counter: TokenCounter,
) -> int:
    """Tokens held back from the pack for the VOLATILE tail (status line, recall group,
    latest user input) and block joins, so the whole rendered prompt fits the budget."""
    probe = compose(
        (),
        status=(
            f"Generation {number} · {request.budget}/{request.budget} tokens"
            f" · strategy {request.strategy}"
        ),
        recall=group.text if group is not None else "",
        latest_user_input=user_input,
    )
    return counter.count(probe.dynamic) + JOIN_SLACK


def refresh_generation(
    gen: Generation,
    pool: AgentPool,
    request: BuildRequest,
    *,
    at: datetime,
    reason: str,
    trigger: Literal["context_limit", "manual"],
    attempt: int,
    failed_tokens: int,
    error: TurnError | None,
) -> GenerationRefreshed:
    """One step of the refresh pipeline: the cut (durable state and the latest step carried,
    ephemeral and raw history dropped) and, after a context-limit error, the window learned
    from it (:func:`learned_window`) as the new generation's budget cap."""
    cap = gen.budget if gen.budget else request.budget
    if trigger == "context_limit":
        forced = sum(i.token_count for i in pool.candidates() if is_forced(i))
        cap = learned_window(
            failed_tokens,
            cap,
            attempt,
            prompt_tokens=error.prompt_tokens if error else 0,
            limit_tokens=error.limit_tokens if error else 0,
            output_tokens=error.output_tokens if error else 0,
            floor=forced,
        )
    # the newest recording that is a step: a working set a build recorded after the steps
    # it summarises is not the agent's latest step
    items = pool.items
    newest = max((n for i, n in pool.seq.items() if not is_working_set(items[i])), default=0)
    latest = latest_step_ids(
        pool.seq,
        newest,
        [i for i in pool.new_since_last_build() if not is_working_set(items[i])],
        {i: it.group for i, it in items.items()},
    )
    carried, dropped = refresh_split(pool.candidates(), latest)
    return GenerationRefreshed(
        at=at,
        agent_id=request.agent_id,
        kind="refresh",
        from_generation=gen.number,
        to_generation=gen.number + 1,
        reason=reason,
        trigger=trigger,
        phase=request.phase,
        strategy=request.strategy,
        budget=cap,
        carried=carried,
        dropped=dropped,
    )
