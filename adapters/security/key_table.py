"""The table of content keys, outside the event stream (same database, ``ctxledger_keys``).

One row per (agent, item): the item's data key wrapped by the master key, or — once erased —
no key at all, only why and when. Erasing deletes the wrapped key and then wipes what a
database keeps of deleted rows (SQLite: ``secure_delete``, ``VACUUM``, a truncating WAL
checkpoint; PostgreSQL: ``VACUUM FULL``), together with the persisted read models, which are
rebuilt from the log. ``adapters.content_seal`` does the cryptography; this module only
stores rows.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple, Protocol

from ctxledger.domain.errors import LedgerUnavailableError

__all__ = ["KEYS_TABLE", "KeyRow", "KeyTable", "MemoryKeyTable", "PgKeyTable", "SQLiteKeyTable"]

KEYS_TABLE = "ctxledger_keys"


class KeyRow(NamedTuple):
    """One key: ``wrapped`` is None once erased (``erased_reason`` and ``erased_at`` say why
    and when)."""

    agent_id: str
    item_id: str
    wrapped: bytes | None
    erased_reason: str = ""
    erased_at: str = ""


class KeyTable(Protocol):
    def rows(self, agent_id: str | None = None) -> list[KeyRow]:
        """Every row (of one agent); ``[]`` when the table does not exist."""
        ...

    def get(self, pairs: Sequence[tuple[str, str]]) -> list[KeyRow]:
        """The rows of these (agent, item) pairs that exist."""
        ...

    def insert(self, rows: Sequence[KeyRow]) -> None:
        """Insert rows, keeping any row already there for the same (agent, item)."""
        ...

    def destroy(
        self, agent_id: str, item_ids: Sequence[str] | None, reason: str, at: str
    ) -> list[str]:
        """Delete the wrapped keys of *agent_id* (all, or *item_ids*), leaving tombstones;
        returns the item ids whose key was destroyed now."""
        ...

    def wipe(self, projections_table: str) -> None:
        """Delete the persisted read models and remove what the database keeps of deleted
        rows (free pages, the write-ahead log)."""
        ...

    def close(self) -> None: ...


class MemoryKeyTable:
    def __init__(self) -> None:
        self._rows: dict[tuple[str, str], KeyRow] = {}
        self.wiped: Callable[[], None] = lambda: None

    def rows(self, agent_id: str | None = None) -> list[KeyRow]:
        return [r for r in self._rows.values() if agent_id is None or r.agent_id == agent_id]

    def get(self, pairs: Sequence[tuple[str, str]]) -> list[KeyRow]:
        return [self._rows[p] for p in pairs if p in self._rows]

    def insert(self, rows: Sequence[KeyRow]) -> None:
        for row in rows:
            self._rows.setdefault((row.agent_id, row.item_id), row)

    def destroy(
        self, agent_id: str, item_ids: Sequence[str] | None, reason: str, at: str
    ) -> list[str]:
        gone = []
        for (agent, item), row in list(self._rows.items()):
            wanted = item_ids is None or item in item_ids
            if agent == agent_id and wanted and row.wrapped is not None:
                self._rows[agent, item] = KeyRow(agent, item, None, reason, at)
                gone.append(item)
        return gone

    def wipe(self, projections_table: str) -> None:
        self.wiped()

    def close(self) -> None:
        return None


_CREATE = (
    f"CREATE TABLE IF NOT EXISTS {KEYS_TABLE} (agent_id TEXT NOT NULL, item_id TEXT NOT NULL, "
    "wrapped BLOB, erased_reason TEXT NOT NULL DEFAULT '', erased_at TEXT NOT NULL DEFAULT '', "
    "PRIMARY KEY (agent_id, item_id))"
)


class SQLiteKeyTable:
    """The key table in the ledger's SQLite file, on a connection of its own (``VACUUM``
    cannot run inside the event store's transactions; ``secure_delete`` is per connection),
    opened on first use and kept."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self._created = False

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None:
                conn = sqlite3.connect(
                    self.path, timeout=60, isolation_level=None, check_same_thread=False
                )
                conn.execute("PRAGMA secure_delete=ON")
                self._conn = conn
            yield self._conn

    def _exists(self, conn: sqlite3.Connection) -> bool:
        if not self._created:
            found = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (KEYS_TABLE,)
            ).fetchone()
            self._created = found is not None
        return self._created

    @staticmethod
    def _row(r: tuple[Any, ...]) -> KeyRow:
        agent, item, wrapped, reason, at = r
        return KeyRow(agent, item, None if wrapped is None else bytes(wrapped), reason, at)

    def rows(self, agent_id: str | None = None) -> list[KeyRow]:
        sql = f"SELECT agent_id, item_id, wrapped, erased_reason, erased_at FROM {KEYS_TABLE}"
        with self._connection() as conn:
            if not self._exists(conn):
                return []
            found = (
                conn.execute(sql).fetchall()
                if agent_id is None
                else conn.execute(sql + " WHERE agent_id=?", (agent_id,)).fetchall()
            )
        return [self._row(r) for r in found]

    def get(self, pairs: Sequence[tuple[str, str]]) -> list[KeyRow]:
        sql = (
            f"SELECT agent_id, item_id, wrapped, erased_reason, erased_at FROM {KEYS_TABLE} "
            "WHERE agent_id=? AND item_id=?"
        )
        with self._connection() as conn:
            if not self._exists(conn):
                return []
            return [self._row(r) for p in pairs for r in conn.execute(sql, p).fetchall()]

    def insert(self, rows: Sequence[KeyRow]) -> None:
        with self._connection() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(_CREATE)
                conn.executemany(
                    f"INSERT OR IGNORE INTO {KEYS_TABLE} VALUES (?,?,?,?,?)",
                    [tuple(r) for r in rows],
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            self._created = True

    def destroy(
        self, agent_id: str, item_ids: Sequence[str] | None, reason: str, at: str
    ) -> list[str]:
        with self._connection() as conn:
            if not self._exists(conn):
                return []
            conn.execute("BEGIN IMMEDIATE")
            try:
                live = [
                    item
                    for (item,) in conn.execute(
                        f"SELECT item_id FROM {KEYS_TABLE} "
                        "WHERE agent_id=? AND wrapped IS NOT NULL",
                        (agent_id,),
                    ).fetchall()
                    if item_ids is None or item in item_ids
                ]
                conn.executemany(
                    f"UPDATE {KEYS_TABLE} SET wrapped=NULL, erased_reason=?, erased_at=? "
                    "WHERE agent_id=? AND item_id=?",
                    [(reason, at, agent_id, item) for item in live],
                )
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
        return live

    def wipe(self, projections_table: str) -> None:
        with self._connection() as conn:
            conn.execute(f"DELETE FROM {projections_table}")
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class PgKeyTable:
    """The key table in the ledger's PostgreSQL database (same schema as the events), on an
    autocommit connection of its own, opened on first use and kept (dropped after an error)."""

    def __init__(self, connect: Callable[[], Any], schema: str) -> None:
        self._connect = connect
        self._schema = schema
        self._conn: Any = None
        self._lock = threading.Lock()
        self._created = False

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        import psycopg

        with self._lock:
            if self._conn is None or self._conn.closed:
                try:
                    self._conn = self._connect()
                except psycopg.OperationalError as exc:
                    raise LedgerUnavailableError(f"key table: {exc}") from exc
            try:
                yield self._conn
            except psycopg.OperationalError as exc:
                self._conn.close()
                self._conn = None
                raise LedgerUnavailableError(f"key table: {exc}") from exc

    def _table(self, name: str = KEYS_TABLE) -> Any:
        from psycopg.sql import SQL, Identifier

        return SQL("{}.{}").format(Identifier(self._schema), Identifier(name))

    def _exists(self, conn: Any) -> bool:
        if not self._created:
            found = conn.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema=%s AND table_name=%s",
                (self._schema, KEYS_TABLE),
            ).fetchone()
            self._created = found is not None
        return self._created

    def _select(self) -> Any:
        from psycopg.sql import SQL

        return SQL("SELECT agent_id, item_id, wrapped, erased_reason, erased_at FROM {}").format(
            self._table()
        )

    def rows(self, agent_id: str | None = None) -> list[KeyRow]:
        from psycopg.sql import SQL

        with self._connection() as conn:
            if not self._exists(conn):
                return []
            sql = self._select()
            rows = (
                conn.execute(sql).fetchall()
                if agent_id is None
                else conn.execute(sql + SQL(" WHERE agent_id=%s"), (agent_id,)).fetchall()
            )
        return [KeyRow(a, i, None if w is None else bytes(w), r, t) for a, i, w, r, t in rows]

    def get(self, pairs: Sequence[tuple[str, str]]) -> list[KeyRow]:
        from psycopg.sql import SQL

        sql = self._select() + SQL(" WHERE agent_id=%s AND item_id=%s")
        with self._connection() as conn:
            if not self._exists(conn):
                return []
            rows = [r for p in pairs for r in conn.execute(sql, p).fetchall()]
        return [KeyRow(a, i, None if w is None else bytes(w), r, t) for a, i, w, r, t in rows]

    def insert(self, rows: Sequence[KeyRow]) -> None:
        from psycopg.sql import SQL

        with self._connection() as conn, conn.transaction():
            if not self._created:
                conn.execute(
                    SQL(
                        "CREATE TABLE IF NOT EXISTS {} (agent_id text NOT NULL, item_id text "
                        "NOT NULL, wrapped bytea, erased_reason text NOT NULL DEFAULT '', "
                        "erased_at text NOT NULL DEFAULT '', PRIMARY KEY (agent_id, item_id))"
                    ).format(self._table())
                )
            with conn.cursor() as cur:
                cur.executemany(
                    SQL("INSERT INTO {} VALUES (%s,%s,%s,%s,%s) ON CONFLICT DO NOTHING").format(
                        self._table()
                    ),
                    [tuple(r) for r in rows],
                )
        self._created = True

    def destroy(
        self, agent_id: str, item_ids: Sequence[str] | None, reason: str, at: str
    ) -> list[str]:
        from psycopg.sql import SQL

        with self._connection() as conn:
            if not self._exists(conn):
                return []
            with conn.transaction():
                live = [
                    item
                    for (item,) in conn.execute(
                        SQL(
                            "SELECT item_id FROM {} WHERE agent_id=%s AND wrapped IS NOT NULL "
                            "FOR UPDATE"
                        ).format(self._table()),
                        (agent_id,),
                    ).fetchall()
                    if item_ids is None or item in item_ids
                ]
                with conn.cursor() as cur:
                    cur.executemany(
                        SQL(
                            "UPDATE {} SET wrapped=NULL, erased_reason=%s, erased_at=%s "
                            "WHERE agent_id=%s AND item_id=%s"
                        ).format(self._table()),
                        [(reason, at, agent_id, item) for item in live],
                    )
        return live

    def wipe(self, projections_table: str) -> None:
        from psycopg.sql import SQL

        with self._connection() as conn:  # autocommit: VACUUM runs outside a transaction
            conn.execute(SQL("DELETE FROM {}").format(self._table(projections_table)))
            conn.execute(
                SQL("VACUUM FULL {}, {}").format(self._table(), self._table(projections_table))
            )
            if _superuser(conn):
                conn.execute("CHECKPOINT")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


def _superuser(conn: Any) -> bool:
    row = conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()
    return bool(row and row[0])
