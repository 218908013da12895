"""Writers of one stream take turns: a lock per stream held across read–decide–append.

Optimistic concurrency alone is correct (a stream that moved is a ConflictError and nothing is
written) but under contention it surfaces as errors: with 8 processes on one agent, a third of
the calls failed after their retries. Serialising the decide-and-append section where the
store can do it turns those conflicts into short waits:

- SQLite: a POSIX byte-range lock (``fcntl.lockf``) per stream on a sidecar file next to the
  database (``<db>-locks``; created by the first writer, never by a reader), plus a lock per
  stream inside the process (POSIX locks belong to the process, not the thread);
- PostgreSQL: a session-level advisory lock per stream on a connection held for the section;
- memory: a lock per stream.

Locks are re-entrant within a thread (a build holds its stream across its two commits, and
appends inside it take the lock again). A crashed holder releases everything: the OS drops
its file locks, PostgreSQL ends its session. Waiting is bounded: past ``timeout`` the caller
gets a ConflictError saying another writer held the stream. The optimistic version check stays
underneath, so a writer that does not lock (an older version) is still caught.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from ctxledger.domain.errors import ConflictError, LedgerUnavailableError

__all__ = [
    "UNAVAILABLE_AFTER_S",
    "FileStreamLocks",
    "LocalStreamLocks",
    "PgStreamLocks",
    "StreamLocks",
]

DEFAULT_TIMEOUT_S = 30.0
UNAVAILABLE_AFTER_S = 20.0
"""How long one call to a PostgreSQL ledger waits for a server that does not answer (killed,
restarting, unreachable) before it raises ``LedgerUnavailableError``: a restart shorter than
this is waited out and the call goes through."""


def _key(stream_id: str) -> int:
    """A stable signed 63-bit key for a stream (advisory lock key, byte offset)."""
    return int.from_bytes(hashlib.sha256(stream_id.encode("utf-8")).digest()[:8], "big") >> 1


class StreamLocks:
    """Re-entrant per-stream locks; subclasses acquire the store-level part."""

    def __init__(self) -> None:
        self._local: dict[str, threading.RLock] = {}
        self._guard = threading.Lock()
        self._held = threading.local()

    def _rlock(self, stream_id: str) -> threading.RLock:
        with self._guard:
            lock = self._local.get(stream_id)
            if lock is None:
                lock = self._local[stream_id] = threading.RLock()
            return lock

    @contextlib.contextmanager
    def hold(self, stream_id: str, timeout: float = DEFAULT_TIMEOUT_S) -> Iterator[None]:
        """Hold *stream_id* for the block (waiting at most *timeout* seconds)."""
        held: dict[str, int] = self._held.__dict__.setdefault("streams", {})
        if held.get(stream_id):
            held[stream_id] += 1
            try:
                yield
            finally:
                held[stream_id] -= 1
            return
        deadline = time.monotonic() + timeout
        local = self._rlock(stream_id)
        if not local.acquire(timeout=max(0.0, timeout)):
            raise _timed_out(stream_id, timeout)
        try:
            release = self._acquire(stream_id, deadline, timeout)
            held[stream_id] = 1
            try:
                yield
            finally:
                held[stream_id] = 0
                release()
        finally:
            local.release()

    def _acquire(self, stream_id: str, deadline: float, timeout: float) -> Callable[[], None]:
        return lambda: None

    def close(self) -> None:
        """Release what the store-level part keeps open."""


def _timed_out(stream_id: str, timeout: float) -> ConflictError:
    return ConflictError(stream_id, -1, f"another writer held the stream for {timeout:g} s")


def _poll(try_once: Callable[[], bool], stream_id: str, deadline: float, timeout: float) -> None:
    """Call *try_once* until it succeeds, backing off (jittered, up to 50 ms) until *deadline*."""
    pause = 0.0005
    while not try_once():
        now = time.monotonic()
        if now >= deadline:
            raise _timed_out(stream_id, timeout)
        time.sleep(min(pause, deadline - now) * (0.5 + 0.5 * (os.getpid() % 7) / 7))
        pause = min(pause * 2, 0.05)


class LocalStreamLocks(StreamLocks):
    """Within one process (the memory store)."""


class FileStreamLocks(StreamLocks):
    """Across processes on one machine: byte-range locks on ``<database>-locks``."""

    def __init__(self, database: str) -> None:
        super().__init__()
        self.path = f"{database}-locks"
        self._fd: int | None = None
        self._fd_guard = threading.Lock()

    def _file(self) -> int:
        with self._fd_guard:
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            return self._fd

    def _acquire(self, stream_id: str, deadline: float, timeout: float) -> Callable[[], None]:
        import fcntl

        fd, offset = self._file(), _key(stream_id) % (2**31 - 1)

        def try_once() -> bool:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
            except OSError:
                return False
            return True

        _poll(try_once, stream_id, deadline, timeout)
        return lambda: fcntl.lockf(fd, fcntl.LOCK_UN, 1, offset)

    def close(self) -> None:
        with self._fd_guard:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _try_advisory_lock(conn: Any, key: int) -> bool:
    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    return bool(row and row[0])


class PgStreamLocks(StreamLocks):
    """Across machines: PostgreSQL advisory locks, on one connection per thread kept open
    (autocommit; session-level locks, released explicitly or when the session ends)."""

    def __init__(self, connect: Callable[[], Any]) -> None:
        super().__init__()
        self._connect = connect
        self._conns = threading.local()
        self._all: list[Any] = []
        self._all_guard = threading.Lock()

    def _conn(self) -> Any:
        conn = getattr(self._conns, "conn", None)
        if conn is None or conn.closed:
            conn = self._conns.conn = self._connect()
            with self._all_guard:
                self._all.append(conn)
        return conn

    def _drop(self, conn: Any) -> None:
        self._conns.conn = None
        with contextlib.suppress(Exception):
            conn.close()

    def _acquire(self, stream_id: str, deadline: float, timeout: float) -> Callable[[], None]:
        import psycopg

        key = _key(stream_id)
        gone_at: float | None = None
        while True:
            conn: Any = None
            try:
                conn = self._conn()
                _poll(
                    functools.partial(_try_advisory_lock, conn, key), stream_id, deadline, timeout
                )
                break
            except ConflictError:
                raise
            except psycopg.OperationalError as exc:  # the server went away (or is restarting)
                if conn is not None:
                    self._drop(conn)  # a broken session holds nothing: start over
                now = time.monotonic()
                gone_at = now if gone_at is None else gone_at
                if now - gone_at >= UNAVAILABLE_AFTER_S:
                    first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                    raise LedgerUnavailableError(
                        f"PostgreSQL did not answer for {UNAVAILABLE_AFTER_S:.0f} s: {first}"
                    ) from exc
                time.sleep(0.1)
            except Exception:
                if conn is not None:
                    self._drop(conn)
                raise

        def release() -> None:
            try:
                conn.execute("SELECT pg_advisory_unlock(%s)", (key,))
            except Exception:
                self._drop(conn)  # ending the session releases its locks

        return release

    def close(self) -> None:
        with self._all_guard:
            conns, self._all = self._all, []
        for conn in conns:
            with contextlib.suppress(Exception):
                conn.close()
