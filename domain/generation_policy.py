"""When a build appends and when it rebuilds into a new generation (how a refresh shrinks:
``domain.refresh_policy``, whose names this module re-exports).

Within a generation a build only appends: items already emitted keep their exact text and
order, new items are packed into the room left. When the new items do not fit, the engine
*rebuilds*: a new generation re-packed below a watermark of the budget, so that small growth
does not churn (the seed's hysteresis). See docs/caching.md for the chosen watermark.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Literal

import msgspec

from ctxledger.domain.model import Decision, Item, Source
from ctxledger.domain.packing import (
    OTHER_STAGE,
    OUTSIDE_WINDOW,
    SUPERSEDED,
    PackResult,
    is_forced,
    other_stage,
)
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.prompt import render_item
from ctxledger.domain.refresh_policy import learned_window, refresh_split, shrink_cap
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import retrieve
from ctxledger.domain.settings import DEFAULT_WATERMARK
from ctxledger.domain.strategies import get_strategy, is_rolling, is_stateless
from ctxledger.domain.strategies.baselines import newer_half
from ctxledger.domain.working_set import is_working_set, working_set_item

__all__ = [
    "DEFAULT_WATERMARK",
    "PLANNER_VERSION",
    "AppendFacts",
    "BuildPlan",
    "EmittedContext",
    "FactsSource",
    "append_facts",
    "plan_build",
    "keep_ids",
    "learned_window",
    "refresh_split",
    "shrink_cap",
]

PLANNER_VERSION = 4
"""Version of the pure planner (retrieval, strategies, packing, generation policy). Recorded on
every ContextBuildingStarted: ``audit --rederive`` re-runs only builds of the same version.
Bump it whenever a change can alter a selection for the same inputs."""

PlanKind = Literal["initial", "append", "rebuild"]


class EmittedContext(msgspec.Struct, frozen=True, kw_only=True):
    """What the current generation has sent so far (rebuilt from the ledger by replay)."""

    generation: int
    decisions: dict[str, Decision]
    emitted: dict[str, Item]
    order: tuple[str, ...]
    used: int
    included: int | None = None
    """Decisions that are not ``dropped`` (None: not counted; ``record_build`` counts)."""


class AppendFacts(msgspec.Struct, frozen=True, kw_only=True):
    """What an append is planned on, beyond the emitted context: how many emitted items are
    no longer candidates (``gone``) or are steering notes of another stage (``off_stage``) —
    either makes the build a rebuild — and the candidates it may add (``new``)."""

    gone: int
    off_stage: int
    new: tuple[Item, ...]
    forced_cut: int = 0
    """Emitted items sent clipped or compressed that are forced now (pinned since): a
    forced item is never cut, so the build rebuilds."""


FactsSource = Callable[[frozenset[str], str], AppendFacts]
"""``(keep ids, stage id) → AppendFacts`` of one build."""


class BuildPlan(msgspec.Struct, frozen=True, kw_only=True):
    """The outcome of planning one build."""

    kind: PlanKind
    result: PackResult
    emitted_order: tuple[str, ...]
    reason: str = ""
    appended: PackResult | None = None
    """An append's own selection (the new candidates only): what the build records and
    renders beyond the generation's previous pack."""
    working_set: Item | None = None
    """The working-set item a generation's first pack extracted and includes (recorded with
    the build's outcome, so the pool holds it for the generation's next builds)."""


_ID = operator.attrgetter("id")


