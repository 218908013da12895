"""The ledger over a store (``Backend``): append with an expected version, read, follow, the
write turn, persisted read models with their position, and the quarantine's damaged streams.

eventsourcing provides the recorders (tables, notification ids, LISTEN/NOTIFY); this class
closes its known gaps: a msgspec mapper (topic = allow-listed ``Name.vN``, payload = msgspec
JSON), allow-list decoding (``decoding``), an expected-version check per stream that raises
the typed :class:`~ctxledger.domain.errors.ConflictError`, a chain link in every payload
(``integrity``), polling follow on SQLite, and a table of persisted read models with their
tracked position in the same database.
"""

from __future__ import annotations

import contextlib
import operator
import secrets
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from eventsourcing.persistence import IntegrityError, StoredEvent

from ctxledger.adapters.ledger.backend import PROJECTIONS_TABLE, Backend
from ctxledger.adapters.ledger.decoding import EventStream, decode_row
from ctxledger.adapters.ledger.head import HeadRecord, Loss
from ctxledger.adapters.ledger.integrity import open_snapshot, seal_snapshot, stored_bytes
from ctxledger.adapters.ledger.locks import DEFAULT_TIMEOUT_S, UNAVAILABLE_AFTER_S, StreamLocks
from ctxledger.adapters.ledger.quarantine import (
    Quarantined,
    damaged_streams,
    quarantined_from_rows,
)
from ctxledger.adapters.ledger.retry import (
    OUTAGE_PAUSE_S,
    call_once,
    pause,
    retry_unavailable,
)
from ctxledger.adapters.security.content_seal import Keyring
from ctxledger.adapters.security.key_table import KeyTable
from ctxledger.domain.chain import chain_start, link, with_prev
from ctxledger.domain.codec import encode_read_back
from ctxledger.domain.errors import (
    ConflictError,
    CtxLedgerError,
    DamagedStreamError,
    LedgerUnavailableError,
    StoreURLError,
)
from ctxledger.domain.events import Event

__all__ = ["PAGE", "WRITE_TURN_TIMEOUT_S", "Ledger", "Recorded", "stream_id_for"]

PAGE = 1000
"""Rows read per query."""
_WRITE_QUEUE = "\x00 write transactions"
"""The lock queue every SQLite write transaction takes its turn in (not a stream id: those are
event stream names)."""
WRITE_TURN_TIMEOUT_S = DEFAULT_TIMEOUT_S
"""How long a SQLite write transaction waits for its turn in the file's write queue (the same
30 s a writer waits for its stream's turn) before ``LedgerUnavailableError``: a writer that
holds the file and does not go on (stopped, hung) keeps every other writer out, and waiting
longer, or retrying, would not help."""
_HEADS_KEPT = 1024
_UNREAD: Any = object()


def stream_id_for(session_id: str, agent_id: str) -> str:
    """The stream of one agent's context: deterministic from session and agent."""
    return f"ctx/{session_id}/{agent_id}"


@dataclass(frozen=True, slots=True)
class Recorded:
    """An event as stored: its global position, its stream and version in that stream."""

    position: int
    stream_id: str
    version: int
    event: Event


