"""ContextEngine: the composition root. Wires ledger, tokenizer, clock and policies.

Every public call turns into events appended to the agent's stream (optimistic concurrency:
a conflict re-reads the log and decides again), and every answer is computed from read models
that replay rebuilds exactly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal

import msgspec

from ctxledger.adapters.clock import SystemClock
from ctxledger.adapters.ledger import Ledger, open_ledger, stream_id_for
from ctxledger.adapters.project_memory import ProjectMemory, memory_stream
from ctxledger.adapters.projection_runner import ProjectionRunner
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain import events as ev
from ctxledger.domain.build_record import BuildRecord, record_build
from ctxledger.domain.compression import compress_report
from ctxledger.domain.errors import (
    ConflictError,
    CtxLedgerError,
    InvalidInputError,
    RefreshExhaustedError,
    UnknownAgentError,
)
from ctxledger.domain.generation_policy import (
    DEFAULT_WATERMARK,
    EmittedContext,
    plan_build,
    refresh_split,
    shrink_cap,
)
from ctxledger.domain.model import (
    AgentIdentity,
    ContextPack,
    Durability,
    Item,
    Layer,
    Source,
    content_hash,
    item_id_for,
)
from ctxledger.domain.ports import Clock, TokenCounter
from ctxledger.domain.prompt import PromptParts, compose, render_item
from ctxledger.domain.recall import RecallGroup
from ctxledger.domain.render import to_anthropic, to_openai
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.strategies import get_strategy
from ctxledger.domain.turn_errors import TurnError, classify_turn_error
from ctxledger.domain.usage import normalize_usage
from ctxledger.projections.generations import AgentGenerations, Generations
from ctxledger.projections.inspector import InspectorState
from ctxledger.projections.pool import AgentPool, Pool, verified_form

__all__ = [
    "BuildResult",
    "ContextEngine",
    "EngineSettings",
    "SystemClock",
    "TurnErrorOutcome",
    "retry_on_conflict",
]


@dataclasses.dataclass(frozen=True)
class EngineSettings:
    """Frozen engine configuration."""

    session_id: str = "default"
    watermark: float = DEFAULT_WATERMARK
    max_refreshes: int = 3
    conflict_retries: int = 8
    save_every: int = 500


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


_JOIN_SLACK = 4
"""Tokens of margin for BPE merges where rendered blocks are joined."""


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


def retry_on_conflict(
    fn: Callable[[], Any], *, attempts: int, on_conflict: Callable[[], object]
) -> Any:
    """Run *fn*; on ConflictError call *on_conflict* (re-read) and retry, up to *attempts*."""
    for attempt in range(attempts):
        try:
            return fn()
        except ConflictError:
            if attempt == attempts - 1:
                raise
            on_conflict()
    return None  # pragma: no cover - loop always returns or raises


@dataclasses.dataclass
class _AgentRuntime:
    """In-memory cache of the last prompt of an agent (rebuilt lazily after a restart)."""

    last_prompt: PromptParts | None = None
    last_request: BuildRequest | None = None
    last_expected_bytes: int = 0
    refresh_attempts: int = 0


class ContextEngine:
    """The context engine for one ledger."""

    def __init__(
        self,
        ledger: Ledger,
        *,
        counter: TokenCounter | None = None,
        clock: Clock | None = None,
        settings: EngineSettings | None = None,
        memory: ProjectMemory | None = None,
    ) -> None:
        self.ledger = ledger
        self.memory = memory
        self.counter = counter or default_counter()
        self.clock = clock or SystemClock()
        self.settings = settings or EngineSettings()
        self.runner = ProjectionRunner(ledger)
        self.runner.run_once()
        self._since_save = 0
        self._runtime: dict[str, _AgentRuntime] = {}

    @classmethod
    def open(cls, url: str, **kwargs: Any) -> ContextEngine:
        return cls(open_ledger(url), **kwargs)

    def close(self) -> None:
        self.checkpoint()
        self.ledger.close()

    def __enter__(self) -> ContextEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- read models ----------------------------------------------------------------------------

    def catch_up(self) -> None:
        """Fold events other processes appended since we last looked."""
        self.runner.catch_up()

    def checkpoint(self) -> None:
        """Persist the read models with their position."""
        self.runner.catch_up()
        self.runner.save()
        self._since_save = 0

    @property
    def states(self) -> dict[str, Any]:
        return self.runner.states

    def agent(self, agent_id: str) -> AgentGenerations:
        gens: Generations = self.states["generations"]
        found = gens.by_agent.get(agent_id)
        if found is None:
            raise UnknownAgentError(f"unknown agent {agent_id[:80]!r}")
        return found

    def pool(self, agent_id: str) -> AgentPool:
        pool: Pool = self.states["pool"]
        return pool.by_agent.get(agent_id, AgentPool())

    def _stream(self, agent_id: str) -> str:
        session = self.settings.session_id
        gens: Generations = self.states["generations"]
        ag = gens.by_agent.get(agent_id)
        if ag is not None and ag.agent.session_id:
            session = ag.agent.session_id
        return stream_id_for(session, agent_id)

    def _rt(self, agent_id: str) -> _AgentRuntime:
        return self._runtime.setdefault(agent_id, _AgentRuntime())

    # --- appending ------------------------------------------------------------------------------

    def _append(self, agent_id: str, make: Callable[[int], list[ev.Event]]) -> list[ev.Event]:
        """Decide (``make``, given the stream version it decides at) and append atomically; on
        a conflict re-read and decide again."""
        stream = self._stream(agent_id)

        def attempt() -> list[ev.Event]:
            # The version first, then catch up, then decide: the decision rests on every event
            # up to that version, so a stream another process moved meanwhile is a conflict,
            # never a silent interleave of two processes' decisions.
            version = self.ledger.stream_version(stream)
            self.runner.catch_up()
            events = make(version)
            if not events:
                return []
            self.ledger.append(stream, events, expected_version=version)
            self.runner.catch_up()
            return events

        result: list[ev.Event] = retry_on_conflict(
            attempt, attempts=self.settings.conflict_retries, on_conflict=self.runner.catch_up
        )
        self._since_save += len(result)
        if self._since_save >= self.settings.save_every:
            self.checkpoint()
        return result

    def _now(self) -> datetime:
        now = self.clock.now()
        if now.tzinfo is None:
            raise InvalidInputError("the clock must return timezone-aware datetimes")
        return now

    # --- agents and items -----------------------------------------------------------------------

    def register_agent(self, identity: AgentIdentity) -> None:
        """Record an agent identity once; re-registering the same identity is a no-op."""
        if not identity.agent_id or len(identity.agent_id) > 200:
            raise InvalidInputError("agent_id must be 1–200 characters")
        if not identity.session_id:
            identity = msgspec.structs.replace(identity, session_id=self.settings.session_id)
        gens: Generations = self.states["generations"]
        existing = gens.by_agent.get(identity.agent_id)
        if existing is not None:
            if existing.agent != identity:
                raise InvalidInputError(
                    f"agent {identity.agent_id!r} is already registered with another identity"
                )
            return
        stream = stream_id_for(identity.session_id, identity.agent_id)
        event = ev.AgentRegistered(at=self._now(), agent=identity)
        self.ledger.append(stream, [event], expected_version=self.ledger.stream_version(stream))
        self.runner.catch_up()

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

    def record(self, agent_id: str, item: Item | str, **kwargs: Any) -> Item:
        """Record an observation into the agent's pool (text or a ready Item)."""
        self.agent(agent_id)
        it = item if isinstance(item, Item) else self.make_item(agent_id, item, **kwargs)
        if it.token_count == 0 and it.content:
            it = self._sized(it)
        if it.source == Source.VERIFIED_FACT and not it.verified:
            raise InvalidInputError(
                "a verified_fact must be verified; record a finding and verify it"
            )
        if it.source == Source.RECALLED_MEMORY:
            raise InvalidInputError("recalled_memory is rendered by recall, never recorded")
        self._append(
            agent_id, lambda _version: [ev.ItemRecorded(at=self._now(), agent_id=agent_id, item=it)]
        )
        return it

    def record_many(self, agent_id: str, items: Sequence[Item]) -> None:
        """Record several items in one append."""
        self.agent(agent_id)
        ready = [i if i.token_count or not i.content else self._sized(i) for i in items]
        self._append(
            agent_id,
            lambda _version: [
                ev.ItemRecorded(at=self._now(), agent_id=agent_id, item=i) for i in ready
            ],
        )

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
        self._append(
            agent_id,
            lambda _version: [ev.SteeringNoteAdded(at=self._now(), agent_id=agent_id, item=item)],
        )
        return item

    def _known_item(self, agent_id: str, item_id: str) -> Item:
        pool = self.pool(agent_id)
        if item_id not in pool.items:
            raise InvalidInputError(f"agent {agent_id!r} has no item {item_id[:80]!r}")
        return pool.current(item_id)

    def pin(self, agent_id: str, item_id: str, *, by: str = "") -> None:
        self._known_item(agent_id, item_id)
        self._append(
            agent_id,
            lambda _version: [
                ev.ItemPinned(at=self._now(), agent_id=agent_id, item_id=item_id, by=by)
            ],
        )

    def unpin(self, agent_id: str, item_id: str, *, by: str = "") -> None:
        self._known_item(agent_id, item_id)
        self._append(
            agent_id,
            lambda _version: [
                ev.ItemUnpinned(at=self._now(), agent_id=agent_id, item_id=item_id, by=by)
            ],
        )

    def remove(self, agent_id: str, item_id: str, *, reason: str = "manual") -> None:
        item = self._known_item(agent_id, item_id)
        if item.pinned or item.mandatory:
            raise InvalidInputError(f"item {item_id!r} is pinned or mandatory; unpin it first")
        self._append(
            agent_id,
            lambda _version: [
                ev.ItemRemoved(at=self._now(), agent_id=agent_id, item_id=item_id, reason=reason)
            ],
        )

    def verify_finding(
        self, agent_id: str, item_id: str, *, by: str = "", evidence: str = ""
    ) -> None:
        """Explicitly verify exactly one finding identity."""
        item = self._known_item(agent_id, item_id)
        if item.source == Source.RECALLED_MEMORY:
            raise InvalidInputError("recalled memory cannot be verified as a fact")
        self._append(
            agent_id,
            lambda _version: [
                ev.FindingVerified(
                    at=self._now(), agent_id=agent_id, item_id=item_id, by=by, evidence=evidence
                )
            ],
        )

    def promote(self, agent_id: str, item_id: str) -> str:
        """Promote an item to a project-memory candidate (verified stays false until an
        explicit ``verify_memory``); the body goes to the catalog, the ledger gets its hash."""
        memory = self._require_memory()
        ag = self.agent(agent_id)
        item = self._known_item(agent_id, item_id)
        partition = memory.partition(ag.agent)
        memory_id = "mem_" + content_hash(f"{partition}\x1f{item.content}")[:24]
        _, event = memory.promote(ag.agent, item, now=self._now(), memory_id=memory_id)
        self._append_stream(memory_stream(partition), lambda: [event])
        return memory_id

    def verify_memory(self, memory_id: str, *, by: str = "") -> None:
        """Explicit verification of one memory entry (the only way it becomes verified)."""
        memory = self._require_memory()
        event = memory.verify(memory_id, now=self._now(), by=by)
        self._append_stream(memory_stream(memory.catalog.get(memory_id).partition), lambda: [event])

    def retire_memory(self, memory_id: str, *, reason: str = "") -> None:
        memory = self._require_memory()
        event = memory.retire(memory_id, now=self._now(), reason=reason)
        self._append_stream(memory_stream(memory.catalog.get(memory_id).partition), lambda: [event])

    def delete_memory(self, memory_id: str) -> ev.MemoryDeleted:
        """Erase a memory body under the erasure policy; the event carries the report."""
        memory = self._require_memory()
        partition = memory.catalog.get(memory_id).partition
        event = memory.delete(memory_id, now=self._now())
        self._append_stream(memory_stream(partition), lambda: [event])
        return event

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
        self._append(
            worker.parent,
            lambda _version: [ev.ItemRecorded(at=self._now(), agent_id=worker.parent, item=report)],
        )
        return report

    def _require_memory(self) -> ProjectMemory:
        if self.memory is None:
            raise InvalidInputError("no project-memory catalog is configured for this engine")
        return self.memory

    def _append_stream(self, stream: str, make: Callable[[], list[ev.Event]]) -> None:
        def attempt() -> None:
            events = make()
            version = self.ledger.stream_version(stream)
            self.ledger.append(stream, events, expected_version=version)
            self.runner.catch_up()

        retry_on_conflict(
            attempt, attempts=self.settings.conflict_retries, on_conflict=self.runner.catch_up
        )

    # --- building -------------------------------------------------------------------------------

    @staticmethod
    def _window_cap(ag: AgentGenerations) -> int:
        """The smallest budget a context-limit refresh learned for this agent (0: none)."""
        caps = [g.budget for g in ag.generations if g.kind == "refresh" and g.budget]
        return min(caps) if caps else 0

    def _volatile_reserve(
        self, request: BuildRequest, number: int, group: RecallGroup | None, user_input: str
    ) -> int:
        """Tokens held back from the pack for the VOLATILE tail (status line, recall group,
        latest user input) and block joins, so the whole rendered prompt fits the budget."""
        probe = compose(
            (),
            status=(
                f"Generation {number} · {request.budget}/{request.budget} tokens"
                f" · strategy {request.strategy}"
            ),
            recall=group.text if group is not None else "",
            latest_user_input=user_input,
        )
        return self.counter.count(probe.dynamic) + _JOIN_SLACK

    def _recall_group(self, agent_id: str, now: datetime) -> RecallGroup | None:
        """This prompt's recalled-memory group (None: nothing to record). With recall off, an
        empty group is recorded once to remove a group an earlier prompt carried."""
        ag = self.agent(agent_id)
        if self.memory is None or not self.memory.settings.enabled:
            inspector: InspectorState = self.states["inspector"]
            previous = inspector.by_agent.get(agent_id)
            if previous is not None and previous.recall is not None and previous.recall.memory_ids:
                return RecallGroup()
            return None
        group, stale = self.memory.recall_for(ag.agent, counter=self.counter, now=now)
        for stale_event in stale:
            partition = self.memory.catalog.get(stale_event.memory_id).partition
            self._append_stream(memory_stream(partition), functools.partial(list, [stale_event]))
        return group

    def _emitted_context(self, agent_id: str) -> EmittedContext | None:
        gen = self.agent(agent_id).current
        if not gen.decisions:
            return None
        pool = self.pool(agent_id)
        emitted: dict[str, Item] = {}
        for item_id, d in gen.decisions.items():
            if d.action == "dropped" or item_id not in pool.items:
                continue
            item = pool.items[item_id]
            if d.verified:
                item = verified_form(item)
            if d.action in ("compressed", "clipped"):
                item = msgspec.structs.replace(item, content=d.content, token_count=d.tokens_after)
            emitted[item_id] = item
        return EmittedContext(
            generation=gen.number,
            decisions=gen.decisions,
            emitted=emitted,
            order=gen.order,
            used=max(0, gen.tokens_used - gen.reserved),
        )

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
    ) -> BuildResult:
        """Build the agent's next pack and compose its prompt; records every decision."""
        ag = self.agent(agent_id)
        rt = self._rt(agent_id)
        gen = ag.current
        want = (
            budget
            if budget is not None
            else (rt.last_request.budget if rt.last_request else ag.agent.budget)
        )
        if not want or want <= 0:
            raise InvalidInputError("a build needs a positive token budget")
        cap = self._window_cap(ag)
        effective = min(want, cap) if cap else want
        name = strategy or (rt.last_request.strategy if rt.last_request else "variable")
        get_strategy(name)  # unknown names fail before anything is written
        request = BuildRequest(
            agent_id=agent_id,
            budget=effective,
            now=self._now(),
            task=task or ag.agent.task,
            role=ag.agent.role,
            phase=phase,
            strategy=name,
            files=tuple(files),
            symbols=tuple(symbols),
            keywords=tuple(keywords),
            failures=tuple(failures),
            scope=scope or (rt.last_request.scope if rt.last_request else Scope()),
            session_id=ag.agent.session_id,
            stage_id=stage_id,
        )
        if rt.last_request is not None and gen.builds and request.scope != rt.last_request.scope:
            raise InvalidInputError(
                "scope is fixed within a generation; refresh or rebuild to change it"
            )
        rt.last_request = request
        return self._build(agent_id, request, latest_user_input=latest_user_input)

    def _build(
        self,
        agent_id: str,
        request: BuildRequest,
        *,
        latest_user_input: str = "",
        force_rebuild: str = "",
    ) -> BuildResult:
        rt = self._rt(agent_id)
        holder: dict[str, BuildRecord] = {}
        group = self._recall_group(agent_id, request.now)

        def make(version: int) -> list[ev.Event]:
            ag = self.agent(agent_id)
            gen = ag.current
            ctx = self._emitted_context(agent_id)
            candidates = self.pool(agent_id).candidates()
            reserve = self._volatile_reserve(request, gen.number + 1, group, latest_user_input)
            pack_request = msgspec.structs.replace(request, budget=max(1, request.budget - reserve))
            plan = plan_build(
                pack_request,
                candidates,
                ctx,
                self.counter,
                watermark=self.settings.watermark,
                force_rebuild=force_rebuild,
            )
            record = record_build(
                agent_id=agent_id,
                plan=plan,
                request=request,
                gen=gen,
                ctx=ctx,
                stream_version=version,
                reserve=reserve,
                verified_ids=frozenset(self.pool(agent_id).verified),
                previous_prompt=rt.last_prompt,
                group=group,
                latest_user_input=latest_user_input,
                force_rebuild=force_rebuild,
            )
            holder["result"] = record
            return list(record.events)

        try:
            self._append(agent_id, make)
        except ConflictError:
            raise
        except KeyboardInterrupt:
            self._record_aborted(agent_id, request, interrupted=True, reason="interrupted")
            raise
        except Exception as exc:
            self._record_aborted(agent_id, request, interrupted=False, reason=_reason(exc))
            raise
        record = holder["result"]
        rt.last_prompt = record.prompt
        rt.last_expected_bytes = record.expected_cached_bytes
        return BuildResult(
            pack=record.pack,
            prompt=record.prompt,
            kind=record.kind,
            generation=record.generation,
            message=record.message,
        )

    def _record_aborted(
        self, agent_id: str, request: BuildRequest, *, interrupted: bool, reason: str
    ) -> None:
        """A build that raised still leaves its lifecycle in the ledger: Started, then Failed
        (or Interrupted). Best effort: the original error is what the caller sees."""
        stream = self._stream(agent_id)
        with contextlib.suppress(CtxLedgerError):
            version = self.ledger.stream_version(stream)
            gen = self.agent(agent_id).current.number
            pack_id = f"{agent_id}/g{gen}/v{version + 1}"
            at = self._now()
            end: ev.Event = (
                ev.ContextBuildingInterrupted(
                    at=at, agent_id=agent_id, pack_id=pack_id, reason=reason
                )
                if interrupted
                else ev.ContextBuildingFailed(
                    at=at, agent_id=agent_id, pack_id=pack_id, reason=reason
                )
            )
            started = ev.ContextBuildingStarted(
                at=at,
                agent_id=agent_id,
                pack_id=pack_id,
                session_id=request.session_id,
                stage_id=request.stage_id,
                generation=gen,
            )
            self.ledger.append(stream, [started, end], expected_version=version)
            self.runner.catch_up()

    # --- rendering and usage --------------------------------------------------------------------

    def render(
        self,
        result: BuildResult,
        *,
        provider: Literal["anthropic", "openai"],
        model: str,
        max_tokens: int = 4096,
    ) -> dict[str, Any]:
        """The provider request body (plain dicts) for a built prompt."""
        if provider == "anthropic":
            return to_anthropic(result.prompt, model=model, max_tokens=max_tokens)
        if provider == "openai":
            return to_openai(result.prompt, model=model)
        raise InvalidInputError(f"unknown provider {provider!r}; use anthropic or openai")

    def report_usage(self, agent_id: str, usage: Mapping[str, Any]) -> ev.CacheUsageRecorded:
        """Record provider usage (Anthropic, OpenAI or DeepSeek shape) of the last call."""
        ag = self.agent(agent_id)
        u = normalize_usage(usage)
        rt = self._rt(agent_id)
        rt.refresh_attempts = 0
        expected = 0
        gen = ag.current
        if gen.builds and rt.last_prompt is not None:
            total = len(rt.last_prompt.text.encode("utf-8")) or 1
            expected = round(u.prompt_tokens * rt.last_expected_bytes / total)
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
        self._append(agent_id, lambda _version: [event])
        return event

    def turn_succeeded(self, agent_id: str) -> None:
        """The last model call went through but there is no provider usage to report (e.g. a
        simulated run): ends the turn's refresh bound, as ``report_usage`` does."""
        self.agent(agent_id)
        self._rt(agent_id).refresh_attempts = 0

    # --- errors and refresh ---------------------------------------------------------------------

    def on_turn_error(
        self, agent_id: str, error: object, *, provider: str = ""
    ) -> TurnErrorOutcome:
        """Record a failed model call; refresh only on a context-limit error.

        Returns the refreshed generation's pack for the retry. Repeated refreshes that make
        no progress end in RefreshExhaustedError (never a loop).
        """
        ag = self.agent(agent_id)
        verdict = classify_turn_error(error, provider=provider)
        gen = ag.current
        failed = ev.TurnFailed(
            at=self._now(),
            agent_id=agent_id,
            generation=gen.number,
            error_class=verdict.error_class,
            provider=verdict.provider,
            code=verdict.code,
            message=verdict.message,
        )
        self._append(agent_id, lambda _version: [failed])
        if verdict.error_class != "context_limit":
            return TurnErrorOutcome(error=verdict, refreshed=False)
        reason = f"context-limit error{' from ' + verdict.provider if verdict.provider else ''}"
        result = self.refresh(agent_id, reason=reason, trigger="context_limit", error=verdict)
        return TurnErrorOutcome(
            error=verdict, refreshed=True, message=result.message, result=result
        )

    def refresh(
        self,
        agent_id: str,
        *,
        reason: str = "manual",
        trigger: Literal["context_limit", "manual"] = "manual",
        error: TurnError | None = None,
    ) -> BuildResult:
        """The refresh pipeline: keep durable state, drop ephemeral and raw history, start a
        new generation (same agent identity) and build its first pack, smaller than before."""
        rt = self._rt(agent_id)
        failed_tokens = self.agent(agent_id).current.tokens_used
        start = self.agent(agent_id).current.number
        while True:
            if rt.refresh_attempts >= self.settings.max_refreshes:
                raise RefreshExhaustedError(
                    f"agent {agent_id!r}: {rt.refresh_attempts} refreshes without a successful "
                    "turn; the pinned and mandatory context alone may exceed the model's window"
                )
            rt.refresh_attempts += 1
            why = reason
            if rt.refresh_attempts > 1:
                why = f"{reason} (attempt {rt.refresh_attempts}: still ≥ {failed_tokens} tokens)"
            result = self._refresh_once(
                agent_id, reason=why, trigger=trigger, failed_tokens=failed_tokens, error=error
            )
            if trigger == "manual" or failed_tokens == 0 or result.pack.budget_used < failed_tokens:
                steps = result.generation - start
                message = f"Context refreshed · Generation {start} → {result.generation} · Reason: {reason}"
                if steps > 1:
                    message += f" ({steps} refreshes to get below {failed_tokens} tokens)"
                return msgspec.structs.replace(result, message=message)

    def _refresh_once(
        self,
        agent_id: str,
        *,
        reason: str,
        trigger: Literal["context_limit", "manual"],
        failed_tokens: int,
        error: TurnError | None = None,
    ) -> BuildResult:
        rt = self._rt(agent_id)
        ag = self.agent(agent_id)
        gen = ag.current
        request = self._last_request(agent_id)
        cap = gen.budget if gen.budget else request.budget
        if trigger == "context_limit":
            cap = shrink_cap(
                failed_tokens or cap,
                cap,
                rt.refresh_attempts,
                provider_prompt_tokens=error.prompt_tokens if error else 0,
                provider_limit_tokens=error.limit_tokens if error else 0,
            )
        pool = self.pool(agent_id)
        latest = set(pool.new_since_last_build()) | {
            i for i, n in pool.seq.items() if n == pool.recorded
        }
        groups = {pool.items[i].group for i in latest if pool.items[i].group}
        if groups:  # the latest step's action travels with its observation
            latest |= {i for i, it in pool.items.items() if it.group in groups}
        carried, dropped = refresh_split(pool.candidates(), frozenset(latest))
        number = gen.number + 1
        refreshed = ev.GenerationRefreshed(
            at=self._now(),
            agent_id=agent_id,
            kind="refresh",
            from_generation=gen.number,
            to_generation=number,
            reason=reason,
            trigger=trigger,
            phase=request.phase,
            strategy=request.strategy,
            budget=cap,
            carried=carried,
            dropped=dropped,
        )
        self._append(agent_id, lambda _version: [refreshed])
        rt.last_prompt = None
        new_request = msgspec.structs.replace(
            request, budget=min(request.budget, cap), now=self._now()
        )
        result = self._build(agent_id, new_request)
        message = f"Context refreshed · Generation {gen.number} → {number} · Reason: {reason}"
        return msgspec.structs.replace(result, message=message)

    def _last_request(self, agent_id: str) -> BuildRequest:
        """The agent's last build request, or one from its identity when it never built."""
        last = self._rt(agent_id).last_request
        if last is not None:
            return last
        ag = self.agent(agent_id)
        return BuildRequest(
            agent_id=agent_id,
            budget=ag.agent.budget or 1,
            now=self._now(),
            role=ag.agent.role,
            task=ag.agent.task,
        )

    def rebuild(self, agent_id: str, *, reason: str = "manual") -> BuildResult:
        """Manual control: re-pack into a new generation below the watermark."""
        request = self._last_request(agent_id)
        if not self.agent(agent_id).current.builds:
            raise InvalidInputError("nothing to rebuild: the generation has no pack yet")
        return self._build(
            agent_id,
            msgspec.structs.replace(request, now=self._now()),
            force_rebuild=f"manual: {reason}",
        )
