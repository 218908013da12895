"""Restart transparency: the log is the engine's only state.

Two engines run the same operations with the same clock: one never restarts, the other is
closed (or dropped without saving its read models, as a crash would) and reopened on the same
store at random steps, and sometimes dies between a build's Started and its outcome. After
every step both ledgers hold byte-identical events. On SQLite files and on PostgreSQL."""

from __future__ import annotations

import itertools
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import ContextEngine, EngineSettings
from ctxledger.adapters.engine.rederive import rederive
from ctxledger.adapters.ledger import open_ledger, stream_id_for
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain.build_policy import BuildQuery
from ctxledger.domain.errors import CtxLedgerError
from ctxledger.domain.model import AgentIdentity, Layer, Source
from ctxledger.domain.request import Scope
from ctxledger.domain.strategies import strategy_names
from ctxledger.projections.audit import audit
from ctxledger.projections.build_view import emitted_context, previous_prompt

SESSION = "restart"
COUNTER = default_counter()
WORDS = st.sampled_from(["alpha", "fix", "auth/session.py", "Session.refresh", "error", "test"])
CONTEXT_LIMIT = {
    "type": "error",
    "error": {"type": "invalid_request_error", "message": "prompt is too long: 9999 > 999"},
}
_agents = itertools.count()