def new_candidates(
    candidates: Sequence[Item], ctx: EmittedContext, keep: frozenset[str], ids: set[str]
) -> list[Item]:
    """Candidates an append may add, in recording order: undecided ones, and dropped ones
    that must be in (pinned, mandatory or kept by the latest-step policy). *ids* is the set
    of the candidates' ids.

    Equal to testing every candidate in turn (tests/property/test_incremental_build.py), but
    the whole-pool passes are set operations and C iterators: Python looks only at the forced
    candidates and walks back from the newest candidate to the oldest one chosen."""
    decisions = ctx.decisions
    chosen = ids.difference(decisions)
    forced = {*map(_ID, itertools.compress(candidates, map(is_forced, candidates)))}
    for item_id in forced.union(keep):
        d = decisions.get(item_id)
        if d is not None and d.action == "dropped" and item_id in ids:
            chosen.add(item_id)
    found: list[Item] = []
    left = len(chosen)
    for item in reversed(candidates):
        if not left:
            break
        if item.id in chosen:
            found.append(item)
            left -= 1
    found.reverse()
    return found


def append_facts(
    candidates: Sequence[Item], ctx: EmittedContext, keep: frozenset[str], stage_id: str
) -> AppendFacts:
    """The facts of an append by passes over every candidate and emitted item (the
    specification ``projections.turn_memo`` keeps up to date in O(changes))."""
    present = set(map(_ID, candidates))
    return AppendFacts(
        forced_cut=sum(
            1
            for i, it in ctx.emitted.items()
            if i in present
            and ctx.decisions[i].action in ("clipped", "compressed")
            and is_forced(it)
        ),
        gone=sum(1 for i in ctx.emitted if i not in present),
        off_stage=sum(1 for it in ctx.emitted.values() if other_stage(it, stage_id)),
        new=tuple(new_candidates(candidates, ctx, keep, present)),
    )


RECENT_FAILURES = 3
"""How many of the newest failures the latest-step policy keeps in every prompt."""


def keep_ids(candidates: Sequence[Item]) -> tuple[str, ...]:
    """What the latest-step policy keeps, most important first: the newest step's group (the
    last recorded candidate and every candidate sharing its ``group``), then the newest
    :data:`RECENT_FAILURES` failures among the last :data:`RECENT_FAILURE_STEPS` steps that
    no later passing run of the same command (``tool_signature``) superseded. *candidates*
    are in recording order."""
    last = _newest(candidates)
    if last is None:
        return ()
    step = [c.id for c in candidates if c.group == last.group] if last.group else [last.id]
    failures: list[str] = []
    passed: set[str] = set()  # commands whose output, later than the walk is, did not fail
    steps: set[str] = set()
    for c in reversed(candidates):
        if is_working_set(c):
            continue
        steps.add(c.group or c.id)
        if len(failures) == RECENT_FAILURES or len(steps) > RECENT_FAILURE_STEPS:
            break
        sig = c.tool_signature
        if not c.failure:
            if sig and c.source is not Source.CONVERSATION:  # a result, not the command
                passed.add(sig)
        elif c.id not in step and sig not in passed:
            failures.append(c.id)
    return (*step, *failures)


_TOKENS = operator.attrgetter("token_count")
_GONE = Decision(item_id="", action="dropped")


def _retained(ctx: EmittedContext | None, result: PackResult) -> tuple[str, ...]:
    """The closing generation's order, less what the rebuild's *result* does not send."""
    decisions = result.decisions
    order = ctx.order if ctx is not None else ()
    return tuple(i for i in order if decisions.get(i, _GONE).action != "dropped")


def rebuild_target(budget: int, watermark: float, fixed: int, step: int = 0) -> int:
    """The pack size a rebuild aims at: the *fixed* tokens (forced content: pinned and
    mandatory items, role instructions), which never grow, plus *watermark* (≤ 0.9) of the
    room beside them — the headroom a generation needs is for what it appends, so at least
    10 % of that room stays free, whatever the fixed part takes. When the headroom the
    watermark leaves could not hold a *step* like the newest one, it buys no append and the
    rebuild takes 90 % of the room."""
    room = max(0, budget - fixed)
    share = watermark if room * (1 - watermark) >= step else max(watermark, 0.9)
    return max(1, min(budget, fixed + int(room * share)))


def _newest(candidates: Sequence[Item]) -> Item | None:
    """The newest candidate that is not a working set (which a build records after the
    steps it summarises: it is never the agent's latest step)."""
    for c in reversed(candidates):
        if not is_working_set(c):
            return c
    return None


