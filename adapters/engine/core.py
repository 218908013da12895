"""The engine's shared machinery: the ledger, the read models, settings and clock, the one way
to append (``decide_and_append``), stream naming, the screening of free text in events, and the
engine lock (``serialized``).

**Threads.** One engine may be called from many threads at once (and from asyncio tasks through
``AsyncContextEngine``): every public method except the pure ``render`` (and the frozen
``input_limits``) runs holding the engine's re-entrant ``lock`` (a ``threading.RLock``), over the
whole read → decide → append → fold of a call, and over every read of the read models, so calls
are serialised and a reader never sees a half-folded state (before it, two threads folding the
same new events at once counted them twice: 246 builds saved where the log had 240). Under it
a call waits only for what never waits for this engine's lock, each bounded: another writer's
hold on the stream (another process, or another engine over the same store; ``lock_timeout_s``,
then ``ConflictError``), a store that does not answer (``UNAVAILABLE_AFTER_S`` per store call,
then ``LedgerUnavailableError``) and the jittered backoff between conflict retries (2 ms doubled
per retry, ``conflict_retries`` tries): a slow call delays the other callers, never blocks them
forever. Methods call one another freely (the lock is re-entrant); a caller may
hold ``engine.lock`` itself to make several calls one step.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar, cast

import msgspec

from ctxledger.adapters.clock import SystemClock
from ctxledger.adapters.ledger import Ledger, Recorded, stream_id_for
from ctxledger.adapters.ledger.projection_runner import ProjectionRunner
from ctxledger.adapters.ledger.retry import pause
from ctxledger.adapters.security.secret_scan import SecretScanner
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain import events as ev
from ctxledger.domain.build_policy import BuildQuery, Overrides, resolve_request
from ctxledger.domain.errors import ConflictError, InvalidInputError, UnknownAgentError
from ctxledger.domain.free_text import map_plain_text, map_sealed_text
from ctxledger.domain.model import ContextPack, Item
from ctxledger.domain.ports import Clock, TokenCounter
from ctxledger.domain.prompt import PromptParts, render_item
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.settings import DEFAULT_WATERMARK, InputLimits, SecretPolicy
from ctxledger.projections.catalog import ReadModels
from ctxledger.projections.generations import AgentGenerations
from ctxledger.projections.pool import AgentPool
from ctxledger.projections.turn_memo import TurnMemo

if TYPE_CHECKING:  # the memory subsystem (catalog, pydantic schemas) loads with a ProjectMemory
    from ctxledger.adapters.memory.project import ProjectMemory

__all__ = [
    "RECALL_STREAM",
    "SERIALIZED",
    "BuildResult",
    "EngineCore",
    "EngineSettings",
    "log",
    "pause_after_conflict",
    "serialized",
]

RECALL_STREAM = "settings/recall"
"""The stream of the ledger-wide recall switch (``RecallSwitched``)."""

F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger("ctxledger.engine")
"""Builds (debug), rebuilds, refreshes, conflict retries, turn errors (see adapters/logs.py)."""


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """Frozen engine configuration (per-agent settings are events: ``configure``)."""

    session_id: str = "default"
    watermark: float = DEFAULT_WATERMARK
    max_refreshes: int = 3
    conflict_retries: int = 8
    lock_timeout_s: float = 30.0
    """How long a writer waits for another writer of the same stream before a ConflictError."""
    save_every: int = 500
    limits: InputLimits = dataclasses.field(default_factory=InputLimits)
    """Size limits of every string a caller passes (``domain.settings.InputLimits``)."""


class BuildResult(msgspec.Struct, frozen=True, kw_only=True):
    """One built pack with its composed prompt."""

    pack: ContextPack
    prompt: PromptParts
    kind: Literal["initial", "append", "rebuild"]
    generation: int
    message: str = ""


def pause_after_conflict(attempt: int) -> None:
    """The jittered backoff before deciding again after the *attempt*-th conflict (the
    project's one backoff, ``adapters/ledger/retry.py``)."""
    pause(attempt, first=0.002, jitter=True)


SERIALIZED = "__ctxledger_serialized__"
"""The mark ``serialized`` leaves on a method (the suite checks every public method has it)."""


def serialized(fn: F) -> F:
    """*fn*, an engine method, run holding the engine's ``lock`` (re-entrant: a method that
    calls another takes it again). Put it under ``checked``: arguments are checked before
    the lock is taken."""

    @functools.wraps(fn)
    def wrapper(self: EngineCore, *args: Any, **kwargs: Any) -> Any:
        with self.lock:
            return fn(self, *args, **kwargs)

    wrapper.__dict__[SERIALIZED] = True
    return cast(F, wrapper)


class EngineCore:
    """What every use case of the engine shares (``ContextEngine`` composes the use cases)."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        counter: TokenCounter | None = None,
        clock: Clock | None = None,
        settings: EngineSettings | None = None,
        memory: ProjectMemory | None = None,
        runner: ProjectionRunner | None = None,
        scanner: SecretScanner | None = None,
    ) -> None:
        self.lock = threading.RLock()
        """Held by every public method but ``render`` (see the module's "Threads")."""
        self.ledger = ledger
        self._scanner = scanner
        self.memory = memory
        self.counter = counter or default_counter()
        self.clock = clock or SystemClock()
        self.settings = settings or EngineSettings()
        self._runner = runner
        self._since_save = 0
        self._prompts: dict[str, tuple[str, PromptParts]] = {}
        """A memo, never state: per agent, the last pack id and the stable part of the prompt
        it built (what ``previous_prompt`` would re-derive from the log for the next build).
        A miss (restart, another writer built since) re-derives it; the result is the same."""
        self._turns: dict[str, TurnMemo] = {}
        """Per agent, the planning facts of its last pack (``projections.turn_memo``)."""
        self._redactions: dict[str, str] = {}

    @serialized
    def close(self) -> None:
        self.checkpoint()
        self.ledger.close()

    # --- read models ----------------------------------------------------------------------------

    @property
    @serialized
    def runner(self) -> ProjectionRunner:
        """The read models, loaded and caught up on first use (never in the constructor)."""
        if self._runner is None:
            self._runner = ProjectionRunner(self.ledger)
            self._runner.run_once()
        return self._runner

    @serialized
    def catch_up(self) -> None:
        """Fold events other processes appended since we last looked."""
        self.runner.catch_up()

    @serialized
    def checkpoint(self) -> None:
        """Persist the read models with their position."""
        self.runner.catch_up()
        self.runner.save()
        self._since_save = 0

    @property
    @serialized
    def states(self) -> ReadModels:
        """The read models at the last catch-up (a typed snapshot)."""
        return self.runner.models

    @serialized
    def agent(self, agent_id: str) -> AgentGenerations:
        found = self.runner.generations.by_agent.get(agent_id)
        if found is None:
            raise UnknownAgentError(f"unknown agent {agent_id[:80]!r}")
        return found

    @serialized
    def pool(self, agent_id: str) -> AgentPool:
        return self.runner.pool.by_agent.get(agent_id, AgentPool())

    @property
    @serialized
    def recall_enabled(self) -> bool:
        """Whether builds recall project memory: the ledger's recorded switch (the latest
        ``RecallSwitched``), or before any, the engine's ``ProjectMemory.settings``; never
        without a project-memory catalog. (An agent's ``AgentSettings.recall`` can still turn
        it off for that agent.)"""
        if self.memory is None:
            return False
        recorded = self.runner.inspector.recall_enabled
        return self.memory.settings.enabled if recorded is None else recorded

    @serialized
    def building(self, agent_id: str) -> str:
        """The pack id of the agent's build in flight (``""``: none)."""
        return self.runner.context_state.building_pack(agent_id)

    @property
    def input_limits(self) -> InputLimits:
        """The limits ``adapters.boundary.checked`` holds every argument to."""
        return self.settings.limits

    def _session(self, agent_id: str) -> str:
        """The agent's session: its identity's, else the engine's."""
        ag = self.runner.generations.by_agent.get(agent_id)
        if ag is not None and ag.agent.session_id:
            return ag.agent.session_id
        return self.settings.session_id

    def _stream(self, agent_id: str) -> str:
        return stream_id_for(self._session(agent_id), agent_id)

    def _now(self) -> datetime:
        now = self.clock.now()
        if now.tzinfo is None:
            raise InvalidInputError("the clock must return timezone-aware datetimes")
        return now

    def _pool_item(self, agent_id: str, item_id: str) -> Item | None:
        """The item as the agent's pool holds it now (None: the pool has no such item)."""
        pool = self.pool(agent_id)
        return pool.current(item_id) if item_id in pool.items else None

    def _known_item(self, agent_id: str, item_id: str) -> Item:
        pool = self.pool(agent_id)
        if item_id not in pool.items:
            raise InvalidInputError(f"agent {agent_id!r} has no item {item_id[:80]!r}")
        return pool.current(item_id)

    def _sized(self, item: Item) -> Item:
        """The item with its token count as rendered in a prompt (header and spacing included),
        so packs add up to what is actually sent."""
        return msgspec.structs.replace(item, token_count=self.counter.count(render_item(item)))

    def _request(
        self,
        agent_id: str,
        *,
        query: BuildQuery | None = None,
        overrides: Overrides | None = None,
        boundary: bool = False,
    ) -> tuple[BuildRequest, tuple[str, ...]]:
        """The request from the folded settings (``query`` None: the last recorded query)."""
        ag = self.agent(agent_id)
        gen = ag.current
        return resolve_request(
            identity=ag.agent,
            settings=ag.settings,
            query=query if query is not None else BuildQuery.of(ag.last_request),
            overrides=overrides or Overrides(),
            generation_scope=ag.scope if gen.builds and not boundary else None,
            window_cap=ag.window_cap,
            now=self._now(),
        )

    # --- the one way to append ------------------------------------------------------------------

    @serialized
    def decide_and_append(
        self, stream: str, decide: Callable[[int], Sequence[ev.Event]]
    ) -> list[ev.Event]:
        """Read the stream version, catch up, decide purely (``decide(version)``), append at
        that version; on a conflict back off (jittered) and decide again on the new state."""
        return self._decide_and_append_at(stream, decide)[0]

    def _decide_and_append_at(
        self, stream: str, decide: Callable[[int], Sequence[ev.Event]]
    ) -> tuple[list[ev.Event], int]:
        """``decide_and_append``, also returning the version the events were appended at."""
        retries = self.settings.conflict_retries
        for attempt in range(retries):
            # Writers of one stream take turns (a lock per stream, across processes and,
            # on PostgreSQL, machines). Under it: the version first, then catch up, so the
            # decision rests on every event up to that version; a writer that does not
            # lock is still caught by the version check (a conflict, never an interleave).
            with self.ledger.stream_lock(stream, timeout=self.settings.lock_timeout_s):
                version = self.ledger.stream_version(stream)
                self.runner.catch_up()
                events = self._screen_text(decide(version))
                if not events:
                    return [], version
                read_back: list[Recorded] = []
                try:
                    self.ledger.append(
                        stream, events, expected_version=version, read_back=read_back
                    )
                except ConflictError:
                    if attempt == retries - 1:
                        raise
                    conflicted = True
                else:
                    conflicted = False
            if conflicted:
                log.info(
                    "conflict appending to %s: another writer moved it; deciding again "
                    "(retry %d of %d)",
                    stream,
                    attempt + 1,
                    retries - 1,
                    extra={"stream": stream, "attempt": attempt + 1},
                )
                pause_after_conflict(attempt)
                continue
            self._appended(len(events), read_back)
            return events, version
        return [], 0  # pragma: no cover - the loop returns or raises

    def _appended(self, count: int, read_back: Sequence[Recorded]) -> None:
        """Fold what was just appended — straight from *read_back* (the events as decoded from
        the bytes stored) when they are the log's next positions — and anything else new."""
        self.runner.fold_appended(read_back)
        self.runner.catch_up()
        self._since_save += count
        if self._since_save >= self.settings.save_every:
            self.checkpoint()

    def _append_agent(
        self, agent_id: str, decide: Callable[[], Sequence[ev.Event]]
    ) -> list[ev.Event]:
        return self.decide_and_append(self._stream(agent_id), lambda _version: decide())

    def _require_memory(self) -> ProjectMemory:
        if self.memory is None:
            raise InvalidInputError("no project-memory catalog is configured for this engine")
        return self.memory

    def _append_memory(self, stream: str, event: ev.Event) -> None:
        self.decide_and_append(stream, lambda _version: [event])

    # --- free text in events --------------------------------------------------------------------

    @property
    @serialized
    def scanner(self) -> SecretScanner:
        """The secret scanner items are screened with (the memory intake's; built on first use:
        it compiles the detect-secrets plugins)."""
        if self._scanner is None:
            self._scanner = SecretScanner()
        return self._scanner

    def _screen_text(self, events: Sequence[ev.Event]) -> list[ev.Event]:
        """*events* with every free-text field outside items (``domain.free_text``: reasons,
        ``by``, evidence, a build's task and keywords, provider errors…) redacted by the same
        scanner and markers as item content, unless the agent's secrets policy is ``allow``
        (``refuse`` refuses items only: a reason or a provider error is redacted, so that a
        failed build can always be closed). Items were screened when recorded."""
        policies = {
            e.agent_id: e.settings.secrets for e in events if isinstance(e, ev.AgentConfigured)
        }
        screened: list[ev.Event] = []
        for event in events:
            if isinstance(event, ev.ItemRecorded | ev.SteeringNoteAdded | ev.ContextPackBuilt):
                screened.append(event)
                continue
            agent_id = ev.event_agent(event)
            policy = policies.get(agent_id) or self._policy(agent_id)
            if policy == "allow":
                screened.append(event)
                continue
            event = map_sealed_text(event, self._redacted_text)
            screened.append(map_plain_text(event, self._redacted_text))
        return screened

    def _policy(self, agent_id: str) -> SecretPolicy:
        found = self.runner.generations.by_agent.get(agent_id) if agent_id else None
        return found.settings.secrets if found is not None else "redact"

    def _redacted_text(self, _item_id: str, text: str) -> str:
        """*text* with every credential replaced by its marker (short texts memoised)."""
        cached = self._redactions.get(text)
        if cached is not None:
            return cached
        redacted, _ = self._redact(text)
        if len(text) <= 4096:
            if len(self._redactions) >= 4096:
                self._redactions.clear()
            self._redactions[text] = redacted
        return redacted

    def _redact(self, value: str) -> tuple[str, tuple[str, ...]]:
        # A value of the wrong type is left for the append's typed check to refuse.
        if not isinstance(value, str) or not value:
            return value, ()
        return self.scanner.redact(value)

    def _forget(self) -> None:
        """Drop every in-memory copy of recorded text this engine keeps (read models, prompt
        and turn memos); the read models are rebuilt from the log on next use."""
        self._runner = None
        self._prompts.clear()
        self._turns.clear()
        self._redactions.clear()
        self._since_save = 0
