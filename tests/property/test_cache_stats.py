"""Properties of the CacheStats fold: batching-independent, order-independent, bounded rates."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime
from itertools import pairwise

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain.events import (
    AgentRegistered,
    CacheUsageRecorded,
    ContextPackBuilt,
    Event,
    GenerationRefreshed,
    TurnFailed,
)
from ctxledger.domain.model import AgentIdentity
from ctxledger.projections.cache_stats import CacheStats, CacheTotals, evolve_cache_stats
from ctxledger.projections.catalog import PROJECTIONS, fold_all

AT = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
AGENTS = st.sampled_from(["primary", "worker-1", "worker-2"])
GENERATIONS = st.integers(min_value=1, max_value=3)
TOKENS = st.integers(min_value=0, max_value=5000)

USAGE = st.builds(
    CacheUsageRecorded,
    at=st.just(AT),
    agent_id=AGENTS,
    generation=GENERATIONS,
    provider=st.sampled_from(["anthropic", "openai", "deepseek"]),
    input_tokens=TOKENS,
    cache_read_tokens=TOKENS,
    cache_write_tokens=TOKENS,
    output_tokens=TOKENS,
    expected_cached_tokens=TOKENS,
)
BUILT = st.builds(
    ContextPackBuilt,
    at=st.just(AT),
    agent_id=AGENTS,
    pack_id=st.sampled_from(["p1", "p2", "p3"]),
    generation=GENERATIONS,
    prompt_bytes=TOKENS,
    expected_cached_bytes=TOKENS,
)
OTHER = st.one_of(
    st.builds(
        AgentRegistered,
        at=st.just(AT),
        agent=st.builds(AgentIdentity, agent_id=AGENTS, role=st.just("worker")),
    ),
    st.builds(TurnFailed, at=st.just(AT), agent_id=AGENTS),
    st.builds(
        GenerationRefreshed,
        at=st.just(AT),
        agent_id=AGENTS,
        kind=st.just("refresh"),
        from_generation=st.just(1),
        to_generation=st.just(2),
        reason=st.just("context_limit"),
    ),
)
EVENTS: st.SearchStrategy[list[Event]] = st.lists(st.one_of(USAGE, BUILT, OTHER), max_size=25)


def fold(events: list[Event], state: CacheStats | None = None) -> CacheStats:
    result = CacheStats() if state is None else state
    for event in events:
        result = evolve_cache_stats(result, event)
    return result


def all_totals(stats: CacheStats) -> list[CacheTotals]:
    nested = [t for per in stats.by_generation.values() for t in per.values()]
    return [stats.overall, *stats.by_agent.values(), *nested]


@given(events=EVENTS, cuts=st.lists(st.integers(min_value=0, max_value=25), max_size=4))
def test_incremental_fold_in_any_batching_equals_fold_at_once(
    events: list[Event], cuts: list[int]
) -> None:
    at_once = fold(events)
    state = CacheStats()
    bounds = [0, *sorted(min(c, len(events)) for c in cuts), len(events)]
    for lo, hi in pairwise(bounds):
        state = fold(events[lo:hi], state)
    assert state == at_once


@given(events=EVENTS, data=st.data())
def test_fold_does_not_depend_on_event_order(events: list[Event], data: st.DataObject) -> None:
    assert fold(data.draw(st.permutations(events))) == fold(events)


@given(events=EVENTS)
def test_hit_rates_are_fractions(events: list[Event]) -> None:
    for totals in all_totals(fold(events)):
        assert 0.0 <= totals.hit_rate <= 1.0
        assert 0.0 <= totals.unexpected_misses <= totals.calls


@given(events=EVENTS)
def test_totals_are_the_sums_of_the_reports(events: list[Event]) -> None:
    stats = fold(events)
    usage = [e for e in events if isinstance(e, CacheUsageRecorded)]
    builds = [e for e in events if isinstance(e, ContextPackBuilt)]
    o = stats.overall
    assert o.calls == len(usage)
    assert o.input_tokens == sum(e.input_tokens for e in usage)
    assert o.cache_read_tokens == sum(e.cache_read_tokens for e in usage)
    assert o.cache_write_tokens == sum(e.cache_write_tokens for e in usage)
    assert o.expected_cached_tokens == sum(e.expected_cached_tokens for e in usage)
    assert o.shortfall_tokens == sum(
        max(0, e.expected_cached_tokens - e.cache_read_tokens) for e in usage
    )
    assert o.unexpected_misses == sum(
        1
        for e in usage
        if e.expected_cached_tokens > 0 and e.cache_read_tokens * 2 < e.expected_cached_tokens
    )
    assert o.builds == len(builds)
    assert o.prompt_bytes == sum(e.prompt_bytes for e in builds)
    denominator = o.input_tokens + o.cache_read_tokens + o.cache_write_tokens
    assert o.hit_rate == (o.cache_read_tokens / denominator if denominator else 0.0)

    per_key: dict[tuple[str, int], int] = defaultdict(int)
    for e in usage:
        per_key[(e.agent_id, e.generation)] += e.cache_read_tokens
    for (agent, gen), read in per_key.items():
        assert stats.generation(agent, gen).cache_read_tokens == read
    for agent in {e.agent_id for e in usage}:
        assert stats.agent(agent).calls == sum(1 for e in usage if e.agent_id == agent)


@given(events=EVENTS)
def test_state_survives_a_json_round_trip(events: list[Event]) -> None:
    stats = fold(events)
    decoded = msgspec.json.decode(msgspec.json.encode(stats), type=CacheStats)
    assert decoded == stats


@given(events=EVENTS)
def test_registered_in_the_catalogue(events: list[Event]) -> None:
    assert "cache_stats" in [p.name for p in PROJECTIONS]
    assert fold_all(events).cache_stats == fold(events)
