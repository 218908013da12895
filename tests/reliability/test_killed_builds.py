"""An engine SIGKILLed while it builds: every build the kill left open (a Started with no
outcome) is closed by ContextBuildingInterrupted when the agent builds next, from another
process; `replay --verify`, `audit` and `audit --rederive` stay clean."""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import subprocess
import threading
import time
from multiprocessing.context import ForkContext, SpawnContext
from pathlib import Path

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import EngineSettings
from ctxledger.adapters.ledger import open_ledger, stream_id_for
from ctxledger.adapters.ledger.projection_runner import ProjectionRunner
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain import events as ev
from tests.reliability._build_writer import AGENT, SESSION, build_writer
from tests.reliability._support import ROOT, pick, record, rerun

KILLS = pick(30, 300)
ABANDONED = "process ended before the build finished"


def _open_build(url: str) -> str:
    """The pack id of the agent's build in flight as the log says (``""``: none)."""
    with open_ledger(url) as ledger:
        runner = ProjectionRunner(ledger)
        runner.catch_up()
        return runner.models.context_state.building_pack(AGENT)


def test_builds_killed_mid_way_are_closed_as_interrupted(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    rng = random.Random(7)
    left_open: list[str] = []
    started = time.monotonic()
    run = -1
    # KILLS kills, and more (up to 3 × KILLS) while fewer than a third hit a build: where a
    # random kill lands depends on the machine's speed (9 of 30 on a loaded one).
    while (run := run + 1) < KILLS or (len(left_open) < KILLS // 3 and run < 3 * KILLS):
        ctx: ForkContext | SpawnContext = (
            multiprocessing.get_context("fork")
            if threading.active_count() == 1
            else multiprocessing.get_context("spawn")
        )
        ready = ctx.Event()
        proc = ctx.Process(target=build_writer, args=(url, run, ready))
        proc.start()
        assert ready.wait(timeout=60), "writer did not start"
        time.sleep(rng.uniform(0.02, 0.3))
        os.kill(proc.pid or 0, signal.SIGKILL)
        proc.join(timeout=30)
        assert proc.exitcode == -signal.SIGKILL
        pending = _open_build(url)
        if pending:
            left_open.append(pending)

    # One last build from this process closes the last kill's open build, if any.
    with open_engine(
        url, counter=default_counter(), settings=EngineSettings(session_id=SESSION)
    ) as engine:
        engine.build(AGENT)
        assert engine.building(AGENT) == ""
    elapsed = time.monotonic() - started

    with open_ledger(url) as ledger:
        stream = ledger.read_stream(stream_id_for(SESSION, AGENT))
    outcomes: dict[str, list[ev.Event]] = {}
    starts: list[str] = []
    for rec in stream:
        e = rec.event
        if isinstance(e, ev.ContextBuildingStarted):
            starts.append(e.pack_id)
        elif isinstance(
            e, ev.ContextPackBuilt | ev.ContextBuildingFailed | ev.ContextBuildingInterrupted
        ):
            outcomes.setdefault(e.pack_id, []).append(e)
    # every build has exactly one outcome
    assert all(len(outcomes.get(p, [])) == 1 for p in starts), "a build without one outcome"
    # every build a kill left open was closed as interrupted, with the reason
    for pack_id in left_open:
        (closing,) = outcomes[pack_id]
        assert isinstance(closing, ev.ContextBuildingInterrupted), pack_id
        assert closing.reason == ABANDONED
    assert len(left_open) >= KILLS // 3, f"only {len(left_open)} of {KILLS} kills hit a build"

    cli = str(ROOT / ".venv" / "bin" / "ctxledger")
    for args in (["replay", "--verify"], ["audit", "--rederive"]):
        done = subprocess.run(
            [cli, *args, "--store", url, "--json"], capture_output=True, text=True, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert (report["mismatches"], report["not_rederivable"]) == (0, 0), report
    assert report["rederived"] == report["builds"] > 0

    built = sum(isinstance(o[0], ev.ContextPackBuilt) for o in outcomes.values())
    record(
        "killed builds · sqlite · SIGKILL mid-build",
        scale=f"{run} kills 20–300 ms into an engine recording and building",
        result=(
            f"{len(left_open)} kills left a build open, all {len(left_open)} closed by "
            f"Interrupted ({ABANDONED!r}); {len(starts)} builds, {built} packs, every build "
            f"one outcome; replay --verify and audit --rederive clean; {elapsed:.1f}s"
        ),
        rerun_cmd=rerun("test_killed_builds.py"),
        kills=run,
        left_open=len(left_open),
        builds=len(starts),
        packs=built,
        seconds=round(elapsed, 2),
    )
