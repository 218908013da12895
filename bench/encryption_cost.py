"""The cost of content encryption (crypto-shredding): recording into, replaying and erasing
from a SQLite ledger whose content is sealed, beside the same work on a plain ledger.

Each run records *items* tool outputs of about 2 KiB into one agent (a build every 20),
then times a cold replay of the whole log through every projection (a new engine on a store
with its persisted read models deleted) and, on the encrypted ledger, the erase of the agent
(keys destroyed, deleted rows wiped, read models rebuilt). Plain and encrypted runs alternate;
each figure is the median of *repeat* runs."""

from __future__ import annotations

import random
import sqlite3
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.domain.model import AgentIdentity, Source

__all__ = ["run_encryption_cost"]

MASTER = bytes(range(32))
START = datetime(2026, 12, 4, tzinfo=UTC)


def _texts(items: int) -> list[str]:
    rng = random.Random(1204)
    words = ("parser", "session", "refresh", "token", "timeout", "module", "assert", "retry")
    return [
        f"$ pytest tests/test_{n}.py\n"
        + " ".join(rng.choice(words) for _ in range(300))
        + f"\nFAILED tests/test_{n}.py::test_{n}"
        for n in range(items)
    ]


def _one(path: Path, texts: list[str], *, encrypt: bool) -> dict[str, float]:
    url = f"sqlite:///{path}"
    clock = SteppingClock(START, timedelta(seconds=1))
    key = MASTER if encrypt else None
    with open_engine(url, clock=clock, master_key=key, encrypt=encrypt) as engine:
        engine.register_agent(AgentIdentity(agent_id="a", role="worker", budget=8000))
        cpu, wall = time.thread_time(), time.perf_counter()
        for n, text in enumerate(texts):
            engine.record("a", text, source=Source.TOOL_LOG)
            if n % 20 == 19:
                engine.build("a")
        record_cpu = (time.thread_time() - cpu) / len(texts)
        record_wall = (time.perf_counter() - wall) / len(texts)
        events = engine.ledger.max_position()
    size = path.stat().st_size
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM ctxledger_projections")
    cpu = time.thread_time()
    with open_engine(url, clock=clock, master_key=key) as engine:
        replay_cpu = time.thread_time() - cpu
        erase_wall = 0.0
        if encrypt:
            wall = time.perf_counter()
            engine.erase("a", reason="bench")
            erase_wall = time.perf_counter() - wall
    return {
        "record_cpu_ms": record_cpu * 1e3,
        "record_wall_ms": record_wall * 1e3,
        "replay_cpu_s": replay_cpu,
        "events": events,
        "erase_s": erase_wall,
        "bytes": size,
    }


def run_encryption_cost(items: int, *, repeat: int = 3) -> dict[str, Any]:
    """Per record (CPU and wall ms), cold replay (CPU s) and erase (s), plain vs encrypted."""
    texts = _texts(items)
    runs: dict[str, list[dict[str, float]]] = {"plain": [], "encrypted": []}
    with tempfile.TemporaryDirectory(prefix="ctxledger-enc-") as tmp:
        for r in range(repeat):
            for kind in ("plain", "encrypted"):
                path = Path(tmp) / f"{kind}-{r}.db"
                runs[kind].append(_one(path, texts, encrypt=kind == "encrypted"))

    def med(kind: str, key: str, digits: int = 3) -> float:
        return round(statistics.median(x[key] for x in runs[kind]), digits)

    out: dict[str, Any] = {"items": items, "repeat": repeat}
    for kind in runs:
        out[kind] = {
            "record_cpu_ms": med(kind, "record_cpu_ms"),
            "record_wall_ms": med(kind, "record_wall_ms"),
            "replay_cpu_s": med(kind, "replay_cpu_s"),
            "events": int(med(kind, "events", 0)),
            "kib": round(med(kind, "bytes", 0) / 1024),
        }
    out["encrypted"]["erase_s"] = med("encrypted", "erase_s")
    out["record_ratio"] = round(
        out["encrypted"]["record_cpu_ms"] / out["plain"]["record_cpu_ms"], 2
    )
    out["replay_ratio"] = round(out["encrypted"]["replay_cpu_s"] / out["plain"]["replay_cpu_s"], 2)
    return out
