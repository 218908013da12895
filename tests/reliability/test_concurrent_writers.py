"""Concurrent writer processes on one stream and on separate streams (SQLite, PostgreSQL):
nothing lost, nothing duplicated, every conflict a typed ConflictError retried by the engine's
``retry_on_conflict``."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ctxledger.adapters.ledger import open_ledger
from ctxledger.domain import events as ev
from tests.reliability._support import pick, record, rerun, spawn_workers
from tests.reliability._workers import append_worker, pack_id

PROCESSES = 16
APPENDS = pick(50, 500)
WAIT_S = pick(300, 1800)


def _url(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        url = str(request.getfixturevalue("pg_url"))
    open_ledger(url).close()  # create the tables once, before the writers race
    return url


def _run_writers(url: str, streams: list[str]) -> tuple[list[tuple[Any, ...]], float]:
    started = time.monotonic()
    out = spawn_workers(
        append_worker,
        PROCESSES,
        args=lambda w: (url, streams[w % len(streams)], w),
        kwargs={"appends": APPENDS},
        timeout=WAIT_S,
        what="writer",
    )
    return out, time.monotonic() - started


@pytest.mark.parametrize("layout", ["one_stream", "separate_streams"])
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_concurrent_writers_lose_and_duplicate_nothing(
    kind: str, layout: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    url = _url(kind, request, tmp_path)
    streams = ["shared"] if layout == "one_stream" else [f"own-{w}" for w in range(PROCESSES)]
    results, elapsed = _run_writers(url, streams)

    conflicts = sum(r[2] for r in results)
    worst_streak = max(r[3] for r in results)
    acked = {r[1]: r[4] for r in results}

    expected_ids = {
        w: [pack_id(w, seq, part) for seq in range(APPENDS) for part in range(1 + seq % 3)]
        for w in range(PROCESSES)
    }
    with open_ledger(url) as ledger:
        log = list(ledger.read_all())
        versions = {s: [r.version for r in ledger.read_stream(s)] for s in streams}
    ids = [r.event.pack_id for r in log if isinstance(r.event, ev.ContextPackBuilt)]
    counts = Counter(ids)
    lost = sum(1 for w in expected_ids for i in expected_ids[w] if i not in counts)
    duplicated = sum(n - 1 for n in counts.values() if n > 1)
    assert len(log) == len(ids)
    assert (lost, duplicated) == (0, 0)
    assert len(log) == sum(len(v) for v in expected_ids.values())

    # Positions: unique and increasing; every stream numbered 1..n without gaps.
    positions = [r.position for r in log]
    assert positions == sorted(set(positions))
    for stream, vs in versions.items():
        assert vs == list(range(1, len(vs) + 1)), stream
    # Each writer's events appear in its own order; each batch is contiguous in its stream.
    where = {r.event.pack_id: r for r in log if isinstance(r.event, ev.ContextPackBuilt)}
    for w, wanted in expected_ids.items():
        assert [i for i in ids if i.startswith(f"w{w}/")] == wanted
        for seq, position, version in acked[w]:
            first = where[pack_id(w, seq, 0)]
            assert (first.position, first.version) == (position, version)
            size = 1 + seq % 3
            batch = [where[pack_id(w, seq, part)] for part in range(size)]
            assert [b.version for b in batch] == list(range(version, version + size))
            assert len({b.stream_id for b in batch}) == 1
    if layout == "separate_streams":
        assert conflicts == 0  # nobody else writes a writer's own stream

    appends = PROCESSES * APPENDS
    record(
        f"concurrent writers · {kind} · {layout.replace('_', ' ')}",
        scale=f"{PROCESSES} processes × {APPENDS} appends ({len(log)} events)",
        result=(
            f"0 lost, 0 duplicated; {conflicts} ConflictError retried "
            f"(worst streak {worst_streak}); {appends / elapsed:.0f} appends/s"
        ),
        rerun_cmd=rerun("test_concurrent_writers.py") + f' -k "{kind} and {layout}"',
        processes=PROCESSES,
        appends=appends,
        events=len(log),
        lost=lost,
        duplicated=duplicated,
        conflicts=conflicts,
        worst_conflict_streak=worst_streak,
        seconds=round(elapsed, 2),
    )
