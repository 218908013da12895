"""The project-memory catalog: the only code that reads or writes the SQLite table ``memory``.

Rows are versioned JSON (``schemaVersion: 2``, validated with pydantic on every write and
read); the partition is an opaque ``ws_`` id (a keyed hash of the workspace path: the path
itself is never stored); every write passes the registered intake and a revision
check-and-set. Guard triggers in the database file refuse any other write shape, also from
other connections and other programs. Deletion erases the body and applies the erasure policy
(secure_delete, VACUUM, ``wal_checkpoint(TRUNCATE)``) and reports what it achieved.
"""

from __future__ import annotations

import builtins
import hashlib
import hmac
import os
import secrets
import sqlite3
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Literal

import msgspec

from ctxledger.adapters.ledger.store_files import check_catalog_file, read_only_uri
from ctxledger.adapters.memory.guard import GUARD_SQL, GUARD_TRIGGERS, guard_sql
from ctxledger.adapters.memory.intake import MemoryIntake, MemoryIntakePort
from ctxledger.adapters.memory.legacy import (
    LEGACY_COLUMNS,
    legacy_entry,
    legacy_rows,
    read_legacy_rows,
)
from ctxledger.adapters.memory.schema import (
    SCHEMA_VERSION,
    decode_payload,
    encode_payload,
)
from ctxledger.adapters.memory.store import (
    META_TABLE,
    CatalogStore,
    connect_catalog,
    put_catalog_meta,
)
from ctxledger.domain.errors import (
    IntakeMissingError,
    InvalidInputError,
    LegacyImportError,
    MemoryConflictError,
    MemoryGuardError,
    MemoryIntakeError,
    MemoryNotFoundError,
    MemoryStateError,
)
from ctxledger.domain.memory import (
    MEMORY_STATES,
    ErasureReport,
    Evidence,
    ImportReport,
    MemoryEntry,
    is_partition_id,
)
from ctxledger.domain.recall import RECALL_LIMIT

__all__ = ["GUARD_TRIGGERS", "SCHEMA_VERSION", "MemoryCatalog", "guard_sql"]

_META_TABLE: Final = META_TABLE
_KEY_NAME: Final = "partition_key"
_ERASE_PENDING: Final = "erase_pending"

_TABLE_SQL: Final = (
    "CREATE TABLE IF NOT EXISTS memory (\n"
    "  id TEXT PRIMARY KEY NOT NULL,\n"
    "  payload TEXT NOT NULL,\n"
    + ",\n".join(
        f"  {column} {kind} GENERATED ALWAYS AS "
        f"(CASE WHEN json_valid(payload) THEN json_extract(payload, '$.{column}') END) VIRTUAL"
        for column, kind in (("partition", "TEXT"), ("state", "TEXT"), ("revision", "INTEGER"))
    )
    + "\n)"
)
"""The table: id and JSON payload; partition, state and revision are computed from the payload
(NULL for a non-JSON payload, so the guard, not a JSON error, refuses such a write)."""
_INDEX_SQL: Final = "CREATE INDEX IF NOT EXISTS memory_partition_state ON memory (partition, state)"

# Which states each transition may start from.
_FROM_STATES: Final[dict[str, frozenset[str]]] = {
    "verify": frozenset({"candidate", "stale"}),
    "mark_stale": frozenset({"candidate", "verified"}),
    "retire": frozenset({"candidate", "verified", "stale"}),
    "delete": frozenset({"candidate", "verified", "stale", "retired"}),
}

IntakeChoice = MemoryIntakePort | None | Literal["standard"]