class FixedClock:
    """The time the test sets for the current step (both engines read the same)."""

    def __init__(self) -> None:
        self.at = datetime(2026, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self.at


class RestartMachine(RuleBasedStateMachine):
    """Subclassed per store with ``urls`` set to two fresh ledger URLs."""

    urls: tuple[str, str] = ("", "")

    def __init__(self) -> None:
        super().__init__()
        self.clock = FixedClock()
        self.steady = self._open(self.urls[0])
        self.restarted = self._open(self.urls[1])
        self.agent = f"agent-{os.getpid()}-{next(_agents)}"
        self.n = 0

    def _open(self, url: str) -> ContextEngine:
        return open_engine(
            open_ledger(url),
            counter=COUNTER,
            clock=self.clock,
            settings=EngineSettings(session_id=SESSION, max_refreshes=3),
        )

    def both(self, op: Callable[[ContextEngine], Any]) -> None:
        """Run *op* on both engines: the same outcome (or the same typed error) on each."""
        self.clock.at += timedelta(seconds=1)
        outcomes = []
        for engine in (self.steady, self.restarted):
            try:
                op(engine)
                outcomes.append("ok")
            except CtxLedgerError as exc:
                outcomes.append(f"{type(exc).__name__}: {exc}")
        assert outcomes[0] == outcomes[1], outcomes

    @initialize(
        budget=st.integers(min_value=200, max_value=1500),
        strategy=st.sampled_from(strategy_names()),
    )
    def register(self, budget: int, strategy: str) -> None:
        identity = AgentIdentity(
            agent_id=self.agent, role="primary", task="fix auth", budget=budget
        )
        self.both(lambda e: e.register_agent(identity))
        self.both(lambda e: e.configure(self.agent, strategy=strategy))
        self.both(
            lambda e: e.record(
                self.agent,
                "Objective: fix the auth timeout",
                layer=Layer.L1,
                source=Source.USER_REQUIREMENT,
                pinned=True,
                mandatory=True,
            )
        )

    @rule(
        words=st.lists(WORDS, min_size=1, max_size=80),
        layer=st.sampled_from(Layer),
        source=st.sampled_from([Source.TOOL_LOG, Source.TEST_RESULT, Source.WORKER_FINDING]),
        group=st.sampled_from(["", "g1"]),
    )
    def record(self, words: list[str], layer: Layer, source: Source, group: str) -> None:
        self.n += 1
        text = f"obs {self.n}: " + " ".join(words)
        self.both(lambda e: e.record(self.agent, text, layer=layer, source=source, group=group))

    @rule(
        budget=st.none() | st.integers(min_value=150, max_value=1500),
        strategy=st.none() | st.sampled_from(strategy_names()),
        phase=st.sampled_from(["", "fix"]),
    )
    def build(self, budget: int | None, strategy: str | None, phase: str) -> None:
        self.both(lambda e: e.build(self.agent, budget=budget, strategy=strategy, phase=phase))

    @rule(
        strategy=st.none() | st.sampled_from(strategy_names()),
        budget=st.none() | st.integers(min_value=150, max_value=1500),
        clip=st.none() | st.integers(min_value=0, max_value=300),
        watermark=st.none() | st.sampled_from([0.3, 0.5, 0.9]),
    )
    def configure(
        self, strategy: str | None, budget: int | None, clip: int | None, watermark: float | None
    ) -> None:
        scope = None if clip is None else Scope(clip_above_tokens=clip)
        self.both(
            lambda e: e.configure(
                self.agent, strategy=strategy, budget=budget, scope=scope, watermark=watermark
            )
        )

    @rule(kind=st.sampled_from(["usage", "succeeded", "context_limit", "other"]))
    def turn(self, kind: str) -> None:
        if kind == "usage":
            usage = {"input_tokens": 10, "cache_read_input_tokens": 50, "output_tokens": 2}
            self.both(lambda e: e.report_usage(self.agent, usage))
        elif kind == "succeeded":
            self.both(lambda e: e.turn_succeeded(self.agent))
        elif kind == "context_limit":
            self.both(lambda e: e.on_turn_error(self.agent, CONTEXT_LIMIT))
        else:
            self.both(lambda e: e.on_turn_error(self.agent, "503 overloaded"))

    @rule(data=st.data(), action=st.sampled_from(["pin", "unpin", "verify", "remove"]))
    def control(self, data: st.DataObject, action: str) -> None:
        items = self.steady.pool(self.agent).candidates()
        item_id = data.draw(st.sampled_from([i.id for i in items]))
        calls: dict[str, Callable[[ContextEngine], Any]] = {
            "pin": lambda e: e.pin(self.agent, item_id),
            "unpin": lambda e: e.unpin(self.agent, item_id),
            "verify": lambda e: e.verify_finding(self.agent, item_id),
            "remove": lambda e: e.remove(self.agent, item_id),
        }
        self.both(calls[action])

    @rule(kind=st.sampled_from(["rebuild", "refresh"]))
    def manual(self, kind: str) -> None:
        if kind == "rebuild":
            self.both(lambda e: e.rebuild(self.agent, reason="test"))
        else:
            self.both(lambda e: e.refresh(self.agent, reason="test"))

    @rule(save=st.booleans())
    def restart(self, save: bool) -> None:
        """Close and reopen the second engine; without ``save`` its read models are not
        persisted first (a crash): the new engine folds the tail from the log."""
        if save:
            self.restarted.close()
        else:
            self.restarted.ledger.close()
        self.restarted = self._open(self.urls[1])

    @precondition(lambda self: self.steady.agent(self.agent).last_request is not None)
    @rule()
    def die_mid_build(self) -> None:
        """Both engines record a build's Started; the second dies before its outcome. The next
        build on each closes the abandoned one with an Interrupted event."""

        def start(engine: ContextEngine) -> None:
            request, _ = engine._request(self.agent, query=BuildQuery())
            engine._start(engine._stream(self.agent), self.agent, request, (), "")

        self.both(start)
        self.restarted.ledger.close()
        self.restarted = self._open(self.urls[1])

    @invariant()
    def same_events(self) -> None:
        stream = stream_id_for(SESSION, self.agent)
        a = [msgspec.json.encode(r.event) for r in self.steady.ledger.read_stream(stream)]
        b = [msgspec.json.encode(r.event) for r in self.restarted.ledger.read_stream(stream)]
        assert a == b

    @invariant()
    def prompt_memo_is_the_rederived_prompt(self) -> None:
        """The engine's memo of the generation's last prompt (what an append extends in
        O(new items)) equals the prompt re-derived from the folded log alone."""
        for engine in (self.steady, self.restarted):
            memo = engine._prompts.get(self.agent)
            gen = engine.agent(self.agent).current if memo else None
            if memo is None or gen is None or memo[0] != gen.last_pack_id:
                continue
            ctx = emitted_context(gen, engine.pool(self.agent))
            assert memo[1] == previous_prompt(ctx)

    def teardown(self) -> None:
        stream = self.steady.ledger.read_stream(stream_id_for(SESSION, self.agent))
        assert audit((r.position, r.event) for r in stream) == []
        report = rederive(stream)
        assert report.mismatches == 0, report.mismatch_details
        assert report.not_rederivable == 0, report.not_rederivable_reasons
        assert report.rederived == report.builds
        self.steady.close()
        self.restarted.close()


def _examples() -> int:
    return 600 if os.environ.get("CTXLEDGER_SOAK") else 200


def _run(urls: tuple[str, str]) -> None:
    machine = type("Machine", (RestartMachine,), {"urls": urls})
    run_state_machine_as_test(
        machine, settings=settings(max_examples=_examples(), stateful_step_count=20)
    )


def test_restart_transparency_sqlite(tmp_path: Path) -> None:
    _run((f"sqlite:///{tmp_path / 'steady.db'}", f"sqlite:///{tmp_path / 'restarted.db'}"))


def test_restart_transparency_postgres(pg_url: str, pg_url_second: str) -> None:
    _run((pg_url, pg_url_second))


@pytest.fixture
def pg_url_second(pg_url: str) -> str:
    """A second fresh database on the same server."""
    import psycopg

    base, name = pg_url.rsplit("/", 1)
    second = f"{name}_b"
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{second}"')
    return f"{base}/{second}"