def newest_step_tokens(candidates: Sequence[Item]) -> int:
    """The tokens of the newest step: the newest candidate (not a working set) and every
    candidate in its group."""
    last = _newest(candidates)
    if last is None:
        return 0
    if not last.group:
        return last.token_count
    return sum(c.token_count for c in reversed(candidates) if c.group == last.group)


RECENT_FAILURE_STEPS = 10
"""Failures older than this many steps (groups) are not kept by the latest-step policy."""

RECENT_SHARE = 0.6
"""The share of a full pack's budget that the newest steps may claim ahead of the priority
tiers (:func:`recent_groups`)."""


def recent_groups(candidates: Sequence[Item], budget: int) -> tuple[str, ...]:
    """The groups of the newest steps, newest first, whose tokens add up to at most
    :data:`RECENT_SHARE` of *budget* (the newest one always counts, as the latest-step
    policy keeps it anyway). *candidates* are in recording order."""
    room = int(budget * RECENT_SHARE)
    groups: dict[str, None] = {}
    used = 0
    for c in reversed(candidates):
        g = c.group
        if not g or c.source is Source.ROLE_INSTRUCTION:
            continue
        if g not in groups:
            if groups and used + c.token_count > room:
                break
            groups[g] = None
        used += c.token_count
    return tuple(groups)


WORKING_SET_SHARE = 0.25
"""The share of the room beside the fixed (forced) part a working-set item may take (at most
:data:`WORKING_SET_MAX` tokens; none below :data:`WORKING_SET_MIN`)."""
WORKING_SET_MAX = 1500
WORKING_SET_MIN = 64


def _full_select(  # noqa: PLR0917 - the planner's inputs, named at the one call site
    request: BuildRequest,
    candidates: Sequence[Item],
    counter: TokenCounter,
    target: int,
    budget: int,
    history: Mapping[str, Item] | None,
    fixed: int,
) -> tuple[PackResult, Item | None]:
    """A generation's first pack into *target* (≤ *budget*) and its working-set item: the
    working set takes the room between the pack and the budget, up to its share of the room
    beside the *fixed* (forced) part; when the pack leaves none (*target* is the budget) and
    steps are left out, the pack is made again that much smaller."""
    if history is None or not request.latest_step:
        return _select(_with_recent(request, candidates, target), candidates, counter, target), None
    # an older working set is superseded, unless someone pinned it (then it is forced)
    olds = [c for c in candidates if is_working_set(c) and not is_forced(c)]
    pool = [c for c in candidates if c not in olds] if olds else candidates
    cap = min(WORKING_SET_MAX, int(max(0, budget - fixed) * WORKING_SET_SHARE))
    result = _select(_with_recent(request, pool, target), pool, counter, target)
    hidden = any(
        d.action == "dropped" and d.item_id in history and history[d.item_id].group
        for d in result.decisions.values()
    )
    ws: Item | None = None
    if hidden and cap >= WORKING_SET_MIN:
        if budget - result.used < cap and target > 2 * cap:
            target -= cap
            result = _select(_with_recent(request, pool, target), pool, counter, target)
        shown = {k for k, d in result.decisions.items() if d.action != "dropped"}
        ws = working_set_item(
            history.values(),
            shown,
            agent=request.agent_id,
            token_budget=min(cap, budget - result.used),
            count=lambda it: counter.count(render_item(it)),
        )
    decisions = result.decisions
    if olds or ws is not None:
        decisions = dict(decisions)
        for old in olds:
            decisions[old.id] = Decision(
                item_id=old.id, action="dropped", reason=SUPERSEDED, tokens_before=old.token_count
            )
        items, used = result.items, result.used
        if ws is not None:
            t = ws.token_count
            decisions[ws.id] = Decision(
                item_id=ws.id, action="included", tokens_before=t, tokens_after=t
            )
            items, used = (*items, ws), used + t
        result = msgspec.structs.replace(
            result, items=items, decisions=decisions, used=used,
            overflow=max(0, used - result.budget),
        )  # fmt: skip
    return result, ws


