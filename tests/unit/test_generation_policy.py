"""The generation policy on hand-made pools: initial, append and rebuild plans, the refresh
cut and the refresh cap, with values worked out by hand."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import msgspec
import pytest

from ctxledger.domain.generation_policy import (
    BuildPlan,
    EmittedContext,
    keep_ids,
    newest_step_tokens,
    plan_build,
    rebuild_target,
)
from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.refresh_policy import refresh_split, shrink_cap
from ctxledger.domain.request import BuildRequest

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


class WordCounter:
    """One token per whitespace-separated word (deterministic, easy to count by hand)."""

    @property
    def name(self) -> str:
        return "words"

    def count(self, text: str) -> int:
        return len(text.split())


COUNTER = WordCounter()


def mk(item_id: str, layer: Layer, source: Source, tokens: int, **kw: object) -> Item:
    """An item of exactly *tokens* words (≤ 64: too small to compress, so it fits or drops)."""
    content = " ".join(f"{item_id}w{k}" for k in range(tokens))
    item = Item(id=item_id, layer=layer, source=source, content=content, token_count=tokens)
    return msgspec.structs.replace(item, **kw)


def request(budget: int = 100, **kw: object) -> BuildRequest:
    return msgspec.structs.replace(BuildRequest(agent_id="a", budget=budget, now=NOW), **kw)


def emitted(plan: BuildPlan) -> EmittedContext:
    """What a generation has sent after *plan* (as the engine rebuilds it by replay)."""
    res = plan.result
    return EmittedContext(
        generation=1,
        decisions=res.decisions,
        emitted={it.id: it for it in res.items},
        order=tuple(it.id for it in res.items),
        used=res.used,
    )


# Tiers (variable strategy): objective 1, finding 3, tool log 4 → pack order a, b, c.
A = mk("a", Layer.L1, Source.USER_REQUIREMENT, 30)
B = mk("b", Layer.L2, Source.WORKER_FINDING, 20)
C = mk("c", Layer.L0, Source.TOOL_LOG, 10)
POOL = [A, B, C]


def actions(plan: BuildPlan) -> dict[str, str]:
    return {k: d.reason or d.action for k, d in sorted(plan.result.decisions.items())}


# --- plan_build ---------------------------------------------------------------------------------


def test_first_build_of_a_generation_is_an_initial_full_pack() -> None:
    plan = plan_build(request(), POOL, None, COUNTER)
    assert plan.kind == "initial"
    assert plan.emitted_order == ()
    assert plan.reason == ""
    assert [it.id for it in plan.result.items] == ["a", "b", "c"]
    assert plan.result.used == 60
    assert plan.result.budget == 100
    assert plan.result.overflow == 0
    assert actions(plan) == {"a": "included", "b": "included", "c": "included"}


def test_an_empty_emitted_context_is_also_initial() -> None:
    empty = EmittedContext(generation=2, decisions={}, emitted={}, order=(), used=0)
    assert plan_build(request(), POOL, empty, COUNTER).kind == "initial"


def test_new_items_that_fit_are_appended_after_the_emitted_ones() -> None:
    ctx = emitted(plan_build(request(), POOL, None, COUNTER))
    d = mk("d", Layer.L2, Source.VERIFIED_FACT, 15, verified=True)
    plan = plan_build(request(), [*POOL, d], ctx, COUNTER)
    assert plan.kind == "append"
    assert plan.reason == ""
    assert [it.id for it in plan.result.items] == ["a", "b", "c", "d"]
    assert plan.result.items[:3] == (A, B, C)
    assert plan.result.used == 75
    assert plan.emitted_order == ("a", "b", "c")
    for k in ("a", "b", "c"):
        assert plan.result.decisions[k] is ctx.decisions[k]
    assert plan.result.decisions["d"].action == "included"
    assert plan.result.decisions["d"].tokens_after == 15


def test_a_build_with_nothing_new_appends_nothing() -> None:
    ctx = emitted(plan_build(request(), POOL, None, COUNTER))
    plan = plan_build(request(), POOL, ctx, COUNTER)
    assert plan.kind == "append"
    assert plan.result.items == (A, B, C)
    assert plan.result.used == 60
    assert plan.result.decisions == ctx.decisions


def test_new_items_that_do_not_fit_rebuild_below_the_watermark() -> None:
    ctx = emitted(plan_build(request(), POOL, None, COUNTER))
    e = mk("e", Layer.L0, Source.TOOL_LOG, 50)  # room is 40
    plan = plan_build(request(), [*POOL, e], ctx, COUNTER, watermark=0.5)
    assert plan.kind == "rebuild"
    assert plan.reason == "budget: next pack needs 110 > 100 tokens"
    # Re-packed into 50 = 0.5 × 100: the objective (30) and the finding (20) fill it.
    assert [it.id for it in plan.result.items] == ["a", "b"]
    assert plan.result.used == 50
    assert actions(plan) == {
        "a": "included",
        "b": "included",
        "c": "over_budget",
        "e": "over_budget",
    }
    # The pack is reported against the request's budget, not the watermark.
    assert plan.result.budget == 100
    assert plan.result.overflow == 0
    assert plan.emitted_order == ("a", "b")  # retained items keep their previous order


def test_force_rebuild_rebuilds_even_when_everything_fits() -> None:
    ctx = emitted(plan_build(request(), POOL, None, COUNTER))
    plan = plan_build(request(), POOL, ctx, COUNTER, watermark=0.9, force_rebuild="manual")
    assert plan.kind == "rebuild"
    assert plan.reason == "manual"
    assert plan.result.used == 60  # 60 ≤ 90: everything still fits
    assert plan.emitted_order == ("a", "b", "c")


@pytest.mark.parametrize(
    "ctx", [None, EmittedContext(generation=1, decisions={}, emitted={}, order=(), used=0)]
)
def test_a_forced_rebuild_with_nothing_emitted_still_rebuilds(ctx: EmittedContext | None) -> None:
    plan = plan_build(request(), POOL, ctx, COUNTER, watermark=0.5, force_rebuild="manual")
    assert plan.kind == "rebuild"
    assert plan.reason == "manual"
    assert plan.emitted_order == ()
    assert [it.id for it in plan.result.items] == ["a", "b"]  # 30 + 20 = the target of 50
    assert plan.result.used == 50


def test_an_emitted_item_that_left_the_pool_forces_a_rebuild() -> None:
    ctx = emitted(plan_build(request(), POOL, None, COUNTER))
    plan = plan_build(request(), [A, C], ctx, COUNTER)
    assert plan.kind == "rebuild"
    assert plan.reason == "removed:1"
    assert plan.emitted_order == ("a", "c")


def test_the_rebuild_target_is_the_fixed_part_plus_the_watermark_of_the_rest() -> None:
    pinned = mk("p", Layer.L1, Source.STEERING_NOTE, 60, pinned=True)
    pool = [pinned, B, C]
    ctx = emitted(plan_build(request(), pool, None, COUNTER))
    plan = plan_build(request(), pool, ctx, COUNTER, watermark=0.5, force_rebuild="manual")
    assert plan.kind == "rebuild"
    # Target 60 + 0.5 × (100 − 60) = 80: the pinned note and b (20) fit, c (10) does not.
    assert [it.id for it in plan.result.items] == ["p", "b"]
    assert plan.result.used == 80
    assert actions(plan) == {"b": "included", "c": "over_budget", "p": "included"}
    # at least 10 % of the room beside the fixed part stays free; never above the budget
    assert rebuild_target(100, 0.9, 60) == 96
    assert rebuild_target(100, 0.5, 0) == 50
    assert rebuild_target(100, 0.5, 120) == 100
    # headroom (20) that could not hold a step like the newest (30): 90 % of the room
    assert rebuild_target(100, 0.5, 60, step=30) == 96
    assert rebuild_target(100, 0.5, 60, step=20) == 80


def test_pinned_content_may_overflow_the_watermark_but_is_recorded() -> None:
    pinned = mk("p", Layer.L1, Source.STEERING_NOTE, 95, pinned=True)
    pool = [pinned, B, C]
    ctx = emitted(plan_build(request(), pool, None, COUNTER))
    plan = plan_build(request(), pool, ctx, COUNTER, watermark=0.5, force_rebuild="manual")
    assert plan.kind == "rebuild"
    # Target 90 (the headroom cap); the pinned note alone is 95: kept whole, nothing else fits.
    assert [it.id for it in plan.result.items] == ["p"]
    assert plan.result.used == 95
    assert plan.result.overflow == 0  # 95 ≤ the request's budget of 100
    assert actions(plan) == {"b": "over_budget", "c": "over_budget", "p": "included"}


def test_a_stage_change_rebuilds_without_the_other_stages_steering_note() -> None:
    note = mk("n", Layer.L1, Source.STEERING_NOTE, 5, pinned=True, stage="plan")
    pool = [*POOL, note]
    first = plan_build(request(stage_id="plan"), pool, None, COUNTER)
    assert first.result.decisions["n"].action == "included"
    plan = plan_build(request(stage_id="fix"), pool, emitted(first), COUNTER)
    assert plan.kind == "rebuild"
    assert plan.reason == "other_stage:1"
    assert "n" not in {it.id for it in plan.result.items}
    assert plan.result.decisions["n"].reason == "other_stage"


@pytest.mark.parametrize("watermark", [0.0, -0.5, 0.900001, 1.0, math.nan, math.inf])
def test_a_watermark_outside_zero_to_ninety_percent_is_refused(watermark: float) -> None:
    with pytest.raises(ValueError, match="watermark"):
        plan_build(request(), POOL, None, COUNTER, watermark=watermark)


def test_the_highest_watermark_is_ninety_percent() -> None:
    e = mk("e", Layer.L0, Source.TOOL_LOG, 50)
    ctx = emitted(plan_build(request(), POOL, None, COUNTER))
    plan = plan_build(request(), [*POOL, e], ctx, COUNTER, watermark=0.9)
    # Target 90: a (30) + b (20) + c (10) = 60; e (50) would make 110.
    assert plan.kind == "rebuild"
    assert plan.result.used == 60
    assert plan.result.decisions["e"].reason == "over_budget"


# --- refresh_split ------------------------------------------------------------------------------


def test_refresh_carries_durable_state_and_drops_ephemera_and_history() -> None:
    pool = [
        mk("l0", Layer.L0, Source.TOOL_LOG, 1),
        mk("l1", Layer.L1, Source.USER_REQUIREMENT, 1),
        mk("l2", Layer.L2, Source.WORKER_FINDING, 1),
        mk("l3", Layer.L3, Source.RECALLED_MEMORY, 1),
        mk("l4", Layer.L4, Source.CONVERSATION, 1),
        mk("pin0", Layer.L0, Source.TOOL_LOG, 1, pinned=True),
        mk("must4", Layer.L4, Source.EVENT_HISTORY, 1, mandatory=True),
        mk("new0", Layer.L0, Source.TOOL_LOG, 1),
        mk("new4", Layer.L4, Source.TOOL_LOG, 1),
    ]
    carried, dropped = refresh_split(pool, frozenset({"new0", "new4", "absent"}))
    assert carried == ("l1", "l2", "l3", "pin0", "must4", "new0", "new4")
    assert dropped == ("l0", "l4")


def test_refresh_split_of_an_empty_pool_is_empty() -> None:
    assert refresh_split([], frozenset({"x"})) == ((), ())


# --- shrink_cap ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("failed", "cap", "attempt", "expected"),
    [
        (1000, 0, 1, 700),  # 0.7
        (1000, 0, 2, 490),  # 0.49
        (1000, 0, 3, 343),  # 0.343
        (1000, 1200, 1, 700),  # a cap above what failed: shrink what failed
        (1000, 800, 1, 560),  # a cap below what failed: shrink the cap
        (10, 0, 0, 9),  # attempt 0 still shrinks by at least one token
        (2, 0, 1, 1),
        (1, 0, 1, 1),  # never below one token
        (0, 0, 1, 1),
    ],
)
def test_shrink_cap_shrinks_geometrically(
    failed: int, cap: int, attempt: int, expected: int
) -> None:
    assert shrink_cap(failed, cap, attempt) == expected


@pytest.mark.parametrize(
    ("failed", "cap", "attempt", "provider", "expected"),
    [
        (1000, 1000, 1, (2000, 1000), 475),  # 1000 × 1/2 × 0.95
        (1000, 1000, 2, (2000, 1000), 451),  # 1000 × 1/2 × 0.9025 = 451.25
        (1000, 0, 1, (400_000, 200_000), 475),
        (1000, 500, 1, (1100, 1000), 499),  # 863 by the ratio, but below the cap of 500
        (1000, 1000, 0, (1001, 1000), 999),  # 999.0…, and at least one below what failed
        # The provider's limit is not below its count: the ratio says nothing, shrink by 0.7.
        (1000, 1000, 1, (2000, 2000), 700),
        (1000, 1000, 1, (2000, 3000), 700),
        (1000, 1000, 1, (0, 1000), 700),
        (1000, 1000, 1, (2000, 0), 700),
    ],
)
def test_shrink_cap_uses_the_providers_ratio_when_its_limit_is_below_its_count(
    failed: int, cap: int, attempt: int, provider: tuple[int, int], expected: int
) -> None:
    prompt, limit = provider  # the provider's count of the prompt, and its limit
    got = shrink_cap(
        failed, cap, attempt, provider_prompt_tokens=prompt, provider_limit_tokens=limit
    )
    assert got == expected


def test_the_latest_step_policy_keeps_only_current_recent_failures() -> None:
    """A failure a later passing run of the same command superseded is not kept, nor one
    older than ten steps; the agent's own command re-issued is not a pass."""

    def it(iid: str, source: Source, sig: str, *, failure: bool = False) -> Item:
        return Item(id=iid, layer=Layer.L0, source=source, content=iid, group=iid.split(".", maxsplit=1)[0],
                    tool_signature=sig, failure=failure)  # fmt: skip

    fixed = it("s1.o", Source.TEST_RESULT, "pytest", failure=True)
    passed = it("s2.o", Source.TEST_RESULT, "pytest")
    retried = it("s3.o", Source.TOOL_LOG, "edit 3:5", failure=True)
    again = it("s4.a", Source.CONVERSATION, "edit 3:5")  # the same command, issued again
    latest = it("s5.o", Source.TOOL_LOG, "ls")
    assert keep_ids([fixed, passed, retried, again, latest]) == ("s5.o", "s3.o")
    old = it("s0.o", Source.TOOL_LOG, "make", failure=True)
    steps = [it(f"t{n}.o", Source.TOOL_LOG, f"cmd {n}") for n in range(11)]
    assert keep_ids([old, *steps]) == ("t10.o",)  # eleven steps later: not recent


def test_the_newest_step_is_never_a_working_set() -> None:
    """A build records its working set after the steps it summarises: the latest-step
    policy and the headroom rule look past it to the agent's newest step."""
    step = [
        mk("s1.a", Layer.L0, Source.CONVERSATION, 5),
        mk("s1.o", Layer.L0, Source.TOOL_LOG, 40),
    ]
    step = [msgspec.structs.replace(it, group="step-1") for it in step]
    ws = Item(id="ws.1", layer=Layer.L1, source=Source.GENERATED_SUMMARY, content="w",
              token_count=9, source_id="working-set")  # fmt: skip
    assert keep_ids([*step, ws]) == ("s1.a", "s1.o")
    assert newest_step_tokens([*step, ws]) == 45
    assert newest_step_tokens([ws]) == 0
