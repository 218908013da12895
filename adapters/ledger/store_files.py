"""What kind of SQLite file a path holds (ledger, memory catalog, other), checked read-only
before any store opens it, so a reader never creates tables in the wrong file."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Final, Literal

from ctxledger.domain.errors import StoreKindError

__all__ = [
    "CATALOG_TABLE",
    "LEDGER_TABLE",
    "StoreKind",
    "check_catalog_file",
    "check_ledger_file",
    "read_only_uri",
    "store_kind",
    "wal_mode",
]

SQLITE_HEADER: Final = b"SQLite format 3\x00"
LEDGER_TABLE: Final = "ctxledger_events"
"""The events table every ledger has (``ctxledger.adapters.ledger.EVENTS_TABLE``)."""
CATALOG_TABLE: Final = "memory"
"""The table every memory catalog has."""

_WAL_FIRST_PAUSE_S = 0.001
_WAL_MAX_PAUSE_S = 0.05
"""The pauses between two tries of the switch to WAL mode (``wal_mode``)."""

StoreKind = Literal["empty", "ledger", "catalog", "shared", "sqlite"]


def read_only_uri(path: str | os.PathLike[str]) -> str:
    """A SQLite URI that opens *path* for reading only and leaves no file behind.

    Without a ``-wal`` file beside it the file is all there is: opened ``immutable`` (no lock,
    no ``-shm``/``-wal`` created). With one, a writer may hold changes in it, so it is opened
    ``mode=ro`` and SQLite reads the log too."""
    file = Path(path)
    wal = file.with_name(file.name + "-wal")
    return f"{file.resolve().as_uri()}?{'mode=ro' if wal.exists() else 'immutable=1'}"


def _tables(path: Path) -> frozenset[str]:
    """The table names of the SQLite file at *path*, read through a read-only connection."""
    uri = read_only_uri(path)
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=5.0)
        try:
            rows = conn.execute("SELECT name FROM sqlite_master WHERE type='table'").fetchall()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        raise StoreKindError(f"{path} is not a readable SQLite database ({exc})") from None
    return frozenset(str(name) for (name,) in rows)


def store_kind(path: str | os.PathLike[str]) -> StoreKind:
    """The kind of the existing file at *path*: ``empty`` (no bytes), ``ledger`` (has the
    events table), ``catalog`` (has the memory table), ``shared`` (both) or ``sqlite``
    (anything else SQLite). Reads only; raises StoreKindError when the file is not SQLite."""
    file = Path(path)
    try:
        with file.open("rb") as fh:
            header = fh.read(len(SQLITE_HEADER))
    except OSError as exc:
        raise StoreKindError(f"{file}: {exc.strerror or exc}") from None
    if not header:
        return "empty"
    if header != SQLITE_HEADER:
        raise StoreKindError(f"{file} is not a SQLite database")
    tables = _tables(file)
    if LEDGER_TABLE in tables and CATALOG_TABLE in tables:
        return "shared"
    if LEDGER_TABLE in tables:
        return "ledger"
    if CATALOG_TABLE in tables:
        return "catalog"
    return "sqlite"


def check_ledger_file(
    path: str | os.PathLike[str], *, must_be_ledger: bool, allow_foreign: bool = False
) -> None:
    """Refuse, before anything opens it for writing, a file that cannot be a ledger: not
    SQLite, or a memory catalog. With *must_be_ledger* (readers) also an empty or other SQLite
    file, which opening would turn into a ledger. A writer is also refused another
    application's SQLite database (tables, none of them a ledger's), which opening would add
    ctxledger tables to, unless *allow_foreign*. A missing file passes (the caller decides)."""
    file = Path(path)
    if not file.is_file():
        return
    kind = store_kind(file)
    if kind == "catalog":
        raise StoreKindError(f"{file} is a memory catalog, not a ledger")
    if must_be_ledger and kind not in ("ledger", "shared"):
        raise StoreKindError(f"{file} is not a ledger (no {LEDGER_TABLE} table)")
    if kind == "sqlite" and not allow_foreign and _foreign_tables(file):
        raise StoreKindError(
            f"{file} is another application's SQLite database (no {LEDGER_TABLE} table); "
            "ctxledger will not add its tables to it (--allow-foreign-db to do so)"
        )


def _foreign_tables(path: Path) -> frozenset[str]:
    """Tables of *path* that are not ctxledger's (``ctxledger_*``) nor SQLite's own: a ledger
    another writer is creating right now has some of its tables and is not foreign."""
    return frozenset(t for t in _tables(path) if not t.startswith(("ctxledger_", "sqlite_")))


def check_catalog_file(path: str | os.PathLike[str], *, must_be_catalog: bool) -> None:
    """Refuse a file that cannot be a memory catalog: not SQLite, or a ledger. With
    *must_be_catalog* (readers) also a file without the memory table. A missing file passes."""
    file = Path(path)
    if not file.is_file():
        return
    kind = store_kind(file)
    if kind == "ledger":
        raise StoreKindError(f"{file} is a ledger, not a memory catalog")
    if must_be_catalog and kind not in ("catalog", "shared"):
        raise StoreKindError(f"{file} is not a memory catalog (no {CATALOG_TABLE} table)")


def wal_mode(conn: sqlite3.Connection, *, timeout: float) -> str:
    """Switch *conn*'s file to WAL journal mode and return the mode it is in.

    SQLite refuses the switch with "database is locked" at once, without waiting out the busy
    timeout, while another connection is switching or creating tables (two stores opened
    together on a new file), so the switch is retried until *timeout*. A file in WAL mode
    stays so: later opens only read the mode. Pauses: 1 ms doubling to 50 ms."""
    # imported on use: the ledger package imports this module at its top (a cycle otherwise)
    from ctxledger.adapters.ledger.retry import pause

    deadline = time.monotonic() + timeout
    attempt = 0
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
        pause(attempt, first=_WAL_FIRST_PAUSE_S, cap=_WAL_MAX_PAUSE_S)
        attempt += 1