def _with_recent(request: BuildRequest, candidates: Sequence[Item], budget: int) -> BuildRequest:
    """*request* for a full pack: under the latest-step policy, with its ``recent`` groups."""
    if not request.latest_step or request.recent:
        return request
    return msgspec.structs.replace(request, recent=recent_groups(candidates, budget))


def _select(
    request: BuildRequest, items: Sequence[Item], counter: TokenCounter, budget: int
) -> PackResult:
    req = request if budget == request.budget else msgspec.structs.replace(request, budget=budget)
    return get_strategy(request.strategy).select(req, retrieve(req, items), counter)


def plan_build(
    request: BuildRequest,
    candidates: Sequence[Item],
    ctx: EmittedContext | None,
    counter: TokenCounter,
    *,
    watermark: float = DEFAULT_WATERMARK,
    force_rebuild: str = "",
    facts: FactsSource | None = None,
    chronology: Mapping[str, int] | None = None,
    history: Mapping[str, Item] | None = None,
) -> BuildPlan:
    """Plan the next pack of an agent.

    - no build yet in this generation (nothing emitted) → ``initial``: a full pack into the
      budget — unless ``force_rebuild`` names a reason: a forced rebuild always rebuilds;
    - new items fit into the room left → ``append``: previous items unchanged, new appended;
    - otherwise (or ``force_rebuild`` names a reason, an emitted item left the pool, or an
      emitted steering note belongs to another stage than the request's) → ``rebuild`` below
      the watermark, keeping retained items in their previous order for the longest prefix.

    *facts* gives the append's facts (``append_facts`` over *candidates* when None). With a
    *chronology* (item id → recording sequence: the prompt reads as a transcript) an append
    that would add an item recorded before the newest one already emitted rebuilds instead
    (reason ``order``), so step order holds within every generation. With a *history*
    (every item the agent recorded, removed ones too, in recording order) a generation's
    first pack under the latest-step policy extracts the working set of the steps it does
    not show (``domain.working_set``) and includes it; an older working set is superseded.
    """
    if not 0 < watermark <= 0.9:
        raise ValueError("watermark must be in (0, 0.9]")
    if is_stateless(request.strategy) or is_rolling(request.strategy):
        # a peer's rule: no latest-step policy, no working set
        request = msgspec.structs.replace(request, latest_step=False, keep_ids=(), recent=())
        history = None
        if is_stateless(request.strategy):
            return _stateless_plan(
                request,
                candidates,
                ctx,
                counter,
                force_rebuild=force_rebuild,
                chronology=chronology,
            )
    if request.latest_step and not request.keep_ids:
        request = msgspec.structs.replace(request, keep_ids=keep_ids(candidates))
    if not force_rebuild and (ctx is None or not ctx.decisions):
        return _initial_plan(request, candidates, counter, history)
    keep = frozenset(request.keep_ids)
    known = None
    if ctx is not None and not force_rebuild:
        if facts is None:
            known = append_facts(candidates, ctx, keep, request.stage_id)
        else:
            known = facts(keep, request.stage_id)
    reason = force_rebuild or _facts_reason(known)
    if not reason and ctx is not None and known is not None:
        appended = _append_plan(request, ctx, known.new, counter, keep, chronology)
        if isinstance(appended, BuildPlan):
            return appended
        reason = appended
    return _rebuild_plan(request, candidates, ctx, counter, watermark, history, reason)


def _initial_plan(
    request: BuildRequest,
    candidates: Sequence[Item],
    counter: TokenCounter,
    history: Mapping[str, Item] | None,
) -> BuildPlan:
    """The plan of a generation's first build with nothing emitted yet: a full pack into the
    whole budget (and, with a *history*, its working set)."""
    budget = request.budget
    fixed = sum(map(_TOKENS, filter(is_forced, candidates))) if history is not None else 0
    result, ws = _full_select(request, candidates, counter, budget, budget, history, fixed)
    return BuildPlan(kind="initial", result=result, emitted_order=(), working_set=ws)


