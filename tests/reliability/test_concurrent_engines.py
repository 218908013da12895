"""Several orchestrator processes driving the same agent through their own ContextEngine:
writers of the stream take turns (per-stream locks), so no ConflictError is raised or
surfaced, nothing is lost, and no decision is appended against a stream it did not see (the
audit of the log is clean)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import EngineSettings
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.ledger.projection_runner import replay_states
from ctxledger.domain.events import ItemRecorded
from ctxledger.domain.model import AgentIdentity
from ctxledger.projections.audit import audit
from ctxledger.projections.catalog import read_models
from ctxledger.projections.pool import Pool
from tests.reliability._support import pick, record, rerun, spawn_workers
from tests.reliability._workers import engine_worker

PROCESS_COUNTS = pick([8], [8, 32])
TURNS_SET = bool(os.environ.get("CTXLEDGER_ENGINE_TURNS"))
ALL_TURNS = int(os.environ.get("CTXLEDGER_ENGINE_TURNS", "0"))
"""Turns of the whole run shared by the processes, when ``CTXLEDGER_ENGINE_TURNS`` sets it."""
TURNS_EACH = pick(25, 300)
"""Turns per process otherwise: the long run drives 8 and 32 processes × 300 turns each (9,600
items on one agent; each engine process folds all of them — the generations read model's
stored form keeps that within ~0.3 GB per process)."""
AGENT = "shared-agent"


@pytest.mark.parametrize("processes", PROCESS_COUNTS)
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_engines_in_several_processes_share_one_agent(
    kind: str, processes: int, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    turns = ALL_TURNS // processes if ALL_TURNS else TURNS_EACH
    url = (
        f"sqlite:///{tmp_path / 'ledger.db'}"
        if kind == "sqlite"
        else str(request.getfixturevalue("pg_url"))
    )
    with open_engine(open_ledger(url)) as engine:
        engine.register_agent(AgentIdentity(agent_id=AGENT, role="worker", task="T-1"))
    started = time.monotonic()
    got = spawn_workers(
        engine_worker,
        processes,
        args=lambda w: (url, w),
        kwargs={"agent_id": AGENT, "turns": turns},
        timeout=pick(300, 1800),
        what="engine",
    )
    elapsed = time.monotonic() - started
    conflicts = sum(g[2] for g in got)
    recorded = {i for g in got for i in g[3]}
    escaped = sum(g[4] for g in got)
    turn_ms = sorted(1000 * t for g in got for t in g[5])
    p50, p99 = (turn_ms[min(len(turn_ms) - 1, int(q * len(turn_ms)))] for q in (0.5, 0.99))

    with open_ledger(url) as ledger:
        records = [(r.position, r.event) for r in ledger.read_all()]
        violations = audit(records)
        states, count, _ = replay_states(ledger)
    assert violations == []
    # Writers of one stream take turns (stream locks): contention is waiting, not errors.
    assert conflicts == 0, f"{conflicts} ConflictError raised by the ledger"
    assert escaped == 0, f"{escaped} ConflictError surfaced to the caller"
    pool: Pool = read_models(states).pool
    assert recorded <= set(pool.by_agent[AGENT].items)  # no recorded item lost
    assert len(recorded) == processes * turns
    stored = [e for _, e in records if isinstance(e, ItemRecorded)]
    assert len(stored) == processes * turns, "an item was stored twice"

    record(
        f"concurrent engines · {kind} · {processes} processes on one agent",
        scale=f"{processes} processes × {turns} turns (record, build, usage) on one agent",
        result=(
            f"0 lost, 0 duplicated ({len(recorded)} items), audit clean (0 silent "
            f"interleaves); turn p50 {p50:.0f} ms, p99 {p99:.0f} ms (waiting included); {conflicts} "
            f"ConflictError retried by the engine, {escaped} surfaced after its "
            f"{EngineSettings().conflict_retries} attempts and retried by the caller; "
            f"{count} events; {elapsed:.1f}s"
        ),
        rerun_cmd=(f"CTXLEDGER_ENGINE_TURNS={ALL_TURNS} " if TURNS_SET else "")
        + rerun("test_concurrent_engines.py")
        + f" -k '{kind} and {processes}'",
        processes=processes,
        turns=processes * turns,
        conflicts=conflicts,
        surfaced=escaped,
        events=count,
        violations=len(violations),
        seconds=round(elapsed, 2),
        p50_ms=round(p50, 1),
        p99_ms=round(p99, 1),
    )
