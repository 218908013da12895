"""Scale: replay of a large log in a child process (events/s and peak RSS), and PostgreSQL."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from bench.ledger_io import Row, append_batched, rate, replay_ledger
from bench.timing import peak_rss_mb, rss_mb
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.ledger.projection_runner import encode_state, replay_states
from ctxledger.domain.events import Event

__all__ = ["child_replay", "replay_in_child", "run_postgres"]

RUN_PY = Path(__file__).resolve().parent / "run.py"


def child_replay(url: str, mode: str) -> dict[str, Any]:
    """In a fresh process: replay *url* (``projections`` or ``read``) and report the rate and
    memory: RSS before, peak RSS, and the size of the final read models."""
    ledger = open_ledger(url)
    before = rss_mb()
    start = time.perf_counter()
    state_bytes = 0
    if mode == "projections":
        states, count, _ = replay_states(ledger)
        took = time.perf_counter() - start
        state_bytes = sum(len(encode_state(s)) for s in states.values())
    else:
        count = sum(1 for _ in ledger.read_all())
        took = time.perf_counter() - start
    ledger.close()
    return {
        "mode": mode,
        "events": count,
        "seconds": round(took, 2),
        "events_per_s": rate(count, took),
        "rss_before_mb": before,
        "peak_rss_mb": peak_rss_mb(),
        "read_models_mb": round(state_bytes / 2**20, 1),
    }


def replay_in_child(url: str, mode: str, *, timeout: float = 900) -> dict[str, Any]:
    """Run :func:`child_replay` in a subprocess (so its peak RSS is its own)."""
    out = subprocess.run(
        [sys.executable, str(RUN_PY), "--child", "replay", url, mode],
        check=True,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _pg_raw(url: str, rows: list[Row]) -> dict[str, float]:
    """Plain psycopg: insert the same payloads (1000 per transaction), then select and decode
    them in order."""
    import psycopg

    decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(Event)
    with psycopg.connect(url) as con:
        con.execute(
            "CREATE TABLE raw_events (notification_id bigserial, originator_id text, "
            "originator_version bigint, topic text, state bytea, "
            "PRIMARY KEY (originator_id, originator_version))"
        )
        con.commit()
        start = time.perf_counter()
        for i in range(0, len(rows), 1000):
            with con.cursor() as cur:
                cur.executemany(
                    "INSERT INTO raw_events (originator_id, originator_version, topic, state) "
                    "VALUES (%s, %s, %s, %s)",
                    rows[i : i + 1000],
                )
            con.commit()
        append_s = time.perf_counter() - start
        start = time.perf_counter()
        count = 0
        with con.cursor(name="replay") as cur:
            cur.itersize = 1000
            cur.execute("SELECT topic, state FROM raw_events ORDER BY notification_id")
            for _, state in cur:
                decoder.decode(state)
                count += 1
        replay_s = time.perf_counter() - start
        con.commit()
    return {"append_s": append_s, "replay_s": replay_s, "events": count}


def run_postgres(rows: Iterator[list[Row]], *, timeout_note: str = "") -> dict[str, Any]:
    """Append (batched) and replay through a PostgreSQL ledger on a throwaway local cluster,
    beside plain psycopg on the same payloads. Needs the PostgreSQL server binaries."""
    root = str(RUN_PY.parent.parent)
    if root not in sys.path:
        sys.path.insert(0, root)
    try:
        from tests.pg_server import find_pg_bin, start_pg_server
    except ImportError:
        return {"skipped": "tests/pg_server.py not found"}
    bindir = find_pg_bin()
    if bindir is None:
        return {"skipped": "PostgreSQL server binaries (pg_ctl) not found"}
    import psycopg

    data = [r for chunk in rows for r in chunk]
    with start_pg_server(bindir) as server:
        admin = server.url()
        with psycopg.connect(admin, autocommit=True) as con:
            con.execute("CREATE DATABASE bench_ledger")
            con.execute("CREATE DATABASE bench_raw")
        url = server.url("bench_ledger")
        append_s = append_batched(url, data)
        replay_s, count = replay_ledger(url)
        read_s, _ = replay_ledger(url, projections=False)
        ledger = open_ledger(url)
        _, _, _ = replay_states(ledger, upto=0)
        ledger.close()
        raw = _pg_raw(server.url("bench_raw"), [(s, v, t, p) for s, v, t, p in data])
    return {
        "events": count,
        "append_per_s": rate(len(data), append_s),
        "replay_per_s": rate(count, replay_s),
        "read_per_s": rate(count, read_s),
        "raw_append_per_s": rate(len(data), raw["append_s"]),
        "raw_replay_per_s": rate(int(raw["events"]), raw["replay_s"]),
        "append_ratio": round(raw["append_s"] / append_s, 2) if append_s else None,
        "replay_ratio": round(raw["replay_s"] / replay_s, 2) if replay_s else None,
        "server": "throwaway local cluster (fsync=off, synchronous_commit=off)",
        "note": timeout_note,
    }