def _facts_reason(known: AppendFacts | None) -> str:
    """The rebuild reason the append's facts give before any selection (``""``: none): an
    emitted item left the pool, an emitted steering note belongs to another stage (it cannot
    stay in the prompt when the stage changes), or an emitted item sent cut is forced now."""
    return (
        (f"removed:{known.gone}" if known is not None and known.gone else "")
        or (f"{OTHER_STAGE}:{known.off_stage}" if known is not None and known.off_stage else "")
        or (f"{PINNED}:{known.forced_cut}" if known is not None and known.forced_cut else "")
    )


def _append_plan(  # noqa: PLR0917 - the planner's inputs, named at the one call site
    request: BuildRequest,
    ctx: EmittedContext,
    new: Sequence[Item],
    counter: TokenCounter,
    keep: frozenset[str],
    chronology: Mapping[str, int] | None,
) -> BuildPlan | str:
    """The append of the *new* candidates into the room the generation left, or the reason
    to rebuild instead: one of them was recorded before the newest item sent (``order``), or
    they do not fit or a kept one would be cut (``budget``, with what the next pack needs)."""
    budget = request.budget
    room = max(0, budget - ctx.used)
    # A strategy needs a positive budget: with no room left, select against 1 token, so
    # anything new is ``over_budget`` (→ rebuild) and no new items append nothing.
    added = _select(request, new, counter, max(room, 1))
    # a kept item cut to fit the room left is a reason to rebuild (room is freed there)
    over = [
        d
        for d in added.decisions.values()
        if d.reason == "over_budget" or (d.item_id in keep and d.action != "included")
    ]
    late = _out_of_order(added.items, ctx.order, chronology) if chronology else 0
    if late:
        return f"{ORDER}: {late} item(s) recorded before the newest one sent"
    if not over and added.overflow == 0 and ctx.used + added.used <= budget:
        items = (*ctx.emitted.values(), *added.items)
        decisions = {**ctx.decisions, **added.decisions}
        result = msgspec.structs.replace(
            added,
            items=items,
            decisions=decisions,
            used=ctx.used + added.used,
            budget=budget,
            overflow=max(0, ctx.used + added.used - budget),
        )
        return BuildPlan(kind="append", result=result, emitted_order=ctx.order, appended=added)
    need = ctx.used + added.used + sum(d.tokens_before - d.tokens_after for d in over)
    return f"budget: next pack needs {need} > {budget} tokens"


def _rebuild_plan(  # noqa: PLR0917 - the planner's inputs, named at the one call site
    request: BuildRequest,
    candidates: Sequence[Item],
    ctx: EmittedContext | None,
    counter: TokenCounter,
    watermark: float,
    history: Mapping[str, Item] | None,
    reason: str,
) -> BuildPlan:
    """The rebuild into a new generation, for *reason*: a rolling strategy's window, else a
    full pack below the watermark (:func:`rebuild_target`) measured against the whole
    budget, keeping the retained items in their previous order."""
    budget = request.budget
    if is_rolling(request.strategy) and ctx is not None:
        result = _rolling_select(request, candidates, ctx, counter)
        return BuildPlan(
            kind="rebuild", result=result, emitted_order=_retained(ctx, result), reason=reason
        )
    fixed = sum(map(_TOKENS, filter(is_forced, candidates)))
    target = rebuild_target(budget, watermark, fixed, newest_step_tokens(candidates))
    result, ws = _full_select(request, candidates, counter, target, budget, history, fixed)
    if result.budget != budget:
        result = msgspec.structs.replace(
            result, budget=budget, overflow=max(0, result.used - budget)
        )
    kept = _retained(ctx, result)
    return BuildPlan(
        kind="rebuild", result=result, emitted_order=kept, reason=reason, working_set=ws
    )


