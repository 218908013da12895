"""The memory catalog's gaps from the seeds' audit (issue 19, item 5), on real SQLite files.

- every writable path that opens a catalog installs its guard, even after another tool dropped
  the triggers (``CatalogStore.open``, ``connect_catalog``, ``MemoryCatalog.open``);
- the generic accessor reads ``catalog_meta`` but refuses to write it (a write there would
  orphan every memory on the next open);
- opening a catalog runs the erasure (VACUUM + checkpoint) only when a deletion's erasure has
  not finished, not on every open; a delete reports its own erasure;
- recall ranks verified memories by relevance to the build, and architect and test agents
  follow their scope (tests/property/test_recall.py holds the pure rules).
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ctxledger.adapters.memory.catalog import GUARD_TRIGGERS, MemoryCatalog
from ctxledger.adapters.memory.store import CatalogStore, connect_catalog
from ctxledger.domain.errors import ProtectedTableError
from ctxledger.domain.memory import CommandEvidence, ErasureReport, Evidence, FileEvidence

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
WORKSPACE = "/srv/projects/acme"


def _triggers(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'").fetchall()
    return {str(r[0]) for r in rows}


def _last(cat: MemoryCatalog) -> ErasureReport | None:
    """The catalog's last erasure report (read through a call: it changes under mypy's eyes)."""
    return cat.last_erasure


def _add(cat: MemoryCatalog, body: str, path: str = "src/app.py") -> str:
    entry = cat.add_candidate(
        partition=cat.partition_for(WORKSPACE),
        body=body,
        source="worker_finding",
        agent="w1",
        task="T-1",
        observed_at=NOW,
        evidence=Evidence(
            commands=(CommandEvidence(cmd="make test", exit_code=0, ran_at=NOW),),
            files=(FileEvidence(path=path, sha256="ab" * 32),),
        ),
    )
    return entry.id


@pytest.mark.parametrize("opener", ["catalog_store", "connect_catalog", "memory_catalog"])
def test_every_writable_open_reinstalls_a_dropped_guard(tmp_path: Path, opener: str) -> None:
    db = tmp_path / "catalog.db"
    MemoryCatalog.open(db).close()
    with sqlite3.connect(db) as conn:  # another tool drops the guard
        for name in GUARD_TRIGGERS:
            conn.execute(f"DROP TRIGGER {name}")
    assert not _triggers(db) & set(GUARD_TRIGGERS)
    if opener == "catalog_store":
        CatalogStore.open(db).close()
    elif opener == "connect_catalog":
        connect_catalog(db).close()
    else:
        MemoryCatalog.open(db).close()
    assert _triggers(db) >= set(GUARD_TRIGGERS)
    with sqlite3.connect(db) as conn, pytest.raises(sqlite3.DatabaseError, match="memory guard"):
        conn.execute("INSERT INTO memory (id, payload) VALUES ('mem_00000000', '{}')")


def test_catalog_meta_is_read_only_through_the_generic_accessor(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    with MemoryCatalog.open(db) as cat:
        partition = cat.partition_for(WORKSPACE)
    with CatalogStore.open(db) as store:
        key = store.get("catalog_meta", "partition_key")
        assert isinstance(key, str)
        assert len(key) == 64
        for table in ("catalog_meta", "CATALOG_META"):
            with pytest.raises(ProtectedTableError, match="written only by the catalog"):
                store.put_json(table, "partition_key", "00" * 32)
        store.put_json("notes", "k", {"v": 1})  # other tables stay writable
        assert store.get("notes", "k") == {"v": 1}
    with MemoryCatalog.open(db) as cat:  # the key survived: partitions are stable
        assert cat.partition_for(WORKSPACE) == partition


def test_open_erases_only_when_a_deletion_left_its_erasure_unfinished(tmp_path: Path) -> None:
    db = tmp_path / "catalog.db"
    with MemoryCatalog.open(db) as cat:
        assert _last(cat) is None  # a new catalog: nothing to erase
        memory_id = _add(cat, "The cache key is the tenant id, not the user id.")
    with MemoryCatalog.open(db) as cat:
        assert _last(cat) is None  # writes alone never make an open vacuum
        report = cat.delete(memory_id, cat.get(memory_id).revision)
        assert _last(cat) == report  # the delete's own erasure, not the open's
        assert report.vacuumed
        assert not report.checkpoint_blocked
        assert not cat.erase_pending
    with MemoryCatalog.open(db) as cat:
        assert _last(cat) is None

    # a deletion whose erasure did not finish (a reader held the checkpoint; or the process
    # died before it ran): the flag stays, and the next open erases
    with MemoryCatalog.open(db, checkpoint_timeout_ms=0) as cat:
        other = _add(cat, "Ports: 5433 for the test db.")
        reader = sqlite3.connect(db)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM memory").fetchone()  # holds a read snapshot
        blocked = cat.delete(other, cat.get(other).revision)
        reader.rollback()
        reader.close()
        assert blocked.checkpoint_blocked
        assert cat.erase_pending
    with MemoryCatalog.open(db) as cat:
        reopened = _last(cat)
        assert reopened is not None
        assert not reopened.checkpoint_blocked
        assert not cat.erase_pending
    assert b"Ports: 5433" not in db.read_bytes()
    wal = Path(f"{db}-wal")
    assert not wal.exists() or b"Ports: 5433" not in wal.read_bytes()
