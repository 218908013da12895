"""Writers of one stream take turns: a lock per stream held across read–decide–append.

Optimistic concurrency alone is correct (a stream that moved is a ConflictError and nothing is
written) but under contention it surfaces as errors: with 8 processes on one agent, a third of
the calls failed after their retries. Serialising the decide-and-append section where the
store can do it turns those conflicts into short waits:

- SQLite: a ticket lock per stream in a sidecar file next to the database (``<db>-locks``;
  created by the first writer, never by a reader): a writer draws the next ticket and waits
  until the stream serves it, so writers are served first come, first served (a polling
  try-lock let the process that just released a stream take it again before any sleeping
  waiter woke: with 32 processes on one agent, 75 of 9,600 turns waited past the deadline).
  The counters are file bytes guarded by a POSIX byte-range lock (``fcntl.lockf``); each
  ticket's owner holds a byte-range lock on its ticket's byte while it waits and holds, so a
  waiter that finds the ticket being served unowned (its process died, or it gave up at its
  deadline) moves the stream past it. Inside the process one lock per stream and database
  file (POSIX locks belong to the process, not the thread or the open file);
- PostgreSQL: a session-level advisory lock per stream on a connection held for the section,
  waited for in the server (``pg_advisory_lock`` under ``lock_timeout``), whose lock queue
  serves waiters in order;
- memory: a lock per stream.

These locks are why ctxledger is POSIX-only (its classifiers say ``Operating System ::
POSIX``; docs/architecture.md, "Platforms"): Windows has neither ``fcntl`` byte-range locks
with these semantics nor ``os.pread``/``os.pwrite``, and a whole-file lock (``msvcrt.locking``,
``filelock``) waits by polling — the try-lock that starved waiters above. Where the calls are
missing, the first write to a SQLite ledger raises a one-line ``LedgerUnavailableError``
(:func:`missing_posix_calls`) instead of an ``ImportError`` from inside a commit.

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
import struct
import sys
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
    "missing_posix_calls",
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

    def _name(self, stream_id: str) -> str:
        """What re-entrancy and the in-process lock are keyed by (the stream by default)."""
        return stream_id

    @contextlib.contextmanager
    def hold(self, stream_id: str, timeout: float = DEFAULT_TIMEOUT_S) -> Iterator[None]:
        """Hold *stream_id* for the block (waiting at most *timeout* seconds)."""
        held: dict[str, int] = self._held.__dict__.setdefault("streams", {})
        name = self._name(stream_id)
        if held.get(name):
            held[name] += 1
            try:
                yield
            finally:
                held[name] -= 1
            return
        deadline = time.monotonic() + timeout
        local = self._rlock(name)
        if not local.acquire(timeout=max(0.0, timeout)):
            raise _timed_out(stream_id, timeout)
        try:
            release = self._acquire(stream_id, deadline, timeout)
            held[name] = 1
            try:
                yield
            finally:
                held[name] = 0
                release()
        finally:
            local.release()

    def _acquire(self, stream_id: str, deadline: float, timeout: float) -> Callable[[], None]:
        return lambda: None

    def close(self) -> None:
        """Release what the store-level part keeps open."""


def _timed_out(stream_id: str, timeout: float) -> ConflictError:
    return ConflictError(stream_id, -1, f"another writer held the stream for {timeout:g} s")


class LocalStreamLocks(StreamLocks):
    """Within one process (the memory store)."""


_SLOTS = 1 << 20
"""Streams are hashed into this many ticket queues (two streams sharing one share a queue:
still exclusive, and a thread holding one re-enters the other)."""
_TICKET_BYTES = 4096
"""Ticket bytes per queue: the byte of ticket *t* is ``t % _TICKET_BYTES`` (more waiters than
this on one stream would skip the tickets whose byte is still held)."""
_GUARD_BASE = 1 << 40  # lock-range offsets: one guard byte per queue ...
_TICKET_BASE = 1 << 41  # ... and _TICKET_BYTES ticket bytes per queue (data stays at 0..32 MiB)
_COUNTERS = struct.Struct("<QQQ")
"""A queue's file bytes: next ticket, ticket being served, and the served ticket's complement
(a read that mixes two writes never looks like a ticket being served)."""
_MASK = (1 << 64) - 1
_STALL_CHECK_S = 0.05
"""A waiter that sees the served ticket unchanged this long checks that its owner is alive."""
_POLL_NEXT_S = 0.0002
_POLL_PER_TICKET_S = 0.0005
_POLL_MAX_S = 0.01
"""A waiter's pauses between two reads of its queue (``_poll_pause``)."""


