"""A follower and a projection runner under concurrent writer processes (PostgreSQL): none
missed, none applied twice; a runner restarted mid-way resumes exactly where it saved."""

from __future__ import annotations

import multiprocessing
import queue
import threading
import time
from collections import Counter
from typing import Any

import pytest

from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.ledger.projection_runner import (
    ProjectionRunner,
    encode_state,
    replay_states,
)
from ctxledger.domain import events as ev
from ctxledger.projections.context_state import ContextStates
from tests.reliability._support import pick, record, rerun
from tests.reliability._workers import follow_writer

WRITERS = 8
EVENTS_PER_WRITER = pick(500, 5000)
TOTAL = WRITERS * EVENTS_PER_WRITER
DEADLINE_S = pick(300, 1800)
BATCH = pick(50, 500)


def _follow(url: str, stop: threading.Event, seen: list[tuple[int, str]]) -> None:
    with open_ledger(url) as ledger:
        for rec in ledger.follow(stop=stop, poll_interval=0.05, idle_timeout=DEADLINE_S):
            assert isinstance(rec.event, ev.ContextPackBuilt)
            seen.append((rec.position, rec.event.pack_id))
            if len(seen) >= TOTAL:
                return


def _run_until(runner: ProjectionRunner, done: Any, deadline: float) -> None:
    while not done() and time.monotonic() < deadline:
        if runner.run_once() == 0:
            time.sleep(0.02)


@pytest.mark.postgres
def test_follower_and_runner_under_concurrent_writers(pg_url: str) -> None:
    url = pg_url
    open_ledger(url).close()
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(WRITERS + 1)
    gate = ctx.Event()
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=follow_writer,
            args=(url, w),
            kwargs={
                "events": EVENTS_PER_WRITER,
                "barrier": barrier,
                "gate": gate,
                "results": results,
                "pace_s": 0.002,
            },
        )
        for w in range(WRITERS)
    ]
    for p in procs:
        p.start()
    seen: list[tuple[int, str]] = []
    stop = threading.Event()
    follower = threading.Thread(target=_follow, args=(url, stop, seen), daemon=True)
    follower.start()
    barrier.wait(timeout=120)
    started = time.monotonic()
    deadline = started + DEADLINE_S

    # Runner 1 applies a quarter of the events while the writers write, then "crashes";
    # the writers cannot pass halfway before the restart, so the restart is mid-way.
    ledger1 = open_ledger(url)
    runner1 = ProjectionRunner(ledger1, batch_size=BATCH)
    _run_until(runner1, lambda: runner1.applied >= TOTAL // 4, deadline)
    saved_at = runner1.position
    applied1 = runner1.applied
    written_at_restart = len(list(ledger1.read_all()))
    ledger1.close()

    # Runner 2 starts from what runner 1 persisted and follows to the end.
    ledger2 = open_ledger(url)
    try:
        runner2 = ProjectionRunner(ledger2, batch_size=BATCH)
        resumed_at = runner2.position
        gate.set()
        finished: list[tuple[Any, ...]] = []

        def writers_done() -> bool:
            while True:
                try:
                    got = results.get_nowait()
                except queue.Empty:
                    break
                assert got[0] == "ok", f"writer {got[1]} failed: {got[2]}\n{got[3]}"
                finished.append(got)
            return len(finished) == WRITERS and runner2.position == ledger2.max_position()

        _run_until(runner2, writers_done, deadline)
        elapsed = time.monotonic() - started
        stop.set()
        follower.join(timeout=60)
        for p in procs:
            p.join(timeout=30)
        assert len(finished) == WRITERS, "writers did not finish before the deadline"

        log = list(ledger2.read_all())
        replayed, count, _ = replay_states(ledger2)
        before_restart = sum(1 for r in log if r.position <= saved_at)
    finally:
        gate.set()
        ledger2.close()
        for p in procs:
            if p.is_alive():
                p.kill()

    expected = {f"w{w}/{i}" for w in range(WRITERS) for i in range(EVENTS_PER_WRITER)}
    # The log itself: exactly the events written.
    assert count == len(log) == TOTAL
    # The follower: every event once, in log order.
    seen_ids = Counter(pid for _, pid in seen)
    missed = len(expected - set(seen_ids))
    twice = sum(n - 1 for n in seen_ids.values() if n > 1)
    assert (missed, twice) == (0, 0)
    assert [p for p, _ in seen] == [r.position for r in log]
    # The runners: resumed exactly at the persisted position, applied every event once.
    assert resumed_at == saved_at
    assert saved_at > 0
    assert written_at_restart < TOTAL, "the restart was not mid-way"
    assert applied1 == before_restart
    assert runner2.applied == TOTAL - before_restart
    states: ContextStates = runner2.models.context_state
    for w in range(WRITERS):
        built = states.by_agent[f"w{w}"].built_pack_ids
        assert built == tuple(f"w{w}/{i}" for i in range(EVENTS_PER_WRITER))
    for name, state in replayed.items():
        assert encode_state(runner2.states[name]) == encode_state(state), name

    record(
        "follower + projection runner · postgres",
        scale=f"{WRITERS} writer processes, {TOTAL} events, runner restarted mid-way",
        result=(
            f"follower: {TOTAL} seen, 0 missed, 0 twice; runner: {applied1} + "
            f"{runner2.applied} applied, resumed at position {resumed_at} "
            f"({written_at_restart} of {TOTAL} written at restart); states = replay; "
            f"{elapsed:.1f}s"
        ),
        rerun_cmd=rerun("test_follower.py"),
        writers=WRITERS,
        events=TOTAL,
        missed=missed,
        applied_twice=twice,
        runner1_applied=applied1,
        runner2_applied=runner2.applied,
        resumed_at=resumed_at,
        written_at_restart=written_at_restart,
        seconds=round(elapsed, 2),
    )
