"""ContextEngine: a thin facade over the ledger. Every use case reads the folded log, decides
with a pure function and appends what it decided; nothing that decides a build lives outside
the log (settings, the previous prompt, the refresh count and the window are all folded).

Builds are recorded in two commits: ``ContextBuildingStarted`` with the whole request, then
the outcome (``ContextPackBuilt``, ``ContextBuildingFailed`` or ``ContextBuildingInterrupted``),
planned on exactly the state at the Started, so ``audit --rederive`` can re-run every build.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import random
import time
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, overload

import msgspec

from ctxledger.adapters.boundary import checked
from ctxledger.adapters.clock import SystemClock
from ctxledger.adapters.ledger import Ledger, Recorded, open_ledger, stream_id_for
from ctxledger.adapters.logs import build_span
from ctxledger.adapters.projection_runner import ProjectionRunner
from ctxledger.adapters.secret_scan import SecretScanner
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain import events as ev
from ctxledger.domain.build_policy import (
    BuildQuery,
    Overrides,
    check_budget,
    next_refresh_attempt,
    refresh_made_progress,
    resolve_request,
    validate_settings,
)
from ctxledger.domain.build_record import BuildRecord, build_started
from ctxledger.domain.codec import check_struct
from ctxledger.domain.compression import compress_report
from ctxledger.domain.decision_point import DECISION_LAYERS
from ctxledger.domain.errors import (
    ConflictError,
    CtxLedgerError,
    InvalidInputError,
    SecretRefusedError,
    UnknownAgentError,
)
from ctxledger.domain.free_text import ERASED_REASON, map_item, map_plain_text, map_sealed_text
from ctxledger.domain.input_checks import check_text, member
from ctxledger.domain.model import (
    AgentIdentity,
    ContextPack,
    Durability,
    Generation,
    Item,
    Layer,
    Source,
    content_hash,
    item_id_for,
)
from ctxledger.domain.ports import Clock, TokenCounter
from ctxledger.domain.prompt import PromptParts, render_item
from ctxledger.domain.recall import RecallGroup
from ctxledger.domain.render import (
    PROVIDERS,
    AnthropicRequest,
    CacheTTL,
    OpenAIChatRequest,
    OpenAIResponsesRequest,
    Provider,
    ProviderRequest,
    render_anthropic,
    to_openai,
    to_openai_responses,
)
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.settings import DEFAULT_WATERMARK, AgentSettings, InputLimits, SecretPolicy
from ctxledger.domain.turn_errors import TurnError, classify_turn_error
from ctxledger.domain.usage import normalize_usage
from ctxledger.projections.build_view import (
    DECISION_POINT,
    BuildView,
    build_view,
    decide_build,
    refresh_generation,
    turn_build_view,
    volatile_reserve,
)
from ctxledger.projections.catalog import ReadModels
from ctxledger.projections.context_state import ContextStates
from ctxledger.projections.generations import AgentGenerations, Generations
from ctxledger.projections.inspector import InspectorState
from ctxledger.projections.pool import AgentPool, Pool, check_recordable
from ctxledger.projections.turn_memo import TurnMemo, advance_memo, memo_of_decisions

if TYPE_CHECKING:  # the memory subsystem (catalog, pydantic schemas) loads with a ProjectMemory
    from ctxledger.adapters.project_memory import ProjectMemory

__all__ = [
    "BuildResult",
    "ContextEngine",
    "EngineSettings",
    "SystemClock",
    "TurnErrorOutcome",
]


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


_log = logging.getLogger("ctxledger.engine")
"""Builds (debug), rebuilds, refreshes, conflict retries, turn errors (see adapters/logs.py)."""

_ABANDONED = "process ended before the build finished"
_SUPERSEDED = "superseded: the agent's stream moved during the build"


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


class BuildResult(msgspec.Struct, frozen=True, kw_only=True):
    """One built pack with its composed prompt."""

    pack: ContextPack
    prompt: PromptParts
    kind: Literal["initial", "append", "rebuild"]
    generation: int
    message: str = ""


class TurnErrorOutcome(msgspec.Struct, frozen=True, kw_only=True):
    """What ``on_turn_error`` did: refreshed (with the retry's pack) or recorded only."""

    error: TurnError
    refreshed: bool
    message: str = ""
    result: BuildResult | None = None


class _Superseded(Exception):
    """The build's Started was closed or passed by another append: start it again."""


class ContextEngine:
    """The context engine for one ledger (open it with ``adapters.bootstrap.open_engine``)."""

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
        self.ledger = ledger
        self._scanner = scanner
        self.memory = memory
        self.counter = counter or default_counter()
        self.clock = clock or SystemClock()
        self.settings = settings or EngineSettings()
        self._runner = runner
        self._since_save = 0
        self._prompts: dict[str, tuple[str, PromptParts]] = {}
        self._turns: dict[str, TurnMemo] = {}
        self._redactions: dict[str, str] = {}
        """Per agent, the planning facts of its last pack (``projections.turn_memo``)."""
        """A memo, never state: per agent, the last pack id and the stable part of the prompt
        it built (what ``previous_prompt`` would re-derive from the log for the next build).
        A miss (restart, another writer built since) re-derives it; the result is the same."""

    @classmethod
    def open(cls, url: str, **kwargs: Any) -> ContextEngine:
        """An engine over the ledger at *url* (read models load on first use); entry points
        use ``adapters.bootstrap.open_engine``."""
        return cls(open_ledger(url), **kwargs)

    def close(self) -> None:
        self.checkpoint()
        self.ledger.close()

    def __enter__(self) -> ContextEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- read models ----------------------------------------------------------------------------

    @property
    def runner(self) -> ProjectionRunner:
        """The read models, loaded and caught up on first use (never in the constructor)."""
        if self._runner is None:
            self._runner = ProjectionRunner(self.ledger)
            self._runner.run_once()
        return self._runner

    def catch_up(self) -> None:
        """Fold events other processes appended since we last looked."""
        self.runner.catch_up()

    def checkpoint(self) -> None:
        """Persist the read models with their position."""
        self.runner.catch_up()
        self.runner.save()
        self._since_save = 0

    @property
    def states(self) -> ReadModels:
        """The read models at the last catch-up (a typed snapshot)."""
        return self.runner.models

    def agent(self, agent_id: str) -> AgentGenerations:
        gens: Generations = self.runner.model("generations")
        found = gens.by_agent.get(agent_id)
        if found is None:
            raise UnknownAgentError(f"unknown agent {agent_id[:80]!r}")
        return found

    def pool(self, agent_id: str) -> AgentPool:
        pool: Pool = self.runner.model("pool")
        return pool.by_agent.get(agent_id, AgentPool())

    def building(self, agent_id: str) -> str:
        """The pack id of the agent's build in flight (``""``: none)."""
        cs: ContextStates = self.runner.model("context_state")
        return cs.building_pack(agent_id)

    @property
    def input_limits(self) -> InputLimits:
        """The limits ``adapters.boundary.checked`` holds every argument to."""
        return self.settings.limits

    def _stream(self, agent_id: str) -> str:
        session = self.settings.session_id
        gens: Generations = self.runner.model("generations")
        ag = gens.by_agent.get(agent_id)
        if ag is not None and ag.agent.session_id:
            session = ag.agent.session_id
        return stream_id_for(session, agent_id)

    def _now(self) -> datetime:
        now = self.clock.now()
        if now.tzinfo is None:
            raise InvalidInputError("the clock must return timezone-aware datetimes")
        return now

    # --- the one way to append ------------------------------------------------------------------

    def decide_and_append(
        self, stream: str, decide: Callable[[int], Sequence[ev.Event]]
    ) -> list[ev.Event]:
        """Read the stream version, catch up, decide purely (``decide(version)``), append at
        that version; on a conflict back off (jittered) and decide again on the new state."""
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
                    return []
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
                _log.info(
                    "conflict appending to %s: another writer moved it; deciding again "
                    "(retry %d of %d)",
                    stream,
                    attempt + 1,
                    retries - 1,
                    extra={"stream": stream, "attempt": attempt + 1},
                )
                time.sleep(random.uniform(0, 0.002 * 2**attempt))
                continue
            self._appended(len(events), read_back)
            return events
        return []  # pragma: no cover - the loop returns or raises

    def _appended(self, count: int, read_back: Sequence[Recorded]) -> None:
        """Fold what was just appended — straight from *read_back* (the events as decoded from
        the bytes stored) when they are the log's next positions — and anything else new."""
        self.runner.fold_appended(read_back)
        self.runner.catch_up()
        self._since_save += count
        if self._since_save >= self.settings.save_every:
            self.checkpoint()

    def _append_agent(self, agent_id: str, decide: Callable[[], Sequence[ev.Event]]) -> None:
        self.decide_and_append(self._stream(agent_id), lambda _version: decide())

    # --- agents and settings --------------------------------------------------------------------

    @checked
    def register_agent(
        self, identity: AgentIdentity, settings: AgentSettings | None = None
    ) -> None:
        """Record an agent identity once, with its settings; re-registering the same identity
        is a no-op (use ``configure`` to change settings)."""
        check_struct(identity, "agent identity")
        if settings is not None:
            check_struct(settings, "agent settings")
        if not identity.agent_id or len(identity.agent_id) > 200:
            raise InvalidInputError("agent_id must be 1–200 characters")
        if not identity.session_id:
            identity = msgspec.structs.replace(identity, session_id=self.settings.session_id)
        check_budget(identity.budget)
        chosen = validate_settings(settings or AgentSettings(watermark=self.settings.watermark))
        agent_id = identity.agent_id

        def decide(_version: int) -> list[ev.Event]:
            gens: Generations = self.runner.model("generations")
            existing = gens.by_agent.get(agent_id)
            if existing is not None:
                if existing.agent != identity:
                    raise InvalidInputError(
                        f"agent {agent_id!r} is already registered with another identity"
                    )
                return []
            now = self._now()
            return [
                ev.AgentRegistered(at=now, agent=identity),
                ev.AgentConfigured(at=now, agent_id=agent_id, settings=chosen),
            ]

        self.decide_and_append(stream_id_for(identity.session_id, agent_id), decide)

    @checked
    def configure(
        self,
        agent_id: str,
        *,
        strategy: str | None = None,
        budget: int | None = None,
        scope: Scope | None = None,
        recall: bool | None = None,
        watermark: float | None = None,
        latest_step: bool | None = None,
        secrets: SecretPolicy | None = None,
        by: str = "",
    ) -> AgentSettings:
        """Change the agent's settings (recorded as ``AgentConfigured``); every later build,
        refresh and rebuild uses them. A new scope takes effect at the next generation."""
        if scope is not None:
            check_struct(scope, "scope")
        changes: dict[str, Any] = {
            k: v
            for k, v in (
                ("strategy", strategy),
                ("budget", budget),
                ("scope", scope),
                ("recall", recall),
                ("watermark", watermark),
                ("latest_step", latest_step),
                ("secrets", secrets),
            )
            if v is not None
        }
        result: list[AgentSettings] = []

        def decide() -> list[ev.Event]:
            current = self.agent(agent_id).settings
            new = validate_settings(msgspec.structs.replace(current, **changes))
            result[:] = [new]
            if new == current:
                return []
            return [ev.AgentConfigured(at=self._now(), agent_id=agent_id, settings=new, by=by)]

        self.agent(agent_id)
        self._append_agent(agent_id, decide)
        return result[0]

    # --- items ----------------------------------------------------------------------------------

    @property
    def scanner(self) -> SecretScanner:
        """The secret scanner items are screened with (the memory intake's; built on first use:
        it compiles the detect-secrets plugins)."""
        if self._scanner is None:
            self._scanner = SecretScanner()
        return self._scanner

    def _screened(self, agent_id: str, items: Sequence[Item]) -> list[Item]:
        """The items as the agent's secrets policy lets them be recorded: every credential in
        the item's free text (``domain.free_text.map_item``: content, task, stage, phase, tool
        signature, files, symbols) and its id replaced by a typed marker and the kinds
        noted in ``redacted`` (``redact``; an id derived from the content, or holding a
        credential itself, is derived again from the redacted content),
        ``SecretRefusedError`` before anything is written (``refuse``), or as given
        (``allow``)."""
        policy = self.agent(agent_id).settings.secrets
        if policy == "allow":
            return list(items)
        screened: list[Item] = []
        for item in items:
            kinds: list[str] = []

            def screen(_item_id: str, text: str, kinds: list[str] = kinds) -> str:
                redacted, found = self._redact(text)
                kinds.extend(found)
                return redacted

            changed = map_item(item, screen)
            _, id_kinds = self._redact(item.id)
            found = tuple(dict.fromkeys([*kinds, *id_kinds]))
            if not found:
                screened.append(item)
                continue
            if policy == "refuse":
                raise SecretRefusedError(agent_id, found)
            redacted = msgspec.structs.replace(
                changed,
                id=self._redacted_id(item, changed.content, holds_secret=bool(id_kinds)),
                redacted=tuple(dict.fromkeys(item.redacted + found)),
            )
            screened.append(self._sized(redacted) if changed != item else redacted)
        return screened

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
        gens: Generations = self.runner.model("generations")
        found = gens.by_agent.get(agent_id) if agent_id else None
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

    def _redacted_id(self, item: Item, content: str, *, holds_secret: bool) -> str:
        """The id of *item* once its content is redacted: a content-addressed id (this engine's
        or an importer's ``kind.<hash prefix>``) is derived from the redacted content, so the
        id cannot confirm a guessed secret; an id that itself holds a credential is replaced;
        any other caller id is kept."""
        if holds_secret or item.id == item_id_for(item.layer, item.source, item.content):
            return item_id_for(item.layer, item.source, content)
        before, after = content_hash(item.content), content_hash(content)
        for n in (64, 32, 24, 16, 12):
            if before[:n] in item.id:
                return item.id.replace(before[:n], after[:n])
        return item.id

    def _sized(self, item: Item) -> Item:
        """The item with its token count as rendered in a prompt (header and spacing included),
        so packs add up to what is actually sent."""
        return msgspec.structs.replace(item, token_count=self.counter.count(render_item(item)))

    def make_item(
        self,
        agent_id: str,
        content: str,
        *,
        layer: Layer = Layer.L0,
        source: Source = Source.TOOL_LOG,
        item_id: str = "",
        **provenance: Any,
    ) -> Item:
        """An Item with a content-addressed id (unless given) and its token count."""
        if not isinstance(content, str):
            raise InvalidInputError("item content must be text")
        layer = member(Layer, layer, "layer")
        source = member(Source, source, "source")
        iid = item_id or item_id_for(layer, source, content)
        try:
            item = Item(
                id=iid,
                layer=layer,
                source=source,
                content=content,
                agent=agent_id,
                observed_at=provenance.pop("observed_at", None) or self._now(),
                **provenance,
            )
            return self._sized(item)
        except TypeError as exc:
            raise InvalidInputError(f"bad item field: {exc}") from None

    @checked
    def record(self, agent_id: str, item: Item | str, **kwargs: Any) -> Item:
        """Record an observation into the agent's pool (text or a ready Item)."""
        self.agent(agent_id)
        if isinstance(item, Item):
            it = check_struct(item, "item")
        else:
            it = self.make_item(agent_id, item, **kwargs)
        if it.token_count == 0 and it.content:
            it = self._sized(it)
        [it] = self._screened(agent_id, [it])
        check_recordable(it)
        self._append_agent(
            agent_id, lambda: [ev.ItemRecorded(at=self._now(), agent_id=agent_id, item=it)]
        )
        return it

    @checked
    def record_many(self, agent_id: str, items: Sequence[Item]) -> list[Item]:
        """Record several items in one append (all or none); returns them as recorded (ids and
        content redacted by the agent's secrets policy)."""
        self.agent(agent_id)
        for i in items:
            check_struct(i, "item")
        ready = [i if i.token_count or not i.content else self._sized(i) for i in items]
        ready = self._screened(agent_id, ready)
        for i in ready:
            check_recordable(i)
        self._append_agent(
            agent_id,
            lambda: [ev.ItemRecorded(at=self._now(), agent_id=agent_id, item=i) for i in ready],
        )
        return ready

    @checked
    def add_steering_note(self, agent_id: str, text: str, *, stage: str = "") -> Item:
        """User guidance: pinned, session-stable, never dropped."""
        self.agent(agent_id)
        item = self.make_item(
            agent_id,
            text,
            layer=Layer.L1,
            source=Source.STEERING_NOTE,
            pinned=True,
            stage=stage,
            durability=Durability.DURABLE,
            observed_at=None,
        )
        [item] = self._screened(agent_id, [item])
        self._append_agent(
            agent_id, lambda: [ev.SteeringNoteAdded(at=self._now(), agent_id=agent_id, item=item)]
        )
        return item

    def _known_item(self, agent_id: str, item_id: str) -> Item:
        pool = self.pool(agent_id)
        if item_id not in pool.items:
            raise InvalidInputError(f"agent {agent_id!r} has no item {item_id[:80]!r}")
        return pool.current(item_id)

    # Every guard below runs inside the decision, under the agent's stream lock and after
    # catching up (``decide_and_append``): a check made on state read before the lock could
    # be undone by a writer that pinned, removed or replaced the item in between.

    @checked
    def pin(self, agent_id: str, item_id: str, *, by: str = "") -> None:
        def decide() -> list[ev.Event]:
            self._known_item(agent_id, item_id)
            return [ev.ItemPinned(at=self._now(), agent_id=agent_id, item_id=item_id, by=by)]

        self._append_agent(agent_id, decide)

    @checked
    def unpin(self, agent_id: str, item_id: str, *, by: str = "") -> None:
        def decide() -> list[ev.Event]:
            self._known_item(agent_id, item_id)
            return [ev.ItemUnpinned(at=self._now(), agent_id=agent_id, item_id=item_id, by=by)]

        self._append_agent(agent_id, decide)

    @checked
    def remove(self, agent_id: str, item_id: str, *, reason: str = "manual") -> None:
        def decide() -> list[ev.Event]:
            item = self._known_item(agent_id, item_id)
            if item.pinned or item.mandatory:
                raise InvalidInputError(f"item {item_id!r} is pinned or mandatory; unpin it first")
            return [
                ev.ItemRemoved(at=self._now(), agent_id=agent_id, item_id=item_id, reason=reason)
            ]

        self._append_agent(agent_id, decide)

    @checked
    def verify_finding(
        self, agent_id: str, item_id: str, *, by: str = "", evidence: str = ""
    ) -> None:
        """Explicitly verify exactly one finding identity."""

        def decide() -> list[ev.Event]:
            item = self._known_item(agent_id, item_id)
            if item.source == Source.RECALLED_MEMORY:
                raise InvalidInputError("recalled memory cannot be verified as a fact")
            return [
                ev.FindingVerified(
                    at=self._now(), agent_id=agent_id, item_id=item_id, by=by, evidence=evidence
                )
            ]

        self._append_agent(agent_id, decide)

    # --- forgetting (crypto-shredding) ----------------------------------------------------------

    @checked
    def erase(self, agent_id: str, item_id: str = "", *, reason: str) -> ev.ContentErased:
        """Erase the text of one item (*item_id*) or of everything the agent recorded, by
        destroying its content keys (``adapters.content_seal``). The items leave the pool
        (``ItemRemoved``, reason ``erased: …``) and a ``ContentErased`` event records the
        erase; every event stays, and the erased text reads ``[erased: reason, at]``. The
        read models are then rebuilt from the log, so no copy of the text stays in them."""
        if not reason.strip():
            raise InvalidInputError("an erase needs a reason (--reason)")
        if self._policy(agent_id) != "allow":  # the reason stays readable: it explains the erase
            reason = self._redacted_text("", reason)
        if not self.ledger.keyring.encrypted:
            raise InvalidInputError(
                "this ledger does not encrypt content, so nothing in it can be erased without "
                "rewriting history; create ledgers with a master key (CTXLEDGER_MASTER_KEY)"
            )
        self.agent(agent_id)
        if item_id:
            self._known_item(agent_id, item_id)
        at = self._now()
        erased: list[ev.ContentErased] = []

        def decide() -> list[ev.Event]:
            pool = self.pool(agent_id)
            targets = (item_id,) if item_id else tuple(pool.items)
            removals: list[ev.Event] = [
                ev.ItemRemoved(at=at, agent_id=agent_id, item_id=i, reason=ERASED_REASON + reason)
                for i in targets
                if i not in pool.removed
            ]
            event = ev.ContentErased(
                at=at, agent_id=agent_id, item_id=item_id, reason=reason, items=targets
            )
            erased[:] = [event]
            return [*removals, event]

        self._append_agent(agent_id, decide)
        self.ledger.erase_content(
            agent_id,
            [item_id] if item_id else None,
            reason=reason,
            at=at.isoformat(timespec="seconds"),
        )
        self._forget()
        return erased[0]

    def _forget(self) -> None:
        """Drop every in-memory copy of recorded text this engine keeps (read models, prompt
        and turn memos); the read models are rebuilt from the log on next use."""
        self._runner = None
        self._prompts.clear()
        self._turns.clear()
        self._redactions.clear()
        self._since_save = 0

    # --- project memory (the catalog decides; the ledger records) -------------------------------

    @checked
    def promote(self, agent_id: str, item_id: str) -> str:
        """Promote an item to a project-memory candidate (verified stays false until an
        explicit ``verify_memory``); the body goes to the catalog, the ledger gets its hash."""
        memory = self._require_memory()
        item = self._known_item(agent_id, item_id)
        event = memory.promote(self.agent(agent_id).agent, item, now=self._now())
        from ctxledger.adapters.project_memory import memory_stream

        self._append_memory(memory_stream(event.partition), event)
        return event.memory_id

    @checked
    def verify_memory(self, memory_id: str, *, by: str = "") -> None:
        """Explicit verification of one memory entry (the only way it becomes verified)."""
        memory = self._require_memory()
        self._append_memory(
            memory.stream_of(memory_id), memory.verify(memory_id, now=self._now(), by=by)
        )

    @checked
    def retire_memory(self, memory_id: str, *, reason: str = "") -> None:
        memory = self._require_memory()
        event = memory.retire(memory_id, now=self._now(), reason=reason)
        self._append_memory(memory.stream_of(memory_id), event)

    @checked
    def delete_memory(self, memory_id: str) -> ev.MemoryDeleted:
        """Erase a memory body under the erasure policy, and the ledger's copy of it: the
        text of the item(s) it was promoted from is erased too (``erase``) when the ledger
        encrypts content; otherwise the report names every event that still holds it. The
        event's ``erasure`` carries the report (JSON; ``ledger`` is the ledger's part)."""
        memory = self._require_memory()
        stream = memory.stream_of(memory_id)
        sources = sorted(
            {
                (r.event.agent_id, r.event.item_id)
                for r in self.ledger.read_stream(stream)
                if isinstance(r.event, ev.MemoryPromoted) and r.event.memory_id == memory_id
            }
        )
        event = memory.delete(memory_id, now=self._now())
        ledger: dict[str, Any]
        if self.ledger.keyring.encrypted:
            for agent_id, item_id in sources:
                self.erase(agent_id, item_id, reason=f"memory {memory_id} deleted")
            ledger = {"erased": [{"agent": a, "item": i} for a, i in sources]}
        else:
            ledger = {
                "copies": [{"agent": a, "item": i} for a, i in sources],
                "note": "this ledger does not encrypt content: the text stays in the "
                "ItemRecorded events of these items and cannot be erased from it; ledgers "
                "created with a master key can (ctxledger erase)",
            }
        report = {**json.loads(event.erasure or "{}"), "ledger": ledger}
        event = msgspec.structs.replace(event, erasure=json.dumps(report, sort_keys=True))
        self._append_memory(stream, event)
        return event

    @checked
    def report_to_parent(self, worker_id: str) -> Item:
        """Compress a worker's transcript into a parent report and record it in the parent's
        pool: the Primary sees the report, never the raw transcript."""
        worker = self.agent(worker_id).agent
        if not worker.parent:
            raise InvalidInputError(f"agent {worker_id!r} has no parent to report to")
        self.agent(worker.parent)
        report = compress_report(
            self.pool(worker_id).candidates(),
            agent=worker_id,
            task=worker.task,
            observed_at=self._now(),
        )
        report = self._sized(report)
        self._append_agent(
            worker.parent,
            lambda: [ev.ItemRecorded(at=self._now(), agent_id=worker.parent, item=report)],
        )
        return report

    def _require_memory(self) -> ProjectMemory:
        if self.memory is None:
            raise InvalidInputError("no project-memory catalog is configured for this engine")
        return self.memory

    def _append_memory(self, stream: str, event: ev.Event) -> None:
        self.decide_and_append(stream, lambda _version: [event])

    # --- building -------------------------------------------------------------------------------

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

    @checked
    def build(
        self,
        agent_id: str,
        *,
        budget: int | None = None,
        strategy: str | None = None,
        task: str = "",
        phase: str = "",
        files: Sequence[str] = (),
        symbols: Sequence[str] = (),
        keywords: Sequence[str] = (),
        failures: Sequence[str] = (),
        scope: Scope | None = None,
        latest_user_input: str = "",
        stage_id: str = "",
        purpose: Literal["prompt", "decision_point"] = "prompt",
    ) -> BuildResult:
        """Build the agent's next pack and compose its prompt; records every decision.
        ``budget``, ``strategy`` and ``scope`` override the agent's settings for this build.
        ``purpose="decision_point"`` builds seed 004's DecisionPointBuilder view instead: L0 and
        L1 only (other layers ``excluded_by_scope``), on its own (the generation's prompt and
        decisions are left as they are), recorded like any build."""
        if scope is not None:
            check_struct(scope, "scope")
        if budget is not None:
            check_budget(budget)
        query = BuildQuery(
            task=task,
            phase=phase,
            files=tuple(files),
            symbols=tuple(symbols),
            keywords=tuple(keywords),
            failures=tuple(failures),
            stage_id=stage_id,
        )
        if purpose == "decision_point":
            scope = Scope(layers=DECISION_LAYERS)
        overrides = Overrides(budget=budget, strategy=strategy, scope=scope)
        request, overridden = self._request(
            agent_id, query=query, overrides=overrides, boundary=purpose == "decision_point"
        )
        if purpose == "decision_point":
            request = msgspec.structs.replace(request, purpose=DECISION_POINT)
        return self._build(
            agent_id, request, overrides=overridden, latest_user_input=latest_user_input
        )

    def _build(
        self,
        agent_id: str,
        request: BuildRequest,
        *,
        overrides: tuple[str, ...] = (),
        latest_user_input: str = "",
        force_rebuild: str = "",
    ) -> BuildResult:
        """Started (its own commit), then the outcome; anything that raises in between ends
        the build in Failed (or Interrupted), never in nothing."""
        stream = self._stream(agent_id)
        with (
            build_span(agent_id) as span,
            self.ledger.stream_lock(stream, timeout=self.settings.lock_timeout_s),
        ):
            result = self._build_locked(
                stream,
                agent_id,
                request,
                overrides=overrides,
                latest_user_input=latest_user_input,
                force_rebuild=force_rebuild,
            )
            if span is not None:
                span.set_attributes(
                    {
                        "generation": result.generation,
                        "pack_id": result.pack.id,
                        "kind": result.kind,
                        "budget_used": result.pack.budget_used,
                        "budget_limit": result.pack.budget_limit,
                        "strategy": result.pack.strategy,
                    }
                )
            return result

    def _build_locked(
        self,
        stream: str,
        agent_id: str,
        request: BuildRequest,
        *,
        overrides: tuple[str, ...],
        latest_user_input: str,
        force_rebuild: str,
    ) -> BuildResult:
        """``_build`` with the stream held: its two commits are not interleaved by another
        engine's writes (a writer that does not lock still supersedes it, caught below)."""
        for attempt in range(self.settings.conflict_retries):
            started, at_version = self._start(stream, agent_id, request, overrides, force_rebuild)
            try:
                return self._finish(stream, started, at_version, latest_user_input)
            except _Superseded:
                _log.info(
                    "build %s superseded: the stream moved during it; building again "
                    "(attempt %d of %d)",
                    started.pack_id,
                    attempt + 2,
                    self.settings.conflict_retries,
                    extra={
                        "agent_id": agent_id,
                        "generation": started.generation,
                        "pack_id": started.pack_id,
                        "stream": stream,
                        "attempt": attempt + 1,
                    },
                )
                time.sleep(random.uniform(0, 0.002 * 2**attempt))
            except KeyboardInterrupt:
                self._close(stream, started, interrupted=True, reason="interrupted")
                raise
            except Exception as exc:
                _log.warning(
                    "build %s failed: %s",
                    started.pack_id,
                    _reason(exc),
                    extra={
                        "agent_id": agent_id,
                        "generation": started.generation,
                        "pack_id": started.pack_id,
                    },
                )
                self._close(stream, started, interrupted=False, reason=_reason(exc))
                raise
        raise ConflictError(
            stream,
            self.ledger.stream_version(stream),
            f"the stream kept moving during {self.settings.conflict_retries} build attempts",
        )

    def _start(
        self,
        stream: str,
        agent_id: str,
        request: BuildRequest,
        overrides: tuple[str, ...],
        force_rebuild: str,
    ) -> tuple[ev.ContextBuildingStarted, int]:
        """Commit the Started (closing an abandoned one first); returns it and its version."""

        landed = [0]

        def decide(version: int) -> list[ev.Event]:
            events: list[ev.Event] = []
            abandoned = self.building(agent_id)
            if abandoned:
                events.append(
                    ev.ContextBuildingInterrupted(
                        at=request.now, agent_id=agent_id, pack_id=abandoned, reason=_ABANDONED
                    )
                )
            ag = self.agent(agent_id)
            at_version = landed[0] = version + len(events) + 1
            events.append(
                build_started(
                    request,
                    pack_id=f"{agent_id}/g{ag.current.number}/v{at_version}",
                    generation=ag.current.number,
                    watermark=ag.settings.watermark,
                    counter=self.counter.name,
                    force_rebuild=force_rebuild,
                    overrides=overrides,
                )
            )
            return events

        events = self.decide_and_append(stream, decide)
        started = events[-1]
        assert isinstance(started, ev.ContextBuildingStarted)
        return started, landed[0]

    def _finish(
        self,
        stream: str,
        started: ev.ContextBuildingStarted,
        at_version: int,
        latest_user_input: str,
    ) -> BuildResult:
        """Plan on exactly the state at the Started and append the outcome right after it."""
        request = started.request
        assert request is not None
        agent_id = started.agent_id
        group = self._recall_group(agent_id, request)
        version = self.ledger.stream_version(stream)
        self.runner.catch_up()
        if version != at_version or self.building(agent_id) != started.pack_id:
            self._close(stream, started, interrupted=True, reason=_SUPERSEDED)
            raise _Superseded
        ag = self.agent(agent_id)
        memo = self._prompts.get(agent_id)
        view = self._view(agent_id, ag.current, request.purpose, started.force_rebuild)
        record = decide_build(
            view,
            request,
            pack_id=started.pack_id,
            reserve=volatile_reserve(
                request, ag.current.number + 1, group, latest_user_input, self.counter
            ),
            counter=self.counter,
            watermark=started.watermark,
            force_rebuild=started.force_rebuild,
            group=group,
            latest_user_input=latest_user_input,
            previous=memo[1] if memo and memo[0] == ag.current.last_pack_id else None,
        )
        read_back: list[Recorded] = []
        try:
            self.ledger.append(stream, record.events, expected_version=version, read_back=read_back)
        except ConflictError:
            self._close(stream, started, interrupted=True, reason=_SUPERSEDED)
            raise _Superseded from None
        if record.stable_prompt is not None:
            self._prompts[agent_id] = (started.pack_id, record.stable_prompt)
        self._remember_turn(agent_id, view, record, self.pool(agent_id))
        # Dropped before the fold: a snapshot still held here would make the live folds copy
        # the agent's decisions and pool instead of extending them in place (drafts.holders).
        del ag, view, memo
        self._appended(len(record.events), read_back)
        level = logging.INFO if record.kind == "rebuild" else logging.DEBUG
        if _log.isEnabledFor(level):  # the summary costs a pass over the pack's items
            pack = record.pack
            _log.log(
                level,
                "%s %s: %d of %d tokens, %d items%s",
                "rebuild" if record.kind == "rebuild" else "build",
                started.pack_id,
                pack.budget_used,
                pack.budget_limit,
                sum(len(items) for items in pack.layers.values()),
                f" ({started.force_rebuild})" if started.force_rebuild else "",
                extra={
                    "agent_id": agent_id,
                    "generation": record.generation,
                    "pack_id": started.pack_id,
                    "kind": record.kind,
                },
            )
        return BuildResult(
            pack=record.pack,
            prompt=record.prompt,
            kind=record.kind,
            generation=record.generation,
            message=record.message,
        )

    def _view(
        self, agent_id: str, gen: Generation, purpose: str, force_rebuild: str = ""
    ) -> BuildView:
        """What the next build plans on: the agent's turn memo brought up to date. A forced
        rebuild reads none of the memo's append facts (and drops the memo after it), so it
        plans on the plain view instead of recomputing the memo over the whole history."""
        if force_rebuild:
            return build_view(gen, self.pool(agent_id), purpose)
        return turn_build_view(gen, self.pool(agent_id), purpose, self._turns.get(agent_id))

    def _remember_turn(
        self, agent_id: str, view: BuildView, record: BuildRecord, pool: AgentPool
    ) -> None:
        """Keep the turn memo of the pack just appended: an append advances the one it was
        planned on, a generation's first pack (a rebuild, a refresh) derives it from its
        decisions — so the turns after it plan in O(new items) too; any other build leaves
        the next turn to recompute it once."""
        if record.stable_prompt is None:  # a decision point: the generation is unchanged
            return
        built = record.events[-1]
        assert isinstance(built, ev.ContextPackBuilt)
        memo = None
        if record.kind == "append" and view.turn is not None:
            memo = advance_memo(view.turn, built)
        elif record.opened is not None:  # *pool*: the one planned on, and what the build adds
            memo = memo_of_decisions(
                record.opened,
                pool,
                pack_id=built.pack_id,
                generation=built.generation,
                added={i.id: i for i in record.recorded},
            )
        if memo is None:
            self._turns.pop(agent_id, None)
        else:
            self._turns[agent_id] = memo

    def _close(
        self, stream: str, started: ev.ContextBuildingStarted, *, interrupted: bool, reason: str
    ) -> None:
        """End a build that produced no pack (best effort: the caller sees the original error;
        a build someone else already closed is left as it is)."""

        def decide(_version: int) -> list[ev.Event]:
            if self.building(started.agent_id) != started.pack_id:
                return []
            kind = ev.ContextBuildingInterrupted if interrupted else ev.ContextBuildingFailed
            return [
                kind(
                    at=self._now(),
                    agent_id=started.agent_id,
                    pack_id=started.pack_id,
                    reason=reason,
                )
            ]

        with contextlib.suppress(CtxLedgerError):
            self.decide_and_append(stream, decide)

    def _recall_group(self, agent_id: str, request: BuildRequest) -> RecallGroup | None:
        """This prompt's recalled-memory group (None: nothing to record), ranked by relevance to
        the *request* and gated by its scope. With recall off, an empty group is recorded once
        to remove a group an earlier prompt carried."""
        ag = self.agent(agent_id)
        if self.memory is None or not self.memory.settings.enabled or not ag.settings.recall:
            inspector: InspectorState = self.runner.model("inspector")
            previous = inspector.by_agent.get(agent_id)
            if previous is not None and previous.recall is not None and previous.recall.memory_ids:
                return RecallGroup()
            return None
        group, stale = self.memory.recall_for(
            ag.agent, counter=self.counter, now=request.now, request=request
        )
        for stale_event in stale:
            self._append_memory(self.memory.stream_of(stale_event.memory_id), stale_event)
        return group

    # --- rendering and usage --------------------------------------------------------------------

    @overload
    def render(
        self,
        result: BuildResult,
        provider: Literal["anthropic"],
        model: str,
        *,
        max_tokens: int = ...,
        messages: Sequence[Any] | None = ...,
        tools: Sequence[Any] | None = ...,
        cache_ttl: CacheTTL | None = ...,
        prompt_cache_key: None = ...,
    ) -> AnthropicRequest: ...

    @overload
    def render(
        self,
        result: BuildResult,
        provider: Literal["openai"],
        model: str,
        *,
        max_tokens: int = ...,
        messages: Sequence[Any] | None = ...,
        tools: Sequence[Any] | None = ...,
        cache_ttl: None = ...,
        prompt_cache_key: str | None = ...,
    ) -> OpenAIChatRequest: ...

    @overload
    def render(
        self,
        result: BuildResult,
        provider: Literal["openai-responses"],
        model: str,
        *,
        max_tokens: int = ...,
        messages: Sequence[Any] | None = ...,
        tools: Sequence[Any] | None = ...,
        cache_ttl: None = ...,
        prompt_cache_key: str | None = ...,
    ) -> OpenAIResponsesRequest: ...

    def render(
        self,
        result: BuildResult,
        provider: Provider,
        model: str,
        *,
        max_tokens: int = 4096,
        messages: Sequence[Any] | None = None,
        tools: Sequence[Any] | None = None,
        cache_ttl: CacheTTL | None = None,
        prompt_cache_key: str | None = None,
    ) -> ProviderRequest:
        """The provider request body for a built prompt, typed per provider, with the
        caller's conversation ``messages`` and ``tools`` placed after the static prefix by the
        provider's cache order (docs/caching.md, "Provider requests"). ``max_tokens`` and
        ``cache_ttl`` are Anthropic's; ``prompt_cache_key`` is OpenAI's (chat and responses).
        Anthropic breakpoints are spent only where the prefix reaches the model's minimum
        cacheable length (counted with the engine's counter); every breakpoint dropped or left
        out is logged on the ``ctxledger.render`` logger (``render_anthropic`` returns them)."""
        if provider == "anthropic":
            if prompt_cache_key is not None:
                raise InvalidInputError("prompt_cache_key is OpenAI's; Anthropic has none")
            rendered = render_anthropic(
                result.prompt,
                model=model,
                max_tokens=max_tokens,
                messages=messages or (),
                tools=tools,
                cache_ttl=cache_ttl,
                counter=self.counter,
            )
            log = logging.getLogger("ctxledger.render")
            for note in rendered.notes:
                log.log(
                    logging.WARNING if note.caller else logging.DEBUG,
                    "%s: %s",
                    note.where,
                    note.reason,
                    extra={"agent_id": result.pack.agent_id, "generation": result.generation},
                )
            return rendered.request
        if provider not in PROVIDERS:
            raise InvalidInputError(
                f"unknown provider {provider!r}; use one of {', '.join(PROVIDERS)}"
            )
        if cache_ttl is not None:
            raise InvalidInputError(f"cache_ttl is Anthropic's; {provider} caches on its own")
        to = to_openai if provider == "openai" else to_openai_responses
        return to(
            result.prompt,
            model=model,
            messages=messages or (),
            tools=tools,
            prompt_cache_key=prompt_cache_key,
        )

    def report_usage(self, agent_id: str, usage: object) -> ev.CacheUsageRecorded:
        """Record provider usage (Anthropic, OpenAI or DeepSeek shape) of the last call: a
        mapping or the SDK's own usage object (``response.usage`` of anthropic or openai, an
        openai-agents ``Usage``; see ``normalize_usage``); anything else raises
        InvalidInputError and records nothing. The expected cached tokens scale the prompt's
        tokens by the share of its bytes the previous prompt already held (both recorded on the
        generation's last pack)."""
        ag = self.agent(agent_id)
        u = normalize_usage(usage)
        gen = ag.current
        expected = 0
        if gen.builds:
            expected = round(u.prompt_tokens * gen.expected_cached_bytes / (gen.prompt_bytes or 1))
        event = ev.CacheUsageRecorded(
            at=self._now(),
            agent_id=agent_id,
            generation=gen.number,
            provider=u.provider,
            input_tokens=u.input_tokens,
            cache_read_tokens=u.cache_read_tokens,
            cache_write_tokens=u.cache_write_tokens,
            output_tokens=u.output_tokens,
            expected_cached_tokens=expected,
        )
        self._append_agent(agent_id, lambda: [event])
        return event

    @checked
    def turn_succeeded(self, agent_id: str) -> None:
        """The last model call went through but there is no provider usage to report (e.g. a
        simulated run): ends the turn's refresh count, as ``report_usage`` does."""
        self.agent(agent_id)

        def decide() -> list[ev.Event]:
            ag = self.agent(agent_id)
            if not ag.refresh_streak:
                return []
            return [
                ev.TurnSucceeded(at=self._now(), agent_id=agent_id, generation=ag.current.number)
            ]

        self._append_agent(agent_id, decide)

    # --- errors and refresh ---------------------------------------------------------------------

    @checked
    def on_turn_error(
        self, agent_id: str, error: object, *, provider: str = ""
    ) -> TurnErrorOutcome:
        """Record a failed model call; refresh only on a context-limit error.

        Returns the refreshed generation's pack for the retry. Repeated refreshes that make
        no progress end in RefreshExhaustedError (never a loop).
        """
        ag = self.agent(agent_id)
        verdict = classify_turn_error(error, provider=provider)
        for field in ("message", "code", "provider"):
            check_text(
                getattr(verdict, field), f"on_turn_error: {field}", self.input_limits.text_bytes
            )
        failed = ev.TurnFailed(
            at=self._now(),
            agent_id=agent_id,
            generation=ag.current.number,
            error_class=verdict.error_class,
            provider=verdict.provider,
            code=verdict.code,
            message=verdict.message,
        )
        self._append_agent(agent_id, lambda: [failed])
        _log.log(
            logging.INFO if verdict.error_class == "context_limit" else logging.WARNING,
            "turn error (%s%s): %s",
            verdict.error_class,
            f" from {verdict.provider}" if verdict.provider else "",
            " ".join(verdict.message.split())[:300],
            extra={
                "agent_id": agent_id,
                "generation": failed.generation,
                "error_class": verdict.error_class,
                "provider": verdict.provider or None,
            },
        )
        if verdict.error_class != "context_limit":
            return TurnErrorOutcome(error=verdict, refreshed=False)
        reason = f"context-limit error{' from ' + verdict.provider if verdict.provider else ''}"
        result = self.refresh(agent_id, reason=reason, trigger="context_limit", error=verdict)
        return TurnErrorOutcome(
            error=verdict, refreshed=True, message=result.message, result=result
        )

    @checked
    def refresh(
        self,
        agent_id: str,
        *,
        reason: str = "manual",
        trigger: Literal["context_limit", "manual"] = "manual",
        error: TurnError | None = None,
    ) -> BuildResult:
        """The refresh pipeline: keep durable state, drop ephemeral and raw history, start a
        new generation (same agent identity) and build its first pack, smaller than before.
        The count of refreshes since the last successful turn is folded from the log."""
        failed_tokens = self.agent(agent_id).current.tokens_used
        start = self.agent(agent_id).current.number
        while True:
            attempt = next_refresh_attempt(
                agent_id, self.agent(agent_id).refresh_streak, self.settings.max_refreshes
            )
            why = reason
            if attempt > 1:
                why = f"{reason} (attempt {attempt}: still ≥ {failed_tokens} tokens)"
            self._refresh_generation(
                agent_id,
                reason=why,
                trigger=trigger,
                attempt=attempt,
                failed_tokens=failed_tokens,
                error=error,
            )
            request, _ = self._request(agent_id, boundary=True)
            result = self._build(agent_id, request)
            stated = error is not None and error.limit_tokens > 0
            if refresh_made_progress(
                manual=trigger == "manual",
                failed_tokens=failed_tokens,
                used=result.pack.budget_used,
                stated_window=self.agent(agent_id).window if stated else 0,
            ):
                steps = result.generation - start
                message = f"Context refreshed · Generation {start} → {result.generation} · Reason: {reason}"
                if steps > 1:
                    message += f" ({steps} refreshes to get below {failed_tokens} tokens)"
                _log.info(
                    "%s",
                    message,
                    extra={
                        "agent_id": agent_id,
                        "generation": result.generation,
                        "pack_id": result.pack.id,
                        "kind": trigger,
                    },
                )
                return msgspec.structs.replace(result, message=message)

    def _refresh_generation(
        self,
        agent_id: str,
        *,
        reason: str,
        trigger: Literal["context_limit", "manual"],
        attempt: int,
        failed_tokens: int,
        error: TurnError | None,
    ) -> None:
        """Append the GenerationRefreshed of one refresh: the cut and the new budget cap."""

        def decide() -> list[ev.Event]:
            request, _ = self._request(agent_id, boundary=True)
            return [
                refresh_generation(
                    self.agent(agent_id).current,
                    self.pool(agent_id),
                    request,
                    at=self._now(),
                    reason=reason,
                    trigger=trigger,
                    attempt=attempt,
                    failed_tokens=failed_tokens,
                    error=error,
                )
            ]

        self._append_agent(agent_id, decide)

    @checked
    def rebuild(self, agent_id: str, *, reason: str = "manual") -> BuildResult:
        """Manual control: re-pack into a new generation below the watermark."""
        if not self.agent(agent_id).current.builds:
            raise InvalidInputError("nothing to rebuild: the generation has no pack yet")
        request, _ = self._request(agent_id, boundary=True)
        return self._build(agent_id, request, force_rebuild=f"manual: {reason}")