class MemoryCatalog:
    """Project memory in the ``memory`` table of one workspace catalog file.

    Open with :meth:`open` (a context manager too). ``intake="standard"`` registers the
    standard :class:`MemoryIntake`; ``intake=None`` registers none, and then every write and
    every legacy import fails with IntakeMissingError. Opening installs the schema and the guard
    triggers (migrating a legacy-layout ``memory`` table in place through the intake) and runs
    the erasure policy once (:attr:`last_erasure`)."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        path: Path,
        *,
        intake: MemoryIntakePort | None,
        partition_key: bytes,
        checkpoint_timeout_ms: int,
    ) -> None:
        self._conn = conn
        self._path = path
        self._intake = intake
        self._key = partition_key
        self._checkpoint_timeout_ms = checkpoint_timeout_ms
        self._busy_timeout_ms = int(conn.execute("PRAGMA busy_timeout").fetchone()[0])
        self.last_erasure: ErasureReport | None = None

    # --- lifecycle -----------------------------------------------------------------------------

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        intake: IntakeChoice = "standard",
        partition_key: bytes | None = None,
        timeout: float = 5.0,
        checkpoint_timeout_ms: int = 200,
    ) -> MemoryCatalog:
        """Open (creating if needed) the catalog at *path*; a file that is not SQLite or is a
        ledger raises StoreKindError and is left untouched.

        ``partition_key`` is the HMAC key for partition ids; by default a random key is created
        once and kept in the catalog's ``catalog_meta`` table. ``checkpoint_timeout_ms`` bounds
        how long the erasure checkpoint waits for readers before reporting itself blocked."""
        check_catalog_file(path, must_be_catalog=False)
        conn = connect_catalog(path, timeout=timeout)
        try:
            chosen = MemoryIntake() if isinstance(intake, str) else intake
            key = partition_key if partition_key is not None else _stored_key(conn)
            catalog = cls(
                conn,
                Path(path),
                intake=chosen,
                partition_key=key,
                checkpoint_timeout_ms=checkpoint_timeout_ms,
            )
            catalog._install()
            if catalog.erase_pending:  # a deletion whose erasure did not finish
                catalog.last_erasure = catalog.erase()
        except BaseException:
            conn.close()
            raise
        return catalog

    @classmethod
    def open_read_only(cls, path: str | os.PathLike[str], *, timeout: float = 5.0) -> MemoryCatalog:
        """Open an existing catalog for reading only (``get``, ``list``, ``recall_candidates``):
        no schema install, no erasure pass, no key created, not a byte written; every write
        fails. A missing file, a file that is not a memory catalog, or one still in the legacy
        layout (a writer's :meth:`open` migrates it) raises a typed error."""
        file = Path(path)
        if not file.is_file():
            raise InvalidInputError(f"{file}: no such catalog file")
        check_catalog_file(file, must_be_catalog=True)
        conn = sqlite3.connect(read_only_uri(file), uri=True, timeout=timeout, isolation_level=None)
        try:
            columns = {str(r[1]) for r in conn.execute("PRAGMA table_xinfo(memory)").fetchall()}
            if "partition" not in columns:
                raise InvalidInputError(
                    f"{file} has the legacy memory layout; a writing command migrates it"
                )
            stored = CatalogStore(conn).get(_META_TABLE, _KEY_NAME)
            key = (
                bytes.fromhex(stored)
                if isinstance(stored, str) and len(stored) == 64
                else secrets.token_bytes(32)  # no key stored: nothing was partitioned with one
            )
            catalog = cls(conn, file, intake=None, partition_key=key, checkpoint_timeout_ms=0)
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise InvalidInputError(f"{file}: cannot read the catalog ({exc})") from None
        except BaseException:
            conn.close()
            raise
        return catalog

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> MemoryCatalog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def path(self) -> Path:
        return self._path

    @property
    def intake(self) -> MemoryIntakePort | None:
        return self._intake

    def register_intake(self, intake: MemoryIntakePort | None) -> None:
        """Replace the registered intake (None: writes and imports fail until one is set)."""
        self._intake = intake

    def partition_for(self, workspace: str | os.PathLike[str]) -> str:
        """The opaque partition id of an absolute workspace path (``ws_`` + 32 hex digits).

        A keyed hash (HMAC-SHA-256) of the normalised path; the path is never stored."""
        text = os.fspath(workspace)
        if not text or "\x00" in text or not os.path.isabs(text):
            raise InvalidInputError("a workspace must be an absolute path without NUL")
        normal = os.path.normpath(text).encode("utf-8", "surrogateescape")
        return "ws_" + hmac.new(self._key, normal, hashlib.sha256).hexdigest()[:32]

    # --- writes --------------------------------------------------------------------------------

    def add_candidate(
        self,
        *,
        partition: str,
        body: str,
        source: str,
        agent: str,
        task: str,
        observed_at: datetime,
        evidence: Evidence | None = None,
        memory_id: str | None = None,
    ) -> MemoryEntry:
        """Store a new unverified candidate (revision 1) and return it.

        Without ``memory_id`` the id is derived from the content (partition, body, agent, task,
        observation time); an existing id raises MemoryConflictError."""
        intake = self._require_intake()
        if not is_partition_id(partition):
            raise MemoryIntakeError("invalid_partition", "partition")
        if memory_id is None:
            memory_id = _derived_id(partition, body, agent, task, observed_at)
        entry = intake.admit(
            MemoryEntry(
                id=memory_id,
                partition=partition,
                state="candidate",
                revision=1,
                body=body,
                source=source,
                agent=agent,
                task=task,
                observed_at=observed_at,
                verified=False,
                evidence=evidence or Evidence(),
            )
        )
        payload = encode_payload(entry)
        with self._transaction():
            row = self._row(entry.id)
            if row is not None:
                raise MemoryConflictError(entry.id, 0, row.revision)
            self._execute("INSERT INTO memory (id, payload) VALUES (?, ?)", (entry.id, payload))
        return entry

    def verify(self, memory_id: str, expected_revision: int) -> MemoryEntry:
        """Explicit verification: candidate or stale → verified (``verified=True``)."""
        return self._transition(
            memory_id,
            expected_revision,
            "verify",
            lambda e: msgspec.structs.replace(e, state="verified", verified=True),
        )

    def mark_stale(self, memory_id: str, expected_revision: int) -> MemoryEntry:
        """The entry no longer matches the worktree: candidate or verified → stale."""
        return self._transition(
            memory_id,
            expected_revision,
            "mark_stale",
            lambda e: msgspec.structs.replace(e, state="stale", verified=False),
        )

    def retire(self, memory_id: str, expected_revision: int) -> MemoryEntry:
        """The entry is no longer recalled (any state but deleted → retired)."""
        return self._transition(
            memory_id,
            expected_revision,
            "retire",
            lambda e: msgspec.structs.replace(e, state="retired", verified=False),
        )

    def delete(self, memory_id: str, expected_revision: int) -> ErasureReport:
        """Erase the entry's body, task and evidence (a ``deleted`` tombstone keeps id,
        partition, source, agent and observation time) and apply the erasure policy."""
        put_catalog_meta(self._conn, _ERASE_PENDING, True)
        self._transition(
            memory_id,
            expected_revision,
            "delete",
            lambda e: msgspec.structs.replace(
                e, state="deleted", verified=False, body="", task="", evidence=Evidence()
            ),
        )
        report = self.last_erasure = self.erase()
        return report

    @property
    def erase_pending(self) -> bool:
        """Whether a deletion's erasure has not finished (set before a delete, cleared once
        VACUUM and the checkpoint both completed): the next open runs it again."""
        return CatalogStore(self._conn).get(_META_TABLE, _ERASE_PENDING) is True

    def erase(self) -> ErasureReport:
        """The erasure policy: VACUUM (best effort), then ``wal_checkpoint(TRUNCATE)``.

        ``checkpoint_blocked`` is true when a reader kept the checkpoint from completing (the
        WAL may then still hold old page images); ``wal_bytes_after`` is the WAL file's size.
        A complete erasure clears :attr:`erase_pending` (and checkpoints that small write)."""
        try:
            self._conn.execute("VACUUM")
            vacuumed = True
        except sqlite3.OperationalError:
            vacuumed = False
        blocked = self._checkpoint()
        if vacuumed and not blocked and self.erase_pending:
            put_catalog_meta(self._conn, _ERASE_PENDING, False)
            blocked = self._checkpoint()
        wal = Path(f"{self._path}-wal")
        wal_bytes = wal.stat().st_size if wal.exists() else 0
        return ErasureReport(
            vacuumed=vacuumed, checkpoint_blocked=blocked, wal_bytes_after=wal_bytes
        )

    def _checkpoint(self) -> bool:
        """``wal_checkpoint(TRUNCATE)`` waiting at most the checkpoint timeout; True when a
        reader blocked it."""
        self._conn.execute(f"PRAGMA busy_timeout = {int(self._checkpoint_timeout_ms)}")
        try:
            row = self._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
            return row is None or int(row[0]) != 0
        except sqlite3.OperationalError:
            return True
        finally:
            self._conn.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")

    # --- reads ---------------------------------------------------------------------------------

    def get(self, memory_id: str) -> MemoryEntry:
        """The entry with *memory_id*; MemoryNotFoundError when there is none."""
        entry = self._row(memory_id)
        if entry is None:
            raise MemoryNotFoundError(f"no memory entry {memory_id[:80]!r}")
        return entry

    def list(
        self, partition: str | None = None, states: Collection[str] | None = None
    ) -> builtins.list[MemoryEntry]:
        """Entries, optionally of one partition and some states, oldest observation first."""
        sql = "SELECT id, payload FROM memory"
        clauses: builtins.list[str] = []
        params: builtins.list[str] = []
        if partition is not None:
            clauses.append("partition = ?")
            params.append(partition)
        if states is not None:
            wanted = sorted(set(states))
            unknown = [s for s in wanted if s not in MEMORY_STATES]
            if unknown:
                raise InvalidInputError(f"unknown memory state {unknown[0][:40]!r}")
            if not wanted:
                return []
            clauses.append(f"state IN ({', '.join('?' for _ in wanted)})")
            params.extend(wanted)
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        rows = self._conn.execute(sql, params).fetchall()
        entries = [decode_payload(str(i), p) for i, p in rows]
        return sorted(entries, key=lambda e: (e.observed_at, e.id))

    def recall_candidates(
        self, partition: str, limit: int = RECALL_LIMIT
    ) -> builtins.list[MemoryEntry]:
        """At most *limit* verified entries of *partition*, newest observation first."""
        if limit <= 0:
            return []
        entries = self.list(partition, ("verified",))
        entries.sort(key=lambda e: (-e.observed_at.timestamp(), e.id))
        return [e for e in entries if e.verified][:limit]

    # --- legacy import -------------------------------------------------------------------------

    def import_legacy(self, old_db_path: str | os.PathLike[str]) -> ImportReport:
        """Import the memory rows of a legacy catalog file through the intake, in one transaction.

        Rows failing intake or the v1 shape are dropped and counted by reason; a payload that is
        not JSON fails the whole import (LegacyImportError, nothing written); without a
        registered intake the import fails (IntakeMissingError). The guard is lifted only inside
        the transaction and reinstalled before the commit."""
        intake = self._require_intake()
        rows = read_legacy_rows(Path(old_db_path))
        with self._transaction():
            return self._import_rows(intake, rows)

    # --- internals -----------------------------------------------------------------------------

    def _require_intake(self) -> MemoryIntakePort:
        if self._intake is None:
            raise IntakeMissingError("no memory intake is registered; nothing was written")
        return self._intake

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _execute(self, sql: str, params: tuple[Any, ...]) -> sqlite3.Cursor:
        try:
            return self._conn.execute(sql, params)
        except sqlite3.IntegrityError as exc:
            if "memory guard" in str(exc):
                raise MemoryGuardError(str(exc)) from None
            raise

    def _row(self, memory_id: str) -> MemoryEntry | None:
        row = self._conn.execute(
            "SELECT id, payload FROM memory WHERE id = ?", (memory_id,)
        ).fetchone()
        return None if row is None else decode_payload(str(row[0]), row[1])

    def _transition(
        self,
        memory_id: str,
        expected_revision: int,
        action: str,
        change: Callable[[MemoryEntry], MemoryEntry],
    ) -> MemoryEntry:
        intake = self._require_intake()
        with self._transaction():
            current = self._row(memory_id)
            if current is None:
                raise MemoryNotFoundError(f"no memory entry {memory_id[:80]!r}")
            if current.revision != expected_revision:
                raise MemoryConflictError(memory_id, expected_revision, current.revision)
            if current.state not in _FROM_STATES[action]:
                raise MemoryStateError(
                    f"cannot {action.replace('_', ' ')} memory entry {memory_id} "
                    f"in state {current.state}"
                )
            updated = intake.admit(
                msgspec.structs.replace(change(current), revision=current.revision + 1)
            )
            cur = self._execute(
                "UPDATE memory SET payload = ? WHERE id = ? AND revision = ?",
                (encode_payload(updated), memory_id, expected_revision),
            )
            if cur.rowcount != 1:
                raise MemoryConflictError(memory_id, expected_revision, -1)
        return updated

    def _install(self) -> None:
        with self._transaction():
            columns = self._memory_columns()
            legacy: builtins.list[tuple[object, object, object]] = []
            if columns and "partition" not in columns:
                if not columns >= LEGACY_COLUMNS:
                    raise LegacyImportError("the catalog's memory table has an unknown layout")
                legacy = legacy_rows(self._conn)
                self._conn.execute("DROP TABLE memory")
                put_catalog_meta(self._conn, _ERASE_PENDING, True)  # the old rows' pages
            self._conn.execute(_TABLE_SQL)
            self._conn.execute(_INDEX_SQL)
            self._conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            if legacy:
                self._import_rows(self._require_intake(), legacy)
            self._reinstall_guard()

    def _memory_columns(self) -> set[str]:
        rows = self._conn.execute("PRAGMA table_xinfo(memory)").fetchall()
        return {str(r[1]) for r in rows}

    def _drop_guard(self) -> None:
        for name in GUARD_TRIGGERS:
            self._conn.execute(f"DROP TRIGGER IF EXISTS {name}")

    def _reinstall_guard(self) -> None:
        self._drop_guard()
        for sql in GUARD_SQL:
            self._conn.execute(sql)

    def _import_rows(
        self, intake: MemoryIntakePort, rows: Iterable[tuple[object, object, object]]
    ) -> ImportReport:
        # Caller holds the transaction: the guard is lifted here and reinstalled before the
        # caller commits; any exception rolls both back.
        self._drop_guard()
        imported = 0
        reasons: dict[str, int] = {}
        for position, (_legacy_id, workspace, payload) in enumerate(rows):
            entry_or_reason = legacy_entry(intake, self.partition_for, position, workspace, payload)
            if isinstance(entry_or_reason, str):
                reasons[entry_or_reason] = reasons.get(entry_or_reason, 0) + 1
                continue
            entry = entry_or_reason
            if self._row(entry.id) is not None:
                reasons["duplicate_id"] = reasons.get("duplicate_id", 0) + 1
                continue
            self._conn.execute(
                "INSERT INTO memory (id, payload) VALUES (?, ?)", (entry.id, encode_payload(entry))
            )
            imported += 1
        self._reinstall_guard()
        dropped = sum(reasons.values())
        return ImportReport(
            imported=imported, dropped=dropped, reasons=dict(sorted(reasons.items()))
        )


def _stored_key(conn: sqlite3.Connection) -> bytes:
    store = CatalogStore(conn)
    stored = store.get(_META_TABLE, _KEY_NAME)
    if isinstance(stored, str) and len(stored) == 64:
        return bytes.fromhex(stored)
    key = secrets.token_bytes(32)
    conn.execute("BEGIN IMMEDIATE")
    try:
        again = store.get(_META_TABLE, _KEY_NAME)
        if isinstance(again, str) and len(again) == 64:
            key = bytes.fromhex(again)
        else:
            put_catalog_meta(conn, _KEY_NAME, key.hex())
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")
    return key


def _derived_id(partition: str, body: str, agent: str, task: str, observed_at: datetime) -> str:
    material = "\x1f".join((partition, body, agent, task, observed_at.isoformat()))
    return "mem_" + hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()[:24]
