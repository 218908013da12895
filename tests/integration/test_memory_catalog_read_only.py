"""`MemoryCatalog.open_read_only`: the reads of a catalog without writing a byte."""

from __future__ import annotations

import hashlib
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ctxledger.adapters.memory.catalog import MemoryCatalog
from ctxledger.domain.errors import IntakeMissingError, InvalidInputError, StoreKindError


def _digest(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir()}


@pytest.fixture
def catalog_path(tmp_path: Path) -> Path:
    path = tmp_path / "catalog.db"
    with MemoryCatalog.open(path) as cat:
        part = cat.partition_for("/work/project")
        first = cat.add_candidate(
            partition=part,
            body="Session tokens are compared in milliseconds.",
            source="finding",
            agent="worker-1",
            task="fix-auth",
            observed_at=datetime(2026, 1, 5, 9, 0, tzinfo=UTC),
        )
        cat.verify(first.id, first.revision)
    return path


def test_reads_match_the_writer_and_leave_every_byte(catalog_path: Path) -> None:
    with MemoryCatalog.open(catalog_path) as writer:
        expected = writer.list()
        part = writer.partition_for("/work/project")
    before = _digest(catalog_path.parent)
    with MemoryCatalog.open_read_only(catalog_path) as reader:
        assert reader.list() == expected
        assert reader.get(expected[0].id) == expected[0]
        assert reader.partition_for("/work/project") == part  # the stored key is read
        assert reader.recall_candidates(part) == expected
        with pytest.raises(IntakeMissingError):  # no intake: every write is refused
            reader.verify(expected[0].id, expected[0].revision)
    assert _digest(catalog_path.parent) == before


def test_refuses_what_is_not_a_catalog(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="no such catalog file"):
        MemoryCatalog.open_read_only(tmp_path / "absent.db")
    (tmp_path / "notes.txt").write_text("not a database at all")
    with pytest.raises(StoreKindError, match="is not a SQLite database"):
        MemoryCatalog.open_read_only(tmp_path / "notes.txt")
    con = sqlite3.connect(tmp_path / "legacy.db")
    con.execute("CREATE TABLE memory (id TEXT, workspace_path TEXT, payload TEXT)")
    con.commit()
    con.close()
    before = _digest(tmp_path)
    with pytest.raises(InvalidInputError, match="legacy memory layout"):
        MemoryCatalog.open_read_only(tmp_path / "legacy.db")
    assert _digest(tmp_path) == before
