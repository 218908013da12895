"""Child-process code for the memory-catalog test: raw bypass attempts from another program,
and a check-and-set writer racing another process."""

from __future__ import annotations

import json
import sqlite3
import sys
import traceback
from datetime import UTC, datetime
from typing import Any

__all__ = ["BODY", "NOW", "bypass_main", "cas_worker"]

NOW = datetime(2026, 2, 1, 12, 0, tzinfo=UTC)
BODY = "Run the integration tests with `make it`; they need the db container first."


def bypass_main(db: str) -> None:
    """Run each ``[name, sql, params]`` read from stdin on a plain connection of this process,
    with recursive_triggers off and on; print ``[name, mode, outcome]`` lines as JSON."""
    attempts = json.load(sys.stdin)
    out = []
    for recursive in (False, True):
        conn = sqlite3.connect(db, isolation_level=None, timeout=30)
        conn.execute(f"PRAGMA recursive_triggers={'ON' if recursive else 'OFF'}")
        for name, sql, params in attempts:
            try:
                conn.execute(sql, params)
                outcome = "ACCEPTED"
            except sqlite3.Error as exc:
                outcome = f"{type(exc).__name__}: {exc}"
            out.append([name, "recursive" if recursive else "plain", outcome])
        conn.close()
    json.dump(out, sys.stdout)


def cas_worker(
    db: str,
    who: int,
    *,
    memory_id: str,
    workspace: str,
    rounds: int,
    barrier: Any,
    results: Any,
) -> None:
    """Race the other process on the same entry: create it, then one transition per round
    with the revision both read. Reports each round's outcome: won, conflict or an error."""
    try:
        from ctxledger.adapters.memory.catalog import MemoryCatalog
        from ctxledger.domain.errors import MemoryConflictError

        outcomes: list[str] = []
        with MemoryCatalog.open(db, timeout=30) as cat:
            partition = cat.partition_for(workspace)
            barrier.wait(timeout=120)
            try:
                cat.add_candidate(
                    partition=partition,
                    body=BODY,
                    source="worker_finding",
                    agent=f"writer-{who}",
                    task="T-1",
                    observed_at=NOW,
                    memory_id=memory_id,
                )
                outcomes.append("won")
            except MemoryConflictError:
                outcomes.append("conflict")
            barrier.wait(timeout=120)
            for _ in range(rounds):
                current = cat.get(memory_id)
                barrier.wait(timeout=120)  # both hold the same revision now
                action = cat.verify if current.state in ("candidate", "stale") else cat.mark_stale
                try:
                    action(memory_id, current.revision)
                    outcomes.append("won")
                except MemoryConflictError:
                    outcomes.append("conflict")
                barrier.wait(timeout=120)  # both done before the next read
        results.put(("ok", who, outcomes))
    except BaseException as exc:
        results.put(("error", who, f"{type(exc).__name__}: {exc}", traceback.format_exc()))


if __name__ == "__main__":
    bypass_main(sys.argv[1])
