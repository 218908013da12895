"""Load: many agents × many turns through one ContextEngine on the embedded SQLite store; no
error, the audit is clean, replay equals the persisted read models; peak RSS and duration."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.ledger.projection_runner import (
    ProjectionRunner,
    encode_state,
    replay_states,
)
from ctxledger.projections.audit import audit
from tests.reliability._support import ROOT, pick, record, rerun

AGENTS = 100
TURNS = pick(20, 200)


def test_many_agents_through_one_engine(tmp_path: Path) -> None:
    db = tmp_path / "load.db"
    # A child process, so that its peak RSS is the run's own.
    proc = subprocess.run(
        [sys.executable, "-m", "tests.reliability._load_run", str(db), str(AGENTS), str(TURNS)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=pick(600, 3600),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])

    with open_ledger(f"sqlite:///{db}") as ledger:
        records = [(r.position, r.event) for r in ledger.read_all()]
        violations = audit(records)
        assert violations == []
        replayed, count, last = replay_states(ledger)
        assert count == len(records)
        runner = ProjectionRunner(ledger)  # what the engine persisted when it closed
        assert runner.position == last
        for name, state in replayed.items():
            assert encode_state(runner.states[name]) == encode_state(state), name

    turns = AGENTS * TURNS
    record(
        "load · one engine · sqlite",
        scale=f"{AGENTS} agents × {TURNS} turns ({turns} turns, {count} events)",
        result=(
            f"0 errors; audit clean (0 violations); replay = persisted read models; "
            f"{figures['seconds']}s ({turns / figures['seconds']:.0f} turns/s), peak RSS "
            f"{figures['peak_rss_mb']} MB; {figures['rebuilds']} rebuilds, "
            f"{figures['refreshes']} refreshes"
        ),
        rerun_cmd=rerun("test_load.py"),
        agents=AGENTS,
        turns=turns,
        events=count,
        violations=len(violations),
        **figures,
    )
