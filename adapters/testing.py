"""Testing kit (public API): Hypothesis strategies for every item and event type, lifecycle
sequences, and a ContextState state machine to subclass for your own orchestrator.

Needs the optional ``testing`` extra (Hypothesis)::

    pip install "ctxledger[testing]"
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ctxledger.domain import events as ev
from ctxledger.domain.model import (
    AgentIdentity,
    CompressionMetadata,
    Decision,
    Durability,
    Item,
    Layer,
    Source,
    item_id_for,
)
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.settings import SECRET_POLICIES, AgentSettings
from ctxledger.projections.context_state import ContextState, evolve_context_state

__all__ = [
    "ContextStateMachine",
    "LIFECYCLE_KINDS",
    "agent_identities",
    "agent_settings",
    "aware_datetimes",
    "build_requests",
    "decisions",
    "events",
    "events_of",
    "items",
    "lifecycle_sequences",
    "reference_context_state",
]

_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=16)
_short = st.text(max_size=40)
_count = st.integers(min_value=0, max_value=2**31)


def aware_datetimes() -> st.SearchStrategy[datetime]:
    """Timezone-aware datetimes (UTC and fixed offsets), as every event carries."""
    tzs = st.sampled_from([UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-5))])
    return st.datetimes(
        min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=tzs
    )


@st.composite
def items(
    draw: st.DrawFn,
    *,
    layers: st.SearchStrategy[Layer] | None = None,
    sources: st.SearchStrategy[Source] | None = None,
    content: st.SearchStrategy[str] | None = None,
) -> Item:
    """Items with arbitrary provenance; the id is content-addressed like the engine's."""
    layer = draw(st.sampled_from(Layer) if layers is None else layers)
    source = draw(st.sampled_from(Source) if sources is None else sources)
    text = draw(st.text(max_size=200) if content is None else content)
    unit = st.floats(min_value=0.0, max_value=1.0, allow_nan=False)
    return Item(
        id=item_id_for(layer, source, text),
        layer=layer,
        source=source,
        content=text,
        token_count=draw(st.integers(min_value=0, max_value=5000)),
        agent=draw(_ids),
        task=draw(st.sampled_from(["", "t1", "t2"])),
        phase=draw(st.sampled_from(["", "explore", "edit", "verify"])),
        observed_at=draw(st.none() | aware_datetimes()),
        confidence=draw(unit),
        relevance=draw(unit),
        durability=draw(st.sampled_from(Durability)),
        verified=draw(st.booleans()),
        files=tuple(draw(st.lists(st.sampled_from(["a.py", "b/c.py", "README.md"]), max_size=3))),
        symbols=tuple(draw(st.lists(st.sampled_from(["foo", "Bar", "baz_qux"]), max_size=3))),
        source_id=draw(st.sampled_from(["", "s1", "s2"])),
        pinned=draw(st.booleans()),
        mandatory=draw(st.booleans()),
        tool_signature=draw(st.sampled_from(["", "grep foo", "pytest -x"])),
        group=draw(st.sampled_from(["", "g1", "g2"])),
        failure=draw(st.booleans()),
        redacted=draw(
            st.sampled_from([(), ("aws access key",), ("github token", "json web token")])
        ),
    )


def agent_identities() -> st.SearchStrategy[AgentIdentity]:
    return st.builds(
        AgentIdentity,
        agent_id=_ids,
        role=st.sampled_from(["primary", "worker", "probe", "reviewer", "debug"]),
        task=_short,
        parent=st.just("") | _ids,
        scope=st.lists(_ids, max_size=3).map(tuple),
        model=_short,
        workspace=_short,
        budget=st.integers(min_value=0, max_value=1_000_000),
        session_id=st.just("") | _ids,
    )


def scopes() -> st.SearchStrategy[Scope]:
    return st.builds(
        Scope,
        layers=st.lists(st.sampled_from(list(Layer)), max_size=3, unique=True).map(tuple),
        sources=st.lists(st.sampled_from(list(Source)), max_size=3, unique=True).map(tuple),
        exclude_project_memory=st.booleans(),
        dependency_task_ids=st.none() | st.lists(_ids, max_size=3).map(tuple),
        clip_above_tokens=st.integers(min_value=0, max_value=100_000),
    )


