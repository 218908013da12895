"""CacheStats read model: provider cache hit rates and expected-vs-reported cached tokens."""

from __future__ import annotations

from typing import assert_never

import msgspec

from ctxledger.domain.events import (
    AgentConfigured,
    AgentRegistered,
    CacheUsageRecorded,
    ContextBuildingFailed,
    ContextBuildingInterrupted,
    ContextBuildingStarted,
    ContextPackBuilt,
    Event,
    FindingVerified,
    GenerationRefreshed,
    ItemPinned,
    ItemRecorded,
    ItemRemoved,
    ItemUnpinned,
    MemoryDeleted,
    MemoryMarkedStale,
    MemoryPromoted,
    MemoryRetired,
    MemoryVerified,
    RecallRendered,
    SteeringNoteAdded,
    TurnFailed,
    TurnSucceeded,
)
from ctxledger.domain.usage import hit_rate

__all__ = ["CacheStats", "CacheTotals", "evolve_cache_stats", "is_unexpected_miss"]


class CacheTotals(msgspec.Struct, frozen=True, kw_only=True):
    """Sums over calls (CacheUsageRecorded) and builds (ContextPackBuilt) of one scope."""

    calls: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    expected_cached_tokens: int = 0
    shortfall_tokens: int = 0
    unexpected_misses: int = 0
    builds: int = 0
    prompt_bytes: int = 0
    expected_cached_bytes: int = 0
    changed_segments: dict[str, int] = {}
    """Builds per first segment that differed from the previous prompt ("role" or "session"
    means the cacheable static prefix changed)."""
    last_changed_segment: str = ""
    miss_segments: dict[str, int] = {}
    """Unexpected misses per segment that changed in the build before the call: names what
    broke the prefix (``"none"`` when the prompt did not change, e.g. a cache eviction)."""

    @property
    def hit_rate(self) -> float:
        """Token-weighted CacheRead / (Input + CacheRead + CacheWrite); 0.0 with no tokens."""
        return hit_rate(
            max(self.input_tokens, 0),
            max(self.cache_read_tokens, 0),
            max(self.cache_write_tokens, 0),
        )

    @property
    def expected_reuse(self) -> float:
        """Engine-estimated prefix reuse: expected cached bytes / prompt bytes of the builds."""
        return self.expected_cached_bytes / self.prompt_bytes if self.prompt_bytes > 0 else 0.0


class CacheStats(msgspec.Struct, frozen=True, kw_only=True):
    """Cache figures overall, per agent and per (agent, generation)."""

    overall: CacheTotals = CacheTotals()
    by_agent: dict[str, CacheTotals] = {}
    by_generation: dict[str, dict[int, CacheTotals]] = {}

    def agent(self, agent_id: str) -> CacheTotals:
        return self.by_agent.get(agent_id) or _EMPTY

    def generation(self, agent_id: str, number: int) -> CacheTotals:
        per_gen = self.by_generation.get(agent_id)
        found = per_gen.get(number) if per_gen is not None else None
        return found or _EMPTY


_EMPTY = CacheTotals()
"""The zero totals (frozen, shared: building a Struct with dict defaults per lookup is slow)."""


def is_unexpected_miss(expected_cached_tokens: int, cache_read_tokens: int) -> bool:
    """A call is an unexpected miss when the engine expected a cached prefix and the provider
    read less than half of it (``2 * read < expected``).

    Half, not "any shortfall": providers cache in steps (OpenAI in 128-token increments above
    1024 tokens, Anthropic only up to the last matching breakpoint), so small shortfalls are
    normal; reading under half means the prefix broke or the cache entry was evicted."""
    return expected_cached_tokens > 0 and 2 * cache_read_tokens < expected_cached_tokens


def _add_usage(t: CacheTotals, e: CacheUsageRecorded) -> CacheTotals:
    miss = is_unexpected_miss(e.expected_cached_tokens, e.cache_read_tokens)
    miss_segments = t.miss_segments
    if miss:
        key = t.last_changed_segment or "none"
        miss_segments = {**miss_segments, key: miss_segments.get(key, 0) + 1}
    return msgspec.structs.replace(
        t,
        miss_segments=miss_segments,
        calls=t.calls + 1,
        input_tokens=t.input_tokens + e.input_tokens,
        cache_read_tokens=t.cache_read_tokens + e.cache_read_tokens,
        cache_write_tokens=t.cache_write_tokens + e.cache_write_tokens,
        output_tokens=t.output_tokens + e.output_tokens,
        expected_cached_tokens=t.expected_cached_tokens + e.expected_cached_tokens,
        shortfall_tokens=t.shortfall_tokens
        + max(0, e.expected_cached_tokens - e.cache_read_tokens),
        unexpected_misses=t.unexpected_misses + int(miss),
    )


def _add_build(t: CacheTotals, e: ContextPackBuilt) -> CacheTotals:
    return msgspec.structs.replace(
        t,
        builds=t.builds + 1,
        prompt_bytes=t.prompt_bytes + e.prompt_bytes,
        expected_cached_bytes=t.expected_cached_bytes + e.expected_cached_bytes,
        changed_segments=(
            {
                **t.changed_segments,
                e.changed_segment: t.changed_segments.get(e.changed_segment, 0) + 1,
            }
            if e.changed_segment
            else t.changed_segments
        ),
        last_changed_segment=e.changed_segment,
    )


def _update(
    state: CacheStats, agent_id: str, generation: int, event: CacheUsageRecorded | ContextPackBuilt
) -> CacheStats:
    def add(t: CacheTotals) -> CacheTotals:
        if isinstance(event, CacheUsageRecorded):
            return _add_usage(t, event)
        return _add_build(t, event)

    per_gen = state.by_generation.get(agent_id, {})
    return CacheStats(
        overall=add(state.overall),
        by_agent={**state.by_agent, agent_id: add(state.agent(agent_id))},
        by_generation={
            **state.by_generation,
            agent_id: {**per_gen, generation: add(state.generation(agent_id, generation))},
        },
    )


def evolve_cache_stats(state: CacheStats, event: Event) -> CacheStats:
    """Fold one event: usage reports add tokens, built packs add prompt/expected-cached bytes."""
    match event:
        case CacheUsageRecorded():
            return _update(state, event.agent_id, event.generation, event)
        case ContextPackBuilt():
            return _update(state, event.agent_id, event.generation, event)
        case (
            AgentRegistered()
            | ItemRecorded()
            | SteeringNoteAdded()
            | ItemPinned()
            | ItemUnpinned()
            | ItemRemoved()
            | FindingVerified()
            | ContextBuildingStarted()
            | ContextBuildingFailed()
            | ContextBuildingInterrupted()
            | GenerationRefreshed()
            | TurnFailed()
            | TurnSucceeded()
            | AgentConfigured()
            | MemoryPromoted()
            | MemoryVerified()
            | MemoryMarkedStale()
            | MemoryRetired()
            | MemoryDeleted()
            | RecallRendered()
        ):
            return state
        case _:
            assert_never(event)
