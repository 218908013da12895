"""Invariants of every packing strategy over random pools, budgets and scopes."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain import packing
from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.packing import DROP_REASONS, PackResult
from ctxledger.domain.prompt import render_item
from ctxledger.domain.ranked_pack import pack
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.retrieval import retrieve
from ctxledger.domain.strategies import STRATEGIES, get_strategy
from ctxledger.domain.strategies.layered import LayeredStrategy
from ctxledger.domain.strategies.role_optimized import RAW_CODE_TOKENS
from ctxledger.domain.strategies.summary import KEPT_LAYERS, KEPT_SOURCES
from ctxledger.domain.tokens import EstimatingCounter
from tests.oracles import packing_spec
from tests.property.strategies_items import build_requests, item_pools

COUNTER = EstimatingCounter()
NAMES = sorted(STRATEGIES)
MARKER = re.compile(r"\[… \d+ tokens clipped …\]")
IN = ("included", "compressed", "clipped")
ALWAYS_KEPT = (Source.STEERING_NOTE, Source.EVENT_HISTORY)
EVICTABLE = (Layer.L1, Layer.L2)


def tokens_of(item: Item) -> int:
    return item.token_count if item.token_count > 0 else COUNTER.count(item.content)


def is_forced(item: Item, strategy: str) -> bool:
    """Pinned and mandatory items and role instructions (``layered`` also keeps steering
    notes and event history)."""
    own = item.pinned or item.mandatory or item.source is Source.ROLE_INSTRUCTION
    return own or (strategy == "layered" and item.source in ALWAYS_KEPT)


def units(pool: Sequence[Item]) -> list[list[Item]]:
    groups: dict[str, list[Item]] = defaultdict(list)
    out: list[list[Item]] = []
    for it in pool:
        if it.group:
            if it.group not in groups:
                out.append(groups[it.group])
            groups[it.group].append(it)
        else:
            out.append([it])
    return out


def forced_ids(pool: Sequence[Item], strategy: str) -> set[str]:
    return {it.id for u in units(pool) if any(is_forced(m, strategy) for m in u) for it in u}


def scope_excludes(scope: Scope, it: Item) -> bool:
    if scope.layers and it.layer not in scope.layers:
        return True
    if scope.sources and it.source not in scope.sources:
        return True
    if scope.exclude_project_memory and (
        it.layer is Layer.L3 or it.source is Source.RECALLED_MEMORY
    ):
        return True
    deps = scope.dependency_task_ids
    return deps is not None and it.source is Source.PARENT_REPORT and it.task not in deps


def run(request: BuildRequest, pool: list[Item], name: str) -> PackResult:
    return get_strategy(name).select(request, retrieve(request, pool), COUNTER)


pools_and_requests = st.tuples(item_pools(), build_requests(), st.sampled_from(NAMES))


@given(pools_and_requests)
def test_every_candidate_gets_exactly_one_decision(
    case: tuple[list[Item], BuildRequest, str],
) -> None:
    pool, request, name = case
    res = run(request, pool, name)
    assert set(res.decisions) == {it.id for it in pool}
    assert all(k == d.item_id for k, d in res.decisions.items())
    selected = [it.id for it in res.items]
    assert len(selected) == len(set(selected))
    assert set(selected) == {k for k, d in res.decisions.items() if d.action in IN}
    for d in res.decisions.values():
        if d.action == "dropped":
            assert d.reason in DROP_REASONS
            assert d.tokens_after == 0
    assert res.strategy == name
    assert res.counter == "estimate-4cpb"
    assert res.metadata.strategies_applied[0] == name
    assert res.metadata.entries_dropped == sum(
        d.action == "dropped" for d in res.decisions.values()
    )


@given(pools_and_requests)
def test_used_is_the_sum_of_what_was_selected(case: tuple[list[Item], BuildRequest, str]) -> None:
    pool, request, name = case
    res = run(request, pool, name)
    by_id = {it.id: it for it in pool}
    assert res.used == sum(it.token_count for it in res.items)
    assert res.used == sum(d.tokens_after for d in res.decisions.values() if d.action in IN)
    for it in res.items:
        d = res.decisions[it.id]
        assert d.tokens_before == tokens_of(by_id[it.id])
        if d.action == "included":
            assert it.content == by_id[it.id].content
            assert it.token_count == tokens_of(by_id[it.id])
        else:  # compressed or clipped: shorter, and counted as rendered with the pack's counter
            assert it.token_count == COUNTER.count(render_item(it))
            assert d.tokens_after < d.tokens_before
            assert d.method


@given(pools_and_requests)
def test_budget_holds_except_recorded_overflow(case: tuple[list[Item], BuildRequest, str]) -> None:
    pool, request, name = case
    res = run(request, pool, name)
    assert res.overflow == max(0, res.used - res.budget)
    assert res.budget <= request.budget
    if name == "aggressive_refresh":  # 60 % of the room beside the forced items
        own: dict[str, int] = {}
        for it in pool:
            own.setdefault(it.id, tokens_of(it) if is_forced(it, name) else 0)
        fixed = sum(own.values())
        room = max(0, request.budget - fixed)
        assert res.budget == min(request.budget, fixed + room * 60 // 100)
    else:
        assert res.budget == request.budget
    forced = forced_ids(pool, name)
    forced_total = sum(tokens_of(it) for it in pool if it.id in forced)
    # The budget is a hard limit for every strategy (layered included): nothing but forced
    # units (pinned/mandatory, and layered's steering notes and event history) may push
    # used over it, and then nothing else is in.
    assert res.used <= max(res.budget, forced_total)
    if res.overflow:
        assert {it.id for it in res.items} == forced


@given(pools_and_requests)
def test_pinned_and_mandatory_are_never_dropped_clipped_or_compressed(
    case: tuple[list[Item], BuildRequest, str],
) -> None:
    pool, request, name = case
    res = run(request, pool, name)
    out = {it.id: it for it in res.items}
    for it in pool:
        if it.pinned or it.mandatory or it.id in forced_ids(pool, name):
            assert res.decisions[it.id].action == "included"
            assert out[it.id].content == it.content


@given(pools_and_requests)
def test_groups_are_never_split(case: tuple[list[Item], BuildRequest, str]) -> None:
    pool, request, name = case
    res = run(request, pool, name)
    for u in units(pool):
        fates = {res.decisions[m.id].action in IN for m in u}
        assert len(fates) == 1, [res.decisions[m.id] for m in u]


@given(pools_and_requests)
def test_scope_exclusions_and_clipping(case: tuple[list[Item], BuildRequest, str]) -> None:
    pool, request, name = case
    res = run(request, pool, name)
    scope = request.scope
    forced = forced_ids(pool, name)
    for u in units(pool):
        if any(m.id in forced for m in u):
            continue
        if any(scope_excludes(scope, m) for m in u):
            for m in u:
                assert res.decisions[m.id] == msgspec.structs.replace(
                    res.decisions[m.id], action="dropped", reason="excluded_by_scope"
                )
    for it in res.items:
        d = res.decisions[it.id]
        if d.action == "clipped":
            assert scope.clip_above_tokens > 0
            assert MARKER.search(it.content)
        if d.action in ("clipped", "compressed"):
            assert it.id not in forced


@given(pools_and_requests)
def test_same_inputs_give_byte_identical_results(
    case: tuple[list[Item], BuildRequest, str],
) -> None:
    pool, request, name = case
    first = msgspec.json.encode(run(request, pool, name))
    # Fresh, equal objects (no identity-keyed memo can help) and a second run.
    copy = msgspec.json.decode(msgspec.json.encode(pool), type=list[Item])
    assert msgspec.json.encode(run(request, copy, name)) == first
    assert msgspec.json.encode(run(request, pool, name)) == first


@given(pools_and_requests)
def test_result_does_not_depend_on_candidate_order(
    case: tuple[list[Item], BuildRequest, str],
) -> None:
    pool, request, name = case
    cands = retrieve(request, pool)
    a = get_strategy(name).select(request, cands, COUNTER)
    b = get_strategy(name).select(request, cands[::-1], COUNTER)
    assert a.items == b.items
    assert a.decisions == b.decisions
    assert a.used == b.used


@given(item_pools(), build_requests())
def test_strategy_specific_omissions(pool: list[Item], request: BuildRequest) -> None:
    by_id = {it.id: it for it in pool}
    summary = run(request, pool, "summary")
    forced = forced_ids(pool, "summary")
    for it in summary.items:
        if it.id not in forced:
            assert it.layer in KEPT_LAYERS or it.source in KEPT_SOURCES
    aggressive = run(request, pool, "aggressive_refresh")
    for it in aggressive.items:
        if it.id not in forced and request.phase and it.phase:
            assert it.phase == request.phase
    role = run(request, pool, "role_optimized")
    for it in role.items:
        if it.id in forced:
            continue
        if request.role == "primary":
            big = (
                it.source is Source.REPOSITORY_SOURCE and tokens_of(by_id[it.id]) > RAW_CODE_TOKENS
            )
            assert not big
        if request.role == "probe" and it.source is Source.PARENT_REPORT:
            assert it.task == request.task


@given(item_pools(), build_requests(strategy="full_history"))
def test_full_history_fills_chronologically_and_stops(
    pool: list[Item], request: BuildRequest
) -> None:
    res = run(request, pool, "full_history")
    forced = forced_ids(pool, "full_history")

    def when(it: Item) -> tuple[float, str]:
        return (it.observed_at.timestamp() if it.observed_at else float("-inf"), it.id)

    # A group sits at its earliest member; everything else is strictly chronological.
    unit_when = {m.id: min(when(x) for x in u) for u in units(pool) for m in u}
    ordered = [unit_when[it.id] for it in res.items]
    assert ordered == sorted(ordered)
    # After the first unit that did not fit, nothing later (and unforced) was taken.
    misses = [
        when(it) for it in pool
        if res.decisions[it.id].reason == "over_budget" and it.id not in forced
    ]  # fmt: skip
    if misses:
        first_miss = min(misses)
        for it in pool:
            if it.id not in forced and not it.group and when(it) > first_miss:
                assert res.decisions[it.id].action == "dropped"


@given(item_pools(max_size=40), build_requests(strategy="layered"), st.sampled_from([20, 3, 0]))
def test_layered_obeys_core_context_invariants(
    pool: list[Item], request: BuildRequest, keep_last: int
) -> None:
    strategy = LayeredStrategy(conversation_keep_last=keep_last)
    res = strategy.select(request, retrieve(request, pool), COUNTER)
    for it in pool:
        d = res.decisions[it.id]
        # Steering notes and event history are never dropped.
        if it.source in ALWAYS_KEPT:
            assert d.action == "included"
    unit_list = units(pool)
    forced = forced_ids(pool, "layered")
    # L0, L3 and L4 are evicted (dropped over budget) only once no evictable L1/L2 unit is
    # left: the budget is a hard limit, but they go last.
    l034_evicted = any(
        "over_budget" in {res.decisions[m.id].reason for m in u}
        and not all(m.layer in EVICTABLE for m in u)
        for u in unit_list
    )
    if l034_evicted:
        for u in unit_list:
            if all(m.layer in EVICTABLE for m in u) and not any(m.id in forced for m in u):
                assert all(res.decisions[m.id].action == "dropped" for m in u)

    def evictable(u: list[Item]) -> bool:
        return all(m.layer in EVICTABLE for m in u) and not any(m.id in forced for m in u)

    l1_evicted = any(
        evictable(u)
        and min(m.layer for m in u) is Layer.L1
        and res.decisions[u[0].id].reason == "over_budget"
        for u in unit_list
    )
    if l1_evicted:
        for u in unit_list:
            if evictable(u) and min(m.layer for m in u) is Layer.L2:
                assert res.decisions[u[0].id].action == "dropped"
    # Per-source compression of ungrouped, unforced items.
    kept_artifacts: dict[str, int] = defaultdict(int)
    kept_logs: dict[str, int] = defaultdict(int)
    kept_talk = 0
    for it in pool:
        if it.group or it.id in forced:
            continue
        reason = res.decisions[it.id].reason
        if (
            it.source is Source.ARTIFACT
            and it.source_id
            and reason not in ("superseded", "excluded_by_scope")
        ):
            kept_artifacts[it.source_id] += 1
        if it.source is Source.TOOL_LOG and reason not in ("duplicate", "excluded_by_scope"):
            kept_logs[it.content] += 1
        if it.source is Source.CONVERSATION and reason not in (
            "outside_conversation_window",
            "excluded_by_scope",
        ):
            kept_talk += 1
    assert all(n == 1 for n in kept_artifacts.values())
    assert all(n == 1 for n in kept_logs.values())
    assert kept_talk <= keep_last


@pytest.mark.parametrize("name", NAMES)
def test_empty_pool_gives_an_empty_pack(name: str) -> None:
    from tests.property.strategies_items import NOW

    res = get_strategy(name).select(BuildRequest(agent_id="a", budget=10, now=NOW), [], COUNTER)
    assert res.items == ()
    assert res.decisions == {}
    assert res.used == 0
    assert res.overflow == 0


def _tail_unit_by_unit(
    units: list[packing.Unit], start: int, acc: packing.Accumulator, *, dedupe: bool
) -> None:
    """The pack loop's own per-unit drops for the tail (what ``_drop_tail`` does in one pass)."""
    for u in units[start:]:
        if type(u) is packing.Candidate and dedupe and u.item.content in acc.contents:
            acc.drop(u, packing.DUPLICATE)
            acc.strategies.add("dedupe")
        else:
            acc.drop_unit(u, packing.OVER_BUDGET)


@given(pools_and_requests, st.integers(min_value=1, max_value=120))
def test_the_over_budget_tail_in_one_pass_equals_dropping_unit_by_unit(
    case: tuple[list[Item], BuildRequest, str], budget: int
) -> None:
    pool, request, name = case
    # small budgets too, so the budget runs out with candidates (and duplicates) still left
    request = msgspec.structs.replace(request, budget=min(request.budget, budget))
    ranked = retrieve(request, pool)
    # The general packer (the specification) with its one-pass tail, and dropping unit by unit.
    fast = packing_spec.pack(request, list(ranked), COUNTER, strategy_name=name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(packing_spec, "_drop_tail", _tail_unit_by_unit)
        slow = packing_spec.pack(request, list(ranked), COUNTER, strategy_name=name)
    assert msgspec.json.encode(fast) == msgspec.json.encode(slow)
    # The product's packer decides the same (its own tail over positions).
    made = pack(request, ranked, COUNTER, strategy_name=name)
    assert msgspec.json.encode(made) == msgspec.json.encode(fast)
