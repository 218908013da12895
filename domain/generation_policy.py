"""When a build appends, when it rebuilds into a new generation, and how a refresh shrinks.

Within a generation a build only appends: items already emitted keep their exact text and
order, new items are packed into the room left. When the new items do not fit, the engine
*rebuilds*: a new generation re-packed below a watermark of the budget, so that small growth
does not churn (the seed's hysteresis). See docs/caching.md for the chosen watermark.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Sequence
from typing import Literal

import msgspec

from ctxledger.domain.model import Decision, Item, Layer
from ctxledger.domain.packing import OTHER_STAGE, PackResult, other_stage
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import retrieve
from ctxledger.domain.settings import DEFAULT_WATERMARK
from ctxledger.domain.strategies import get_strategy

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

PLANNER_VERSION = 2
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


_ID = operator.attrgetter("id")
_PINNED = operator.attrgetter("pinned")
_MANDATORY = operator.attrgetter("mandatory")


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
    forced = {*map(_ID, itertools.compress(candidates, map(_PINNED, candidates)))}
    forced.update(map(_ID, itertools.compress(candidates, map(_MANDATORY, candidates))))
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
        gone=sum(1 for i in ctx.emitted if i not in present),
        off_stage=sum(1 for it in ctx.emitted.values() if other_stage(it, stage_id)),
        new=tuple(new_candidates(candidates, ctx, keep, present)),
    )


RECENT_FAILURES = 3
"""How many of the newest failures the latest-step policy keeps in every prompt."""


def keep_ids(candidates: Sequence[Item]) -> tuple[str, ...]:
    """What the latest-step policy keeps, most important first: the newest step's group (the
    last recorded candidate and every candidate sharing its ``group``), then the newest
    :data:`RECENT_FAILURES` failures. *candidates* are in recording order."""
    if not candidates:
        return ()
    last = candidates[-1]
    step = [c.id for c in candidates if c.group == last.group] if last.group else [last.id]
    failures: list[str] = []
    for c in reversed(candidates):
        if len(failures) == RECENT_FAILURES:
            break
        if c.failure and c.id not in step:
            failures.append(c.id)
    return (*step, *failures)


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
) -> BuildPlan:
    """Plan the next pack of an agent.

    - no build yet in this generation (nothing emitted) → ``initial``: a full pack into the
      budget — unless ``force_rebuild`` names a reason: a forced rebuild always rebuilds;
    - new items fit into the room left → ``append``: previous items unchanged, new appended;
    - otherwise (or ``force_rebuild`` names a reason, an emitted item left the pool, or an
      emitted steering note belongs to another stage than the request's) → ``rebuild`` below
      the watermark, keeping retained items in their previous order for the longest prefix.

    *facts* gives the append's facts (``append_facts`` over *candidates* when None).
    """
    if not 0 < watermark <= 0.9:
        raise ValueError("watermark must be in (0, 0.9]")
    if request.latest_step and not request.keep_ids:
        request = msgspec.structs.replace(request, keep_ids=keep_ids(candidates))
    budget = request.budget
    if not force_rebuild and (ctx is None or not ctx.decisions):
        return BuildPlan(
            kind="initial", result=_select(request, candidates, counter, budget), emitted_order=()
        )
    keep = frozenset(request.keep_ids)
    known = None
    if ctx is not None and not force_rebuild:
        if facts is None:
            known = append_facts(candidates, ctx, keep, request.stage_id)
        else:
            known = facts(keep, request.stage_id)
    # A steering note of another stage cannot stay in the prompt when the stage changes.
    reason = (
        force_rebuild
        or (f"removed:{known.gone}" if known is not None and known.gone else "")
        or (f"{OTHER_STAGE}:{known.off_stage}" if known is not None and known.off_stage else "")
    )
    if not reason and ctx is not None and known is not None:
        new = known.new
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
        reason = f"budget: next pack needs {need} > {budget} tokens"
    target = max(1, int(budget * watermark))
    result = _select(request, candidates, counter, target)
    if result.budget != budget:
        result = msgspec.structs.replace(
            result, budget=budget, overflow=max(0, result.used - budget)
        )
    order = ctx.order if ctx is not None else ()
    kept = tuple(
        i for i in order if i in result.decisions and result.decisions[i].action != "dropped"
    )
    return BuildPlan(kind="rebuild", result=result, emitted_order=kept, reason=reason)


def refresh_split(
    candidates: Sequence[Item], latest_ids: frozenset[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The refresh pipeline's cut: ``(carried, dropped)`` item ids.

    Durable state survives (task state L1, findings L2, project memory L3, pinned and
    mandatory items); ephemeral L0 and raw history L4 are dropped, except the latest step's
    observations (``latest_ids``), which the retried turn still needs.
    """
    carried: list[str] = []
    dropped: list[str] = []
    for item in candidates:
        keep = (
            item.pinned
            or item.mandatory
            or item.layer in (Layer.L1, Layer.L2, Layer.L3)
            or item.id in latest_ids
        )
        (carried if keep else dropped).append(item.id)
    return tuple(carried), tuple(dropped)


def learned_window(
    failed_tokens: int,
    current_cap: int,
    attempt: int,
    *,
    prompt_tokens: int = 0,
    limit_tokens: int = 0,
    output_tokens: int = 0,
    floor: int = 1,
) -> int:
    """The agent's window (a budget cap, in this engine's tokens) after a context-limit error.

    With a stated limit it is that limit less the stated output reserve — the same after
    every error, never ratcheted down by repeated errors — scaled by our count of the failed
    prompt over the provider's when the two tokenizers plausibly counted the same prompt (a
    ratio in [0.5, 1)). Without one it shrinks from the prompt size that failed
    (:func:`shrink_cap`). Never below *floor* (what pinned and mandatory content needs)."""
    if limit_tokens > 0:
        window = max(1, limit_tokens - output_tokens)
        if prompt_tokens > 0 and failed_tokens > 0 and 0.5 <= failed_tokens / prompt_tokens < 1:
            window = window * failed_tokens // prompt_tokens
    else:
        window = shrink_cap(failed_tokens or current_cap, current_cap, attempt)
    return max(1, floor, window)


def shrink_cap(
    failed_tokens: int,
    current_cap: int,
    attempt: int,
    *,
    provider_prompt_tokens: int = 0,
    provider_limit_tokens: int = 0,
) -> int:
    """The budget cap after a context-limit error, strictly below what failed.

    When the provider stated both its count of the prompt and its limit, the pack is scaled
    by their ratio (our tokenizer and the provider's may differ) with a 5 % margin per
    attempt; otherwise it shrinks geometrically with each attempt (0.7, 0.49, …). Whatever
    the attempt number (the engine counts from 1), the cap is at least 1 and below both the
    current cap and the failed size (unless that was a single token). Integer arithmetic:
    1000 tokens shrink to exactly 700, 490, 343 (floats would give 489 and 342)."""
    base = min(current_cap, failed_tokens) if current_cap else failed_tokens
    n = max(0, attempt)
    if 0 < provider_limit_tokens < provider_prompt_tokens:
        margin: int = 95**n  # 0.95ⁿ = 95ⁿ / 100ⁿ
        per: int = 100**n
        scaled = failed_tokens * provider_limit_tokens * margin // (provider_prompt_tokens * per)
        return max(1, min(base - 1, scaled))
    shrink: int = 7**n  # 0.7ⁿ = 7ⁿ / 10ⁿ
    per_ten: int = 10**n
    return max(1, min(base - 1, base * shrink // per_ten))
