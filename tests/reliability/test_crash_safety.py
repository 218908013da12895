"""A SQLite writer SIGKILLed at random points while appending: after every kill the database
passes ``PRAGMA integrity_check``, every acknowledged append is present, no batch is half
written, and replay equals the persisted projections."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sqlite3
import threading
import time
from collections import defaultdict
from multiprocessing.context import ForkContext, SpawnContext
from pathlib import Path
from typing import Any

from ctxledger.adapters.ledger import Recorded, open_ledger
from ctxledger.adapters.ledger.projection_runner import (
    ProjectionRunner,
    encode_state,
    replay_states,
)
from ctxledger.domain import events as ev
from ctxledger.projections.catalog import PROJECTIONS, read_models
from ctxledger.projections.context_state import ContextStates
from tests.reliability._crash_writer import crash_writer, parse_batch_id
from tests.reliability._support import pick, record, rerun

KILLS = pick(50, 500)
MAX_DELAY_S = 0.25


def _acks(path: Path) -> list[tuple[str, str, int, int]]:
    """Complete ack lines only (a kill may tear the last one)."""
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")[:-1]  # the part after the last newline is incomplete
    out = []
    for line in lines:
        batch_id, stream, version, k = line.split(" ")
        out.append((batch_id, stream, int(version), int(k)))
    return out


def _check_batches(log: list[Recorded]) -> dict[str, tuple[str, int, int]]:
    """Every batch whole and contiguous: batch id → (stream, first version, k)."""
    groups: dict[str, list[Recorded]] = defaultdict(list)
    for rec in log:
        groups[parse_batch_id(rec.event)[0]].append(rec)
    found = {}
    for batch_id, recs in groups.items():
        k = parse_batch_id(recs[0].event)[1]
        assert len(recs) == k, f"batch {batch_id}: {len(recs)} of {k} events (half-written)"
        assert len({r.stream_id for r in recs}) == 1
        versions = [r.version for r in recs]
        assert versions == list(range(versions[0], versions[0] + k)), batch_id
        positions = [r.position for r in recs]
        assert positions == list(range(positions[0], positions[0] + k)), batch_id
        assert isinstance(recs[0].event, ev.ContextBuildingStarted)
        assert isinstance(recs[-1].event, ev.ContextPackBuilt)
        found[batch_id] = (recs[0].stream_id, versions[0], k)
    return found


def _fold(states: dict[str, Any], records: list[Recorded]) -> dict[str, Any]:
    """Replay *records* onto *states* (the same fold as ``replay_states``)."""
    out = dict(states)
    for rec in records:
        for p in PROJECTIONS:
            out[p.name] = p.evolve(out[p.name], rec.event)
    return out


def _same(runner: ProjectionRunner, states: dict[str, Any]) -> bool:
    return all(encode_state(runner.states[n]) == encode_state(s) for n, s in states.items())


def test_sigkilled_writer_never_corrupts_the_ledger(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}"
    ack_path = tmp_path / "acks.txt"
    open_ledger(url).close()
    rng = random.Random(20260101)
    verified_end = 0  # log position up to which everything was verified
    reference: dict[str, Any] = {p.name: p.initial() for p in PROJECTIONS}
    found: dict[str, tuple[str, int, int]] = {}
    events = 0
    in_flight = 0
    acks: list[tuple[str, str, int, int]] = []
    started = time.monotonic()
    for run in range(KILLS):
        # fork is fast and safe here (the test holds no connection open across it); spawn if
        # another test left threads behind.
        ctx: ForkContext | SpawnContext = (
            multiprocessing.get_context("fork")
            if threading.active_count() == 1
            else multiprocessing.get_context("spawn")
        )
        ready = ctx.Event()
        proc = ctx.Process(target=crash_writer, args=(url, str(ack_path), run, ready))
        proc.start()
        assert ready.wait(timeout=60), "writer did not start"
        time.sleep(rng.uniform(0, MAX_DELAY_S))
        os.kill(proc.pid or 0, signal.SIGKILL)
        proc.join(timeout=30)
        assert proc.exitcode == -signal.SIGKILL

        con = sqlite3.connect(db)
        try:
            assert con.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            (rows,) = con.execute("SELECT count(*) FROM ctxledger_events").fetchone()
        finally:
            con.close()
        with open_ledger(url) as ledger:
            new = list(ledger.read_all(after=verified_end))
            assert rows == events + len(new)  # nothing before verified_end disappeared
            found.update(_check_batches(new))
            events = rows
            acks = _acks(ack_path)
            full = run % 25 == 24 or run == KILLS - 1
            for batch_id, stream, version, k in acks if full else acks[-200:]:
                assert found.get(batch_id) == (stream, version, k), f"acked {batch_id} lost"
            acked_ids = {a[0] for a in acks}
            unacked = sum(1 for b in found if b not in acked_ids)
            # Only the append in flight at the kill may be committed without its ack line.
            assert unacked - in_flight <= 1
            in_flight = unacked
            # Replay equals the persisted projections (at their position) and the caught-up
            # projections (at the end of the log).
            runner = ProjectionRunner(ledger)
            saved_at = runner.position
            assert saved_at >= verified_end  # the last verification persisted its catch-up
            cut = sum(1 for r in new if r.position <= saved_at)
            reference = _fold(reference, new[:cut])
            assert _same(runner, reference)
            runner.run_once()
            reference = _fold(reference, new[cut:])
            assert _same(runner, reference)
            states: ContextStates = read_models(reference).context_state
            assert not any(s.building_in_progress for s in states.by_agent.values())
            verified_end = runner.position
    elapsed = time.monotonic() - started
    with open_ledger(url) as ledger:  # and once from scratch, with the product's replay
        replayed, count, _ = replay_states(ledger)
        assert count == events
        assert all(encode_state(reference[n]) == encode_state(s) for n, s in replayed.items())

    record(
        "crash safety · sqlite · SIGKILL",
        scale=f"{KILLS} kills at random points (0–{MAX_DELAY_S * 1000:.0f} ms into appending)",
        result=(
            f"integrity_check ok {KILLS}/{KILLS}; {len(acks)} acknowledged batches all "
            f"present; 0 half-written of {len(found)} batches ({events} events); "
            f"{in_flight} committed in flight before their ack; replay = projections "
            f"{KILLS}/{KILLS}; {elapsed:.1f}s"
        ),
        rerun_cmd=rerun("test_crash_safety.py"),
        kills=KILLS,
        acked_batches=len(acks),
        batches=len(found),
        events=events,
        committed_unacked=in_flight,
        seconds=round(elapsed, 2),
    )
