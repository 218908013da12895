"""Invariants of the generation policy over random pools, requests, strategies and watermarks:
appends never touch what was emitted, rebuilds stay below the watermark, the refresh cut is a
partition, and the refresh cap always shrinks."""

from __future__ import annotations

import math
from fractions import Fraction

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain.generation_policy import (
    WINDOW,
    BuildPlan,
    EmittedContext,
    newest_step_tokens,
    plan_build,
    rebuild_target,
)
from ctxledger.domain.model import Item, Layer
from ctxledger.domain.refresh_policy import refresh_split, shrink_cap
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import retrieve
from ctxledger.domain.strategies import BASELINES, STRATEGIES, get_strategy
from ctxledger.domain.tokens import EstimatingCounter
from tests.property.strategies_items import NOW, build_requests, item_pools, pool_items
from tests.property.test_packing import EVICTABLE, forced_ids, tokens_of, units

COUNTER = EstimatingCounter()
NAMES = sorted(STRATEGIES)
IN = ("included", "compressed", "clipped")

watermarks = st.floats(min_value=0.01, max_value=0.9)


@st.composite
def extra_items(draw: st.DrawFn, max_size: int = 8) -> list[Item]:
    """Items recorded after the first build (ids ``n00``, ``n01``… never in the first pool)."""
    n = draw(st.integers(min_value=0, max_value=max_size))
    return [draw(pool_items(item_id=f"n{k:02d}")) for k in range(n)]


def emitted(plan: BuildPlan, generation: int = 1) -> EmittedContext:
    """What the generation has sent after *plan*, as the engine rebuilds it by replay."""
    res = plan.result
    return EmittedContext(
        generation=generation,
        decisions=res.decisions,
        emitted={it.id: it for it in res.items},
        order=tuple(it.id for it in res.items),
        used=res.used,
    )


def with_strategy(request: BuildRequest, name: str) -> BuildRequest:
    return msgspec.structs.replace(request, strategy=name)


@given(item_pools(), build_requests(), st.sampled_from(NAMES))
def test_the_first_build_is_an_initial_full_pack(
    pool: list[Item], request: BuildRequest, name: str
) -> None:
    request = with_strategy(request, name)
    plan = plan_build(request, pool, None, COUNTER)
    assert plan.kind == "initial"
    assert plan.emitted_order == ()
    direct = get_strategy(name).select(request, retrieve(request, pool), COUNTER)
    assert msgspec.json.encode(plan.result) == msgspec.json.encode(direct)


@given(item_pools(), extra_items(), build_requests(), st.sampled_from(NAMES), watermarks)
def test_an_append_never_reorders_or_changes_what_was_emitted(
    pool: list[Item], extra: list[Item], request: BuildRequest, name: str, watermark: float
) -> None:
    request = with_strategy(request, name)
    ctx = emitted(plan_build(request, pool, None, COUNTER))
    plan = plan_build(request, [*pool, *extra], ctx, COUNTER, watermark=watermark)
    res = plan.result
    if not ctx.decisions:  # an empty first pool: nothing was emitted, so nothing to keep
        assert plan.kind == "initial"
        return
    assert plan.kind in ("append", "rebuild")
    if plan.kind == "rebuild":
        # a peer's stateless rule rebuilds when its window moves
        assert plan.reason.startswith("budget: next pack needs ") or (
            name in BASELINES and plan.reason == WINDOW
        )
        return
    before = list(ctx.emitted.values())
    assert list(res.items[: len(before)]) == before
    for it in res.items[len(before) :]:
        assert it.id not in ctx.decisions
    for k, d in ctx.decisions.items():
        assert res.decisions[k] == d
    assert set(res.decisions) == set(ctx.decisions) | {it.id for it in extra}
    assert plan.emitted_order == ctx.order
    appended = sum(it.token_count for it in res.items[len(before) :])
    assert res.used == ctx.used + appended
    assert res.used <= request.budget
    assert res.overflow == 0


