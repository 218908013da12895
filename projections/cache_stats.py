"""CacheStats read model: provider cache hit rates and expected-vs-reported cached tokens."""

from __future__ import annotations

import msgspec

from ctxledger.domain.events import CacheUsageRecorded, ContextPackBuilt, Event
from ctxledger.domain.usage import hit_rate
from ctxledger.projections.drafts import AgentDrafts, Handlers, Thawed, batch_of_one

__all__ = [
    "CacheStats",
    "CacheStatsBatch",
    "CacheTotals",
    "evolve_cache_stats",
    "is_unexpected_miss",
]


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


# --- the fold --------------------------------------------------------------------------------


_SUMS = (
    "calls",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "output_tokens",
    "expected_cached_tokens",
    "shortfall_tokens",
    "unexpected_misses",
    "builds",
    "prompt_bytes",
    "expected_cached_bytes",
)
"""The integer sums of CacheTotals: the same events add to them in all three scopes."""


class _TotalsDraft:
    """CacheTotals during a batch: summed in place (not a new struct per event, three times
    per event: overall, agent, generation).

    Only a generation's draft adds up the integer sums per event; since every event adds the
    same amounts to its generation, its agent and the overall totals, an agent's sums grow by
    what its generations' grew, and the overall ones by what every generation's grew: added
    once, when the batch is frozen (``CacheStatsBatch.freeze``). The segment counts and the
    last changed segment, which differ between scopes, are kept per event in each scope."""

    __slots__ = (
        "base",
        "builds",
        "cache_read_tokens",
        "cache_write_tokens",
        "calls",
        "changed_segments",
        "expected_cached_bytes",
        "expected_cached_tokens",
        "input_tokens",
        "last_changed_segment",
        "miss_segments",
        "output_tokens",
        "prompt_bytes",
        "shortfall_tokens",
        "unexpected_misses",
    )

    def __init__(self, t: CacheTotals) -> None:
        self.base = t
        """The totals this draft started from."""
        self.calls = t.calls
        self.input_tokens = t.input_tokens
        self.cache_read_tokens = t.cache_read_tokens
        self.cache_write_tokens = t.cache_write_tokens
        self.output_tokens = t.output_tokens
        self.expected_cached_tokens = t.expected_cached_tokens
        self.shortfall_tokens = t.shortfall_tokens
        self.unexpected_misses = t.unexpected_misses
        self.builds = t.builds
        self.prompt_bytes = t.prompt_bytes
        self.expected_cached_bytes = t.expected_cached_bytes
        self.changed_segments = Thawed(t.changed_segments)
        self.last_changed_segment = t.last_changed_segment
        self.miss_segments = Thawed(t.miss_segments)

    def grown(self) -> list[int]:
        """How much each of the ``_SUMS`` grew since ``base``."""
        base = self.base
        return [getattr(self, name) - getattr(base, name) for name in _SUMS]

    def freeze(self, plus: list[int] | None = None) -> CacheTotals:
        """The totals now, with *plus* (amounts in ``_SUMS`` order) added to the sums."""
        sums = [getattr(self, name) for name in _SUMS]
        if plus is not None:
            sums = [a + b for a, b in zip(sums, plus, strict=True)]
        return CacheTotals(
            **dict(zip(_SUMS, sums, strict=True)),
            changed_segments=self.changed_segments.current,
            last_changed_segment=self.last_changed_segment,
            miss_segments=self.miss_segments.current,
        )


