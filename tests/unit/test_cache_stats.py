"""CacheStats on a hand-worked sequence of builds and usage reports."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from ctxledger.domain.events import CacheUsageRecorded, ContextPackBuilt, Event, TurnFailed
from ctxledger.projections.cache_stats import CacheStats, evolve_cache_stats, is_unexpected_miss

AT = datetime(2025, 6, 1, tzinfo=UTC)


def usage(agent: str, gen: int, inp: int, read: int, write: int, *, expected: int) -> Event:
    return CacheUsageRecorded(
        at=AT,
        agent_id=agent,
        generation=gen,
        input_tokens=inp,
        cache_read_tokens=read,
        cache_write_tokens=write,
        output_tokens=10,
        expected_cached_tokens=expected,
    )


def test_hand_worked_sequence() -> None:
    events: list[Event] = [
        ContextPackBuilt(at=AT, agent_id="w", pack_id="p1", prompt_bytes=1000),
        usage("w", 1, 200, 0, 1800, expected=0),  # first call: cache write, nothing expected
        ContextPackBuilt(
            at=AT, agent_id="w", pack_id="p2", prompt_bytes=1100, expected_cached_bytes=990
        ),
        usage("w", 1, 100, 1800, 100, expected=1800),  # hit as expected
        usage(
            "w", 2, 1000, 400, 600, expected=1000
        ),  # after refresh: read 400 < 1000 / 2 → unexpected
        usage("p", 1, 50, 0, 0, expected=0),
        TurnFailed(at=AT, agent_id="w"),
    ]
    stats = CacheStats()
    for e in events:
        stats = evolve_cache_stats(stats, e)

    w1 = stats.generation("w", 1)
    assert (w1.calls, w1.cache_read_tokens, w1.unexpected_misses) == (2, 1800, 0)
    assert w1.hit_rate == pytest.approx(1800 / (300 + 1800 + 1900))
    assert (w1.builds, w1.prompt_bytes, w1.expected_cached_bytes) == (2, 2100, 990)
    assert w1.expected_reuse == pytest.approx(990 / 2100)

    w2 = stats.generation("w", 2)
    assert (w2.unexpected_misses, w2.shortfall_tokens) == (1, 600)
    assert w2.hit_rate == pytest.approx(400 / 2000)

    w = stats.agent("w")
    assert (w.calls, w.unexpected_misses, w.expected_cached_tokens) == (3, 1, 2800)
    assert stats.overall.calls == 4
    assert stats.overall.hit_rate == pytest.approx(2200 / (1350 + 2200 + 2500))
    assert stats.agent("nobody").hit_rate == 0.0
    assert stats.generation("w", 9).calls == 0


@pytest.mark.parametrize(
    ("expected", "read", "miss"),
    [(0, 0, False), (1000, 0, True), (1000, 499, True), (1000, 500, False), (1000, 1200, False)],
)
def test_unexpected_miss_rule(expected: int, read: int, miss: bool) -> None:
    assert is_unexpected_miss(expected, read) is miss


def test_an_unexpected_miss_names_the_segment_that_changed() -> None:
    from datetime import UTC, datetime

    from ctxledger.domain import events as ev
    from ctxledger.projections.cache_stats import CacheStats, evolve_cache_stats

    at = datetime(2026, 1, 1, tzinfo=UTC)
    seq: list[ev.Event] = [
        ev.ContextPackBuilt(at=at, agent_id="a", pack_id="p1", prompt_bytes=100),
        ev.ContextPackBuilt(
            at=at,
            agent_id="a",
            pack_id="p2",
            prompt_bytes=120,
            expected_cached_bytes=90,
            changed_segment="session",
        ),
        ev.CacheUsageRecorded(
            at=at, agent_id="a", input_tokens=30, cache_read_tokens=0, expected_cached_tokens=25
        ),
        ev.ContextPackBuilt(
            at=at,
            agent_id="a",
            pack_id="p3",
            prompt_bytes=130,
            expected_cached_bytes=118,
            changed_segment="generation",
        ),
        ev.CacheUsageRecorded(
            at=at, agent_id="a", input_tokens=3, cache_read_tokens=29, expected_cached_tokens=29
        ),
    ]
    state = CacheStats()
    for e in seq:
        state = evolve_cache_stats(state, e)
    totals = state.agent("a")
    assert totals.unexpected_misses == 1
    assert totals.miss_segments == {"session": 1}
    assert totals.changed_segments == {"session": 1, "generation": 1}