class _SharedFile:
    """What every FileStreamLocks of one lock file in this process shares: POSIX locks belong
    to the process and closing any descriptor of the file drops them all, so one descriptor,
    one in-process lock per queue and one record of the queues each thread holds."""

    __slots__ = ("fd", "guard", "held", "local", "users")

    def __init__(self) -> None:
        self.fd: int | None = None
        self.users = 0
        self.guard = threading.Lock()
        self.local: dict[str, threading.RLock] = {}
        self.held = threading.local()


_FILES: dict[str, _SharedFile] = {}
_FILES_GUARD = threading.Lock()


def missing_posix_calls() -> tuple[str, ...]:
    """The calls :class:`FileStreamLocks` is built on that this platform lacks (none on Linux
    or macOS; ``fcntl``, ``os.pread`` and ``os.pwrite`` on Windows)."""
    missing: list[str] = []
    try:
        import fcntl  # noqa: F401 (only whether it exists)
    except ImportError:
        missing.append("fcntl")
    missing += [f"os.{name}" for name in ("pread", "pwrite") if not hasattr(os, name)]
    return tuple(missing)


class FileStreamLocks(StreamLocks):
    """Across processes on one machine: first-come, first-served ticket locks in
    ``<database>-locks``. POSIX only: made where :func:`missing_posix_calls` finds a call
    missing, it raises ``LedgerUnavailableError`` (made on the first write, so a reader never
    gets here)."""

    def __init__(self, database: str) -> None:
        missing = missing_posix_calls()
        if missing:
            raise LedgerUnavailableError(
                f"writing to a SQLite ledger needs POSIX file locks, and this platform "
                f"({sys.platform}) lacks {', '.join(missing)}: ctxledger runs on POSIX systems"
            )
        super().__init__()
        self.path = f"{database}-locks"
        self._shared_key = os.path.realpath(self.path)
        with _FILES_GUARD:
            shared = _FILES.get(self._shared_key)
            if shared is None:
                shared = _FILES[self._shared_key] = _SharedFile()
            shared.users += 1
        self._shared: _SharedFile | None = shared
        self._local, self._guard, self._held = shared.local, shared.guard, shared.held

    def _name(self, stream_id: str) -> str:
        return f"queue {_key(stream_id) % _SLOTS}"

    def _file(self) -> int:
        shared = self._shared
        if shared is None:
            raise ConflictError("", -1, "the ledger's stream locks are closed")
        with shared.guard:
            if shared.fd is None:
                shared.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            return shared.fd

    def _acquire(self, stream_id: str, deadline: float, timeout: float) -> Callable[[], None]:
        fd, queue = self._file(), _key(stream_id) % _SLOTS
        ticket = _draw(fd, queue)
        try:
            _wait_turn(fd, queue, ticket, stream_id=stream_id, deadline=deadline, timeout=timeout)
        except BaseException:
            _leave(fd, queue, ticket)
            raise
        return functools.partial(_leave, fd, queue, ticket)

    def close(self) -> None:
        with _FILES_GUARD:
            shared, self._shared = self._shared, None
            if shared is None:
                return
            shared.users -= 1
            if shared.users > 0:
                return
            _FILES.pop(self._shared_key, None)
        with shared.guard:
            if shared.fd is not None:
                os.close(shared.fd)
                shared.fd = None


@contextlib.contextmanager
def _guarded(fd: int, queue: int) -> Iterator[None]:
    """The queue's guard byte, held for a few system calls (blocking: nobody keeps it)."""
    import fcntl

    fcntl.lockf(fd, fcntl.LOCK_EX, 1, _GUARD_BASE + queue)
    try:
        yield
    finally:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, _GUARD_BASE + queue)


def _ticket_byte(queue: int, ticket: int) -> int:
    return _TICKET_BASE + queue * _TICKET_BYTES + ticket % _TICKET_BYTES


def _read(fd: int, queue: int) -> tuple[int, int | None]:
    """``(next ticket, ticket being served)``; the second is None for a torn read."""
    raw = os.pread(fd, _COUNTERS.size, queue * _COUNTERS.size)
    if len(raw) < _COUNTERS.size:
        return 0, 0  # a queue never used (or the file's sparse end): nothing drawn
    nxt, serving, check = _COUNTERS.unpack(raw)
    if nxt == 0 and serving == 0 and check == 0:
        return 0, 0
    return nxt, serving if serving ^ _MASK == check else None


def _write(fd: int, queue: int, nxt: int, serving: int) -> None:
    os.pwrite(fd, _COUNTERS.pack(nxt, serving, serving ^ _MASK), queue * _COUNTERS.size)


def _try_byte(fd: int, offset: int) -> bool:
    import fcntl

    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, offset)
    except OSError:
        return False
    return True