class CacheStatsBatch:
    """The cache stats' fold over a batch of events (see ``projections.drafts``): totals
    summed in place, and the per-agent and per-generation maps copied once per batch instead
    of once per event."""

    def __init__(self, state: CacheStats) -> None:
        self.overall = _TotalsDraft(state.overall)
        self.agents = AgentDrafts(state.by_agent, _TotalsDraft, CacheTotals)
        self.frozen_generations = state.by_generation
        self.generations: dict[str, dict[int, _TotalsDraft]] = {}
        """Per agent, in first-touch order, the drafts of the generations the batch touched."""

    def handlers(self) -> Handlers:
        return {CacheUsageRecorded: self.usage, ContextPackBuilt: self.built}

    def freeze(self) -> CacheStats:
        by_generation = self.frozen_generations
        overall = [0] * len(_SUMS)
        by_agent: dict[str, list[int]] = {}
        if self.generations:
            by_generation = dict(by_generation)
            for agent_id, drafts in self.generations.items():
                per_gen = dict(by_generation.get(agent_id, {}))
                agent = by_agent[agent_id] = [0] * len(_SUMS)
                for number, draft in drafts.items():
                    per_gen[number] = draft.freeze()
                    for i, grew in enumerate(draft.grown()):
                        agent[i] += grew
                        overall[i] += grew
                by_generation[agent_id] = per_gen
        return CacheStats(
            overall=self.overall.freeze(overall),
            by_agent=self.agents.freeze_each(
                lambda agent_id, draft: draft.freeze(by_agent.get(agent_id))
            ),
            by_generation=by_generation,
        )

    def _generation(self, agent_id: str, number: int) -> _TotalsDraft:
        drafts = self.generations.get(agent_id)
        if drafts is None:
            drafts = self.generations[agent_id] = {}
        draft = drafts.get(number)
        if draft is None:
            per_gen = self.frozen_generations.get(agent_id)
            found = per_gen.get(number) if per_gen is not None else None
            draft = drafts[number] = _TotalsDraft(found or _EMPTY)
        return draft

    def _scopes(self, agent_id: str, generation: int) -> tuple[_TotalsDraft, ...]:
        """The totals one event adds to: overall, its agent's, its generation's (the drafts
        already open looked up inline: this runs for every usage and build event)."""
        agent = self.agents.drafts.get(agent_id)
        if agent is None:
            agent = self.agents.put(agent_id)
        drafts = self.generations.get(agent_id)
        draft = drafts.get(generation) if drafts is not None else None
        if draft is None:
            draft = self._generation(agent_id, generation)
        return (self.overall, agent, draft)

    def usage(self, e: CacheUsageRecorded) -> None:
        """A provider's usage report, in place: its tokens added to the sums in the
        generation's draft (see ``_TotalsDraft``), an unexpected miss counted in every scope,
        by the segment that scope saw change last."""
        scopes = self._scopes(e.agent_id, e.generation)
        g = scopes[2]
        read, expected = e.cache_read_tokens, e.expected_cached_tokens
        if is_unexpected_miss(expected, read):
            for t in scopes:
                key = t.last_changed_segment or "none"
                misses = t.miss_segments.edit()
                misses[key] = misses.get(key, 0) + 1
            g.unexpected_misses += 1
        g.calls += 1
        g.input_tokens += e.input_tokens
        g.cache_read_tokens += read
        g.cache_write_tokens += e.cache_write_tokens
        g.output_tokens += e.output_tokens
        g.expected_cached_tokens += expected
        g.shortfall_tokens += expected - read if expected > read else 0

    def built(self, e: ContextPackBuilt) -> None:
        """A built pack, in place: its bytes added to the sums in the generation's draft (see
        ``_TotalsDraft``), the changed segment counted in every scope."""
        scopes = self._scopes(e.agent_id, e.generation)
        g = scopes[2]
        g.builds += 1
        g.prompt_bytes += e.prompt_bytes
        g.expected_cached_bytes += e.expected_cached_bytes
        segment = e.changed_segment
        for t in scopes:
            if segment:
                changed = t.changed_segments.edit()
                changed[segment] = changed.get(segment, 0) + 1
            t.last_changed_segment = segment


_EVOLVE = batch_of_one(CacheStatsBatch, CacheStats())


def evolve_cache_stats(state: CacheStats, event: Event) -> CacheStats:
    """Fold one event (``CacheStatsBatch`` over a batch of one): usage reports add tokens,
    built packs add prompt/expected-cached bytes."""
    return _EVOLVE(state, event)
