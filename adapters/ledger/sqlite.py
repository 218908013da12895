"""The SQLite store (``sqlite:///path``): eventsourcing's SQLite recorder on a file in WAL
mode, read models in a table of the same file, the head file beside it (``head``), writers
taking turns through the ``<file>-locks`` ticket queues (``stream_locks``)."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import ApplicationRecorder, OperationalError
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from ctxledger.adapters.ledger.backend import EVENTS_TABLE, PROJECTIONS_TABLE, QUARANTINE_TABLE
from ctxledger.adapters.ledger.head import HeadRecord, head_file, read_head_record, write_head_file
from ctxledger.adapters.ledger.locks import FileStreamLocks, StreamLocks
from ctxledger.adapters.ledger.store_files import read_only_uri, wal_mode
from ctxledger.adapters.security.key_table import KeyTable, SQLiteKeyTable

__all__ = ["SQLiteBackend", "use_wal"]


def use_wal(path: str, *, timeout: float) -> None:
    """Put the file in WAL mode before eventsourcing's pool opens it (its own switch is not
    retried: two ledgers opened together on a new file could fail)."""
    try:
        conn = sqlite3.connect(path, timeout=timeout, isolation_level=None)
        try:
            wal_mode(conn, timeout=timeout)
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise OperationalError(exc) from exc


class SQLiteBackend:
    outages = False
    queued_writes = True

    def __init__(self, path: str, *, read_only: bool = False) -> None:
        """*read_only* (commands that only read): opened through ``read_only_uri``, so not
        a table, a journal-mode switch, a ``-wal``/``-shm`` or a lock file is created."""
        self.path = path
        self.read_only = read_only
        if not read_only:
            use_wal(path, timeout=60)
        self.datastore = SQLiteDatastore(
            read_only_uri(path) if read_only else path,
            lock_timeout=60,
            originator_id_type="text",
            pool_size=2,
            max_overflow=4,
        )
        recorder = SQLiteApplicationRecorder(self.datastore, events_table_name=EVENTS_TABLE)
        self.recorder: ApplicationRecorder = recorder
        if read_only:
            return
        recorder.create_table()
        with self.datastore.transaction(commit=True) as c:
            c.execute(
                f"CREATE TABLE IF NOT EXISTS {PROJECTIONS_TABLE} ("
                "name TEXT PRIMARY KEY, position INTEGER NOT NULL, state BLOB NOT NULL)"
            )

    def stream_locks(self) -> StreamLocks:
        return FileStreamLocks(self.path)

    def select_rows(
        self, after: int, upto: int | None, limit: int, *, streams: bool
    ) -> list[tuple[Any, ...]]:
        """Straight from eventsourcing's table (its notification id is the rowid), as plain
        tuples: no Notification per row."""
        columns = (
            "rowid, originator_id, originator_version, topic, state"
            if streams
            else ("rowid, topic, state")
        )
        sql = f"SELECT {columns} FROM {EVENTS_TABLE} WHERE rowid>?"
        params: tuple[int, ...] = (after,)
        if upto is not None:
            sql += " AND rowid<=?"
            params += (upto,)
        with self.datastore.transaction(commit=False) as c:
            cursor = c.sqlite_cursor
            cursor.row_factory = None  # tuples, not sqlite3.Row
            cursor.execute(f"{sql} ORDER BY rowid LIMIT ?", (*params, limit))
            rows: list[tuple[Any, ...]] = cursor.fetchall()
        return rows

    def load_projection(self, name: str) -> tuple[int, bytes] | None:
        with self.datastore.transaction(commit=False) as c:
            if self.read_only:
                c.execute(
                    "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                    (PROJECTIONS_TABLE,),
                )
                if c.fetchone() is None:
                    return None  # never saved (a reader creates no table)
            c.execute(f"SELECT position, state FROM {PROJECTIONS_TABLE} WHERE name=?", (name,))
            row = c.fetchone()
        return None if row is None else (int(row["position"]), bytes(row["state"]))

    def save_projections(self, states: dict[str, bytes], position: int) -> None:
        with self.datastore.transaction(commit=True) as c:
            for name, state in states.items():
                c.execute(
                    f"INSERT INTO {PROJECTIONS_TABLE} (name, position, state) VALUES (?,?,?) "
                    "ON CONFLICT(name) DO UPDATE SET position=excluded.position, "
                    "state=excluded.state",
                    (name, position, state),
                )

    def head_record(self) -> HeadRecord | None:
        return read_head_record(self.path)

    def committed(self, position: int, link: str) -> None:
        write_head_file(self.path, position, link=link, in_place=True)

    def accept_head(self, position: int, link: str, line: str) -> None:
        write_head_file(self.path, position, link=link, accept=line)

    def drop_projections_after(self, position: int) -> None:
        with self.datastore.transaction(commit=True) as c:
            c.execute(f"DELETE FROM {PROJECTIONS_TABLE} WHERE position>?", (position,))

    def closing(self) -> None:
        """Checkpoint the WAL into the file (without waiting for readers) and, when every
        frame made it, record the position the file itself now holds: a later log that ends
        before it is an older copy of the file, not only a lost WAL."""
        conn = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
        try:
            (end,) = conn.execute(f"SELECT coalesce(max(rowid), 0) FROM {EVENTS_TABLE}").fetchone()
            busy, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        finally:
            conn.close()
        if busy == 0 and log >= 0 and log == done:
            write_head_file(self.path, int(end), in_file=int(end))

    def quarantined_rows(self) -> list[tuple[Any, ...]]:
        with self.datastore.transaction(commit=False) as c:
            cursor = c.sqlite_cursor
            cursor.row_factory = None
            cursor.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (QUARANTINE_TABLE,)
            )
            if cursor.fetchone() is None:
                return []
            cursor.execute(
                "SELECT position, originator_id, originator_version, topic, state, kind, "
                f"reason, quarantined_at FROM {QUARANTINE_TABLE} ORDER BY position"
            )
            rows: list[tuple[Any, ...]] = cursor.fetchall()
        return rows

    def quarantine(self, entries: Sequence[tuple[int, str, str]], at: str) -> int:
        moved = 0
        with self.datastore.transaction(commit=True) as c:
            cursor = c.sqlite_cursor
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {QUARANTINE_TABLE} (position INTEGER PRIMARY KEY, "
                "originator_id TEXT, originator_version INTEGER, topic TEXT, state BLOB, "
                "kind TEXT NOT NULL, reason TEXT NOT NULL, quarantined_at TEXT NOT NULL)"
            )
            for position, kind, reason in entries:
                cursor.execute(
                    f"INSERT INTO {QUARANTINE_TABLE} SELECT rowid, originator_id, "
                    "originator_version, topic, state, ?, ?, ? "
                    f"FROM {EVENTS_TABLE} WHERE rowid=?",
                    (kind, reason, at, position),
                )
                cursor.execute(f"DELETE FROM {EVENTS_TABLE} WHERE rowid=?", (position,))
                moved += cursor.rowcount
            first = min(p for p, _, _ in entries)
            cursor.execute(f"DELETE FROM {PROJECTIONS_TABLE} WHERE position>=?", (first,))
        # rows left the log on purpose: the recorded head is written again at the next save
        head_file(self.path).unlink(missing_ok=True)
        return moved

    def wait_for_new(self, timeout: float) -> None:
        time.sleep(timeout)  # polling: the follower's interval

    def key_table(self) -> KeyTable:
        return SQLiteKeyTable(self.path)

    def close(self) -> None:
        self.datastore.close()
