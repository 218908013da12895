"""Code that runs in child processes (importable by the ``spawn`` start method)."""

from __future__ import annotations

import random
import time
import traceback
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.ledger import Recorded, open_ledger
from ctxledger.domain import events as ev
from ctxledger.domain.errors import ConflictError

__all__ = ["AT", "append_worker", "batch_events", "engine_worker", "follow_writer", "pack_id"]

AT = datetime(2026, 1, 1, tzinfo=UTC)
CONFLICT_ATTEMPTS = 100_000


def retry_on_conflict(
    fn: Callable[[], Any], *, attempts: int, on_conflict: Callable[[], object]
) -> Any:
    """Run *fn*; on ConflictError call *on_conflict* (re-read, back off) and retry."""
    for attempt in range(attempts):
        try:
            return fn()
        except ConflictError:
            if attempt == attempts - 1:
                raise
            on_conflict()
    return None


def pack_id(worker: int, seq: int, part: int) -> str:
    return f"w{worker}/{seq}/{part}"


def batch_events(worker: int, seq: int, size: int) -> list[ev.Event]:
    """One append's events: ContextPackBuilt witnesses named ``w{worker}/{seq}/{part}``."""
    return [
        ev.ContextPackBuilt(at=AT, agent_id=f"w{worker}", pack_id=pack_id(worker, seq, part))
        for part in range(size)
    ]


def append_worker(
    url: str,
    stream: str,
    worker: int,
    *,
    appends: int,
    barrier: Any,
    results: Any,
) -> None:
    """Append *appends* batches (sizes 1, 2, 3, 1, …) to *stream*, retrying conflicts through
    ``retry_on_conflict``; report acknowledged positions and the conflict count."""
    try:
        ledger = open_ledger(url)
        try:
            barrier.wait(timeout=120)
            known = {"version": ledger.stream_version(stream)}
            conflicts = 0
            worst_streak = 0
            rng = random.Random(worker)
            acked: list[tuple[int, int, int]] = []  # (seq, first position, first version)
            for seq in range(appends):
                events = batch_events(worker, seq, 1 + seq % 3)
                streak = 0

                def attempt(events: list[ev.Event] = events) -> list[Recorded]:
                    return ledger.append(stream, events, expected_version=known["version"])

                def on_conflict() -> None:
                    nonlocal conflicts, streak
                    conflicts += 1
                    streak += 1
                    known["version"] = ledger.stream_version(stream)
                    time.sleep(rng.uniform(0, 0.001 * 2 ** min(streak, 6)))  # jittered back-off

                recs: list[Recorded] = retry_on_conflict(
                    attempt, attempts=CONFLICT_ATTEMPTS, on_conflict=on_conflict
                )
                worst_streak = max(worst_streak, streak)
                known["version"] = recs[-1].version
                acked.append((seq, recs[0].position, recs[0].version))
        finally:
            ledger.close()
        results.put(("ok", worker, conflicts, worst_streak, acked))
    except BaseException as exc:
        results.put(("error", worker, f"{type(exc).__name__}: {exc}", traceback.format_exc()))


def follow_writer(
    url: str,
    worker: int,
    *,
    events: int,
    barrier: Any,
    gate: Any,
    results: Any,
    pace_s: float,
) -> None:
    """Append *events* witnesses ``w{worker}/{n}`` to the writer's own stream in batches of
    1–5 (every seventh batch to the shared stream ``shared``, retried on conflict). Halfway,
    wait for *gate*, so that the test can restart its runner while writers are still busy."""
    try:
        rng = random.Random(1000 + worker)
        ledger = open_ledger(url)
        try:
            barrier.wait(timeout=120)
            n = 0
            batch_no = 0
            while n < events:
                if n >= events // 2 and not gate.is_set():
                    gate.wait(timeout=300)
                size = min(rng.randint(1, 5), events - n)
                batch: list[ev.Event] = [
                    ev.ContextPackBuilt(at=AT, agent_id=f"w{worker}", pack_id=f"w{worker}/{i}")
                    for i in range(n, n + size)
                ]
                stream = "shared" if batch_no % 7 == 6 else f"own-{worker}"

                def attempt(stream: str = stream, batch: list[ev.Event] = batch) -> object:
                    return ledger.append(
                        stream, batch, expected_version=ledger.stream_version(stream)
                    )

                retry_on_conflict(
                    attempt,
                    attempts=CONFLICT_ATTEMPTS,
                    on_conflict=lambda: time.sleep(rng.uniform(0, 0.005)),
                )
                n += size
                batch_no += 1
                if pace_s:
                    time.sleep(rng.uniform(0, pace_s))
        finally:
            ledger.close()
        results.put(("ok", worker, n, batch_no))
    except BaseException as exc:
        results.put(("error", worker, f"{type(exc).__name__}: {exc}", traceback.format_exc()))


