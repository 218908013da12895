"""The workspace catalog's connection policy and a generic JSON key/value accessor.

The accessor serves every catalog table except ``memory``: project memory is reachable only
through :mod:`ctxledger.adapters.memory.catalog`, so no code path can skip its intake, its
provenance fields or its revision check-and-set."""

from __future__ import annotations

import builtins
import json
import os
import re
import sqlite3
from types import TracebackType
from typing import Any, Final

from ctxledger.adapters.ledger.store_files import wal_mode
from ctxledger.adapters.memory.guard import ensure_guard
from ctxledger.domain.errors import InvalidInputError, ProtectedTableError

__all__ = [
    "META_TABLE",
    "PROTECTED_TABLES",
    "READ_ONLY_TABLES",
    "CatalogStore",
    "connect_catalog",
    "put_catalog_meta",
]

PROTECTED_TABLES: Final = frozenset({"memory"})
"""Tables the generic accessor refuses (compared case-insensitively)."""

META_TABLE: Final = "catalog_meta"
READ_ONLY_TABLES: Final = frozenset({META_TABLE})
"""Tables the generic accessor reads but never writes: the catalog's own settings (its
partition key: a write there would orphan every memory on the next open)."""

_TABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def connect_catalog(path: str | os.PathLike[str], *, timeout: float = 5.0) -> sqlite3.Connection:
    """Open the catalog with the policy every connection must have.

    Autocommit mode (transactions are explicit ``BEGIN``/``COMMIT``), WAL journal,
    ``secure_delete`` (freed cells are overwritten) and ``recursive_triggers`` (the guard also
    sees the implicit delete of ``INSERT OR REPLACE``); a memory table missing any guard
    trigger gets the guard again (``memory_guard.ensure_guard``)."""
    conn = sqlite3.connect(os.fspath(path), timeout=timeout, isolation_level=None)
    try:
        conn.execute("PRAGMA secure_delete=ON")
        conn.execute("PRAGMA recursive_triggers=ON")
        conn.execute("PRAGMA foreign_keys=ON")
        mode = wal_mode(conn, timeout=timeout)
        if str(mode).lower() != "wal":
            raise InvalidInputError(f"catalog cannot use WAL journal mode (got {mode})")
        secure = conn.execute("PRAGMA secure_delete").fetchone()[0]
        if secure != 1:
            raise InvalidInputError("this SQLite build cannot enable secure_delete")
        ensure_guard(conn)
    except BaseException:
        conn.close()
        raise
    return conn


def _checked_table(table: str) -> str:
    if _TABLE_NAME.fullmatch(table) is None:
        raise InvalidInputError("catalog table names are 1-63 letters, digits or underscores")
    lowered = table.lower()
    if lowered in PROTECTED_TABLES:
        raise ProtectedTableError(f"table {lowered!r} is reachable only through the memory catalog")
    if lowered.startswith("sqlite_"):
        raise ProtectedTableError("SQLite's internal tables are not catalog tables")
    return table


def put_catalog_meta(conn: sqlite3.Connection, key: str, value: object) -> None:
    """Write one of the catalog's own settings (``catalog_meta``): for the memory catalog
    only, which owns them; the generic accessor refuses that table."""
    _put(conn, META_TABLE, key, value)


def _put(conn: sqlite3.Connection, name: str, key: str, value: object) -> None:
    payload = json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    conn.execute(
        f'CREATE TABLE IF NOT EXISTS "{name}" (key TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)'
    )
    conn.execute(
        f'INSERT INTO "{name}" (key, value) VALUES (?, ?) '
        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        (key, payload),
    )


class CatalogStore:
    """JSON values by key in named tables of the catalog (created on first write).

    Refuses ``memory`` (any case) and SQLite's internal tables with ProtectedTableError."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._owned = False

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> CatalogStore:
        """A store on its own connection (closed by :meth:`close`)."""
        store = cls(connect_catalog(path))
        store._owned = True
        return store

    def close(self) -> None:
        if self._owned:
            self._conn.close()

    def __enter__(self) -> CatalogStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def put_json(self, table: str, key: str, value: object) -> None:
        """Store *value* (anything ``json.dumps`` accepts) under *key*, replacing any old one.
        Refuses the read-only tables (``catalog_meta``) with ProtectedTableError."""
        name = _checked_table(table)
        if name.lower() in READ_ONLY_TABLES:
            raise ProtectedTableError(f"table {name.lower()!r} is written only by the catalog")
        _put(self._conn, name, key, value)

    def get(self, table: str, key: str) -> Any:
        """The value under *key*, or None when the table or the key does not exist."""
        name = _checked_table(table)
        if not self._exists(name):
            return None
        row = self._conn.execute(f'SELECT value FROM "{name}" WHERE key = ?', (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def list(self, table: str) -> builtins.list[tuple[str, Any]]:
        """Every ``(key, value)`` of *table* in key order (empty when the table does not exist)."""
        name = _checked_table(table)
        if not self._exists(name):
            return []
        rows = self._conn.execute(f'SELECT key, value FROM "{name}" ORDER BY key').fetchall()
        return [(str(k), json.loads(v)) for k, v in rows]

    def _exists(self, name: str) -> bool:
        row = self._conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (name,)
        ).fetchone()
        return row is not None