def agent_settings() -> st.SearchStrategy[AgentSettings]:
    """Per-agent build settings (any strategy name: the engine checks names, not the event)."""
    return st.builds(
        AgentSettings,
        strategy=st.sampled_from(["variable", "layered", "summary", "full_history"]),
        budget=st.integers(min_value=0, max_value=1_000_000),
        scope=scopes(),
        recall=st.booleans(),
        watermark=st.floats(min_value=0.05, max_value=0.9),
        latest_step=st.booleans(),
        secrets=st.sampled_from(SECRET_POLICIES),
    )


def build_requests() -> st.SearchStrategy[BuildRequest]:
    return st.builds(
        BuildRequest,
        agent_id=_ids,
        budget=st.integers(min_value=1, max_value=1_000_000),
        now=aware_datetimes(),
        task=_short,
        phase=_short,
        strategy=st.sampled_from(["variable", "layered", "summary"]),
        files=st.lists(_short, max_size=3).map(tuple),
        scope=scopes(),
        stage_id=_short,
    )


def decisions() -> st.SearchStrategy[Decision]:
    return st.builds(
        Decision,
        item_id=_ids,
        action=st.sampled_from(["included", "dropped", "compressed", "clipped"]),
        reason=_short,
        tokens_before=_count,
        tokens_after=_count,
        method=_short,
    )


def _common() -> dict[str, st.SearchStrategy[Any]]:
    return {"at": aware_datetimes()}