def _stateless_plan(
    request: BuildRequest,
    candidates: Sequence[Item],
    ctx: EmittedContext | None,
    counter: TokenCounter,
    *,
    force_rebuild: str,
    chronology: Mapping[str, int] | None,
) -> BuildPlan:
    """A stateless strategy's plan: a full selection at the budget every build — an append
    when it decides every candidate the generation decided as it did and adds only newer
    items, else a rebuild (reason ``window``)."""
    result = _select(request, candidates, counter, request.budget)
    if not force_rebuild and (ctx is None or not ctx.decisions):
        return BuildPlan(kind="initial", result=result, emitted_order=())
    assert ctx is not None or force_rebuild
    if ctx is not None and not force_rebuild:
        decisions = ctx.decisions
        same = all(result.decisions.get(k) == d for k, d in decisions.items())
        new = [it for it in result.items if it.id not in ctx.emitted]
        used = sum(map(_TOKENS, new))
        fits = ctx.used + used <= request.budget
        if same and fits and not (chronology and _out_of_order(new, ctx.order, chronology)):
            changed = {k: d for k, d in result.decisions.items() if decisions.get(k) != d}
            appended = msgspec.structs.replace(
                result, items=tuple(new), decisions=changed, used=used, overflow=0
            )
            whole = msgspec.structs.replace(
                result,
                items=(*ctx.emitted.values(), *new),
                decisions={**decisions, **changed},
                used=ctx.used + used,
            )
            return BuildPlan(
                kind="append", result=whole, emitted_order=ctx.order, appended=appended
            )
    reason = force_rebuild or WINDOW
    if ctx is not None and not force_rebuild:
        off = sum(1 for it in ctx.emitted.values() if other_stage(it, request.stage_id))
        reason = f"{OTHER_STAGE}:{off}" if off else reason
    kept = _retained(ctx, result)
    return BuildPlan(kind="rebuild", result=result, emitted_order=kept, reason=reason)


WINDOW = "window: the oldest steps shown left the window"
"""The rebuild reason of a stateless strategy whose selection no longer extends the prompt."""


def _rolling_select(
    request: BuildRequest, candidates: Sequence[Item], ctx: EmittedContext, counter: TokenCounter
) -> PackResult:
    """A rolling strategy's rebuild (ConversationWindowCondenser): forced items, the newer
    half of the steps the closing generation showed and what was recorded since its last
    pack, selected at the full budget; the older steps are dropped ``outside_window``."""
    shown = list(dict.fromkeys(ctx.emitted[i].group for i in ctx.order if ctx.emitted[i].group))
    window = frozenset(newer_half(shown)) if shown else frozenset()
    decided = ctx.decisions
    inside = [c for c in candidates if is_forced(c) or c.group in window or c.id not in decided]
    result = _select(request, inside, counter, request.budget)
    if len(inside) == len(candidates):
        return result
    ids = {c.id for c in inside}
    decisions = dict(result.decisions)
    for c in candidates:
        if c.id not in ids:
            decisions[c.id] = Decision(
                item_id=c.id, action="dropped", reason=OUTSIDE_WINDOW, tokens_before=c.token_count
            )
    return msgspec.structs.replace(result, decisions=decisions)


PINNED = "pinned"
"""The rebuild reason of an append over an emitted item that was cut and is forced now."""

ORDER = "order"
"""The rebuild reason of an append that would break the transcript order."""


def _out_of_order(
    added: Sequence[Item], order: Sequence[str], chronology: Mapping[str, int]
) -> int:
    """How many *added* items (bar recalled memory, which sits in the tail) were recorded
    before the newest GENERATION item already sent (``order``)."""
    if not order:
        return 0
    newest = max(chronology.get(i, -1) for i in order[-8:])
    return sum(
        1
        for it in added
        if it.source is not Source.RECALLED_MEMORY and chronology.get(it.id, newest + 1) < newest
    )
