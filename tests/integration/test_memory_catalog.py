"""The memory catalog on real SQLite files: rows, check-and-set, guard, legacy import, erasure."""

from __future__ import annotations

import json
import sqlite3
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ctxledger.adapters.memory.catalog import GUARD_TRIGGERS, MemoryCatalog
from ctxledger.adapters.memory.store import CatalogStore, connect_catalog
from ctxledger.domain.errors import (
    IntakeMissingError,
    InvalidInputError,
    LegacyImportError,
    MemoryConflictError,
    MemoryGuardError,
    MemoryIntakeError,
    MemoryNotFoundError,
    MemoryStateError,
    ProtectedTableError,
)
from ctxledger.domain.memory import (
    CommandEvidence,
    Evidence,
    FileEvidence,
    ImportReport,
    MemoryEntry,
)

NOW = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
WORKSPACE = "/srv/projects/acme-payments"
BODY = "Integration tests need `docker compose up db` first; port 5433, not 5432."


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "catalog.db"


@pytest.fixture
def catalog(db: Path) -> Iterator[MemoryCatalog]:
    with MemoryCatalog.open(db) as cat:
        yield cat


def add(cat: MemoryCatalog, body: str = BODY, **kw: object) -> MemoryEntry:
    partition = cat.partition_for(WORKSPACE)
    evidence = Evidence(
        commands=(CommandEvidence(cmd="make it", exit_code=0, ran_at=NOW),),
        files=(FileEvidence(path="docker-compose.yml", sha256="ab" * 32),),
        commit="3f2a9c1",
    )
    return cat.add_candidate(
        partition=partition,
        body=body,
        source="worker_finding",
        agent="worker-1",
        task="T-7",
        observed_at=NOW,
        evidence=evidence,
        **kw,  # type: ignore[arg-type]
    )