def _draw(fd: int, queue: int) -> int:
    """Take the queue's next ticket and hold its byte (the sign its owner is alive)."""
    with _guarded(fd, queue):
        nxt, serving = _read(fd, queue)
        if serving is None:  # writes happen under the guard: only a damaged file reads so
            raise ConflictError(
                "", -1, f"stream lock queue {queue} is damaged (delete the -locks file)"
            )
        for _ in range(_TICKET_BYTES):
            if _try_byte(fd, _ticket_byte(queue, nxt)):
                _write(fd, queue, nxt + 1, serving)
                return nxt
            nxt += 1  # its byte is held (a checker's probe): skip the ticket
        raise ConflictError("", -1, "too many writers waiting for one stream")


def _wait_turn(
    fd: int, queue: int, ticket: int, *, stream_id: str, deadline: float, timeout: float
) -> None:
    """Wait until the queue serves *ticket*, moving it past tickets whose owner is gone."""
    seen, since = -1, time.monotonic()
    while True:
        serving = _read(fd, queue)[1]
        if serving == ticket:
            return
        now = time.monotonic()
        if serving is not None:
            if serving > ticket:  # cannot happen while this process holds the ticket's byte
                raise ConflictError(stream_id, -1, "the stream's ticket queue moved past us")
            if serving != seen:
                seen, since = serving, now
            elif now - since >= _STALL_CHECK_S:
                _skip_abandoned(fd, queue, serving)
                since = now
        if now >= deadline:
            raise _timed_out(stream_id, timeout)
        _poll_pause(ticket - seen if seen >= 0 else 1, left=deadline - now)


def _poll_pause(ahead: int, *, left: float) -> None:
    """The pause of a waiter *ahead* tickets from its turn before it reads the queue again:
    ``_POLL_NEXT_S`` for the next in line, else ``_POLL_PER_TICKET_S`` per ticket ahead; at
    most ``_POLL_MAX_S`` and never past its deadline (*left* seconds away)."""
    # imported on use: the ledger package imports this module at its top (a cycle otherwise)
    from ctxledger.adapters.ledger.retry import pause

    first = _POLL_NEXT_S if ahead <= 1 else _POLL_PER_TICKET_S * ahead
    pause(0, first=first, cap=min(_POLL_MAX_S, left))


def _skip_abandoned(fd: int, queue: int, serving: int) -> None:
    """Move the queue past *serving* if its byte is free: its owner died or gave up."""
    import fcntl

    with _guarded(fd, queue):
        nxt, current = _read(fd, queue)
        if current != serving or current >= nxt:
            return
        byte = _ticket_byte(queue, current)
        if not _try_byte(fd, byte):
            return  # its owner is alive (waiting for its turn or holding the stream)
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, byte)
        _write(fd, queue, nxt, current + 1)


def _leave(fd: int, queue: int, ticket: int) -> None:
    """Pass the stream on (when *ticket* is served) and drop the ticket's byte."""
    import fcntl

    with _guarded(fd, queue):
        nxt, serving = _read(fd, queue)
        if serving == ticket:
            _write(fd, queue, nxt, ticket + 1)
    fcntl.lockf(fd, fcntl.LOCK_UN, 1, _ticket_byte(queue, ticket))


def _advisory_lock(conn: Any, key: int, *, stream_id: str, deadline: float, timeout: float) -> None:
    """Take the advisory lock *key*: at once when it is free, else queued in the server until
    *deadline* (the server hands a released lock to its first waiter: first come, first
    served, no polling)."""
    import psycopg

    row = conn.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone()
    if row and row[0]:
        return
    remaining_ms = int((deadline - time.monotonic()) * 1000)
    if remaining_ms <= 0:
        raise _timed_out(stream_id, timeout)
    conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{remaining_ms}ms",))
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    except psycopg.errors.LockNotAvailable as exc:
        raise _timed_out(stream_id, timeout) from exc


class PgStreamLocks(StreamLocks):
    """Across machines: PostgreSQL advisory locks, on one connection per thread kept open
    (autocommit; session-level locks, released explicitly or when the session ends)."""

    def __init__(self, connect: Callable[[], Any], namespace: str = "") -> None:
        """*namespace*: the ledger's schema — advisory locks are per database, so two ledgers
        of one database (``?schema=``) lock streams of the same name apart."""
        super().__init__()
        self._connect = connect
        self._namespace = f"{namespace}\x00" if namespace else ""
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

        from ctxledger.adapters.ledger.retry import OUTAGE_PAUSE_S, pause  # (on use: a cycle)

        key = _key(self._namespace + stream_id)
        gone_at: float | None = None
        attempt = 0
        while True:
            conn: Any = None
            try:
                conn = self._conn()
                _advisory_lock(conn, key, stream_id=stream_id, deadline=deadline, timeout=timeout)
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
                pause(attempt, first=OUTAGE_PAUSE_S, cap=OUTAGE_PAUSE_S)
                attempt += 1
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
