"""Each strategy's distinctive behaviour on small hand-made pools."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import msgspec
import pytest

from ctxledger.domain.clipping import clip_marker
from ctxledger.domain.decision_point import DefaultDecisionPointBuilder
from ctxledger.domain.errors import BudgetError, UnknownStrategyError
from ctxledger.domain.model import ContextPack, Item, Layer, Source
from ctxledger.domain.packing import PackResult
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.retrieval import retrieve
from ctxledger.domain.strategies import (
    BASELINES,
    STRATEGIES,
    LayeredStrategy,
    get_strategy,
    select_context,
    strategy_names,
)
from ctxledger.domain.tokens import EstimatingCounter

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
COUNTER = EstimatingCounter()


def mk(item_id: str, layer: Layer, source: Source, tokens: int, **kw: object) -> Item:
    fields: dict[str, object] = {
        "id": item_id,
        "layer": layer,
        "source": source,
        "content": f"content of {item_id}",
        "token_count": tokens,
        "observed_at": NOW - timedelta(minutes=int(str(kw.pop("age", 60)))),
    }
    fields.update(kw)
    return msgspec.convert(fields, Item, from_attributes=True, strict=False)


def build(pool: list[Item], budget: int, strategy: str = "variable", **kw: object) -> PackResult:
    request = BuildRequest(agent_id="a", budget=budget, now=NOW, strategy=strategy)
    request = msgspec.structs.replace(request, **kw)
    return select_context(request, pool, COUNTER)


def fate(res: PackResult) -> dict[str, str]:
    return {k: d.reason or d.action for k, d in res.decisions.items()}


# --- registry -------------------------------------------------------------------------------


def test_registry_names_the_six_strategies_and_the_three_baselines() -> None:
    assert strategy_names() == (
        "aggressive_refresh",
        "full_history",
        "keep_first_last",
        "layered",
        "role_optimized",
        "summary",
        "trim_last",
        "variable",
        "window",
    )
    assert BASELINES == ("trim_last", "keep_first_last", "window")
    for name, strategy in STRATEGIES.items():
        assert strategy.name == name
        assert get_strategy(name) is strategy


def test_unknown_strategy_lists_the_valid_names() -> None:
    with pytest.raises(UnknownStrategyError, match="valid strategies: aggressive_refresh, "):
        get_strategy("fancy")
    with pytest.raises(UnknownStrategyError):
        build([], 10, strategy="fancy")


def test_registry_cannot_be_changed_at_runtime() -> None:
    with pytest.raises(TypeError):
        STRATEGIES["mine"] = STRATEGIES["variable"]  # type: ignore[index]


def test_non_positive_budget_is_refused() -> None:
    with pytest.raises(BudgetError):
        build([mk("a", Layer.L1, Source.USER_REQUIREMENT, 1)], 0)


# --- variable -------------------------------------------------------------------------------


def test_variable_fills_by_priority_tier() -> None:
    pool = [
        mk("log", Layer.L0, Source.TOOL_LOG, 100),
        mk("report", Layer.L2, Source.PARENT_REPORT, 100),
        mk("code", Layer.L2, Source.REPOSITORY_SOURCE, 100),
        mk("goal", Layer.L1, Source.USER_REQUIREMENT, 100),
        mk("pin", Layer.L0, Source.UNVERIFIED_HYPOTHESIS, 100, pinned=True),
    ]
    res = build(pool, 350)
    assert fate(res) == {
        "pin": "included",
        "goal": "included",
        "code": "included",
        "report": "over_budget",
        "log": "over_budget",
    }
    assert [i.id for i in res.items] == ["pin", "goal", "code"]
    assert (res.used, res.overflow) == (300, 0)


def test_variable_takes_a_smaller_later_item_that_still_fits() -> None:
    pool = [
        mk("big", Layer.L2, Source.REPOSITORY_SOURCE, 300),
        mk("small", Layer.L0, Source.TOOL_LOG, 50),
    ]
    assert fate(build(pool, 200)) == {"big": "over_budget", "small": "included"}


@pytest.mark.parametrize(
    "strategy", ["variable", "summary", "aggressive_refresh", "role_optimized"]
)
def test_raw_history_is_observability_only(strategy: str) -> None:
    """Seed 000: raw history (L4) never reaches a prompt — except through full_history and
    layered (seed 004's L4 = event history), which keep it by design."""
    pool = [
        mk("goal", Layer.L1, Source.USER_REQUIREMENT, 10),
        mk("log", Layer.L4, Source.TOOL_LOG, 10),
        mk("talk", Layer.L4, Source.CONVERSATION, 10),
    ]
    res = build(pool, 1000, strategy=strategy)
    assert (fate(res)["log"], fate(res)["talk"]) == ("raw_history", "raw_history")
    assert fate(res)["goal"] == "included"
    for keeper in ("full_history", "layered"):
        assert fate(build(pool, 1000, strategy=keeper))["log"] == "included"


def test_pinned_and_mandatory_overflow_is_recorded_not_hidden() -> None:
    pool = [
        mk("pin", Layer.L1, Source.STEERING_NOTE, 300, pinned=True),
        mk("must", Layer.L1, Source.USER_REQUIREMENT, 300, mandatory=True),
        mk("tiny", Layer.L1, Source.USER_REQUIREMENT, 1),
    ]
    res = build(pool, 500)
    assert fate(res) == {"pin": "included", "must": "included", "tiny": "over_budget"}
    assert (res.used, res.budget, res.overflow) == (600, 500, 100)


def test_duplicates_are_dropped_after_the_first() -> None:
    pool = [
        mk("a", Layer.L2, Source.WORKER_FINDING, 10, content="same finding"),
        mk("b", Layer.L0, Source.TOOL_LOG, 10, content="same finding"),
    ]
    assert fate(build(pool, 100)) == {"a": "included", "b": "duplicate"}


def test_a_group_is_dropped_whole_even_if_one_member_would_fit() -> None:
    pool = [
        mk("g-a", Layer.L2, Source.WORKER_FINDING, 60, group="g"),
        mk("g-b", Layer.L2, Source.WORKER_FINDING, 60, group="g"),
        mk("solo", Layer.L2, Source.WORKER_FINDING, 30),
    ]
    assert fate(build(pool, 100)) == {
        "g-a": "over_budget",
        "g-b": "over_budget",
        "solo": "included",
    }


def test_a_group_with_a_pinned_member_is_kept_whole() -> None:
    pool = [
        mk("g-a", Layer.L2, Source.WORKER_FINDING, 60, group="g", pinned=True),
        mk("g-b", Layer.L4, Source.TOOL_LOG, 60, group="g"),
    ]
    res = build(pool, 100)
    assert fate(res) == {"g-a": "included", "g-b": "included"}
    assert res.overflow == 20


def test_older_artifact_versions_are_superseded() -> None:
    pool = [
        mk("v1", Layer.L2, Source.ARTIFACT, 10, source_id="plan", age=120),
        mk("v2", Layer.L2, Source.ARTIFACT, 10, source_id="plan", age=5),
        mk("other", Layer.L2, Source.ARTIFACT, 10, source_id="notes", age=300),
    ]
    assert fate(build(pool, 100)) == {"v1": "superseded", "v2": "included", "other": "included"}


PYTEST_LOG = "\n".join(
    [
        "============================= test session starts ==============================",
        *[f"tests/test_m.py::test_{i} PASSED" for i in range(150)],
        "=================================== FAILURES ===================================",
        "___________________________________ test_pay ___________________________________",
        "E       AssertionError: assert 3 == 4",
        "tests/test_pay.py:12: AssertionError",
        "=========================== short test summary info ============================",
        "FAILED tests/test_pay.py::test_pay - AssertionError: assert 3 == 4",
        "========================= 1 failed, 150 passed in 1.00s =========================",
    ]
)


def test_a_long_failure_log_is_compressed_rather_than_dropped() -> None:
    log = mk("log", Layer.L0, Source.TEST_RESULT, 0, content=PYTEST_LOG, failure=True)
    res = build([log], 300)
    d = res.decisions["log"]
    assert (d.action, d.method, d.reason) == ("compressed", "extract:pytest", "over_budget")
    assert d.tokens_before == COUNTER.count(PYTEST_LOG) > 300
    assert d.tokens_after == res.used <= 300
    (item,) = res.items
    assert "FAILED tests/test_pay.py::test_pay" in item.content
    assert "extract:pytest" in res.metadata.strategies_applied
    assert res.metadata.layers_truncated == (Layer.L0,)


# --- scope ----------------------------------------------------------------------------------


def test_scope_limits_layers_and_sources_with_reasons() -> None:
    pool = [
        mk("goal", Layer.L1, Source.USER_REQUIREMENT, 10),
        mk("code", Layer.L2, Source.REPOSITORY_SOURCE, 10),
        mk("log", Layer.L4, Source.TOOL_LOG, 10),
        mk("pinned-log", Layer.L4, Source.TOOL_LOG, 10, pinned=True),
    ]
    scope = Scope(layers=(Layer.L1, Layer.L2), sources=(Source.USER_REQUIREMENT,))
    assert fate(build(pool, 100, scope=scope)) == {
        "goal": "included",
        "code": "excluded_by_scope",
        "log": "excluded_by_scope",
        "pinned-log": "included",  # pinned items are never excluded
    }


def test_scope_excludes_project_memory_and_unrelated_parent_reports() -> None:
    pool = [
        mk("memory", Layer.L3, Source.VERIFIED_FACT, 10),
        mk("recalled", Layer.L2, Source.RECALLED_MEMORY, 10),
        mk("dep-report", Layer.L2, Source.PARENT_REPORT, 10, task="t-dep"),
        mk("other-report", Layer.L2, Source.PARENT_REPORT, 10, task="t-other"),
    ]
    scope = Scope(exclude_project_memory=True, dependency_task_ids=("t-dep",))
    assert fate(build(pool, 100, scope=scope)) == {
        "memory": "excluded_by_scope",
        "recalled": "excluded_by_scope",
        "dep-report": "included",
        "other-report": "excluded_by_scope",
    }


def test_scope_clips_oversized_items_but_never_pinned_ones() -> None:
    body = "\n".join(f"line {i} of a long file" for i in range(400))
    pool = [
        mk("big", Layer.L2, Source.REPOSITORY_SOURCE, 0, content=body),
        mk("big-pinned", Layer.L1, Source.USER_REQUIREMENT, 0, content=body + " ", pinned=True),
    ]
    res = build(pool, 10_000, scope=Scope(clip_above_tokens=120))
    d = res.decisions["big"]
    assert (d.action, d.method, d.reason) == ("clipped", "head_tail", "scope_clip")
    assert d.tokens_after <= 120 < d.tokens_before
    clipped = next(i for i in res.items if i.id == "big")
    assert clipped.content.startswith("line 0 of a long file\n")
    assert clipped.content.endswith("line 399 of a long file")
    m = re.search(r"\[… (\d+) tokens clipped …\]", clipped.content)
    assert m is not None
    assert clip_marker(int(m.group(1))) in clipped.content
    assert res.decisions["big-pinned"].action == "included"


# --- full_history ---------------------------------------------------------------------------


def test_full_history_is_chronological_and_stops_at_the_first_miss() -> None:
    pool = [
        mk("t3", Layer.L4, Source.TOOL_LOG, 50, age=10),
        mk("t1", Layer.L4, Source.CONVERSATION, 100, age=300),
        mk("t2", Layer.L2, Source.REPOSITORY_SOURCE, 300, age=200),
    ]
    res = build(pool, 200, strategy="full_history")
    assert fate(res) == {"t1": "included", "t2": "over_budget", "t3": "over_budget"}
    # variable never sends raw history (L4): that is full_history's alone
    assert fate(build(pool, 200))["t3"] == "raw_history"


def test_full_history_keeps_raw_history_in_time_order() -> None:
    pool = [mk(f"h{i}", Layer.L4, Source.TOOL_LOG, 10, age=100 - i) for i in range(5)]
    res = build(pool, 1000, strategy="full_history")
    assert [i.id for i in res.items] == ["h0", "h1", "h2", "h3", "h4"]


# --- summary --------------------------------------------------------------------------------


def test_summary_keeps_task_state_findings_and_reports_only() -> None:
    pool = [
        mk("goal", Layer.L1, Source.USER_REQUIREMENT, 10),
        mk("finding", Layer.L2, Source.WORKER_FINDING, 10),
        mk("report", Layer.L3, Source.PARENT_REPORT, 10),
        mk("grep", Layer.L0, Source.TOOL_LOG, 10),
        mk("memory", Layer.L3, Source.VERIFIED_FACT, 10),
        mk("raw", Layer.L4, Source.CONVERSATION, 10),
        mk("raw-pinned", Layer.L4, Source.CONVERSATION, 10, pinned=True),
    ]
    assert fate(build(pool, 1000, strategy="summary")) == {
        "goal": "included",
        "finding": "included",
        "report": "included",
        "grep": "omitted_by_strategy",
        "memory": "omitted_by_strategy",
        "raw": "raw_history",  # raw history never reaches a summary prompt …
        "raw-pinned": "included",  # … unless pinned
    }


# --- aggressive_refresh ---------------------------------------------------------------------


def test_aggressive_refresh_packs_into_sixty_percent_and_drops_other_phases() -> None:
    pool = [
        mk("now-a", Layer.L2, Source.WORKER_FINDING, 300, phase="implement"),
        mk("now-b", Layer.L2, Source.WORKER_FINDING, 350, phase="implement"),
        mk("old", Layer.L2, Source.WORKER_FINDING, 10, phase="explore"),
        mk("timeless", Layer.L1, Source.USER_REQUIREMENT, 10),
    ]
    res = build(pool, 1000, strategy="aggressive_refresh", phase="implement")
    assert res.budget == 600
    assert fate(res) == {
        "timeless": "included",
        "now-a": "included",
        "now-b": "over_budget",  # 10 + 300 + 350 > 600
        "old": "other_phase",
    }
    assert fate(build(pool, 1000, phase="implement"))["now-b"] == "included"


# --- role_optimized -------------------------------------------------------------------------


def test_primary_omits_raw_code_dumps() -> None:
    pool = [
        mk("dump", Layer.L2, Source.REPOSITORY_SOURCE, 2000),
        mk("snippet", Layer.L2, Source.REPOSITORY_SOURCE, 120),
        mk("report", Layer.L2, Source.PARENT_REPORT, 100),
    ]
    assert fate(build(pool, 10_000, strategy="role_optimized", role="primary")) == {
        "dump": "omitted_by_strategy",
        "snippet": "included",
        "report": "included",
    }
    assert fate(build(pool, 10_000, strategy="role_optimized", role="worker"))["dump"] == "included"


def test_probe_omits_reports_of_other_tasks() -> None:
    pool = [
        mk("mine", Layer.L2, Source.PARENT_REPORT, 10, task="t1"),
        mk("theirs", Layer.L2, Source.PARENT_REPORT, 10, task="t2"),
        mk("code", Layer.L2, Source.REPOSITORY_SOURCE, 2000),
    ]
    assert fate(build(pool, 10_000, strategy="role_optimized", role="probe", task="t1")) == {
        "mine": "included",
        "theirs": "omitted_by_strategy",
        "code": "included",
    }


# --- layered (core-context) -----------------------------------------------------------------


def test_layered_never_drops_steering_notes_or_event_history() -> None:
    pool = [
        mk("steer", Layer.L1, Source.STEERING_NOTE, 400),
        mk("events", Layer.L2, Source.EVENT_HISTORY, 400),
        mk("finding", Layer.L2, Source.WORKER_FINDING, 10),
    ]
    res = build(pool, 500, strategy="layered")
    assert fate(res) == {"steer": "included", "events": "included", "finding": "over_budget"}
    assert res.overflow == 300


def test_layered_per_source_compression() -> None:
    pool = [
        mk("art-old", Layer.L2, Source.ARTIFACT, 5, source_id="doc", age=50),
        mk("art-new", Layer.L2, Source.ARTIFACT, 5, source_id="doc", age=5),
        mk("log-1", Layer.L0, Source.TOOL_LOG, 5, content="ls\nREADME", age=40),
        mk("log-2", Layer.L0, Source.TOOL_LOG, 5, content="ls\nREADME", age=30),
        *[mk(f"c{i}", Layer.L1, Source.CONVERSATION, 5, age=100 - i) for i in range(4)],
    ]
    res = LayeredStrategy(conversation_keep_last=2).select(
        BuildRequest(agent_id="a", budget=1000, now=NOW), retrieve(
            BuildRequest(agent_id="a", budget=1000, now=NOW), pool), COUNTER
    )  # fmt: skip
    assert fate(res) == {
        "art-old": "superseded",
        "art-new": "included",
        "log-1": "included",
        "log-2": "duplicate",
        "c0": "outside_conversation_window",
        "c1": "outside_conversation_window",
        "c2": "included",
        "c3": "included",
    }
    assert res.metadata.strategies_applied == (
        "layered",
        "artifact:latest_per_source",
        "conversation:keep_last_2",
        "tool_log:dedupe",
    )


def test_layered_evicts_l2_then_l1_and_l0_l3_l4_only_as_a_last_resort() -> None:
    pool = [
        mk("live", Layer.L0, Source.TOOL_LOG, 100),
        mk("stage", Layer.L1, Source.USER_REQUIREMENT, 100),
        mk("memory-old", Layer.L2, Source.WORKER_FINDING, 100, age=90),
        mk("memory-new", Layer.L2, Source.WORKER_FINDING, 100, age=10),
        mk("project", Layer.L3, Source.VERIFIED_FACT, 100),
        mk("archive", Layer.L4, Source.CONVERSATION, 100),
    ]
    res = build(pool, 450, strategy="layered")
    assert fate(res) == {
        "live": "included",
        "stage": "included",
        "memory-old": "over_budget",  # oldest L2 first …
        "memory-new": "over_budget",  # … then the next L2 …
        "project": "included",
        "archive": "included",
    }
    assert (res.used, res.overflow) == (400, 0)
    tight = build(pool, 250, strategy="layered")
    # … then L1; still over budget, so L0/L3/L4 go too, oldest first: the budget is a hard
    # limit (only pinned content may exceed it)
    assert fate(tight)["stage"] == "over_budget"
    assert tight.used <= 250
    assert tight.overflow == 0
    assert len(tight.items) == 2
    assert {i.id for i in tight.items} < {"live", "project", "archive"}
    assert tight.metadata.strategies_applied == (
        "layered", "evict:L1", "evict:L2", "evict:over_budget",
    )  # fmt: skip


def test_by_layer_groups_the_selection_for_a_context_pack() -> None:
    pool = [
        mk("code", Layer.L2, Source.REPOSITORY_SOURCE, 1),
        mk("goal", Layer.L1, Source.USER_REQUIREMENT, 1),
        mk("spec", Layer.L1, Source.USER_REQUIREMENT, 2),
    ]
    layers = build(pool, 100).by_layer()
    assert list(layers) == [Layer.L1, Layer.L2]
    assert [i.id for i in layers[Layer.L1]] == ["goal", "spec"]
    assert [i.id for i in layers[Layer.L2]] == ["code"]


def test_layered_pack_is_ordered_by_layer() -> None:
    pool = [
        mk("l4", Layer.L4, Source.TOOL_LOG, 1),
        mk("l0", Layer.L0, Source.TOOL_LOG, 1, content="other"),
        mk("l2", Layer.L2, Source.WORKER_FINDING, 1),
    ]
    assert [i.id for i in build(pool, 100, strategy="layered").items] == ["l0", "l2", "l4"]


# --- decision point -------------------------------------------------------------------------


def test_decision_point_keeps_only_l0_and_l1() -> None:
    items: dict[Layer, tuple[Item, ...]] = {
        layer: (mk(f"i{layer.value}", layer, Source.TOOL_LOG, 1),) for layer in Layer
    }
    pack = ContextPack(
        id="p",
        session_id="s",
        stage_id="st",
        agent_id="a",
        generation=1,
        layers=items,
        budget_used=5,
        budget_limit=10,
    )
    builder = DefaultDecisionPointBuilder()
    assert [i.id for i in builder.build(pack)] == ["i0", "i1"]
    assert [i.id for i in builder.select(pack.items[::-1])] == ["i0", "i1"]
