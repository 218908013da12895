"""Append and replay through the ledger beside raw sqlite3/psycopg + msgspec on the same bytes.

A realistic log is recorded once by engines on ``memory://`` (agents taking turns: record a
tool call and its output, build, report usage), then replicated with renamed agents to any
size: each copy is the template with the agent prefix replaced in stream ids and payloads,
so every copy is a consistent set of agents of its own.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgspec

from bench.build_latency import TickClock
from bench.pools import START, make_pool
from bench.timing import stats
from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import EngineSettings
from ctxledger.adapters.ledger import EVENTS_TABLE, open_ledger
from ctxledger.adapters.ledger.projection_runner import replay_states
from ctxledger.domain.codec import decode_event
from ctxledger.domain.events import Event
from ctxledger.domain.model import AgentIdentity, Item

__all__ = [
    "PREFIX",
    "Row",
    "append_batched",
    "append_per_turn",
    "best_of",
    "make_template",
    "raw_sqlite_append",
    "rate",
    "raw_sqlite_replay",
    "replay_ledger",
    "replicas",
    "sqlite_bulk_load",
]

Row = tuple[str, int, str, bytes]
"""(stream id, version in the stream, topic, payload)."""
PREFIX = "bench-r0000-"
_BUDGET = 8_000


def make_template(agents: int, turns: int, *, seed: int = 11) -> list[Row]:
    """The log of *agents* taking *turns* each, round-robin, recorded by a real engine."""
    rng = random.Random(seed)
    source = make_pool(max(64, 2 * turns + 8), seed=seed)
    bodies = [i for i in source if not (i.pinned or i.mandatory)]
    engine = open_engine(
        open_ledger("memory://"),
        clock=TickClock(START),
        settings=EngineSettings(session_id="bench", save_every=10**9),
    )
    names = [f"{PREFIX}a{a:03d}" for a in range(agents)]
    for name in names:
        engine.register_agent(
            AgentIdentity(agent_id=name, role="worker", task="bench-task", budget=_BUDGET)
        )
        engine.add_steering_note(name, "Keep the public API stable; run the tests after edits.")
    for turn in range(turns):
        for name in names:
            call, out = bodies[(2 * turn) % len(bodies)], bodies[(2 * turn + 1) % len(bodies)]
            group = f"step-{turn:04d}"
            pair: list[Item] = [
                msgspec.structs.replace(call, id=f"{call.id}-{turn}", group=group, agent=name),
                msgspec.structs.replace(
                    out,
                    id=f"{out.id}-{turn}-o",
                    group=group,
                    agent=name,
                    failure=rng.random() < 0.1,
                ),
            ]
            engine.record_many(name, pair)
            result = engine.build(name, files=pair[1].files)
            engine.report_usage(
                name,
                {
                    "input_tokens": 200 + rng.randint(0, 400),
                    "cache_read_input_tokens": result.pack.budget_used,
                    "output_tokens": 150,
                },
            )
    rows = [(r.stream_id, r.version, *_encoded(r.event)) for r in engine.ledger.read_all()]
    engine.ledger.close()
    return rows


def _encoded(event: Event) -> tuple[str, bytes]:
    from ctxledger.domain.codec import encode_event

    return encode_event(event)


def replicas(template: list[Row], copies: int, *, first: int = 0) -> Iterator[list[Row]]:
    """*copies* renamed copies of *template* (copy k's agents are ``bench-r{k:04d}-…``)."""
    old = PREFIX.encode()
    for k in range(first, first + copies):
        new = f"bench-r{k:04d}-"
        newb = new.encode()
        yield [(s.replace(PREFIX, new), v, t, p.replace(old, newb)) for s, v, t, p in template]


def _decode(rows: list[Row]) -> list[tuple[str, int, Event]]:
    return [(s, v, decode_event(t, p)) for s, v, t, p in rows]


def _by_stream(decoded: list[tuple[str, int, Event]]) -> dict[str, list[tuple[int, Event]]]:
    streams: dict[str, list[tuple[int, Event]]] = {}
    for s, v, e in decoded:
        streams.setdefault(s, []).append((v, e))
    return streams


def append_batched(url: str, rows: list[Row], *, batch: int = 1000) -> float:
    """Seconds to append *rows* through ``Ledger.append``, up to *batch* events of one stream
    per transaction (events are decoded beforehand, untimed; encoding is timed)."""
    streams = _by_stream(_decode(rows))
    ledger = open_ledger(url)
    start = time.perf_counter()
    for stream, events in streams.items():
        for i in range(0, len(events), batch):
            chunk = events[i : i + batch]
            ledger.append(stream, [e for _, e in chunk], expected_version=chunk[0][0] - 1)
    took = time.perf_counter() - start
    ledger.close()
    return took


def _turns(rows: list[Row]) -> list[list[Row]]:
    """Consecutive rows of one stream, cut after each ContextPackBuilt: one turn each."""
    groups: list[list[Row]] = []
    current: list[Row] = []
    for row in rows:
        if current and current[-1][0] != row[0]:
            groups.append(current)
            current = []
        current.append(row)
        if row[2].startswith("ContextPackBuilt."):
            groups.append(current)
            current = []
    if current:
        groups.append(current)
    return groups


def append_per_turn(url: str, rows: list[Row]) -> tuple[float, int]:
    """``(seconds, transactions)`` to append *rows* through ``Ledger.append``, one
    transaction per turn (a build with the items recorded before it)."""
    groups = _turns(rows)
    decoded = [_decode(g) for g in groups]
    ledger = open_ledger(url)
    start = time.perf_counter()
    for g in decoded:
        ledger.append(g[0][0], [e for _, _, e in g], expected_version=g[0][1] - 1)
    took = time.perf_counter() - start
    ledger.close()
    return took, len(groups)


def _raw_connect(path: str) -> sqlite3.Connection:
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(
        f"CREATE TABLE IF NOT EXISTS {EVENTS_TABLE} (originator_id TEXT, originator_version "
        "INTEGER, topic TEXT, state BLOB, PRIMARY KEY (originator_id, originator_version))"
    )
    return con


def raw_sqlite_append(
    path: str, rows: list[Row], *, batch: int = 1000, per_turn: bool = False
) -> float:
    """Seconds for plain sqlite3 to insert the same events (msgspec-encoded from the decoded
    events, as the ledger does) in a table of the ledger's shape: *batch* rows of one stream
    per transaction, or one transaction per turn."""
    encoder = msgspec.json.Encoder()
    if per_turn:
        groups = [_decode(g) for g in _turns(rows)]
    else:
        groups = []
        for stream, events in _by_stream(_decode(rows)).items():
            for i in range(0, len(events), batch):
                groups.append([(stream, v, e) for v, e in events[i : i + batch]])
    topic_of = {(s, v): t for s, v, t, _ in rows}
    con = _raw_connect(path)
    sql = f"INSERT INTO {EVENTS_TABLE} VALUES (?,?,?,?)"
    start = time.perf_counter()
    for g in groups:
        con.execute("BEGIN")
        con.executemany(sql, [(s, v, topic_of[(s, v)], encoder.encode(e)) for s, v, e in g])
        con.execute("COMMIT")
    took = time.perf_counter() - start
    con.close()
    return took


def sqlite_bulk_load(path: str, chunks: Iterator[list[Row]]) -> tuple[float, int]:
    """Load pre-encoded rows into the ledger's table with plain sqlite3 (a fixture for the
    large replays: the bytes are exactly what ``Ledger.append`` writes). ``(seconds, rows)``."""
    con = _raw_connect(path)
    sql = f"INSERT INTO {EVENTS_TABLE} VALUES (?,?,?,?)"
    count = 0
    start = time.perf_counter()
    for rows in chunks:
        con.execute("BEGIN")
        con.executemany(sql, rows)
        con.execute("COMMIT")
        count += len(rows)
    took = time.perf_counter() - start
    con.close()
    return took, count


def replay_ledger(url: str, *, projections: bool = True) -> tuple[float, int]:
    """``(seconds, events)`` to replay the whole log through every projection (or, with
    ``projections=False``, only read and decode it through the ledger)."""
    ledger = open_ledger(url)
    start = time.perf_counter()
    if projections:
        _, count, _ = replay_states(ledger)
    else:
        count = sum(1 for _ in ledger.read_all())
    took = time.perf_counter() - start
    ledger.close()
    return took, count


def raw_sqlite_replay(path: str, *, page: int = 1000) -> tuple[float, int]:
    """``(seconds, events)`` for plain sqlite3 to select every row in order and decode it with
    one msgspec decoder of the event union."""
    decoder: msgspec.json.Decoder[Any] = msgspec.json.Decoder(Event)
    con = sqlite3.connect(path)
    start = time.perf_counter()
    cur = con.execute(f"SELECT topic, state FROM {EVENTS_TABLE} ORDER BY rowid")
    count = 0
    decode = decoder.decode
    while True:
        rows = cur.fetchmany(page)
        if not rows:
            break
        for _, state in rows:
            decode(state)
        count += len(rows)
    took = time.perf_counter() - start
    con.close()
    return took, count


def rate(events: int, seconds: float) -> float:
    """Events per second, rounded."""
    return round(events / seconds) if seconds > 0 else 0.0


def best_of(fn: Callable[[], tuple[float, int]], rounds: int) -> dict[str, Any]:
    """Run *fn* ``rounds`` times; the median and best seconds and the event count."""
    took = []
    count = 0
    for _ in range(rounds):
        t, count = fn()
        took.append(t)
    s = stats(took)
    return {
        "events": count,
        "median_s": round(s["p50"] / 1e3, 3),
        "best_s": round(s["min"] / 1e3, 3),
    }
