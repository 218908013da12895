"""resolve_request over arbitrary identities, settings, overrides and generation scopes: the
budget, strategy and scope follow their precedence, and ``overrides`` names exactly the
settings a build overrode with a different value."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.adapters.testing import agent_identities, agent_settings, scopes
from ctxledger.domain.build_policy import BuildQuery, Overrides, resolve_request
from ctxledger.domain.errors import InvalidInputError, UnknownStrategyError
from ctxledger.domain.model import AgentIdentity
from ctxledger.domain.request import Scope
from ctxledger.domain.settings import AgentSettings
from ctxledger.domain.strategies import STRATEGIES

NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
KNOWN = sorted(STRATEGIES)

queries = st.builds(
    BuildQuery,
    task=st.sampled_from(["", "t1", "write the migration"]),
    phase=st.sampled_from(["", "explore", "verify"]),
    files=st.lists(st.sampled_from(["a.py", "b.py"]), max_size=2).map(tuple),
    symbols=st.lists(st.sampled_from(["App.run", "login"]), max_size=2).map(tuple),
    keywords=st.lists(st.sampled_from(["auth", "cache"]), max_size=2).map(tuple),
    failures=st.lists(st.just("FAILED t"), max_size=1).map(tuple),
    stage_id=st.sampled_from(["", "s1"]),
)


@st.composite
def overrides_for(
    draw: st.DrawFn, settings: AgentSettings, identity: AgentIdentity, *, positive: bool
) -> Overrides:
    """Overrides that are often absent, often equal to the settings, often different."""
    effective = settings.budget or identity.budget
    budgets = st.integers(min_value=1, max_value=2_000_000)
    if not positive:
        budgets = budgets | st.integers(min_value=-10, max_value=0)
    budget = draw(st.none() | st.just(effective) | budgets)
    strategy = draw(st.none() | st.just(settings.strategy) | st.sampled_from(KNOWN))
    scope = draw(st.none() | st.just(settings.scope) | scopes())
    return Overrides(budget=budget, strategy=strategy, scope=scope)


def resolve(
    *,
    identity: AgentIdentity,
    settings: AgentSettings,
    query: BuildQuery,
    overrides: Overrides,
    generation_scope: Scope | None,
    window_cap: int,
) -> tuple[object, tuple[str, ...]]:
    return resolve_request(
        identity=identity,
        settings=settings,
        query=query,
        overrides=overrides,
        generation_scope=generation_scope,
        window_cap=window_cap,
        now=NOW,
    )


@given(
    data=st.data(),
    identity=agent_identities(),
    settings=agent_settings(),
    query=queries,
    generation_scope=st.none() | scopes(),
    window_cap=st.just(0) | st.integers(min_value=1, max_value=2_000_000),
)
def test_resolve_request_follows_its_precedence_rules(
    *,
    data: st.DataObject,
    identity: AgentIdentity,
    settings: AgentSettings,
    query: BuildQuery,
    generation_scope: Scope | None,
    window_cap: int,
) -> None:
    if generation_scope is not None and data.draw(st.booleans()):
        generation_scope = settings.scope  # a generation started under the current settings
    ov = data.draw(overrides_for(settings, identity, positive=False))
    effective = settings.budget or identity.budget
    want = ov.budget if ov.budget is not None else effective
    if want <= 0:
        with pytest.raises(InvalidInputError, match="a build needs a positive token budget"):
            resolve(
                identity=identity,
                settings=settings,
                query=query,
                overrides=ov,
                generation_scope=generation_scope,
                window_cap=window_cap,
            )
        return
    if generation_scope is not None and ov.scope is not None and ov.scope != generation_scope:
        with pytest.raises(InvalidInputError, match="scope is fixed within a generation"):
            resolve(
                identity=identity,
                settings=settings,
                query=query,
                overrides=ov,
                generation_scope=generation_scope,
                window_cap=window_cap,
            )
        return
    request, overridden = resolve_request(
        identity=identity,
        settings=settings,
        query=query,
        overrides=ov,
        generation_scope=generation_scope,
        window_cap=window_cap,
        now=NOW,
    )
    assert request.budget == (min(want, window_cap) if window_cap > 0 else want)
    assert 0 < request.budget <= want
    if window_cap > 0:
        assert request.budget <= window_cap
    assert request.strategy == (ov.strategy if ov.strategy is not None else settings.strategy)
    if generation_scope is not None:
        assert request.scope == generation_scope
    else:
        assert request.scope == (ov.scope if ov.scope is not None else settings.scope)
    expected = tuple(
        name
        for name, given_value, setting in (
            ("budget", ov.budget, effective),
            ("strategy", ov.strategy, settings.strategy),
            ("scope", ov.scope, settings.scope),
        )
        if given_value is not None and given_value != setting
    )
    assert overridden == expected
    # the query's fields are copied, the identity fills in the rest
    assert request.task == (query.task or identity.task)
    assert (request.phase, request.files, request.symbols) == (
        query.phase,
        query.files,
        query.symbols,
    )
    assert (request.keywords, request.failures, request.stage_id) == (
        query.keywords,
        query.failures,
        query.stage_id,
    )
    assert (request.agent_id, request.role, request.session_id, request.now) == (
        identity.agent_id,
        identity.role,
        identity.session_id,
        NOW,
    )


@given(st.data(), agent_identities(), agent_settings())
def test_no_overrides_names_nothing_and_uses_the_settings(
    data: st.DataObject, identity: AgentIdentity, settings: AgentSettings
) -> None:
    if not (settings.budget or identity.budget):
        settings = AgentSettings(
            strategy=settings.strategy, budget=data.draw(st.integers(1, 10_000))
        )
    request, overridden = resolve_request(
        identity=identity,
        settings=settings,
        query=BuildQuery(),
        overrides=Overrides(),
        generation_scope=None,
        window_cap=0,
        now=NOW,
    )
    assert overridden == ()
    assert request.budget == (settings.budget or identity.budget)
    assert (request.strategy, request.scope, request.task) == (
        settings.strategy,
        settings.scope,
        identity.task,
    )


@given(
    agent_identities().filter(lambda i: i.budget > 0),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=12).filter(
        lambda s: s not in STRATEGIES
    ),
)
def test_an_unknown_strategy_override_is_refused(identity: AgentIdentity, name: str) -> None:
    with pytest.raises(UnknownStrategyError, match="unknown strategy"):
        resolve(
            identity=identity,
            settings=AgentSettings(),
            query=BuildQuery(),
            overrides=Overrides(strategy=name),
            generation_scope=None,
            window_cap=0,
        )