def _builds(cls: type[Any], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.builds(cls, **_common(), **fields)


_EVENT_STRATEGIES: dict[type[ev.EventBase], st.SearchStrategy[Any]] = {
    ev.AgentRegistered: _builds(ev.AgentRegistered, agent=agent_identities()),
    ev.AgentConfigured: _builds(
        ev.AgentConfigured, agent_id=_ids, settings=agent_settings(), by=_short
    ),
    ev.ItemRecorded: _builds(ev.ItemRecorded, agent_id=_ids, item=items()),
    ev.SteeringNoteAdded: _builds(ev.SteeringNoteAdded, agent_id=_ids, item=items()),
    ev.ItemPinned: _builds(ev.ItemPinned, agent_id=_ids, item_id=_ids, by=_short),
    ev.ItemUnpinned: _builds(ev.ItemUnpinned, agent_id=_ids, item_id=_ids, by=_short),
    ev.ItemRemoved: _builds(ev.ItemRemoved, agent_id=_ids, item_id=_ids, reason=_short),
    ev.FindingVerified: _builds(
        ev.FindingVerified, agent_id=_ids, item_id=_ids, by=_short, evidence=_short
    ),
    ev.FindingPromoted: _builds(
        ev.FindingPromoted,
        agent_id=_ids,
        item_id=_ids,
        from_agent=_ids,
        from_item=_ids,
        verified=st.booleans(),
        by=_short,
    ),
    ev.ContextBuildingStarted: _builds(
        ev.ContextBuildingStarted,
        agent_id=_ids,
        pack_id=_ids,
        session_id=_ids,
        stage_id=_ids,
        generation=st.integers(1, 1000),
        request=st.none() | build_requests(),
        watermark=st.floats(min_value=0.05, max_value=0.9),
        counter=_short,
        planner_version=st.integers(0, 10),
        force_rebuild=_short,
        overrides=st.lists(st.sampled_from(["strategy", "budget", "scope"]), max_size=3).map(tuple),
    ),
    ev.ContextPackBuilt: _builds(
        ev.ContextPackBuilt,
        agent_id=_ids,
        pack_id=_ids,
        generation=st.integers(1, 1000),
        strategy=st.sampled_from(["variable", "layered", "summary"]),
        counter=_short,
        budget_limit=_count,
        budget_used=_count,
        reserved=_count,
        overflow=_count,
        decisions=st.lists(decisions(), max_size=4).map(tuple),
        retired=st.lists(_ids, max_size=3).map(tuple),
        order_appended=st.lists(_ids, max_size=3).map(tuple),
        selection_hash=_short,
        included_count=_count,
        compression=st.builds(
            CompressionMetadata,
            strategies_applied=st.lists(_short, max_size=3).map(tuple),
            layers_truncated=st.lists(st.sampled_from(Layer), max_size=3).map(tuple),
            entries_dropped=_count,
        ),
        prefix_hash=_short,
        prompt_bytes=_count,
        expected_cached_bytes=_count,
        changed_segment=_short,
    ),
    ev.ContextBuildingFailed: _builds(
        ev.ContextBuildingFailed, agent_id=_ids, pack_id=_ids, reason=_short
    ),
    ev.ContextBuildingInterrupted: _builds(
        ev.ContextBuildingInterrupted, agent_id=_ids, pack_id=_ids, reason=_short
    ),
    ev.GenerationRefreshed: _builds(
        ev.GenerationRefreshed,
        agent_id=_ids,
        kind=st.sampled_from(["rebuild", "refresh"]),
        from_generation=st.integers(1, 1000),
        to_generation=st.integers(1, 1000),
        reason=_short,
        trigger=st.sampled_from(["budget", "context_limit", "manual"]),
        phase=_short,
        strategy=_short,
        budget=_count,
        carried=st.lists(_ids, max_size=3).map(tuple),
        dropped=st.lists(_ids, max_size=3).map(tuple),
    ),
    ev.TurnFailed: _builds(
        ev.TurnFailed,
        agent_id=_ids,
        generation=st.integers(1, 1000),
        error_class=st.sampled_from(["context_limit", "other"]),
        provider=_short,
        code=_short,
        message=_short,
    ),
    ev.TurnSucceeded: _builds(ev.TurnSucceeded, agent_id=_ids, generation=st.integers(1, 1000)),
    ev.CacheUsageRecorded: _builds(
        ev.CacheUsageRecorded,
        agent_id=_ids,
        generation=st.integers(1, 1000),
        provider=_short,
        input_tokens=_count,
        cache_read_tokens=_count,
        cache_write_tokens=_count,
        output_tokens=_count,
        expected_cached_tokens=_count,
    ),
    ev.MemoryPromoted: _builds(
        ev.MemoryPromoted,
        memory_id=_ids,
        item_id=_ids,
        agent_id=_ids,
        body_hash=_short,
        partition=_short,
        verified=st.just(False),
    ),
    ev.MemoryVerified: _builds(ev.MemoryVerified, memory_id=_ids, body_hash=_short, by=_short),
    ev.MemoryMarkedStale: _builds(ev.MemoryMarkedStale, memory_id=_ids, reason=_short),
    ev.MemoryRetired: _builds(ev.MemoryRetired, memory_id=_ids, reason=_short),
    ev.MemoryDeleted: _builds(ev.MemoryDeleted, memory_id=_ids, erasure=_short),
    ev.ContentErased: _builds(
        ev.ContentErased,
        agent_id=_ids,
        item_id=_ids,
        reason=_short,
        items=st.lists(_ids, max_size=3).map(tuple),
    ),
    ev.RecallRendered: _builds(
        ev.RecallRendered,
        agent_id=_ids,
        pack_id=_ids,
        memory_ids=st.lists(_ids, max_size=4).map(tuple),
        skipped=st.dictionaries(_ids, _short, max_size=3),
        tokens=_count,
        bytes=_count,
    ),
    ev.RecallSwitched: _builds(ev.RecallSwitched, enabled=st.booleans(), by=_short),
}

missing = set(ev.EVENT_TYPES.values()) - set(_EVENT_STRATEGIES)
assert not missing, f"testing kit lacks strategies for {missing}"


def events_of(cls: type[ev.EventBase]) -> st.SearchStrategy[Any]:
    """Events of one catalogue type."""
    return _EVENT_STRATEGIES[cls]


def events() -> st.SearchStrategy[ev.Event]:
    """Any event of the catalogue."""
    return st.one_of(*(_EVENT_STRATEGIES[cls] for cls in ev.EVENT_TYPES.values()))


LIFECYCLE_KINDS = ("started", "built", "failed", "interrupted")


@st.composite
def lifecycle_sequences(
    draw: st.DrawFn, *, agent_id: str = "agent-1", valid: bool = True, max_size: int = 30
) -> list[ev.Event]:
    """Sequences of the four lifecycle events for one agent.

    ``valid=True`` draws only orders an orchestrator should emit (every Built, Failed or
    Interrupted follows a Started); ``valid=False`` draws any order, including the seed's
    "illegal" ones (Built with no build in progress, Interrupted twice, …).
    """
    at = draw(aware_datetimes())
    counter = itertools.count(1)
    out: list[ev.Event] = []
    in_progress = False
    current_pack = ""
    for _ in range(draw(st.integers(0, max_size))):
        if valid:
            kind = "started" if not in_progress else draw(st.sampled_from(LIFECYCLE_KINDS[1:]))
        else:
            kind = draw(st.sampled_from(LIFECYCLE_KINDS))
        if kind == "started":
            current_pack = f"pack-{next(counter)}"
            out.append(ev.ContextBuildingStarted(at=at, agent_id=agent_id, pack_id=current_pack))
            in_progress = True
            continue
        pack = current_pack or f"pack-{next(counter)}"
        if kind == "built":
            out.append(ev.ContextPackBuilt(at=at, agent_id=agent_id, pack_id=pack))
        elif kind == "failed":
            out.append(ev.ContextBuildingFailed(at=at, agent_id=agent_id, pack_id=pack))
        else:
            out.append(ev.ContextBuildingInterrupted(at=at, agent_id=agent_id, pack_id=pack))
        in_progress = False
        current_pack = ""
    return out


def reference_context_state(sequence: list[ev.Event]) -> ContextState:
    """The seed's rules written out independently of the reducer (a test oracle)."""
    built: list[str] = []
    in_progress = False
    interrupted = False
    for e in sequence:
        if isinstance(e, ev.ContextBuildingStarted):
            in_progress = True
        elif isinstance(e, ev.ContextPackBuilt):
            built.append(e.pack_id)
            in_progress = interrupted = False
        elif isinstance(e, ev.ContextBuildingFailed):
            in_progress = interrupted = False
        elif isinstance(e, ev.ContextBuildingInterrupted):
            in_progress = False
            interrupted = True
    return ContextState(
        built_pack_ids=tuple(built), building_in_progress=in_progress, interrupted=interrupted
    )


class ContextStateMachine(RuleBasedStateMachine):
    """Emits lifecycle events and checks ContextState invariants after every step.

    Subclass it to test your orchestrator: override :meth:`record` to send each event where
    your system stores it, and :meth:`observed_state` to read ContextState back (e.g. by
    replaying your store). The machine keeps its own model of the seed's rules and checks
    that what you observe equals it after every step.
    """

    agent_id = "agent-1"
    at = datetime(2026, 1, 1, tzinfo=UTC)

    def __init__(self) -> None:
        super().__init__()
        self.emitted: list[ev.Event] = []
        self._packs = itertools.count(1)
        self._current = ""
        self.model_built: list[str] = []
        self.model_in_progress = False
        self.model_interrupted = False

    # --- override these -----------------------------------------------------------------------

    def record(self, event: ev.Event) -> None:
        """Deliver one event to the system under test (default: keep it in memory)."""

    def observed_state(self) -> ContextState:
        """ContextState as the system under test sees it (default: fold the reducer)."""
        state = ContextState()
        for e in self.emitted:
            state = evolve_context_state(state, e)
        return state

    # --- rules --------------------------------------------------------------------------------

    def _emit(self, event: ev.Event) -> None:
        self.emitted.append(event)
        self.record(event)

    @rule()
    def start_build(self) -> None:
        self._current = f"pack-{next(self._packs)}"
        self._emit(
            ev.ContextBuildingStarted(at=self.at, agent_id=self.agent_id, pack_id=self._current)
        )
        self.model_in_progress = True

    @precondition(lambda self: self.model_in_progress)
    @rule()
    def build_pack(self) -> None:
        self._emit(ev.ContextPackBuilt(at=self.at, agent_id=self.agent_id, pack_id=self._current))
        self.model_built.append(self._current)
        self.model_in_progress = self.model_interrupted = False

    @precondition(lambda self: self.model_in_progress)
    @rule(reason=st.sampled_from(["budget", "provider error", ""]))
    def fail_build(self, reason: str) -> None:
        self._emit(
            ev.ContextBuildingFailed(
                at=self.at, agent_id=self.agent_id, pack_id=self._current, reason=reason
            )
        )
        self.model_in_progress = self.model_interrupted = False

    @precondition(lambda self: self.model_in_progress)
    @rule()
    def interrupt_build(self) -> None:
        self._emit(
            ev.ContextBuildingInterrupted(at=self.at, agent_id=self.agent_id, pack_id=self._current)
        )
        self.model_in_progress = False
        self.model_interrupted = True

    @rule(event=events_of(ev.ItemRecorded) | events_of(ev.CacheUsageRecorded))
    def unrelated_event(self, event: ev.Event) -> None:
        """Events outside the lifecycle never change ContextState."""
        self._emit(event)

    # --- invariants ---------------------------------------------------------------------------

    @invariant()
    def state_matches_model(self) -> None:
        observed = self.observed_state()
        expected = ContextState(
            built_pack_ids=tuple(self.model_built),
            building_in_progress=self.model_in_progress,
            interrupted=self.model_interrupted,
        )
        assert observed == expected, f"{observed} != {expected}"

    @invariant()
    def pack_ids_unique(self) -> None:
        built = self.observed_state().built_pack_ids
        assert len(built) == len(set(built)), built
