"""The build protocol: two commits per build (``ContextBuildingStarted`` with the whole
request, then the outcome planned on exactly the state at the Started), the retry of a build
another writer superseded, the turn memo, and the recalled-memory group of a prompt."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Literal

import msgspec

from ctxledger.adapters.engine.boundary import checked
from ctxledger.adapters.engine.core import (
    BuildResult,
    EngineCore,
    log,
    pause_after_conflict,
    serialized,
)
from ctxledger.adapters.ledger import Recorded
from ctxledger.adapters.logs import build_span
from ctxledger.domain import events as ev
from ctxledger.domain.build_policy import BuildQuery, Overrides, check_budget
from ctxledger.domain.build_protocol import SUPERSEDED, decide_close, decide_start
from ctxledger.domain.build_record import BuildRecord
from ctxledger.domain.codec import check_struct
from ctxledger.domain.decision_point import DECISION_LAYERS
from ctxledger.domain.errors import ConflictError, CtxLedgerError
from ctxledger.domain.model import Generation
from ctxledger.domain.recall import RecallGroup
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.projections.build_view import (
    DECISION_POINT,
    BuildView,
    build_view,
    decide_build,
    turn_build_view,
    volatile_reserve,
)
from ctxledger.projections.pool import AgentPool
from ctxledger.projections.turn_memo import advance_memo, memo_of_decisions

__all__ = ["BuildProtocol"]


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


class _Superseded(Exception):
    """The build's Started was closed or passed by another append: start it again."""


class BuildProtocol(EngineCore):
    """``build`` and the two-commit protocol every build (refresh, rebuild) runs through."""

    @checked
    @serialized
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
            build_span(agent_id, conversation_id=self._session(agent_id)) as span,
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
                log.info(
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
                pause_after_conflict(attempt)
            except KeyboardInterrupt:
                self._close(stream, started, interrupted=True, reason="interrupted")
                raise
            except Exception as exc:
                log.warning(
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

        def decide(version: int) -> list[ev.Event]:
            ag = self.agent(agent_id)
            return decide_start(
                request,
                version=version,
                abandoned=self.building(agent_id),
                generation=ag.current.number,
                watermark=ag.settings.watermark,
                counter=self.counter.name,
                force_rebuild=force_rebuild,
                overrides=overrides,
            )

        events, version = self._decide_and_append_at(stream, decide)
        started = events[-1]
        assert isinstance(started, ev.ContextBuildingStarted)
        return started, version + len(events)

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
            self._close(stream, started, interrupted=True, reason=SUPERSEDED)
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
            self._close(stream, started, interrupted=True, reason=SUPERSEDED)
            raise _Superseded from None
        if record.stable_prompt is not None:
            self._prompts[agent_id] = (started.pack_id, record.stable_prompt)
        self._remember_turn(agent_id, view, record, self.pool(agent_id))
        # Dropped before the fold: a snapshot still held here would make the live folds copy
        # the agent's decisions and pool instead of extending them in place (drafts.holders).
        del ag, view, memo
        self._appended(len(record.events), read_back)
        level = logging.INFO if record.kind == "rebuild" else logging.DEBUG
        if log.isEnabledFor(level):  # the summary costs a pass over the pack's items
            pack = record.pack
            log.log(
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
        with contextlib.suppress(CtxLedgerError):
            self.decide_and_append(
                stream,
                lambda _version: decide_close(
                    started,
                    self.building(started.agent_id),
                    interrupted=interrupted,
                    reason=reason,
                    now=self._now,
                ),
            )

    def _recall_group(self, agent_id: str, request: BuildRequest) -> RecallGroup | None:
        """This prompt's recalled-memory group (None: nothing to record), ranked by relevance to
        the *request* and gated by its scope. With recall off, an empty group is recorded once
        to remove a group an earlier prompt carried."""
        ag = self.agent(agent_id)
        if self.memory is None or not self.recall_enabled or not ag.settings.recall:
            previous = self.runner.inspector.by_agent.get(agent_id)
            if previous is not None and previous.recall is not None and previous.recall.memory_ids:
                return RecallGroup()
            return None
        group, stale = self.memory.recall_for(
            ag.agent, counter=self.counter, now=request.now, request=request
        )
        for stale_event in stale:
            self._append_memory(self.memory.stream_of(stale_event.memory_id), stale_event)
        return group