@given(item_pools(), build_requests(), st.sampled_from(NAMES), watermarks, st.text(min_size=1))
def test_a_forced_rebuild_stays_below_the_watermark_but_for_forced_content(
    pool: list[Item], request: BuildRequest, name: str, watermark: float, reason: str
) -> None:
    request = with_strategy(request, name)
    ctx = emitted(plan_build(request, pool, None, COUNTER))
    plan = plan_build(request, pool, ctx, COUNTER, watermark=watermark, force_rebuild=reason)
    assert plan.kind == "rebuild"
    assert plan.reason == reason
    res = plan.result
    assert res.budget == request.budget
    assert res.overflow == max(0, res.used - request.budget)
    forced = forced_ids(pool, name)
    forced_total = sum(tokens_of(it) for it in pool if it.id in forced)
    # the fixed part plus the watermark of the rest (a peer's rule: the whole budget)
    # (rebuild_target and newest_step_tokens have their own unit tests)
    target = rebuild_target(request.budget, watermark, forced_total, newest_step_tokens(pool))
    if name in BASELINES:
        target = request.budget
    target = max(1, target)
    if name != "layered":
        assert res.used <= max(target, forced_total)
    elif res.used > target:
        # layered never evicts forced units nor L0/L3/L4: everything else has gone.
        for u in units(pool):
            ids = {m.id for m in u}
            if not ids & forced and all(m.layer in EVICTABLE for m in u):
                assert all(res.decisions[i].action == "dropped" for i in ids)
    kept = tuple(i for i in ctx.order if res.decisions[i].action in IN)
    assert plan.emitted_order == kept


@given(
    st.one_of(
        st.floats(max_value=0.0),
        st.floats(min_value=0.9, exclude_min=True),
        st.just(math.nan),
    ),
    st.booleans(),
)
def test_a_watermark_outside_zero_to_ninety_percent_is_refused(
    watermark: float, with_context: bool
) -> None:
    request = BuildRequest(agent_id="a", budget=100, now=NOW)
    ctx = EmittedContext(generation=1, decisions={}, emitted={}, order=(), used=0)
    with pytest.raises(ValueError, match="watermark"):
        plan_build(request, [], ctx if with_context else None, COUNTER, watermark=watermark)


# --- refresh_split ------------------------------------------------------------------------------


DURABLE = (Layer.L1, Layer.L2, Layer.L3)


@given(item_pools(), st.data())
def test_the_refresh_cut_is_a_partition_keeping_durable_and_latest_items(
    pool: list[Item], data: st.DataObject
) -> None:
    ids = [it.id for it in pool]
    latest = (
        frozenset(data.draw(st.lists(st.sampled_from(ids), unique=True))) if ids else frozenset()
    )
    carried, dropped = refresh_split(pool, latest)
    assert set(carried) | set(dropped) == set(ids)
    assert not set(carried) & set(dropped)
    assert len(carried) + len(dropped) == len(ids)
    # Each side keeps the pool's order.
    assert list(carried) == [i for i in ids if i in set(carried)]
    assert list(dropped) == [i for i in ids if i in set(dropped)]
    for it in pool:
        if it.pinned or it.mandatory or it.layer in DURABLE or it.id in latest:
            assert it.id in carried
        else:
            assert it.layer in (Layer.L0, Layer.L4)
            assert it.id in dropped


# --- shrink_cap ---------------------------------------------------------------------------------

tokens = st.integers(min_value=0, max_value=10_000_000)


@given(tokens, tokens, st.integers(min_value=0, max_value=40), tokens, tokens)
def test_the_refresh_cap_always_shrinks_and_stays_positive(
    failed: int, cap: int, attempt: int, prompt: int, limit: int
) -> None:
    got = shrink_cap(
        failed, cap, attempt, provider_prompt_tokens=prompt, provider_limit_tokens=limit
    )
    assert got >= 1
    if failed > 1:
        assert got < failed
    if cap > 1:
        assert got < cap
    if 0 < limit < prompt:
        # Scaled by the provider's ratio (our tokenizer may disagree with the provider's).
        assert got <= max(1, math.floor(Fraction(failed * limit, prompt)))
    elif attempt >= 1:
        base = min(cap, failed) if cap else failed
        assert got <= max(1, math.floor(Fraction(7, 10) * base))


@given(st.integers(min_value=2, max_value=10_000_000), st.integers(min_value=1, max_value=30))
def test_later_attempts_never_give_a_larger_cap(failed: int, attempt: int) -> None:
    assert shrink_cap(failed, 0, attempt + 1) <= shrink_cap(failed, 0, attempt)