def engine_worker(
    url: str,
    worker: int,
    *,
    agent_id: str,
    turns: int,
    barrier: Any,
    results: Any,
) -> None:
    """Drive one shared agent through a ContextEngine of this process: record, build, report
    usage. Counts the ConflictErrors the ledger raised (the engine retries them itself) and
    times each turn (wall seconds, waiting for the other writers included)."""
    try:
        from ctxledger.adapters.clock import SteppingClock
        from ctxledger.domain.errors import ConflictError

        ledger = open_ledger(url)
        conflicts = 0
        real_append = ledger.append

        def counting_append(*args: Any, **kwargs: Any) -> list[Recorded]:
            nonlocal conflicts
            try:
                return real_append(*args, **kwargs)
            except ConflictError:
                conflicts += 1
                raise

        ledger.append = counting_append  # type: ignore[method-assign]
        clock = SteppingClock(AT, timedelta(milliseconds=10 + worker))
        recorded: list[str] = []
        with open_engine(ledger, clock=clock) as engine:
            barrier.wait(timeout=120)
            escaped = 0

            def again(step: Any) -> Any:
                # The engine retries a conflict conflict_retries times, then surfaces it;
                # the orchestrator (this loop) retries the step.
                nonlocal escaped
                while True:
                    try:
                        return step()
                    except ConflictError:
                        escaped += 1
                        time.sleep(0.001 * (1 + worker))

            latencies: list[float] = []
            for turn in range(turns):
                started = time.perf_counter()
                text = f"worker {worker} turn {turn}: output of `make test` " * 3
                item = again(lambda text=text: engine.record(agent_id, text))
                recorded.append(item.id)
                again(lambda: engine.build(agent_id, budget=600, keywords=("make",)))
                again(
                    lambda: engine.report_usage(
                        agent_id, {"input_tokens": 500, "output_tokens": 20}
                    )
                )
                latencies.append(time.perf_counter() - started)
        results.put(("ok", worker, conflicts, recorded, escaped, latencies))
    except BaseException as exc:
        results.put(("error", worker, f"{type(exc).__name__}: {exc}", traceback.format_exc()))


def lock_worker(url: str, worker: int, *, seconds: float, barrier: Any, results: Any) -> None:
    """Take one stream's writer lock over and over for *seconds* (each hold ≈ 1 ms of work,
    then straight back into the queue), reporting how often it got the lock and how long
    each wait was."""
    try:
        ledger = open_ledger(url)
        waits: list[float] = []
        barrier.wait(timeout=120)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            asked = time.monotonic()
            with ledger.stream_lock("ctx/s/contended", timeout=60):
                waits.append(time.monotonic() - asked)
                busy = time.perf_counter() + 0.001
                while time.perf_counter() < busy:
                    pass
        ledger.close()
        results.put(("ok", worker, waits))
    except BaseException as exc:
        results.put(("error", worker, f"{type(exc).__name__}: {exc}", traceback.format_exc()))


def write_turn_worker(url: str, worker: int, *, seconds: float, barrier: Any, results: Any) -> None:
    """Write to one SQLite ledger for *seconds*: worker 0 saves read models over and over,
    the others append one event at a time to a stream of their own (under its lock), so no
    two of them share a stream and only the database's write lock is contended."""
    try:
        ledger = open_ledger(url)
        stream = f"ctx/s/w{worker}"
        waits: list[float] = []
        barrier.wait(timeout=120)
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            asked = time.monotonic()
            if worker == 0:
                ledger.save_projections({"pool": b"x" * 1000}, 1)
            else:
                with ledger.stream_lock(stream):
                    ledger.append(stream, batch_events(worker, n, 1), expected_version=n)
            waits.append(time.monotonic() - asked)
            n += 1
        ledger.close()
        results.put(("ok", worker, waits))
    except BaseException as exc:
        results.put(("error", worker, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