def raw(db: Path, *, recursive_triggers: bool = False) -> sqlite3.Connection:
    """A second, plain connection: what another program or an older binary would use."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute(f"PRAGMA recursive_triggers={'ON' if recursive_triggers else 'OFF'}")
    return conn


def rows(db: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(db) as conn:
        return [(str(i), str(p)) for i, p in conn.execute("SELECT id, payload FROM memory")]


def file_bytes(db: Path) -> bytes:
    parts = [db, Path(f"{db}-wal")]
    return b"".join(p.read_bytes() for p in parts if p.exists())


# --- rows and check-and-set --------------------------------------------------------------------


def test_candidate_roundtrip_and_versioned_payload(catalog: MemoryCatalog, db: Path) -> None:
    created = add(catalog)
    assert created.id.startswith("mem_")
    assert (created.state, created.revision, created.verified) == ("candidate", 1, False)
    assert catalog.get(created.id) == created
    [(row_id, payload)] = rows(db)
    stored = json.loads(payload)
    assert row_id == created.id
    assert stored["schemaVersion"] == 2
    assert stored["partition"] == catalog.partition_for(WORKSPACE)
    assert stored["partition"].startswith("ws_")
    assert len(stored["partition"]) == 35
    assert stored["body"] == BODY
    catalog.erase()
    assert WORKSPACE.encode() not in file_bytes(db)


def test_partition_is_keyed_stable_and_path_free(db: Path, tmp_path: Path) -> None:
    with MemoryCatalog.open(db) as first:
        a = first.partition_for(WORKSPACE)
        assert first.partition_for(WORKSPACE + "/") == a
        assert first.partition_for("/srv/projects/other") != a
    with MemoryCatalog.open(db) as again:
        assert again.partition_for(WORKSPACE) == a
    with MemoryCatalog.open(tmp_path / "other.db") as other:
        assert other.partition_for(WORKSPACE) != a
    with MemoryCatalog.open(db) as cat, pytest.raises(InvalidInputError):
        cat.partition_for("relative/path")


def test_lifecycle_bumps_revision_and_recall_sees_only_verified(catalog: MemoryCatalog) -> None:
    entry = add(catalog)
    partition = entry.partition
    assert catalog.recall_candidates(partition) == []
    verified = catalog.verify(entry.id, 1)
    assert (verified.state, verified.revision, verified.verified) == ("verified", 2, True)
    assert catalog.recall_candidates(partition) == [verified]
    stale = catalog.mark_stale(entry.id, 2)
    assert (stale.state, stale.revision, stale.verified) == ("stale", 3, False)
    assert catalog.recall_candidates(partition) == []
    again = catalog.verify(entry.id, 3)
    retired = catalog.retire(entry.id, 4)
    assert (again.revision, retired.state, retired.revision) == (4, "retired", 5)
    with pytest.raises(MemoryStateError):
        catalog.verify(entry.id, 5)
    assert [e.id for e in catalog.list(partition, ["retired"])] == [entry.id]
    assert catalog.list(partition, ["verified"]) == []


def test_recall_candidates_are_capped_and_newest_first(catalog: MemoryCatalog) -> None:
    partition = catalog.partition_for(WORKSPACE)
    ids = []
    for day in range(1, 7):
        e = catalog.add_candidate(
            partition=partition,
            body=f"observation number {day}",
            source="worker_finding",
            agent="w",
            task="t",
            observed_at=datetime(2024, 5, day, tzinfo=UTC),
        )
        catalog.verify(e.id, 1)
        ids.append(e.id)
    got = [e.id for e in catalog.recall_candidates(partition)]
    assert got == [ids[5], ids[4], ids[3], ids[2]]
    assert catalog.recall_candidates(catalog.partition_for("/elsewhere")) == []


def test_stale_revision_raises_conflict_and_writes_nothing(
    catalog: MemoryCatalog, db: Path
) -> None:
    entry = add(catalog)
    before = rows(db)
    with pytest.raises(MemoryConflictError) as caught:
        catalog.verify(entry.id, 7)
    assert (caught.value.expected_revision, caught.value.actual_revision) == (7, 1)
    assert rows(db) == before


def test_two_writers_check_and_set(db: Path) -> None:
    with MemoryCatalog.open(db) as one, MemoryCatalog.open(db) as two:
        entry = add(one)
        assert two.get(entry.id).revision == 1
        one.verify(entry.id, 1)
        with pytest.raises(MemoryConflictError):
            two.retire(entry.id, 1)
        assert two.get(entry.id).state == "verified"


ALLOWED_FROM = {
    "verify": {"candidate", "stale"},
    "mark_stale": {"candidate", "verified"},
    "retire": {"candidate", "verified", "stale"},
    "delete": {"candidate", "verified", "stale", "retired"},
}
RESULT_STATE = {
    "verify": "verified",
    "mark_stale": "stale",
    "retire": "retired",
    "delete": "deleted",
}


@settings(max_examples=25)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(sorted(ALLOWED_FROM)),
            st.sampled_from([0, 0, 0, -1, 1]),
        ),
        max_size=8,
    )
)
def test_check_and_set_follows_the_state_model(steps: list[tuple[str, int]]) -> None:
    with tempfile.TemporaryDirectory() as tmp, MemoryCatalog.open(Path(tmp, "c.db")) as cat:
        entry = add(cat)
        state, revision = "candidate", 1
        for action, offset in steps:
            before = cat.get(entry.id)
            method = getattr(cat, action)
            if offset != 0:
                with pytest.raises(MemoryConflictError):
                    method(entry.id, revision + offset)
            elif state not in ALLOWED_FROM[action]:
                with pytest.raises(MemoryStateError):
                    method(entry.id, revision)
            else:
                method(entry.id, revision)
                state, revision = RESULT_STATE[action], revision + 1
            after = cat.get(entry.id)
            assert (after.state, after.revision) == (state, revision)
            assert after.verified == (state == "verified")
            if after.revision == before.revision:
                assert after == before


def test_duplicate_create_and_unknown_ids(catalog: MemoryCatalog) -> None:
    entry = add(catalog)
    with pytest.raises(MemoryConflictError):
        add(catalog)
    with pytest.raises(MemoryNotFoundError):
        catalog.get("mem_" + "f" * 16)
    with pytest.raises(MemoryNotFoundError):
        catalog.verify("mem_" + "f" * 16, 1)
    assert catalog.get(entry.id).revision == 1


def test_every_write_goes_through_the_intake(catalog: MemoryCatalog, db: Path) -> None:
    token = "ghp" + "_" + "Ab1" * 12
    with pytest.raises(MemoryIntakeError) as caught:
        add(catalog, body=f"login with {token}")
    assert caught.value.rule == "secret"
    assert token not in str(caught.value)
    with pytest.raises(MemoryIntakeError):
        add(catalog, body="x" * 4001)
    assert rows(db) == []
    catalog.erase()
    assert token.encode() not in file_bytes(db)


def test_without_an_intake_nothing_is_written(db: Path) -> None:
    with MemoryCatalog.open(db, intake=None) as cat:
        with pytest.raises(IntakeMissingError):
            add(cat)
        assert cat.list() == []


# --- guard -------------------------------------------------------------------------------------

GOOD_PARTITION = "ws_" + "0" * 32


def _payload(**changes: object) -> str:
    data: dict[str, object] = {
        "schemaVersion": 2,
        "id": "mem_00000000aaaaaaaa",
        "partition": GOOD_PARTITION,
        "state": "candidate",
        "revision": 1,
        "body": "raw write",
        "source": "worker_finding",
        "agent": "x",
        "task": "",
        "observed_at": "2024-05-01T12:00:00+00:00",
        "verified": False,
        "evidence": {"commands": [], "files": [], "commit": ""},
    }
    data.update(changes)
    return json.dumps(data)


BYPASS_ATTEMPTS: dict[str, tuple[str, tuple[object, ...]]] = {
    "insert schema v1": (
        "INSERT INTO memory (id, payload) VALUES (?, ?)",
        ("mem_00000000aaaaaaaa", _payload(schemaVersion=1)),
    ),
    "insert schema '2' as text": (
        "INSERT INTO memory (id, payload) VALUES (?, ?)",
        ("mem_00000000aaaaaaaa", _payload(schemaVersion="2")),
    ),
    "insert schema missing": (
        "INSERT INTO memory (id, payload) VALUES (?, ?)",
        ("mem_00000000aaaaaaaa", json.dumps({"id": "mem_00000000aaaaaaaa"})),
    ),
    "insert raw path partition": (
        "INSERT INTO memory (id, payload) VALUES (?, ?)",
        ("mem_00000000aaaaaaaa", _payload(partition=WORKSPACE)),
    ),
    "insert uppercase-hex partition": (
        "INSERT INTO memory (id, payload) VALUES (?, ?)",
        ("mem_00000000aaaaaaaa", _payload(partition="ws_" + "A" * 32)),
    ),
    "insert bad state": (
        "INSERT INTO memory (id, payload) VALUES (?, ?)",
        ("mem_00000000aaaaaaaa", _payload(state="archived")),
    ),
    "insert non-JSON": (
        "INSERT INTO memory (id, payload) VALUES (?, ?)",
        ("mem_00000000aaaaaaaa", "not json at all"),
    ),
    "insert id differs from payload": (
        "INSERT INTO memory (id, payload) VALUES (?, ?)",
        ("mem_00000000bbbbbbbb", _payload()),
    ),
    "update to schema v1": (
        "UPDATE memory SET payload = json_set(payload, '$.schemaVersion', 1)",
        (),
    ),
    "update to raw path partition": (
        "UPDATE memory SET payload = json_set(payload, '$.partition', ?)",
        (WORKSPACE,),
    ),
    "update to bad state": (
        "UPDATE memory SET payload = json_set(payload, '$.state', 'archived')",
        (),
    ),
    "update without revision bump": (
        "UPDATE memory SET payload = json_set(payload, '$.body', 'overwritten')",
        (),
    ),
    "insert or replace with bad schema": (
        "INSERT OR REPLACE INTO memory (id, payload) "
        "SELECT id, json_set(payload, '$.schemaVersion', 1) FROM memory",
        (),
    ),
    "insert or replace with raw path": (
        "INSERT OR REPLACE INTO memory (id, payload) "
        "SELECT id, json_set(payload, '$.partition', '/home/alice') FROM memory",
        (),
    ),
    "replace with a valid shape": (
        "REPLACE INTO memory (id, payload) "
        "SELECT id, json_set(payload, '$.body', 'replaced', '$.revision', 9) FROM memory",
        (),
    ),
    "upsert with bad schema": (
        "INSERT INTO memory (id, payload) SELECT id, json_set(payload, '$.schemaVersion', 3) "
        "FROM memory WHERE true ON CONFLICT(id) DO UPDATE SET payload = excluded.payload",
        (),
    ),
    "upsert do-update to bad state": (
        "INSERT INTO memory (id, payload) SELECT id, payload FROM memory WHERE true "
        "ON CONFLICT(id) DO UPDATE SET payload = json_set(payload, '$.state', 'gone')",
        (),
    ),
    "upsert do-nothing of a bad new row": (
        "INSERT INTO memory (id, payload) VALUES (?, ?) ON CONFLICT(id) DO NOTHING",
        ("mem_00000000aaaaaaaa", _payload(state="bogus")),
    ),
    "delete a live row": ("DELETE FROM memory", ()),
}


@pytest.mark.parametrize("recursive_triggers", [False, True], ids=["plain", "recursive"])
@pytest.mark.parametrize("attempt", sorted(BYPASS_ATTEMPTS))
def test_guard_refuses_bypass_from_another_connection(
    catalog: MemoryCatalog, db: Path, attempt: str, recursive_triggers: bool
) -> None:
    entry = add(catalog)
    before = rows(db)
    sql, params = BYPASS_ATTEMPTS[attempt]
    other = raw(db, recursive_triggers=recursive_triggers)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="memory guard"):
            other.execute(sql, params)
    finally:
        other.close()
    assert rows(db) == before
    assert catalog.get(entry.id) == entry


def test_guard_lives_in_the_file(catalog: MemoryCatalog, db: Path) -> None:
    add(catalog)
    with sqlite3.connect(db) as other:
        names = {
            str(r[0])
            for r in other.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        }
    assert set(GUARD_TRIGGERS) <= names


def test_guard_error_is_typed_inside_the_catalog(catalog: MemoryCatalog, db: Path) -> None:
    entry = add(catalog)
    other = raw(db)
    try:
        # A raw row that keeps the shape rules: the guard allows it, and the catalog then
        # refuses a write that would break the revision chain at the database.
        other.execute(
            "UPDATE memory SET payload = json_set(payload, '$.revision', 2, '$.body', 'edited')"
        )
    finally:
        other.close()
    with pytest.raises(MemoryConflictError):
        catalog.verify(entry.id, 1)
    with pytest.raises(MemoryGuardError):
        catalog._execute(  # the one internal door, to show the translation
            "UPDATE memory SET payload = json_set(payload, '$.state', 'lost') WHERE id = ?",
            (entry.id,),
        )


def test_catalog_connections_have_the_policy(db: Path) -> None:
    conn = connect_catalog(db)
    try:
        assert conn.execute("PRAGMA secure_delete").fetchone()[0] == 1
        assert conn.execute("PRAGMA recursive_triggers").fetchone()[0] == 1
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


@pytest.mark.parametrize("table", ["memory", "MEMORY", "Memory", "sqlite_master"])
def test_generic_store_refuses_the_memory_table(db: Path, table: str) -> None:
    with CatalogStore.open(db) as store:
        with pytest.raises(ProtectedTableError):
            store.put_json(table, "k", {"body": "x"})
        with pytest.raises(ProtectedTableError):
            store.get(table, "k")
        with pytest.raises(ProtectedTableError):
            store.list(table)


def test_generic_store_serves_other_tables(db: Path) -> None:
    with CatalogStore.open(db) as store:
        assert store.get("settings", "recall") is None
        store.put_json("settings", "recall", {"enabled": True})
        store.put_json("settings", "alpha", [1, 2])
        store.put_json("settings", "recall", {"enabled": False})
        assert store.get("settings", "recall") == {"enabled": False}
        assert store.list("settings") == [("alpha", [1, 2]), ("recall", {"enabled": False})]
        for bad in ("main.memory", 'memory"', "", "1x", "a b"):
            with pytest.raises(InvalidInputError):
                store.put_json(bad, "k", 1)


# --- legacy import -----------------------------------------------------------------------------


def legacy_payload(memory_id: str, text: str, **extra: object) -> str:
    data: dict[str, object] = {
        "schemaVersion": 1,
        "id": memory_id,
        "text": text,
        "source": "worker_finding",
        "agent": "old-agent",
        "created_at": "2023-11-02T09:30:00+00:00",
        "files": [{"path": "src/app.py", "sha256": "cd" * 32}],
    }
    data.update(extra)
    return json.dumps(data)


def make_legacy(path: Path, rows_: list[tuple[str, object, object]]) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE memory (id TEXT, workspace_path TEXT, payload)")
        conn.executemany("INSERT INTO memory VALUES (?, ?, ?)", rows_)
    return path


LEGACY_SECRET = "AKI" + "A" + "QWERTYUIOPASDFGH"


def legacy_rows() -> list[tuple[str, object, object]]:
    good: list[tuple[str, object, object]] = [
        ("1", WORKSPACE, legacy_payload("mem_1111111111111111", "Use uv for installs.")),
        ("2", WORKSPACE, legacy_payload("mem_2222222222222222", "CI runs on Python 3.11.")),
        ("3", "/srv/other", legacy_payload("mem_3333333333333333", "Docs build with mkdocs.")),
    ]
    bad: list[tuple[str, object, object]] = [
        ("4", WORKSPACE, legacy_payload("mem_4444444444444444", f"key {LEGACY_SECRET}")),
        ("5", WORKSPACE, legacy_payload("mem_5555555555555555", "y" * 5000)),
        ("6", WORKSPACE, legacy_payload("note-6", "fine text, bad id")),
        (
            "7",
            WORKSPACE,
            legacy_payload(
                "mem_7777777777777777",
                "escaping path",
                files=[{"path": "../x", "sha256": "0" * 64}],
            ),
        ),
        ("8", "relative/workspace", legacy_payload("mem_8888888888888888", "ok")),
        ("9", WORKSPACE, json.dumps(["a", "list"])),
        ("10", WORKSPACE, legacy_payload("mem_aaaaaaaaaaaaaaaa", "v3", schemaVersion=3)),
        ("11", WORKSPACE, json.dumps({"schemaVersion": 1, "id": "mem_bbbbbbbbbbbbbbbb"})),
        ("12", WORKSPACE, legacy_payload("mem_1111111111111111", "duplicate of row 1")),
    ]
    return good + bad


def test_legacy_import_drops_and_counts_bad_rows(
    catalog: MemoryCatalog, db: Path, tmp_path: Path
) -> None:
    old = make_legacy(tmp_path / "old.db", legacy_rows())
    report = catalog.import_legacy(old)
    assert report == ImportReport(
        imported=3,
        dropped=9,
        reasons={
            "duplicate_id": 1,
            "invalid_id": 1,
            "invalid_path": 1,
            "invalid_shape": 2,
            "invalid_workspace": 1,
            "over_limit": 1,
            "secret": 1,
            "unsupported_schema": 1,
        },
    )
    imported = catalog.list()
    assert {e.id for e in imported} == {
        "mem_1111111111111111",
        "mem_2222222222222222",
        "mem_3333333333333333",
    }
    assert all(e.state == "candidate" and not e.verified and e.revision == 1 for e in imported)
    by_id = {e.id: e for e in imported}
    assert by_id["mem_1111111111111111"].partition == catalog.partition_for(WORKSPACE)
    assert by_id["mem_3333333333333333"].partition == catalog.partition_for("/srv/other")
    assert by_id["mem_1111111111111111"].evidence.files == (
        FileEvidence(path="src/app.py", sha256="cd" * 32),
    )
    with sqlite3.connect(db) as conn:
        triggers = conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'")
        assert triggers.fetchone()[0] == len(GUARD_TRIGGERS)
    catalog.erase()
    data = file_bytes(db)
    assert WORKSPACE.encode() not in data
    assert LEGACY_SECRET.encode() not in data


def test_non_json_payload_fails_the_whole_import(
    catalog: MemoryCatalog, db: Path, tmp_path: Path
) -> None:
    existing = add(catalog)
    rows_ = [*legacy_rows()[:2], ("x", WORKSPACE, "{not json"), *legacy_rows()[2:3]]
    old = make_legacy(tmp_path / "old.db", rows_)
    with pytest.raises(LegacyImportError, match="not JSON"):
        catalog.import_legacy(old)
    assert [e.id for e in catalog.list()] == [existing.id]
    other = raw(db)
    try:
        with pytest.raises(sqlite3.IntegrityError, match="memory guard"):
            other.execute(
                "INSERT INTO memory (id, payload) VALUES (?, ?)",
                ("mem_00000000aaaaaaaa", _payload(schemaVersion=1)),
            )
    finally:
        other.close()


def test_binary_non_utf8_payload_fails_the_whole_import(
    catalog: MemoryCatalog, tmp_path: Path
) -> None:
    old = make_legacy(
        tmp_path / "old.db", [*legacy_rows()[:1], ("b", WORKSPACE, b"\xff\xfe\x00garbage")]
    )
    with pytest.raises(LegacyImportError):
        catalog.import_legacy(old)
    assert catalog.list() == []


def test_import_without_an_intake_fails(db: Path, tmp_path: Path) -> None:
    old = make_legacy(tmp_path / "old.db", legacy_rows())
    with MemoryCatalog.open(db, intake=None) as cat:
        with pytest.raises(IntakeMissingError):
            cat.import_legacy(old)
        assert cat.list() == []


def test_import_of_a_file_that_is_not_a_legacy_catalog_fails(
    catalog: MemoryCatalog, tmp_path: Path
) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (x)")
    with pytest.raises(LegacyImportError):
        catalog.import_legacy(other)
    with pytest.raises(LegacyImportError):
        catalog.import_legacy(tmp_path / "missing.db")


def test_legacy_layout_in_the_catalog_is_migrated_at_open(db: Path) -> None:
    make_legacy(db, legacy_rows())
    with MemoryCatalog.open(db) as cat:
        assert len(cat.list()) == 3
        assert cat.list(states=["candidate"]) == cat.list()
    with sqlite3.connect(db) as conn:
        columns = {str(r[1]) for r in conn.execute("PRAGMA table_xinfo(memory)")}
        assert "workspace_path" not in columns
    assert WORKSPACE.encode() not in file_bytes(db)


def test_legacy_layout_without_an_intake_does_not_open(db: Path) -> None:
    make_legacy(db, legacy_rows())
    with pytest.raises(IntakeMissingError):
        MemoryCatalog.open(db, intake=None)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM memory").fetchone()[0] == len(legacy_rows())


# --- erasure -----------------------------------------------------------------------------------

DISTINCTIVE = "QUOKKA-7f3e-erasure-canary-body-9c1d"


def test_delete_erases_the_body_from_the_files(catalog: MemoryCatalog, db: Path) -> None:
    entry = add(catalog, body=f"remember {DISTINCTIVE} for the deploy")
    entry = catalog.verify(entry.id, 1)
    catalog.erase()  # the body is now in catalog.db itself, not only in the WAL
    assert DISTINCTIVE.encode() in file_bytes(db)
    report = catalog.delete(entry.id, entry.revision)
    assert report.vacuumed
    assert not report.checkpoint_blocked
    assert report.wal_bytes_after == 0
    assert DISTINCTIVE.encode() not in file_bytes(db)
    tombstone = catalog.get(entry.id)
    assert (tombstone.state, tombstone.body, tombstone.revision) == ("deleted", "", 3)
    assert tombstone.evidence == Evidence()
    assert catalog.recall_candidates(entry.partition) == []
    with pytest.raises(MemoryStateError):
        catalog.delete(entry.id, 3)


def test_a_reader_blocks_the_checkpoint_and_it_is_reported(
    catalog: MemoryCatalog, db: Path
) -> None:
    entry = add(catalog, body=f"remember {DISTINCTIVE} for the deploy")
    reader = sqlite3.connect(db, isolation_level=None)
    try:
        reader.execute("BEGIN")
        assert reader.execute("SELECT count(*) FROM memory").fetchone()[0] == 1
        report = catalog.delete(entry.id, 1)
        assert report.checkpoint_blocked
        assert report.wal_bytes_after > 0
    finally:
        reader.execute("COMMIT")
        reader.close()
    after = catalog.erase()
    assert not after.checkpoint_blocked
    assert after.wal_bytes_after == 0
    assert DISTINCTIVE.encode() not in file_bytes(db)
