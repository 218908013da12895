"""The memory catalog under attack and contention: guard bypass attempts from another
program, erasure byte-scan, and two processes racing check-and-set on one entry."""

from __future__ import annotations

import json
import multiprocessing
import queue
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from ctxledger.adapters.memory.catalog import MemoryCatalog
from ctxledger.domain.memory import MemoryEntry
from tests.integration.test_memory_catalog import BYPASS_ATTEMPTS
from tests.reliability._catalog_workers import NOW, cas_worker
from tests.reliability._support import ROOT, pick, record, rerun

WORKSPACE = "/srv/projects/acme-payments"
ENTRIES = pick(60, 600)
CAS_ROUNDS = pick(50, 500)
_WORDS = (
    "amber",
    "basil",
    "cedar",
    "delta",
    "ember",
    "fjord",
    "garnet",
    "harbor",
    "indigo",
    "juniper",
    "kestrel",
    "lagoon",
    "meadow",
    "nectar",
    "orchid",
    "pebble",
    "quartz",
    "raven",
    "saffron",
    "tundra",
    "umber",
    "violet",
    "willow",
    "yarrow",
)


def _rows(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return [
            (str(i), str(p)) for i, p in conn.execute("SELECT id, payload FROM memory ORDER BY id")
        ]


def _files(db: Path) -> bytes:
    return b"".join(
        p.read_bytes() for p in (db, Path(f"{db}-wal"), Path(f"{db}-shm")) if p.exists()
    )


def _canary(rng: random.Random, n: int) -> str:
    words = "-".join(rng.choice(_WORDS) for _ in range(3))
    return f"canary-{words}-{n:05d}"


def _add(cat: MemoryCatalog, body: str, n: int) -> MemoryEntry:
    return cat.add_candidate(
        partition=cat.partition_for(WORKSPACE),
        body=body,
        source="worker_finding",
        agent=f"worker-{n % 7}",
        task=f"T-{n}",
        observed_at=NOW,
    )


def test_guard_bypass_erasure_and_check_and_set(tmp_path: Path) -> None:
    started = time.monotonic()
    rng = random.Random(7)
    db = tmp_path / "catalog.db"

    # --- many entries in every state; half of them deleted under the erasure policy -------
    deleted: list[str] = []
    kept: list[str] = []
    with MemoryCatalog.open(db) as cat:
        entries = []
        for n in range(ENTRIES):
            canary = _canary(rng, n)
            body = f"Deploys need {canary} in the release notes; see docs/release.md."
            entries.append((canary, _add(cat, body, n)))
        reports = []
        for n, (canary, entry) in enumerate(entries):
            if n % 4 == 1:
                entry = cat.verify(entry.id, entry.revision)
            elif n % 4 == 2:
                entry = cat.retire(entry.id, entry.revision)
            elif n % 4 == 3:
                entry = cat.mark_stale(entry.id, entry.revision)
            if n % 2 == 0:
                reports.append(cat.delete(entry.id, entry.revision))
                deleted.append(canary)
            else:
                kept.append(canary)
        final = cat.erase()
    assert all(r.vacuumed and not r.checkpoint_blocked for r in reports)
    assert not final.checkpoint_blocked
    blob = _files(db)
    copies = sum(1 for c in deleted if c.encode() in blob)
    assert copies == 0, f"{copies} deleted bodies still readable in the catalog files"
    assert all(c.encode() in blob for c in kept)  # the scan does see live bodies

    # --- guard bypass attempts from another program (a separate Python process) -----------
    before = _rows(db)
    attempts = [[name, sql, list(params)] for name, (sql, params) in BYPASS_ATTEMPTS.items()]
    proc = subprocess.run(
        [sys.executable, "-m", "tests.reliability._catalog_workers", str(db)],
        input=json.dumps(attempts),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
        check=True,
    )
    outcomes = json.loads(proc.stdout)
    accepted = [o for o in outcomes if "memory guard" not in o[2]]
    assert accepted == []
    assert _rows(db) == before

    # --- two processes racing check-and-set on one entry ----------------------------------
    memory_id = "mem_" + "c0ffee" * 4
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=cas_worker,
            args=(str(db), who),
            kwargs={
                "memory_id": memory_id,
                "workspace": WORKSPACE,
                "rounds": CAS_ROUNDS,
                "barrier": barrier,
                "results": results,
            },
        )
        for who in (1, 2)
    ]
    for p in procs:
        p.start()
    got = []
    try:
        for _ in procs:
            try:
                item = results.get(timeout=pick(300, 1800))
            except queue.Empty:
                barrier.abort()
                raise AssertionError("a check-and-set writer did not report") from None
            assert item[0] == "ok", f"writer {item[1]} failed: {item[2]}\n{item[3]}"
            got.append(item[2])
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    one, two = got
    assert len(one) == len(two) == CAS_ROUNDS + 1
    rounds_with_one_winner = sum(
        1 for a, b in zip(one, two, strict=True) if sorted((a, b)) == ["conflict", "won"]
    )
    assert rounds_with_one_winner == CAS_ROUNDS + 1
    with MemoryCatalog.open(db) as cat:
        assert cat.get(memory_id).revision == CAS_ROUNDS + 1  # one write per round, no more
    elapsed = time.monotonic() - started

    record(
        "memory catalog · guard, erasure, check-and-set",
        scale=(
            f"{len(outcomes)} bypass attempts from another process ({len(BYPASS_ATTEMPTS)} "
            f"kinds × recursive_triggers off/on); {ENTRIES} entries, {len(deleted)} deleted; "
            f"2 processes × {CAS_ROUNDS + 1} check-and-set rounds"
        ),
        result=(
            f"bypass refused {len(outcomes)}/{len(outcomes)}, rows unchanged; byte scan of "
            f"catalog.db+wal+shm: 0 of {len(deleted)} deleted bodies found "
            f"({len(kept)}/{len(kept)} live ones found); check-and-set: exactly one winner in "
            f"{rounds_with_one_winner}/{CAS_ROUNDS + 1} rounds, the loser a "
            f"MemoryConflictError; {elapsed:.1f}s"
        ),
        rerun_cmd=rerun("test_memory_catalog_reliability.py"),
        bypass_attempts=len(outcomes),
        bypass_accepted=len(accepted),
        entries=ENTRIES,
        deleted=len(deleted),
        deleted_found=copies,
        cas_rounds=CAS_ROUNDS + 1,
        cas_single_winner=rounds_with_one_winner,
        seconds=round(elapsed, 2),
    )
