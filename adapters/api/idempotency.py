"""``Idempotency-Key`` for ``ctxledger api``: the first answer of a keyed POST, kept in a small
SQLite table so a client that lost the answer and retries gets it back without a second append
(even after the server restarted). The file is ``<ledger>.api-keys.db`` beside a SQLite ledger,
``--idempotency-db`` for any store (processes serving one PostgreSQL database share one file),
else in memory (a retry then survives only while the process runs).

A key is reserved (a row with no answer) before the request runs, so a concurrent retry of the
same key, in this process or another, answers 409 ``in_progress`` instead of running twice; an
answer of ours that failed (5xx) or a conflict (409: another writer moved the stream) releases
the key, so the retry runs again. The same key with another method, path or
body is 409 ``idempotency_mismatch``."""

from __future__ import annotations

import hashlib
import sqlite3
import threading
import time
from collections.abc import Callable

from ctxledger.adapters.api.errors import error_body

__all__ = ["MAX_KEY_CHARS", "STALE_AFTER_S", "IdempotencyStore", "fingerprint"]

MAX_KEY_CHARS = 200
STALE_AFTER_S = 300.0
"""A reservation with no answer this old was left by a process that died mid-request: a retry
takes it over (what that request appended before it died, if anything, stays appended)."""

_SCHEMA = """CREATE TABLE IF NOT EXISTS api_idempotency (
    key TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, status INTEGER, body BLOB,
    created REAL NOT NULL)"""


def fingerprint(method: str, path: str, body: bytes) -> str:
    """What a retry must repeat exactly: the method, the path and the body's bytes."""
    h = hashlib.sha256(f"{method} {path}\n".encode())
    h.update(body)
    return h.hexdigest()


class IdempotencyStore:
    """Keyed answers in SQLite (*path* ``":memory:"``: this process only)."""

    def __init__(self, path: str = ":memory:") -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            path, timeout=30.0, check_same_thread=False, isolation_level=None
        )
        self._db.execute("PRAGMA busy_timeout = 30000")
        if path != ":memory:":
            self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _reserve(self, key: str, print_: str) -> tuple[int, bytes] | None:
        """None: *key* is ours to run; else the answer to give instead."""
        with self._lock:
            cur = self._db.execute(
                "INSERT OR IGNORE INTO api_idempotency (key, fingerprint, created) VALUES (?, ?, ?)",
                (key, print_, time.time()),
            )
            if cur.rowcount == 1:
                return None
            row = self._db.execute(
                "SELECT fingerprint, status, body, created FROM api_idempotency WHERE key = ?",
                (key,),
            ).fetchone()
            stale = row is not None and row[1] is None and row[3] < time.time() - STALE_AFTER_S
            if stale and row[0] == print_:
                taken = self._db.execute(
                    "UPDATE api_idempotency SET created = ? "
                    "WHERE key = ? AND status IS NULL AND created = ?",
                    (time.time(), key, row[3]),
                )
                if taken.rowcount == 1:
                    return None
        if row is None:  # released between the two statements: run it
            return self._reserve(key, print_)
        stored_print, status, body, _ = row
        if stored_print != print_:
            return error_body(
                409,
                "idempotency_mismatch",
                "this Idempotency-Key was used with another request (method, path or body)",
                "Idempotency-Key",
            )
        if status is None:
            return error_body(
                409,
                "in_progress",
                "a request with this Idempotency-Key is still running; retry later",
                "Idempotency-Key",
            )
        return int(status), bytes(body)

    def once(
        self, key: str, print_: str, run: Callable[[], tuple[int, bytes]]
    ) -> tuple[int, bytes]:
        """The answer of *run* for *key*: run once, stored, and given again to every retry."""
        if len(key) > MAX_KEY_CHARS or not key.isascii() or not key.isprintable():
            return error_body(
                422,
                "invalid_header",
                f"Idempotency-Key must be 1–{MAX_KEY_CHARS} printable ASCII characters",
                "Idempotency-Key",
            )
        earlier = self._reserve(key, print_)
        if earlier is not None:
            return earlier
        status, body = 500, b""
        try:
            status, body = run()
        finally:
            with self._lock:
                if status >= 500 or status == 409:  # ours, or a conflict: the retry runs
                    self._db.execute("DELETE FROM api_idempotency WHERE key = ?", (key,))
                else:
                    self._db.execute(
                        "UPDATE api_idempotency SET status = ?, body = ? WHERE key = ?",
                        (status, body, key),
                    )
        return status, body
