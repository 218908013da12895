"""The *limit pipeline*: the same job as a build in the simplest possible code, as a floor.

Score (word overlap with the request + recency) → sort → greedy pack into the budget → join
→ SHA-256. Per-item facts that do not depend on the request (word sets, timestamps, token
counts) are precomputed once, as ctxledger memoises them too, so the floor is strict.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from collections.abc import Callable, Sequence

from ctxledger.domain.model import Item
from ctxledger.domain.request import BuildRequest

__all__ = ["limit_pipeline", "raw_insert"]

_WORD = re.compile(r"[a-z_][a-z0-9_]{2,}")


def limit_pipeline(pool: Sequence[Item], request: BuildRequest) -> Callable[[], str]:
    """A zero-argument function running the limit pipeline once over *pool*."""
    words = [frozenset(_WORD.findall(i.content.lower())) for i in pool]
    stamps = [i.observed_at.timestamp() if i.observed_at else 0.0 for i in pool]
    tokens = [i.token_count for i in pool]
    contents = [i.content for i in pool]
    wanted = frozenset(_WORD.findall(" ".join((request.task, *request.keywords)).lower()))
    now = request.now.timestamp()
    budget = request.budget
    n = len(pool)

    def run() -> str:
        scores = [
            len(wanted & w) + 1.0 / (1.0 + (now - t) / 86_400.0)
            for w, t in zip(words, stamps, strict=True)
        ]
        order = sorted(range(n), key=scores.__getitem__, reverse=True)
        used = 0
        chosen = []
        for k in order:
            t = tokens[k]
            if used + t <= budget:
                used += t
                chosen.append(contents[k])
        return hashlib.sha256("\n\n".join(chosen).encode()).hexdigest()

    return run


def raw_insert(path: str) -> Callable[[list[tuple[str, bytes]]], None]:
    """A function that inserts ``(topic, payload)`` rows into a plain sqlite3 table shaped
    like the ledger's (same pragmas: WAL, default synchronous) in one transaction."""
    con = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    con.execute("PRAGMA journal_mode=WAL")
    con.execute(
        "CREATE TABLE IF NOT EXISTS raw (stream TEXT, version INTEGER, topic TEXT, state BLOB,"
        " PRIMARY KEY (stream, version))"
    )
    version = [0]

    def insert(rows: list[tuple[str, bytes]]) -> None:
        con.execute("BEGIN")
        rows_v = []
        for topic, payload in rows:
            version[0] += 1
            rows_v.append(("s", version[0], topic, payload))
        con.executemany("INSERT INTO raw VALUES (?,?,?,?)", rows_v)
        con.execute("COMMIT")

    return insert