class Ledger:
    """Append, read and follow events; persist read models with their position."""

    def __init__(self, url: str, backend: Backend, keyring: Keyring | None = None) -> None:
        self.url = url
        self.write_turn_timeout_s = WRITE_TURN_TIMEOUT_S
        """Seconds a write transaction waits for its turn (``WRITE_TURN_TIMEOUT_S``)."""
        self._backend = backend
        self._recorder = backend.recorder
        self._append_lock = threading.Lock()
        self._locks: StreamLocks | None = None
        self._heads: dict[str, Any] = {}
        self._damaged: dict[str, tuple[int, ...]] | None = None
        self._wrote = False
        self.keyring = keyring or Keyring(backend.key_table(), None, encrypted=False)
        """Seals free text on the way in and opens it on the way out (``content_seal``);
        ``open_ledger`` sets the store's own."""

    def backend_key_table(self) -> KeyTable:
        """The store's table of content keys (``open_ledger`` builds the keyring on it)."""
        return self._backend.key_table()

    @contextlib.contextmanager
    def _write_turn(self) -> Iterator[None]:
        """Hold the store's queue of write transactions (where it has one) for the block."""
        with contextlib.ExitStack() as turn:
            if self._backend.queued_writes:
                try:
                    turn.enter_context(
                        self.stream_lock(_WRITE_QUEUE, timeout=self.write_turn_timeout_s)
                    )
                except ConflictError as exc:  # waiting for the turn timed out
                    raise LedgerUnavailableError(
                        f"{self.url}: another writer kept the database for "
                        f"{self.write_turn_timeout_s:g} s (stopped or hung?)"
                    ) from exc
            yield

    def stream_lock(
        self, stream_id: str, *, timeout: float = DEFAULT_TIMEOUT_S
    ) -> contextlib.AbstractContextManager[None]:
        """Hold *stream_id* against other writers (threads, processes, machines) for a
        read–decide–append section; re-entrant; ConflictError after *timeout* seconds."""
        if self._locks is None:
            self._locks = self._backend.stream_locks()
        return self._locks.hold(stream_id, timeout)

    # --- writing ------------------------------------------------------------------------------

    def stream_version(self, stream_id: str) -> int:
        """The version of the last event in *stream_id* (0 when empty). The head row is kept
        for the ``append`` that usually follows (read–decide–append), so it need not be read
        twice; a stale one is harmless: that append then hits the (stream, version) key."""
        rows = self._call(self._recorder.select_events, stream_id, desc=True, limit=1)
        if len(self._heads) > _HEADS_KEPT:
            self._heads.clear()
        self._heads[stream_id] = rows[0] if rows else None
        return rows[0].originator_version if rows else 0

    def append(
        self,
        stream_id: str,
        events: Sequence[Event],
        *,
        expected_version: int,
        read_back: list[Recorded] | None = None,
    ) -> list[Recorded]:
        """Append *events* to *stream_id* if its version is *expected_version*; atomic.

        Returns the events as recorded (global position, stream version). A stream that
        moved raises ConflictError and nothing is written. Given a *read_back* list, it is
        filled with the events as decoded from the bytes stored — what any reader of those
        rows gets — when that is known here: the content is not encrypted and the positions
        are known (else it stays empty).
        """
        if not events:
            return []
        if not stream_id or len(stream_id) > 512:
            raise StoreURLError(f"invalid stream id {stream_id[:60]!r}")
        damaged = self.damaged_streams()
        if damaged and stream_id in damaged:
            raise DamagedStreamError(stream_id, damaged[stream_id])
        with self._append_lock:
            head = self._head_row(stream_id, expected_version)
            current = head[0].originator_version if head else 0
            if current != expected_version:
                raise ConflictError(stream_id, expected_version, f"stream is at {current}")
            stored, back, last_link, plain = self._stored_events(stream_id, events, head)
            positions = self._insert(stream_id, expected_version, stored, last_link)
        if not positions or len(positions) != len(stored):
            positions = [0] * len(stored)
        elif read_back is not None and plain:
            read_back += [
                Recorded(int(pos), stream_id, s.originator_version, e)
                for pos, s, e in zip(positions, stored, back, strict=True)
            ]
        return [
            Recorded(int(pos), stream_id, s.originator_version, ev)
            for pos, s, ev in zip(positions, stored, events, strict=True)
        ]

    def _head_row(self, stream_id: str, expected_version: int) -> Sequence[Any]:
        """The stream's last stored row (empty: none), the one ``stream_version`` kept when it
        is at *expected_version*. Versions only grow, so "current == expected" now plus the
        primary key on (stream, version) at insert time leaves no gap and no silent
        interleaving."""
        kept = self._heads.pop(stream_id, _UNREAD)
        if kept is not _UNREAD and (kept.originator_version if kept else 0) == expected_version:
            return [kept] if kept else []
        rows: Sequence[Any] = self._call(
            self._recorder.select_events, stream_id, desc=True, limit=1
        )
        return rows

    def _stored_events(
        self, stream_id: str, events: Sequence[Event], head: Sequence[Any]
    ) -> tuple[list[StoredEvent], list[Event], str, bool]:
        """*events* as the rows to store after *head*: sealed (when content is encrypted),
        encoded and read back (or nothing is stored), each payload linking the one before;
        also the events read back, the last row's link and whether the events are stored
        as given (not sealed)."""
        key = self.keyring.chain_key
        current = head[0].originator_version if head else 0
        prev = (
            link(str(head[0].topic), current, stored_bytes(head[0].state), key)
            if head
            else chain_start(stream_id, key)
        )
        stored: list[StoredEvent] = []
        back: list[Event] = []
        op = secrets.token_hex(8)  # this append's idempotency key, in its first payload
        plain = not self.keyring.encrypted
        sealed = self.keyring.seal_events(events)  # as is, unless content is encrypted
        plain = plain and all(map(operator.is_, sealed, events))
        for version, event in enumerate(sealed, start=current + 1):
            topic, payload, decoded = encode_read_back(event)
            back.append(decoded)
            payload = with_prev(payload, prev, op if not stored else "")
            stored.append(StoredEvent(stream_id, version, topic, payload))
            prev = link(topic, version, payload, key)
        return stored, back, prev, plain

    def _landed(self, stream_id: str, expected_version: int, stored: list[StoredEvent]) -> bool:
        """Whether *stored* is already in the stream, byte for byte (its first payload holds
        this append's random ``op`` key). A driver that lost the acknowledgement of a COMMIT
        retries the insert, which then hits the (stream, version) key: that is our own
        append, not another writer's, and must not be decided and written again."""
        rows = self._call_once(
            self._recorder.select_events,
            stream_id,
            gt=expected_version,
            lte=expected_version + len(stored),
        )
        return len(rows) == len(stored) and all(
            bytes(r.state) == s.state and r.topic == s.topic
            for r, s in zip(rows, stored, strict=True)
        )

    def _insert(
        self, stream_id: str, expected_version: int, stored: list[StoredEvent], last_link: str
    ) -> Sequence[int]:
        """Insert *stored* once: a connection lost around the COMMIT leaves its outcome
        unknown, so the ledger looks (once the server answers) whether its own rows landed —
        the ``op`` key makes them unique — and reports them stored instead of failing a call
        that succeeded; if they did not land, it inserts them again. Positions are unknown
        (empty) when the rows were found rather than inserted."""
        deadline = time.monotonic() + UNAVAILABLE_AFTER_S
        attempt = 0
        while True:
            try:
                return self._insert_once(stored, last_link)
            except IntegrityError as exc:
                if not self._landed(stream_id, expected_version, stored):
                    raise ConflictError(stream_id, expected_version, "concurrent append") from exc
                return []  # our own commit, acknowledged late: not a conflict
            except LedgerUnavailableError:
                if not self._backend.outages or time.monotonic() >= deadline:
                    raise
            pause(attempt, first=OUTAGE_PAUSE_S, cap=OUTAGE_PAUSE_S)
            attempt += 1
            try:
                if self._landed(stream_id, expected_version, stored):
                    return []
            except LedgerUnavailableError:
                if time.monotonic() >= deadline:
                    raise

    def _insert_once(self, stored: list[StoredEvent], last_link: str) -> list[int]:
        """One try of an insert in the write turn; a commit is recorded with the backend."""
        with self._write_turn():
            positions = list(self._call_once(self._recorder.insert_events, stored) or [])
            if positions:
                self._wrote = True
                # (a writer without a keyed chain's key knows no link to record)
                known = last_link if self.links_checkable else ""
                self._backend.committed(int(positions[-1]), known)
            return positions

    # --- reading ------------------------------------------------------------------------------

    def read_stream(self, stream_id: str, *, after_version: int = 0) -> list[Recorded]:
        """Every event of one stream after *after_version*, in order (positions unknown: 0)."""
        rows = self._call(self._recorder.select_events, stream_id, gt=after_version or None)
        opened = self.keyring.open_event
        return [
            Recorded(0, stream_id, r.originator_version, opened(decode_row(None, r.topic, r.state)))
            for r in rows
        ]

    def max_position(self) -> int:
        """Position of the newest event in the whole log (0 when empty)."""
        return int(self._call(self._recorder.max_notification_id) or 0)

    def read_all(self, *, after: int = 0, limit: int | None = None) -> Iterator[Recorded]:
        """The whole log after position *after*, in order, paged; decoding is allow-listed."""
        remaining = limit
        position = after
        while remaining is None or remaining > 0:
            page = PAGE if remaining is None else min(PAGE, remaining)
            rows = self._call(self._backend.select_rows, position, None, page, streams=True)
            opened = self.keyring.open_event
            for pos, stream_id, version, topic, state in rows:
                event = opened(decode_row(pos, topic, state))
                yield Recorded(pos, str(stream_id), version, event)
                position = pos
            if remaining is not None:
                remaining -= len(rows)
            if len(rows) < page:
                return

    def stored_rows(self, *, page: int = PAGE) -> Iterator[tuple[int, str, int, str, bytes]]:
        """Every stored row as it is in the table, oldest first, undecoded: ``(position,
        stream id, version, topic, payload)`` — what the tamper check digests."""
        after = 0
        while True:
            rows = self._call(self._backend.select_rows, after, None, page, streams=True)
            for position, stream_id, version, topic, state in rows:
                yield position, str(stream_id), version, str(topic or ""), stored_bytes(state)
            if len(rows) < page:
                return
            after = rows[-1][0]

    def page_rows(self, after: int, upto: int | None, limit: int) -> Sequence[Sequence[Any]]:
        """Up to *limit* stored rows ``(position, topic, state)`` after position *after* (up
        to *upto*), oldest first: the pages an ``EventStream`` decodes."""
        rows: Sequence[Sequence[Any]] = self._call(
            self._backend.select_rows, after, upto, limit, streams=False
        )
        return rows

    def events(self, *, after: int = 0, upto: int | None = None, page: int = PAGE) -> EventStream:
        """The log after position *after* (up to *upto*) as one stream of events, decoded a
        few dozen rows at a time as the reader comes to them (``DECODE_RUN``): the replay
        path of ``replay_states`` (``EventStream.runs``: the projection runner's). No page of
        decoded events is ever alive at once (a replay folds each event while its bytes are
        still in the cache). A row that does not decode raises its DecodeError when reached,
        after the events before it were taken."""
        return EventStream(self, after, upto, page)

    def follow(
        self,
        *,
        after: int = 0,
        stop: threading.Event | None = None,
        poll_interval: float = 0.2,
        idle_timeout: float | None = None,
    ) -> Iterator[Recorded]:
        """Yield every event after *after*, then wait for new ones (LISTEN/NOTIFY on
        PostgreSQL, polling elsewhere) until *stop* is set or *idle_timeout* passes."""
        position = after
        idle_since = time.monotonic()
        while stop is None or not stop.is_set():
            got = False
            for rec in self.read_all(after=position):
                got = True
                position = rec.position
                yield rec
            if got:
                idle_since = time.monotonic()
            elif idle_timeout is not None and time.monotonic() - idle_since >= idle_timeout:
                return
            self._backend.wait_for_new(poll_interval)

    # --- the recorded head and the chain ------------------------------------------------------

    def recorded_head(self, names: Sequence[str]) -> tuple[int, str] | None:
        """The furthest position this store recorded having held — the persisted read models
        *names* and, for SQLite, the head file beside the database (written after every save,
        so a deleted WAL or a truncated file cannot take it along) — and where it was read;
        None when nothing was recorded. A log that ends before it lost events."""
        found: list[tuple[int, str]] = []
        for name in names:
            row = self._call(self._backend.load_projection, name)
            if row is not None:
                found.append((row[0], f"the persisted read model {name!r}"))
        recorded = self._backend.head_record()
        if recorded is not None:
            found.append((recorded.position, recorded.where))
        return max(found) if found else None

    def head_record(self) -> HeadRecord | None:
        """The store's record of its head kept outside the database (SQLite's head file)."""
        return self._backend.head_record()

    def link_at(self, position: int) -> str | None:
        """The chain link of the stored event at *position* (None: no event there)."""
        rows = self._call(self._backend.select_rows, position - 1, position, 1, streams=True)
        if not rows or int(rows[0][0]) != position:
            return None
        _, _, version, topic, state = rows[0]
        return link(str(topic or ""), int(version or 0), stored_bytes(state), self.chain_key)

    @property
    def chain_key(self) -> bytes | None:
        """The key of a keyed chain (None: plain links, or keyed and no master key here)."""
        return self.keyring.chain_key

    @property
    def links_checkable(self) -> bool:
        """Whether this reader can recompute the links (not: keyed, without the master key)."""
        return not self.keyring.chain_keyed or self.keyring.chain_key is not None

    def head_loss(self) -> Loss | None:
        """Loss the head record shows: the log ends before the position it recorded, or the
        event there is not the one recorded (None: nothing missing, or no head record)."""
        recorded = self._backend.head_record()
        if recorded is None:
            return None
        end = self.max_position()
        if end < recorded.position:
            kind = "emptied" if end == 0 else "older_copy" if end < recorded.in_file else "lost"
            return Loss(end, recorded.position, recorded.where, kind, recorded.in_file)
        checkable = recorded.link and self.links_checkable
        found = self.link_at(recorded.position) if checkable else recorded.link
        if found != recorded.link:
            return Loss(end, recorded.position, recorded.where, "replaced", recorded.in_file)
        return None

    def accept_loss(self, loss: Loss, *, at: str) -> None:
        """Record that an operator accepted *loss* (``doctor --accept-loss``): the head record
        restarts at the log's end, keeping a line saying what was accepted, and persisted read
        models past the end are dropped (rebuilt from the log)."""
        with self._write_turn():
            self._call(self._backend.drop_projections_after, loss.end)
            end = self.max_position()
            line = f"{at}: accepted {loss.line}"
            self._backend.accept_head(end, self.link_at(end) or "" if end else "", line)

    # --- persisted read models ----------------------------------------------------------------

    def load_projection(self, name: str) -> tuple[int, bytes] | None:
        """``(position, state bytes)`` of a persisted read model, or None (also when it is
        sealed and cannot be opened here: it is then rebuilt from the log)."""
        row: tuple[int, bytes] | None = self._call(self._backend.load_projection, name)
        if row is None:
            return None
        blob = self._unmac(name, row[0], row[1])
        state = None if blob is None else self.keyring.open_blob(blob)
        return None if state is None else (row[0], state)

    def snapshot_forged(self, names: Sequence[str]) -> list[str]:
        """The persisted read models among *names* whose MAC does not match their content and
        position (keyed chains only; ``load_projection`` refuses them: rebuilt by replay)."""
        if self.keyring.chain_key is None:
            return []
        forged = []
        for name in names:
            row = self._call(self._backend.load_projection, name)
            if row is not None and self._unmac(name, row[0], row[1]) is None:
                forged.append(name)
        return forged

    def _mac(self, name: str, position: int, blob: bytes) -> bytes:
        return seal_snapshot(self.keyring.chain_key, name, position, blob)

    def _unmac(self, name: str, position: int, stored: bytes) -> bytes | None:
        """A stored snapshot's blob, its MAC checked on a keyed chain (None: refused)."""
        keyring = self.keyring
        return open_snapshot(keyring.chain_keyed, keyring.chain_key, name, position, stored)

    def save_projections(self, states: dict[str, bytes], position: int) -> None:
        """Persist read models and the position they reflect, in one transaction (sealed
        when the store encrypts content: they hold the text of items)."""
        if not self.links_checkable:
            return  # keyed, no key here (an erase): a later writer with the key saves them
        seal, mac = self.keyring.seal_blob, self._mac
        sealed = {name: mac(name, position, seal(state)) for name, state in states.items()}
        with self._write_turn():
            self._call(self._backend.save_projections, sealed, position)

    def erase_content(
        self, agent_id: str, item_ids: Sequence[str] | None, *, reason: str, at: str
    ) -> list[str]:
        """Crypto-shred: destroy the content keys of *agent_id* (all, or *item_ids*) and the
        snapshot keys, delete the persisted read models and wipe the deleted rows from the
        database files; returns the item ids whose key was destroyed. The caller records the
        ``ContentErased`` event and rebuilds its read models from the log."""
        gone = self.keyring.erase(agent_id, item_ids, reason=reason, at=at)
        self._call(self.keyring.table.wipe, PROJECTIONS_TABLE)
        return gone

    # --- quarantine ---------------------------------------------------------------------------

    def raw_rows(self, *, after: int = 0, limit: int = PAGE) -> Sequence[Sequence[Any]]:
        """Up to *limit* stored rows after position *after* exactly as the driver returns them
        (``(position, stream id, version, topic, payload)``, any of them possibly NULL or of
        the wrong type): what ``ctxledger doctor`` checks one by one."""
        rows: Sequence[Sequence[Any]] = self._call(
            self._backend.select_rows, after, None, limit, streams=True
        )
        return rows

    def quarantined(self) -> list[Quarantined]:
        """Every row in the quarantine table, in position order (none without the table)."""
        return quarantined_from_rows(self._call(self._backend.quarantined_rows))

    def damaged_streams(self) -> dict[str, tuple[int, ...]]:
        """Stream id → quarantined positions: the streams that refuse appends. Read once per
        Ledger (one query) and read again after ``refresh_quarantine``."""
        if self._damaged is None:
            self._damaged = damaged_streams(self.quarantined())
        return self._damaged

    def refresh_quarantine(self) -> None:
        """Forget the cached damaged streams (the next append reads the table again)."""
        self._damaged = None

    def quarantine(self, entries: Sequence[tuple[int, str, str]], at: str) -> int:
        """Move the rows at the positions of ``(position, kind, reason)`` *entries* into the
        quarantine table in one transaction (kept whole, never deleted); persisted read models
        saved at or past the first of them are dropped, so they are rebuilt from the log."""
        if not entries:
            return 0
        try:
            with self._write_turn():
                moved = int(self._call_once(self._backend.quarantine, entries, at))
        finally:
            self.refresh_quarantine()
        return moved

    def close(self) -> None:
        if self._wrote:
            self._wrote = False
            with contextlib.suppress(CtxLedgerError, OSError, sqlite3.Error), self._write_turn():
                self._backend.closing()
        if self._locks is not None:
            self._locks.close()
        self.keyring.table.close()
        self._backend.close()

    def __enter__(self) -> Ledger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- helpers ------------------------------------------------------------------------------

    def _call_once(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return call_once(self.url, fn, *args, **kwargs)

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """*fn* (a read, or a write that is safe to repeat), tried again while a server that
        restarts comes back, for at most ``UNAVAILABLE_AFTER_S``."""
        if not self._backend.outages:
            return self._call_once(fn, *args, **kwargs)
        return retry_unavailable(
            lambda: self._call_once(fn, *args, **kwargs), within=UNAVAILABLE_AFTER_S
        )
