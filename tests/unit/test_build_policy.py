"""The pure rules around a build (domain/build_policy.py) on hand-made settings: how a request
resolves from identity, settings and one-off overrides, the refresh ladder, the latest step's
ids and the settings check, with values worked out by hand."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime

import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import ContextEngine, EngineSettings
from ctxledger.adapters.ledger import open_ledger
from ctxledger.domain import events as ev
from ctxledger.domain.build_policy import (
    BuildQuery,
    Overrides,
    latest_step_ids,
    next_refresh_attempt,
    refresh_made_progress,
    resolve_request,
    validate_settings,
)
from ctxledger.domain.errors import (
    InvalidInputError,
    RefreshExhaustedError,
    UnknownStrategyError,
)
from ctxledger.domain.model import AgentIdentity, Layer, Source
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.settings import AgentSettings

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
IDENTITY = AgentIdentity(
    agent_id="a1", role="worker", task="fix auth", budget=1000, session_id="s1"
)
ONLY_L1 = Scope(layers=(Layer.L1,))
ONLY_TOOLS = Scope(sources=(Source.TOOL_LOG,), clip_above_tokens=20)


def resolve(
    *,
    identity: AgentIdentity = IDENTITY,
    settings: AgentSettings | None = None,
    query: BuildQuery | None = None,
    overrides: Overrides | None = None,
    generation_scope: Scope | None = None,
    window_cap: int = 0,
) -> tuple[BuildRequest, tuple[str, ...]]:
    return resolve_request(
        identity=identity,
        settings=settings if settings is not None else AgentSettings(),
        query=query if query is not None else BuildQuery(),
        overrides=overrides if overrides is not None else Overrides(),
        generation_scope=generation_scope,
        window_cap=window_cap,
        now=NOW,
    )


# --- resolve_request: budget ----------------------------------------------------------------------


def test_the_identity_budget_applies_when_settings_name_none() -> None:
    request, overridden = resolve(settings=AgentSettings(budget=0))
    assert request.budget == 1000
    assert overridden == ()


def test_the_settings_budget_beats_the_identity_budget() -> None:
    request, overridden = resolve(settings=AgentSettings(budget=500))
    assert request.budget == 500
    assert overridden == ()


def test_an_override_beats_settings_and_identity_and_is_named() -> None:
    request, overridden = resolve(
        settings=AgentSettings(budget=500), overrides=Overrides(budget=300)
    )
    assert request.budget == 300
    assert overridden == ("budget",)


def test_an_override_may_also_raise_the_budget() -> None:
    request, overridden = resolve(
        settings=AgentSettings(budget=500), overrides=Overrides(budget=4000)
    )
    assert request.budget == 4000
    assert overridden == ("budget",)


@pytest.mark.parametrize(
    ("settings_budget", "override", "expected_names"),
    [
        (500, 500, ()),  # equals the settings' budget
        (0, 1000, ()),  # equals the identity's budget the settings fall back to
        (0, 999, ("budget",)),
    ],
)
def test_a_budget_override_equal_to_the_effective_budget_is_not_named(
    settings_budget: int, override: int, expected_names: tuple[str, ...]
) -> None:
    request, overridden = resolve(
        settings=AgentSettings(budget=settings_budget), overrides=Overrides(budget=override)
    )
    assert request.budget == override
    assert overridden == expected_names


@pytest.mark.parametrize(
    ("settings_budget", "override", "window_cap", "expected"),
    [
        (0, None, 400, 400),  # identity 1000 capped at 400
        (500, None, 400, 400),
        (500, None, 600, 500),  # a cap above the budget changes nothing
        (500, 3000, 600, 600),  # an override is capped too
        (500, None, 500, 500),
        (500, None, 0, 500),  # 0: no cap learned
        (0, None, 1, 1),
    ],
)
def test_the_budget_never_exceeds_the_learned_window(
    settings_budget: int, override: int | None, window_cap: int, expected: int
) -> None:
    request, _ = resolve(
        settings=AgentSettings(budget=settings_budget),
        overrides=Overrides(budget=override),
        window_cap=window_cap,
    )
    assert request.budget == expected


@pytest.mark.parametrize(
    ("identity_budget", "settings_budget", "override"),
    [(0, 0, None), (1000, 500, 0), (1000, 500, -1), (0, 0, -200)],
)
def test_a_non_positive_budget_is_refused(
    identity_budget: int, settings_budget: int, override: int | None
) -> None:
    identity = AgentIdentity(agent_id="a1", role="worker", budget=identity_budget)
    with pytest.raises(InvalidInputError, match="a build needs a positive token budget") as info:
        resolve(
            identity=identity,
            settings=AgentSettings(budget=settings_budget),
            overrides=Overrides(budget=override),
        )
    assert not isinstance(info.value, UnknownStrategyError)


# --- resolve_request: strategy --------------------------------------------------------------------


def test_the_settings_strategy_applies_without_an_override() -> None:
    request, overridden = resolve(settings=AgentSettings(strategy="layered"))
    assert request.strategy == "layered"
    assert overridden == ()


def test_a_strategy_override_wins_and_is_named() -> None:
    request, overridden = resolve(
        settings=AgentSettings(strategy="layered"), overrides=Overrides(strategy="summary")
    )
    assert request.strategy == "summary"
    assert overridden == ("strategy",)


def test_a_strategy_override_equal_to_the_settings_is_not_named() -> None:
    request, overridden = resolve(
        settings=AgentSettings(strategy="layered"), overrides=Overrides(strategy="layered")
    )
    assert request.strategy == "layered"
    assert overridden == ()


def test_an_unknown_override_strategy_is_refused_naming_the_valid_ones() -> None:
    with pytest.raises(UnknownStrategyError, match=r"unknown strategy 'nope'.*variable"):
        resolve(overrides=Overrides(strategy="nope"))


def test_an_unknown_settings_strategy_is_refused() -> None:
    # AgentSettings does not check names itself (the event decodes any string).
    with pytest.raises(UnknownStrategyError, match="unknown strategy 'gone'"):
        resolve(settings=AgentSettings(strategy="gone"))


def test_a_known_override_rescues_an_unknown_settings_strategy() -> None:
    request, overridden = resolve(
        settings=AgentSettings(strategy="gone"), overrides=Overrides(strategy="variable")
    )
    assert request.strategy == "variable"
    assert overridden == ("strategy",)


# --- resolve_request: scope -----------------------------------------------------------------------


def test_within_a_generation_a_different_scope_override_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="scope is fixed within a generation"):
        resolve(
            settings=AgentSettings(scope=ONLY_L1),
            overrides=Overrides(scope=ONLY_TOOLS),
            generation_scope=ONLY_L1,
        )


def test_within_a_generation_an_override_of_the_default_scope_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="scope is fixed within a generation"):
        resolve(overrides=Overrides(scope=Scope()), generation_scope=ONLY_L1)


def test_within_a_generation_an_equal_scope_override_is_accepted() -> None:
    request, overridden = resolve(
        settings=AgentSettings(scope=ONLY_L1),
        overrides=Overrides(scope=Scope(layers=(Layer.L1,))),
        generation_scope=ONLY_L1,
    )
    assert request.scope == ONLY_L1
    assert overridden == ()


def test_within_a_generation_its_scope_wins_over_new_settings() -> None:
    """Settings changed to ONLY_TOOLS mid-generation: the generation keeps ONLY_L1."""
    request, overridden = resolve(
        settings=AgentSettings(scope=ONLY_TOOLS), generation_scope=ONLY_L1
    )
    assert request.scope == ONLY_L1
    assert overridden == ()


def test_at_a_boundary_the_settings_scope_applies() -> None:
    request, overridden = resolve(settings=AgentSettings(scope=ONLY_TOOLS))
    assert request.scope == ONLY_TOOLS
    assert overridden == ()


def test_at_a_boundary_a_scope_override_applies_and_is_named() -> None:
    request, overridden = resolve(
        settings=AgentSettings(scope=ONLY_TOOLS), overrides=Overrides(scope=ONLY_L1)
    )
    assert request.scope == ONLY_L1
    assert overridden == ("scope",)


def test_every_overridden_setting_is_named_in_field_order() -> None:
    request, overridden = resolve(
        settings=AgentSettings(budget=500, strategy="layered"),
        overrides=Overrides(budget=200, strategy="summary", scope=ONLY_L1),
    )
    assert (request.budget, request.strategy, request.scope) == (200, "summary", ONLY_L1)
    assert overridden == ("budget", "strategy", "scope")


# --- resolve_request: query -----------------------------------------------------------------------


def test_the_query_is_copied_and_identity_fields_filled_in() -> None:
    query = BuildQuery(
        task="write the migration",
        phase="implement",
        files=("src/db.py", "src/app.py"),
        symbols=("Cache",),
        keywords=("auth", "cache"),
        failures=("FAILED tests/x.py::t",),
        stage_id="stage-2",
    )
    request, _ = resolve(query=query, settings=AgentSettings(budget=700, strategy="summary"))
    assert request == BuildRequest(
        agent_id="a1",
        budget=700,
        now=NOW,
        task="write the migration",
        role="worker",
        phase="implement",
        strategy="summary",
        files=("src/db.py", "src/app.py"),
        symbols=("Cache",),
        keywords=("auth", "cache"),
        failures=("FAILED tests/x.py::t",),
        scope=Scope(),
        session_id="s1",
        stage_id="stage-2",
        latest_step=True,
    )


def test_an_empty_query_task_falls_back_to_the_identity_task() -> None:
    request, _ = resolve(query=BuildQuery(phase="verify"))
    assert request.task == "fix auth"
    assert request.phase == "verify"
    assert (request.files, request.symbols, request.keywords, request.failures) == (
        (),
        (),
        (),
        (),
    )


def test_build_query_of_a_request_round_trips_the_query_fields() -> None:
    request = BuildRequest(
        agent_id="x",
        budget=10,
        now=NOW,
        task="t",
        phase="p",
        files=("f",),
        symbols=("s",),
        keywords=("k",),
        failures=("e",),
        stage_id="st",
    )
    assert BuildQuery.of(request) == BuildQuery(
        task="t",
        phase="p",
        files=("f",),
        symbols=("s",),
        keywords=("k",),
        failures=("e",),
        stage_id="st",
    )
    assert BuildQuery.of(None) == BuildQuery()


# --- the refresh ladder ---------------------------------------------------------------------------


@pytest.mark.parametrize(("streak", "max_refreshes", "expected"), [(0, 3, 1), (1, 3, 2), (2, 3, 3)])
def test_the_next_refresh_attempt_counts_up(streak: int, max_refreshes: int, expected: int) -> None:
    assert next_refresh_attempt("a1", streak, max_refreshes) == expected


@pytest.mark.parametrize(("streak", "max_refreshes"), [(3, 3), (4, 3), (0, 0)])
def test_refreshes_stop_after_the_maximum(streak: int, max_refreshes: int) -> None:
    with pytest.raises(
        RefreshExhaustedError, match=rf"agent 'a1': {streak} refreshes without a successful turn"
    ):
        next_refresh_attempt("a1", streak, max_refreshes)


@pytest.mark.parametrize(
    ("manual", "failed_tokens", "used", "expected"),
    [
        (True, 1000, 2000, True),  # manual: always done
        (True, 0, 5, True),
        (False, 0, 5000, True),  # nothing known to fail
        (False, 1000, 999, True),  # smaller than what failed
        (False, 1000, 1000, False),  # as large as what failed
        (False, 1000, 1001, False),
    ],
)
def test_refresh_made_progress_truth_table(
    manual: bool, failed_tokens: int, used: int, expected: bool
) -> None:
    assert refresh_made_progress(manual=manual, failed_tokens=failed_tokens, used=used) is expected


# --- latest_step_ids ------------------------------------------------------------------------------

SEQ = {"a": 1, "b": 2, "c": 3, "d": 3}
GROUPS = {"a": "g1", "b": "", "c": "", "d": "g1", "e": "", "f": "g2", "h": "g2"}


def test_latest_step_is_the_new_ids_the_last_recording_and_their_groups() -> None:
    # new: e; recorded 3: c, d; d's group g1 pulls in a; b and f/h stay out.
    assert latest_step_ids(SEQ, 3, ["e"], GROUPS) == frozenset({"a", "c", "d", "e"})


def test_a_new_id_brings_its_whole_group() -> None:
    assert latest_step_ids(SEQ, 2, ["f"], GROUPS) == frozenset({"b", "f", "h"})


def test_the_empty_group_is_not_a_group() -> None:
    # b and c both have group "": taking b must not take c (or e).
    assert latest_step_ids(SEQ, 2, [], GROUPS) == frozenset({"b"})


def test_no_new_ids_and_no_recording_at_that_number_is_empty() -> None:
    assert latest_step_ids(SEQ, 0, [], GROUPS) == frozenset()
    assert latest_step_ids({}, 0, [], {}) == frozenset()


def test_a_new_id_without_a_known_group_is_kept_alone() -> None:
    assert latest_step_ids({}, 0, ["zz"], GROUPS) == frozenset({"zz"})


# --- validate_settings ----------------------------------------------------------------------------


@pytest.mark.parametrize("watermark", [0.0, -0.1, 0.9000001, 0.95, 1.0, math.nan, math.inf])
def test_a_watermark_outside_zero_to_ninety_percent_is_refused(watermark: float) -> None:
    with pytest.raises(InvalidInputError, match=r"watermark must be in \(0, 0.9\]"):
        validate_settings(AgentSettings(watermark=watermark))


@pytest.mark.parametrize("watermark", [0.9, 0.5, 1e-9])
def test_a_watermark_inside_is_accepted_unchanged(watermark: float) -> None:
    settings = AgentSettings(strategy="layered", budget=100, watermark=watermark)
    assert validate_settings(settings) is settings


def test_an_unknown_strategy_in_settings_is_refused() -> None:
    with pytest.raises(UnknownStrategyError, match="unknown strategy 'nope'"):
        validate_settings(AgentSettings(strategy="nope"))


# --- budgets no event can hold ---------------------------------------------------------------------
# AgentSettings.budget and AgentIdentity.budget are ``Count`` (0 … 2**62), enforced by the
# decoder; register_agent and configure must refuse a budget outside it before anything is
# written, or one bad argument would leave an event no later read can decode.


@pytest.mark.parametrize("budget", [-1, 2**62 + 1])
def test_validate_settings_refuses_a_budget_no_event_can_hold(budget: int) -> None:
    with pytest.raises(InvalidInputError, match="budget"):
        validate_settings(AgentSettings(budget=budget))


def _engine() -> ContextEngine:
    return open_engine(
        open_ledger("memory://"), clock=SteppingClock(), settings=EngineSettings(session_id="s")
    )


def _register_with_negative_settings_budget(e: ContextEngine) -> None:
    e.register_agent(AgentIdentity(agent_id="a", role="primary"), AgentSettings(budget=-5))


def _register_with_negative_identity_budget(e: ContextEngine) -> None:
    e.register_agent(AgentIdentity(agent_id="a", role="primary", budget=-1))


def _configure_a_budget_above_count(e: ContextEngine) -> None:
    e.register_agent(AgentIdentity(agent_id="a", role="primary", budget=100))
    e.configure("a", budget=2**63)


@pytest.mark.parametrize(
    "act",
    [
        _register_with_negative_settings_budget,
        _register_with_negative_identity_budget,
        _configure_a_budget_above_count,
    ],
)
def test_a_bad_budget_is_refused_and_the_ledger_stays_readable(
    act: Callable[[ContextEngine], None],
) -> None:
    e = _engine()
    with pytest.raises(InvalidInputError, match="budget"):
        act(e)
    events = [r.event for r in e.ledger.read_all()]  # decodes: nothing bad was written
    assert all(not isinstance(x, ev.AgentConfigured) or x.settings.budget >= 0 for x in events)
