"""The append-only ledger over eventsourcing recorders: memory://, sqlite:///path, postgresql://.

eventsourcing provides the recorders (tables, notification ids, LISTEN/NOTIFY); this module
closes its known gaps: a msgspec mapper (topic = allow-listed ``Name.vN``, payload = msgspec
JSON), allow-list decoding, an expected-version check per stream that raises the typed
:class:`~ctxledger.domain.errors.ConflictError`, polling follow on SQLite, and a table of
persisted read models with their tracked position in the same database.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import operator
import os
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

import msgspec
from eventsourcing.persistence import (
    ApplicationRecorder,
    IntegrityError,
    OperationalError,
    PersistenceError,
    StoredEvent,
)
from eventsourcing.popo import POPOApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

from ctxledger.adapters.content_seal import Keyring, MasterKeyError, master_key_from_env
from ctxledger.adapters.key_table import KeyTable, MemoryKeyTable, PgKeyTable, SQLiteKeyTable
from ctxledger.adapters.store_files import (
    LEDGER_TABLE,
    check_ledger_file,
    read_only_uri,
    store_kind,
    wal_mode,
)
from ctxledger.adapters.stream_locks import (
    DEFAULT_TIMEOUT_S,
    UNAVAILABLE_AFTER_S,
    FileStreamLocks,
    LocalStreamLocks,
    PgStreamLocks,
    StreamLocks,
)
from ctxledger.domain.chain import chain_start, link, with_prev
from ctxledger.domain.codec import decode_event, encode_read_back
from ctxledger.domain.errors import (
    ConflictError,
    CtxLedgerError,
    DamagedStreamError,
    LedgerUnavailableError,
    StoredRowError,
    StoreKindError,
    StoreURLError,
)
from ctxledger.domain.events import EVENT_TYPES, Event

__all__ = [
    "EVENTS_TABLE",
    "EventStream",
    "FROM_ENV",
    "HeadRecord",
    "Ledger",
    "LedgerUnavailableError",
    "Loss",
    "LossError",
    "accept_emptied",
    "UNAVAILABLE_AFTER_S",
    "QUARANTINE_TABLE",
    "Quarantined",
    "Recorded",
    "decode_row",
    "open_ledger",
    "stream_id_for",
]

EVENTS_TABLE = LEDGER_TABLE
PROJECTIONS_TABLE = "ctxledger_projections"
QUARANTINE_TABLE = "ctxledger_quarantine"
"""Damaged rows moved aside by ``ctxledger doctor --quarantine`` (same database; kept whole,
with their original position, the kind of damage, the reason and when)."""
_PAGE = 1000
_SNAPSHOT_MAC = b"\x00mac1:"
"""A read-model snapshot of a keyed chain: this prefix, its 32-byte HMAC, then the blob."""
_log = logging.getLogger("ctxledger.ledger")


def _snapshot_mac(key: bytes, name: str, position: int, blob: bytes) -> bytes:
    """The MAC binding a snapshot to its read model's name and its log position."""
    h = hmac.new(key, f"ctxledger snapshot\n{name}\n{position}\n".encode(), hashlib.sha256)
    h.update(blob)
    return h.digest()


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


@dataclass(frozen=True, slots=True)
class Quarantined:
    """A row moved into the quarantine table: where it was in the log, what it held, why."""

    position: int
    stream_id: str
    version: int
    topic: str | None
    payload: bytes | str | None
    kind: str
    reason: str
    at: str
    """When it was quarantined (ISO 8601, UTC)."""


_LOSS_CAUSE = {
    "emptied": "the file is empty or has no events table: deleted, emptied, its WAL "
    "deleted before anything reached the file, or replaced",
    "older_copy": "the file holds less than it held when a writer last closed it, at "
    "position {in_file}: an older copy restored over it, or rows deleted at its end",
    "lost": "a deleted WAL, a truncated file, rows deleted at its end or an older copy "
    "restored over it",
    "models": "read models saved past the end of the log: a deleted WAL, a truncated or "
    "replaced file, rows deleted at the end, or models of another log",
}


@dataclass(frozen=True, slots=True)
class Loss:
    """Events the store recorded holding that its log no longer has: the log ends at *end*
    but *where* recorded position *recorded*. *kind*: ``emptied`` (the log is empty),
    ``older_copy`` (it ends before what the file itself held at a writer's last close),
    ``lost`` (a lost WAL, a cut file, or a copy older than that is not known), ``replaced``
    (long enough, but the event at the recorded position is another one), ``models`` (only
    persisted read models claim the later position)."""

    end: int
    recorded: int
    where: str
    kind: str
    in_file: int = 0

    @property
    def line(self) -> str:
        if self.kind == "replaced":
            return (
                f"the event at position {self.recorded} is not the one {self.where} recorded: "
                "rewritten since, or the file replaced by another ledger or another copy"
            )
        cause = _LOSS_CAUSE[self.kind].format(in_file=self.in_file)
        return (
            f"the log ends at position {self.end} but {self.where} recorded position "
            f"{self.recorded}: {self.recorded - self.end} events lost ({cause})"
        )


class LossError(CtxLedgerError):
    """A writer opened a ledger whose log lost events it was known to hold: writing on would
    bury the evidence (``ctxledger doctor --accept-loss`` records the loss and lets writers
    go on)."""


class _Backend(Protocol):
    recorder: ApplicationRecorder
    outages: bool
    """Whether the store can go away and come back (a server restart): a call that meets a
    lost connection is then tried again until ``UNAVAILABLE_AFTER_S``."""
    queued_writes: bool
    """Whether write transactions take turns in the store's lock queue first (SQLite: its
    busy handler polls with pauses growing to 100 ms, so under a steady stream of writers a
    waiting one can starve past the busy timeout — a read-model save did, with 32 processes
    on one agent)."""

    def select_rows(
        self, after: int, upto: int | None, limit: int, *, streams: bool
    ) -> Sequence[Sequence[Any]]:
        """Stored rows after position *after* (up to *upto*), oldest first, at most *limit*:
        ``(position, topic, state)``, or with *streams* ``(position, stream id, version,
        topic, state)``."""
        ...

    def load_projection(self, name: str) -> tuple[int, bytes] | None: ...

    def stream_locks(self) -> StreamLocks:
        """The per-stream writer locks of this store (see ``adapters/stream_locks.py``)."""
        ...

    def save_projections(self, states: dict[str, bytes], position: int) -> None: ...

    def head_record(self) -> HeadRecord | None:
        """The record of the store's head kept outside the database (SQLite's head file);
        None where the store keeps none."""
        ...

    def committed(self, position: int, link: str) -> None:
        """A write transaction ending at *position* (the event there links *link*) committed;
        called inside the write turn, so records of it are made in commit order."""
        ...

    def closing(self) -> None:
        """A writer is closing the store (inside its write turn): settle what it can."""
        ...

    def accept_head(self, position: int, link: str, line: str) -> None:
        """Restart the head record at *position* (an accepted loss, said by *line*)."""
        ...

    def drop_projections_after(self, position: int) -> None:
        """Delete persisted read models saved past *position*."""
        ...

    def quarantined_rows(self) -> list[tuple[Any, ...]]:
        """The quarantine table's rows in position order (none when it does not exist):
        ``(position, stream id, version, topic, payload, kind, reason, at)``."""
        ...

    def quarantine(self, entries: Sequence[tuple[int, str, str]], at: str) -> int:
        """Move the rows at the positions of ``(position, kind, reason)`` *entries* from the
        events table into the quarantine table, in one transaction; drop persisted read
        models saved at or past the first of them. Returns the number of rows moved."""
        ...

    def wait_for_new(self, timeout: float) -> None: ...

    def key_table(self) -> KeyTable:
        """The table of content keys (``adapters.key_table``) in the same store."""
        ...

    def close(self) -> None: ...


class Ledger:
    """Append, read and follow events; persist read models with their position."""

    def __init__(self, url: str, backend: _Backend, keyring: Keyring | None = None) -> None:
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
            # Versions only grow, so "current == expected" now plus the primary key on
            # (stream, version) at insert time leaves no gap and no silent interleaving.
            kept = self._heads.pop(stream_id, _UNREAD)
            if kept is not _UNREAD and (kept.originator_version if kept else 0) == expected_version:
                head = [kept] if kept else []
            else:
                head = self._call(self._recorder.select_events, stream_id, desc=True, limit=1)
            current = head[0].originator_version if head else 0
            if current != expected_version:
                raise ConflictError(stream_id, expected_version, f"stream is at {current}")
            key = self.keyring.chain_key
            prev = (
                link(str(head[0].topic), current, _stored_bytes(head[0].state), key)
                if head
                else chain_start(stream_id, key)
            )
            stored: list[StoredEvent] = []
            back: list[Event] = []
            op = secrets.token_hex(8)  # this append's idempotency key, in its first payload
            plain = not self.keyring.encrypted
            sealed = self.keyring.seal_events(events)  # as is, unless content is encrypted
            plain = plain and all(map(operator.is_, sealed, events))
            for version, event in enumerate(sealed, start=expected_version + 1):
                # reads back, or nothing is stored
                topic, payload, decoded = encode_read_back(event)
                back.append(decoded)
                payload = with_prev(payload, prev, op if not stored else "")
                stored.append(StoredEvent(stream_id, version, topic, payload))
                prev = link(topic, version, payload, key)
            positions = self._insert(stream_id, expected_version, stored, prev)
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

    # --- reading ------------------------------------------------------------------------------

    def read_stream(self, stream_id: str, *, after_version: int = 0) -> list[Recorded]:
        """Every event of one stream after *after_version*, in order (positions unknown: 0)."""
        rows = self._call(self._recorder.select_events, stream_id, gt=after_version or None)
        opened = self.keyring.open_event
        return [
            Recorded(
                0, stream_id, r.originator_version, opened(_decode_row(None, r.topic, r.state))
            )
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
            page = _PAGE if remaining is None else min(_PAGE, remaining)
            rows = self._call(self._backend.select_rows, position, None, page, streams=True)
            opened = self.keyring.open_event
            for pos, stream_id, version, topic, state in rows:
                event = opened(_decode_row(pos, topic, state))
                yield Recorded(pos, str(stream_id), version, event)
                position = pos
            if remaining is not None:
                remaining -= len(rows)
            if len(rows) < page:
                return

    def stored_rows(self, *, page: int = _PAGE) -> Iterator[tuple[int, str, int, str, bytes]]:
        """Every stored row as it is in the table, oldest first, undecoded: ``(position,
        stream id, version, topic, payload)`` — what the tamper check digests."""
        after = 0
        while True:
            rows = self._call(self._backend.select_rows, after, None, page, streams=True)
            for position, stream_id, version, topic, state in rows:
                yield position, str(stream_id), version, str(topic or ""), _stored_bytes(state)
            if len(rows) < page:
                return
            after = rows[-1][0]

    def events(self, *, after: int = 0, upto: int | None = None, page: int = _PAGE) -> EventStream:
        """The log after position *after* (up to *upto*) as one stream of events, decoded a
        few dozen rows at a time as the reader comes to them (``_DECODE_RUN``): the replay
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

    # --- persisted read models ----------------------------------------------------------------

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
        return link(str(topic or ""), int(version or 0), _stored_bytes(state), self.chain_key)

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
        key = self.keyring.chain_key
        if key is None:
            return blob
        return _SNAPSHOT_MAC + _snapshot_mac(key, name, position, blob) + blob

    def _unmac(self, name: str, position: int, stored: bytes) -> bytes | None:
        """A stored snapshot's blob, its MAC checked on a keyed chain (None: refused)."""
        if not self.keyring.chain_keyed:
            return stored
        key = self.keyring.chain_key
        if key is None or not stored.startswith(_SNAPSHOT_MAC):
            return None
        mac, blob = (
            stored[len(_SNAPSHOT_MAC) : len(_SNAPSHOT_MAC) + 32],
            stored[len(_SNAPSHOT_MAC) + 32 :],
        )
        if not hmac.compare_digest(mac, _snapshot_mac(key, name, position, blob)):
            _log.warning(
                "the saved read model %r does not match its MAC: rebuilt from the log", name
            )
            return None
        return blob

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

    # --- quarantine -------------------------------------------------------------------------

    def raw_rows(self, *, after: int = 0, limit: int = _PAGE) -> Sequence[Sequence[Any]]:
        """Up to *limit* stored rows after position *after* exactly as the driver returns them
        (``(position, stream id, version, topic, payload)``, any of them possibly NULL or of
        the wrong type): what ``ctxledger doctor`` checks one by one."""
        rows: Sequence[Sequence[Any]] = self._call(
            self._backend.select_rows, after, None, limit, streams=True
        )
        return rows

    def quarantined(self) -> list[Quarantined]:
        """Every row in the quarantine table, in position order (none without the table)."""
        rows = self._call(self._backend.quarantined_rows)
        return [
            Quarantined(int(p), str(sid), int(v or 0), t, s, str(k), str(r), str(at))
            for p, sid, v, t, s, k, r, at in rows
        ]

    def damaged_streams(self) -> dict[str, tuple[int, ...]]:
        """Stream id → quarantined positions: the streams that refuse appends. Read once per
        Ledger (one query) and read again after ``refresh_quarantine``."""
        if self._damaged is None:
            found: dict[str, list[int]] = {}
            for q in self.quarantined():
                found.setdefault(q.stream_id, []).append(q.position)
            self._damaged = {sid: tuple(ps) for sid, ps in found.items()}
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
        try:
            return fn(*args, **kwargs)
        except (CtxLedgerError, IntegrityError):
            raise
        except (PersistenceError, OSError) as exc:
            raise LedgerUnavailableError(f"{self.url}: {exc}") from exc

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """*fn* (a read, or a write that is safe to repeat), tried again while a server that
        restarts comes back, for at most ``UNAVAILABLE_AFTER_S``."""
        if not self._backend.outages:
            return self._call_once(fn, *args, **kwargs)
        deadline = time.monotonic() + UNAVAILABLE_AFTER_S
        while True:
            try:
                return self._call_once(fn, *args, **kwargs)
            except LedgerUnavailableError:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.1)

    def _insert(
        self, stream_id: str, expected_version: int, stored: list[StoredEvent], last_link: str
    ) -> Sequence[int]:
        """Insert *stored* once: a connection lost around the COMMIT leaves its outcome
        unknown, so the ledger looks (once the server answers) whether its own rows landed —
        the ``op`` key makes them unique — and reports them stored instead of failing a call
        that succeeded; if they did not land, it inserts them again. Positions are unknown
        (empty) when the rows were found rather than inserted."""
        deadline = time.monotonic() + UNAVAILABLE_AFTER_S
        while True:
            try:
                with self._write_turn():
                    positions = list(self._call_once(self._recorder.insert_events, stored) or [])
                    if positions:
                        self._wrote = True
                        # (a writer without a keyed chain's key knows no link to record)
                        known = last_link if self.links_checkable else ""
                        self._backend.committed(int(positions[-1]), known)
                    return positions
            except IntegrityError as exc:
                if not self._landed(stream_id, expected_version, stored):
                    raise ConflictError(stream_id, expected_version, "concurrent append") from exc
                return []  # our own commit, acknowledged late: not a conflict
            except LedgerUnavailableError:
                if not self._backend.outages or time.monotonic() >= deadline:
                    raise
            time.sleep(0.1)
            try:
                if self._landed(stream_id, expected_version, stored):
                    return []
            except LedgerUnavailableError:
                if time.monotonic() >= deadline:
                    raise


# --- decoding stored rows ---------------------------------------------------------------------


def _stored_bytes(state: Any) -> bytes:
    """A payload column as bytes for digesting: NULL is empty, TEXT its UTF-8 (both damage
    that decoding reports; the chain check sees a payload that is not a JSON object)."""
    if state is None:
        return b""
    if isinstance(state, str):
        return state.encode("utf-8", "surrogatepass")
    return bytes(state)


_FAST_DECODERS: dict[str, Callable[[bytes], Any]] = {
    f"{name}.v{cls.schema_version}": msgspec.json.Decoder(cls).decode
    for name, cls in EVENT_TYPES.items()
}
"""One msgspec decoder per topic of the current schema (``decode_event`` parses the topic and
looks its decoder up per row)."""
_FAST_MAX_BYTES = 1 << 20
"""Larger payloads take ``decode_event``, which enforces the payload size limit."""


def _decode_row(position: int | None, topic: Any, state: Any) -> Event:
    """One stored row's event. A current-schema topic decodes with its cached decoder; any
    other topic (an old version to upcast, an unknown or future one) and every failure go
    through ``_decode_stored``, which upcasts or raises the typed DecodeError with the position."""
    decode = _FAST_DECODERS.get(topic) if type(topic) is str else None
    if decode is not None and type(state) is bytes and len(state) <= _FAST_MAX_BYTES:
        try:
            event: Event = decode(state)
        except (msgspec.DecodeError, ValueError, TypeError, RecursionError):
            pass
        else:
            return event
    return _decode_stored(position, topic, state)


decode_row = _decode_row
"""The event of one stored row as the driver returned it (``ctxledger doctor`` checks each
row with it): the decoder of every reader, typed DecodeError with the position."""


def _decode_stored(position: int | None, topic: Any, state: Any) -> Event:
    """``decode_event`` for a row as the driver returned it: a NULL or non-text topic and a
    NULL or TEXT payload (SQLite stores TEXT in a BLOB column) are typed StoredRowErrors with
    the position, like every other kind of damage."""
    if topic is None:
        raise StoredRowError("null_topic", "the topic is NULL", position=position)
    if not isinstance(topic, str):
        raise StoredRowError(
            "bad_topic", f"the topic is {type(topic).__name__}, not text", position=position
        )
    if state is None:
        raise StoredRowError("null_payload", f"{topic[:80]} payload is NULL", position=position)
    if isinstance(state, str):
        raise StoredRowError(
            "text_payload",
            f"{topic[:80]} payload is stored as TEXT, not bytes (written outside ctxledger)",
            position=position,
        )
    if not isinstance(state, bytes | bytearray | memoryview):
        raise StoredRowError(
            "bad_payload",
            f"{topic[:80]} payload is {type(state).__name__}, not bytes",
            position=position,
        )
    return decode_event(topic, bytes(state), position=position)


def _decode_events(rows: Sequence[Sequence[Any]]) -> list[Event]:
    """The events of ``(position, topic, state)`` rows: ``_decode_run``, or row by row
    (``_decode_row``) when a row is not on its path (the same events, or the same error)."""
    try:
        return _decode_run(rows)
    except Exception:  # any row off the fast path: decoded one by one below
        return [_decode_row(position, topic, state) for position, topic, state in rows]


def _decode_run(rows: Sequence[Sequence[Any]]) -> list[Event]:
    """The events of rows whose topics are of the current schema, in one comprehension
    (``_decode_row``'s fast path; a payload over ``_FAST_MAX_BYTES`` or not bytes takes
    ``_decode_stored``). Raises on the first row that is off that path — an unknown or old
    topic (KeyError), a payload its decoder refuses — with nothing returned: the caller
    decodes the rows one by one, which upcasts or raises the typed error at that row."""
    fast = _FAST_DECODERS
    limit = _FAST_MAX_BYTES
    return [
        fast[topic](state)
        if type(state) is bytes and len(state) <= limit
        else _decode_stored(position, topic, state)
        for position, topic, state in rows
    ]


_DECODE_RUN = 64
"""Rows an ``EventStream`` decodes together before the reader takes their events: decoding a
few dozen in a row and then folding them keeps each loop's code and data in the CPU's caches
(measured against decoding each row as it is taken: a 100k-event replay ≈ 7 % faster, one of
400k events / 800 agents 0–4 %; against decoding a page of 2,000 rows first, opening an
engine on an unsaved 100k log 9–19 % faster)."""


class EventStream:
    """The events of a stretch of the log, read a page of rows at a time and decoded a run
    of rows at a time (``_DECODE_RUN``; see ``Ledger.events``): iterate it for the events
    one by one, or take ``runs()``. ``count`` and ``last`` are the number of events of the
    runs taken whole and the position of the last of them (*after* before the first run):
    once the stream is exhausted, every event's."""

    __slots__ = ("_ledger", "_page", "_upto", "count", "last")

    def __init__(self, ledger: Ledger, after: int, upto: int | None, page: int) -> None:
        self._ledger = ledger
        self._upto = upto
        self._page = page
        self.count = 0
        self.last = after

    def __iter__(self) -> Iterator[Event]:
        keyring = self._ledger.keyring
        for part in self._parts():
            events: Iterable[Event]
            try:
                events = _decode_run(part)
            except Exception:  # row by row: the events before a bad row first
                events = (_decode_row(pos, topic, state) for pos, topic, state in part)
            if keyring.encrypted:
                events = map(keyring.open_event, events)
            yield from events
            self._taken(part)

    def runs(self) -> Iterator[list[Event]]:
        """The events a run at a time, each run decoded whole: a run holding a row that does
        not decode raises that row's DecodeError and hands out none of its events, so a
        reader folding runs stops at the end of the last complete one (``count`` and
        ``last`` cover the runs handed out)."""
        keyring = self._ledger.keyring
        for part in self._parts():
            events = keyring.open_events(_decode_events(part))
            self._taken(part)
            yield events

    def _parts(self) -> Iterator[Sequence[Sequence[Any]]]:
        """The rows after ``last``, ``(position, topic, state)``, in runs of at most
        ``_DECODE_RUN`` (of at most the page size), a page read at a time."""
        ledger = self._ledger
        select = ledger._backend.select_rows
        page, upto = self._page, self._upto
        run = min(page, _DECODE_RUN)
        after = self.last
        while True:
            rows = ledger._call(select, after, upto, page, streams=False)
            for at in range(0, len(rows), run):
                yield rows[at : at + run]
            if len(rows) < page:
                return
            after = rows[-1][0]

    def _taken(self, part: Sequence[Sequence[Any]]) -> None:
        self.count += len(part)
        self.last = part[-1][0]


# --- backends ---------------------------------------------------------------------------------


class _NoHeadFile:
    """A store that keeps no head record outside itself (memory, PostgreSQL): its persisted
    read models witness loss alone."""

    def head_record(self) -> HeadRecord | None:
        return None

    def committed(self, position: int, link: str) -> None:
        return None

    def closing(self) -> None:
        return None

    def accept_head(self, position: int, link: str, line: str) -> None:
        return None


class _MemoryBackend(_NoHeadFile):
    outages = False
    queued_writes = False

    def __init__(self) -> None:
        self.recorder: ApplicationRecorder = POPOApplicationRecorder()
        self._projections: dict[str, tuple[int, bytes]] = {}
        self._lock = threading.Lock()
        self._keys = MemoryKeyTable()
        self._keys.wiped = self._projections.clear

    def select_rows(
        self, after: int, upto: int | None, limit: int, *, streams: bool
    ) -> list[tuple[Any, ...]]:
        rows = self.recorder.select_notifications(after, limit, upto, inclusive_of_start=False)
        if streams:
            return [(r.id, r.originator_id, r.originator_version, r.topic, r.state) for r in rows]
        return [(r.id, r.topic, r.state) for r in rows]

    def load_projection(self, name: str) -> tuple[int, bytes] | None:
        with self._lock:
            return self._projections.get(name)

    def stream_locks(self) -> StreamLocks:
        return LocalStreamLocks()

    def save_projections(self, states: dict[str, bytes], position: int) -> None:
        with self._lock:
            self._projections.update({k: (position, v) for k, v in states.items()})

    def drop_projections_after(self, position: int) -> None:
        with self._lock:
            for name in [n for n, (p, _) in self._projections.items() if p > position]:
                del self._projections[name]

    def quarantined_rows(self) -> list[tuple[Any, ...]]:
        return []

    def quarantine(self, entries: Sequence[tuple[int, str, str]], at: str) -> int:
        raise StoreURLError("memory:// keeps no damaged rows to quarantine")

    def wait_for_new(self, timeout: float) -> None:
        time.sleep(timeout)

    def key_table(self) -> KeyTable:
        return self._keys

    def close(self) -> None:
        return None


def _use_wal(path: str, *, timeout: float) -> None:
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


class _SQLiteBackend:
    outages = False
    queued_writes = True

    def __init__(self, path: str, *, read_only: bool = False) -> None:
        """*read_only* (commands that only read): opened through ``read_only_uri``, so not
        a table, a journal-mode switch, a ``-wal``/``-shm`` or a lock file is created."""
        self.path = path
        self.read_only = read_only
        if not read_only:
            _use_wal(path, timeout=60)
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
        time.sleep(timeout)

    def key_table(self) -> KeyTable:
        return SQLiteKeyTable(self.path)

    def close(self) -> None:
        self.datastore.close()


class _PostgresBackend(_NoHeadFile):
    outages = True
    queued_writes = False  # the server queues writers itself

    def __init__(self, url: str, *, must_exist: bool = False) -> None:
        from ctxledger.adapters.extras import require_extra

        require_extra("postgres", "a postgresql:// store")
        import psycopg
        from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore

        parts = urlsplit(url)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        dbname = unquote(parts.path.lstrip("/"))
        if not dbname or not parts.hostname:
            raise StoreURLError(f"{_redact(url)}: expected postgresql://user@host:port/dbname")
        self._conninfo: dict[str, Any] = {
            "dbname": dbname,
            "host": parts.hostname,
            "port": parts.port or 5432,
            "user": unquote(parts.username or os.environ.get("PGUSER", "postgres")),
            "password": unquote(parts.password or os.environ.get("PGPASSWORD", "")),
        }
        try:
            self.datastore = PostgresDatastore(
                self._conninfo["dbname"],
                self._conninfo["host"],
                self._conninfo["port"],
                self._conninfo["user"],
                self._conninfo["password"],
                schema=query.get("schema", ""),
                originator_id_type="text",
                pool_size=2,
                max_overflow=4,
                # the wait for a pooled connection; eventsourcing tries a call 10 times with
                # 0.2 s pauses, so a server that does not answer fails a call within
                # UNAVAILABLE_AFTER_S (10 × (wait + 0.2 s))
                connect_timeout=UNAVAILABLE_AFTER_S / 10 - 0.2,
            )
            _refuse_encoding(self.datastore, url)
            recorder = _chunked_recorder(PostgresApplicationRecorder)(
                self.datastore, events_table_name=EVENTS_TABLE
            )
            if must_exist:  # a reader: never create tables, say what is missing
                schema = query.get("schema", "")
                table = f"{schema}.{EVENTS_TABLE}" if schema else EVENTS_TABLE
                with self.datastore.transaction(commit=False) as c:
                    c.execute("SELECT to_regclass(%s) IS NOT NULL AS found", (table,))
                    row = c.fetchone()
                if not row or not row["found"]:
                    self.datastore.close()
                    raise StoreKindError(
                        f"{_redact(url)}: no ledger in this database (no {EVENTS_TABLE} table)"
                    )
            else:
                with _schema_lock(self._conninfo):
                    if query.get("schema"):  # a writer's ?schema= is made when missing
                        from psycopg.sql import SQL, Identifier

                        with self.datastore.transaction(commit=True) as c:
                            c.execute(
                                SQL("CREATE SCHEMA IF NOT EXISTS {}").format(
                                    Identifier(query["schema"])
                                )
                            )
                    recorder.create_table()
                    with self.datastore.transaction(commit=True) as c:
                        c.execute(
                            f"CREATE TABLE IF NOT EXISTS {self._projections} ("
                            "name text PRIMARY KEY, position bigint NOT NULL, "
                            "state bytea NOT NULL)"
                        )
        except (PersistenceError, OperationalError, psycopg.Error) as exc:
            raise LedgerUnavailableError(f"{_redact(url)}: {exc}") from exc
        self.recorder: ApplicationRecorder = recorder
        self._channel = recorder.channel_name
        self._listener: Any = None

    def stream_locks(self) -> StreamLocks:
        import psycopg

        conninfo = self._conninfo
        return PgStreamLocks(
            lambda: psycopg.connect(**conninfo, autocommit=True, connect_timeout=10),
            namespace=self.datastore.schema if self.datastore.schema != "public" else "",
        )

    def select_rows(
        self, after: int, upto: int | None, limit: int, *, streams: bool
    ) -> list[tuple[Any, ...]]:
        """Straight from eventsourcing's table, as plain tuples: no Notification per row."""
        from psycopg.rows import tuple_row
        from psycopg.sql import SQL, Identifier

        columns = (
            "notification_id, originator_id, originator_version, topic, state"
            if (streams)
            else "notification_id, topic, state"
        )
        sql = f"SELECT {columns} FROM {{schema}}.{{table}} WHERE notification_id > %s"
        params: tuple[int, ...] = (after,)
        if upto is not None:
            sql += " AND notification_id <= %s"
            params += (upto,)
        statement = SQL(sql + " ORDER BY notification_id LIMIT %s").format(
            schema=Identifier(self.datastore.schema), table=Identifier(EVENTS_TABLE)
        )
        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(statement, (*params, limit), prepare=True)
            rows: list[tuple[Any, ...]] = cur.fetchall()
        return rows

    def load_projection(self, name: str) -> tuple[int, bytes] | None:
        with self.datastore.transaction(commit=False) as c:
            c.execute(
                f"SELECT position, state FROM {self._projections} WHERE name=%s",
                (name,),
            )
            row = c.fetchone()
        return None if row is None else (int(row["position"]), bytes(row["state"]))

    def save_projections(self, states: dict[str, bytes], position: int) -> None:
        with self.datastore.transaction(commit=True) as c:
            for name, state in states.items():
                c.execute(
                    f"INSERT INTO {self._projections} (name, position, state) "
                    "VALUES (%s,%s,%s) ON CONFLICT (name) DO UPDATE SET "
                    "position=excluded.position, state=excluded.state",
                    (name, position, state),
                )

    def drop_projections_after(self, position: int) -> None:
        with self.datastore.transaction(commit=True) as c:
            c.execute(f"DELETE FROM {self._projections} WHERE position>%s", (position,))

    @property
    def _projections(self) -> str:
        """The saved-read-models table in this ledger's schema (``?schema=`` isolates it)."""
        schema = (self.datastore.schema or "public").replace('"', '""')
        return f'"{schema}".{PROJECTIONS_TABLE}'

    def _table(self, name: str) -> Any:
        from psycopg.sql import SQL, Identifier

        return SQL("{}.{}").format(Identifier(self.datastore.schema), Identifier(name))

    def quarantined_rows(self) -> list[tuple[Any, ...]]:
        from psycopg.rows import tuple_row
        from psycopg.sql import SQL

        with self.datastore.get_connection() as conn, conn.cursor(row_factory=tuple_row) as cur:
            cur.execute(
                "SELECT 1 FROM information_schema.tables WHERE table_schema=%s AND table_name=%s",
                (self.datastore.schema, QUARANTINE_TABLE),
            )
            if cur.fetchone() is None:
                return []
            cur.execute(
                SQL(
                    "SELECT position, originator_id, originator_version, topic, state, kind, "
                    "reason, quarantined_at FROM {} ORDER BY position"
                ).format(self._table(QUARANTINE_TABLE))
            )
            rows: list[tuple[Any, ...]] = cur.fetchall()
        return rows

    def quarantine(self, entries: Sequence[tuple[int, str, str]], at: str) -> int:
        from psycopg.sql import SQL

        quarantine, events = self._table(QUARANTINE_TABLE), self._table(EVENTS_TABLE)
        moved = 0
        with self.datastore.transaction(commit=True) as c:
            c.execute(
                SQL(
                    "CREATE TABLE IF NOT EXISTS {} (position bigint PRIMARY KEY, "
                    "originator_id text, originator_version bigint, topic text, state bytea, "
                    "kind text NOT NULL, reason text NOT NULL, quarantined_at text NOT NULL)"
                ).format(quarantine)
            )
            for position, kind, reason in entries:
                c.execute(
                    SQL(
                        "INSERT INTO {} SELECT notification_id, originator_id, "
                        "originator_version, topic, state, %s, %s, %s FROM {} "
                        "WHERE notification_id=%s"
                    ).format(quarantine, events),
                    (kind, reason, at, position),
                )
                c.execute(
                    SQL("DELETE FROM {} WHERE notification_id=%s").format(events), (position,)
                )
                moved += c.rowcount
            first = min(p for p, _, _ in entries)
            c.execute(f"DELETE FROM {self._projections} WHERE position>=%s", (first,))
        return moved

    def wait_for_new(self, timeout: float) -> None:
        """Block on LISTEN until a NOTIFY or *timeout*; fall back to sleeping."""
        import psycopg

        try:
            if self._listener is None or self._listener.closed:
                self._listener = psycopg.connect(**self._conninfo, autocommit=True)
                self._listener.execute(f'LISTEN "{self._channel}"')
            for _ in self._listener.notifies(timeout=timeout, stop_after=1):
                break
        except psycopg.Error:
            self._listener = None
            time.sleep(timeout)

    def key_table(self) -> KeyTable:
        import psycopg

        conninfo = self._conninfo
        return PgKeyTable(
            lambda: psycopg.connect(**conninfo, autocommit=True, connect_timeout=10),
            self.datastore.schema,
        )

    def close(self) -> None:
        if self._listener is not None:
            with contextlib.suppress(Exception):
                self._listener.close()
        self.datastore.close()


_PG_CHUNK = 1000
"""Rows per INSERT of one append on PostgreSQL: one statement of 10,000 rows never returned
(psycopg's pipeline waiting on the server while the server waited for the rest of the
statement); chunks of this many, in the one transaction, keep an append atomic."""


def _chunked_recorder(base: type[Any]) -> type[Any]:
    """eventsourcing's PostgreSQL recorder, inserting a large append in chunks of
    ``_PG_CHUNK`` rows within one transaction (all or nothing, as before)."""
    from eventsourcing.utils import retry
    from psycopg import InterfaceError as PgInterfaceError
    from psycopg import OperationalError as PgOperationalError

    class ChunkedRecorder(base):  # type: ignore[misc]
        @retry((PgInterfaceError, PgOperationalError), max_attempts=10, wait=0.2)
        def insert_events(
            self, stored_events: Sequence[StoredEvent], **kwargs: Any
        ) -> Sequence[int] | None:
            if len(stored_events) <= _PG_CHUNK or self.datastore.enable_db_functions:
                return super().insert_events.__wrapped__(self, stored_events, **kwargs)  # type: ignore[no-any-return]
            failed: Exception | None = None
            ids: list[int] = []
            with self.datastore.get_connection() as conn:
                with conn.pipeline() as pipeline, conn.transaction():
                    for at in range(0, len(stored_events), _PG_CHUNK):
                        chunk = stored_events[at : at + _PG_CHUNK]
                        with conn.cursor() as curs:
                            try:
                                self._insert_stored_events(curs, chunk, **kwargs)
                                pipeline.sync()  # a key violation raises here
                                ids += self._fetch_ids_after_insert_events(curs, chunk) or []
                            except Exception as exc:  # re-raised once the pipeline closed
                                failed = exc
                                break
                if failed is not None:
                    raise failed
            return ids

    return ChunkedRecorder


def _refuse_encoding(datastore: Any, url: str) -> None:
    """Refuse a database whose encoding is not UTF-8 (``SQL_ASCII`` accepts the bytes of
    every append and then fails every call, so its rows land and read back broken)."""
    with datastore.transaction(commit=False) as c:
        c.execute(
            "SELECT pg_encoding_to_char(encoding) AS enc FROM pg_database "
            "WHERE datname = current_database()"
        )
        row = c.fetchone()
    found = row["enc"] if row else ""
    # (a SQL_ASCII database hands text back as bytes)
    encoding = found.decode("ascii", "replace") if isinstance(found, bytes) else str(found)
    if encoding.upper() not in ("UTF8", "UTF-8"):
        datastore.close()
        raise StoreKindError(
            f"{_redact(url)}: the database's encoding is {encoding or 'unknown'}, not UTF8: "
            "ctxledger stores UTF-8 text (CREATE DATABASE … ENCODING 'UTF8')"
        )


_SCHEMA_LOCK_KEY = 0x6374786C6C6467  # advisory lock id: "ctxlldg"


@contextlib.contextmanager
def _schema_lock(conninfo: dict[str, Any]) -> Iterator[None]:
    """Serialise schema creation across processes. Run concurrently, eventsourcing's
    ``CREATE OR REPLACE FUNCTION``/``CREATE TYPE`` fail with "tuple concurrently updated",
    so orchestrators starting together could not open a shared ledger. The lock is held by
    its own session; closing the session releases it."""
    import psycopg

    with psycopg.connect(**conninfo, autocommit=True, connect_timeout=10) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (_SCHEMA_LOCK_KEY,))
        yield


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@")
    return url


def head_file(path: str | Path) -> Path:
    """The file beside a SQLite ledger that records the furthest position its log reached
    (``<ledger>.head``): written after every commit, so a deleted WAL, a truncated or emptied
    file or an older copy restored over it cannot take the evidence along."""
    return Path(f"{path}.head")


@dataclass(frozen=True, slots=True)
class HeadRecord:
    """What the head file says: the furthest *position* the log reached and the chain *link*
    of the event there (``""``: not known), *in_file* the position the database file itself
    held when a writer last closed it with its WAL checkpointed (0: never), *at* when it was
    written, and *accepted* the losses an operator accepted (``doctor --accept-loss``)."""

    position: int
    link: str = ""
    in_file: int = 0
    at: str = ""
    accepted: tuple[str, ...] = ()
    name: str = ""
    """The head file's name."""

    @property
    def where(self) -> str:
        return f"the head file {self.name} (written {self.at or '?'})"


def read_head_record(path: str | Path) -> HeadRecord | None:
    """The head file of the SQLite ledger at *path*, or None (none, or unreadable)."""
    target = head_file(path)
    try:
        data = json.loads(target.read_text(encoding="utf-8"))
        position = int(data["position"])
        accepted = tuple(str(a) for a in data.get("accepted", ()))
        return HeadRecord(
            position,
            str(data.get("link", "")),
            int(data.get("in_file", 0)),
            str(data.get("at", "")),
            accepted,
            target.name,
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def write_head_file(
    path: str | Path,
    position: int,
    *,
    link: str = "",
    in_file: int = 0,
    accept: str = "",
    in_place: bool = False,
) -> None:
    """Record *position* (and the *link* of the event there) in the head file, written whole
    and renamed into place. The recorded position never goes down — after a loss the evidence
    stays — except when an operator accepts the loss (*accept*: one line saying what was
    accepted, kept in the file); *in_file* only ever goes up too. *in_place* (each commit)
    overwrites the existing file's bytes instead of renaming a new file into place."""
    target = head_file(path)
    recorded = read_head_record(path)
    accepted: tuple[str, ...] = () if recorded is None else recorded.accepted
    if accept:
        accepted, in_file = (*accepted, accept), 0
    elif recorded is not None:
        if position < recorded.position or (position == recorded.position and not link):
            position, link = recorded.position, recorded.link
        in_file = max(in_file, recorded.in_file)
        if (position, link, in_file) == (recorded.position, recorded.link, recorded.in_file):
            return
    at = datetime.now(UTC).isoformat(timespec="seconds")
    body: dict[str, Any] = {"position": position, "link": link, "in_file": in_file, "at": at}
    if accepted:
        body["accepted"] = list(accepted)
    data = json.dumps(body).encode() + b"\n"
    if in_place and recorded is not None:
        # every commit: overwritten in place, padded to the old size (no truncation, no
        # rename: ~1 µs instead of ~0.3 ms); a reader meeting a torn write reads no record
        # (never a false loss)
        fd = os.open(target, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            os.pwrite(fd, data.ljust(os.fstat(fd).st_size), 0)
        finally:
            os.close(fd)
        return
    tmp = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    tmp.write_bytes(data)
    tmp.replace(target)


def read_head_file(path: str | Path) -> tuple[int, str] | None:
    """``(position, where)`` from the head file, or None (none, or unreadable)."""
    record = read_head_record(path)
    return None if record is None else (record.position, record.where)


FROM_ENV: Any = object()
"""``master_key`` default of ``open_ledger``: the key configured in the environment."""


def open_ledger(
    url: str,
    *,
    must_exist: bool = False,
    master_key: bytes | None = FROM_ENV,
    encrypt: bool | None = None,
    loss_check: bool = True,
    allow_foreign: bool = False,
    read_only: bool = False,
) -> Ledger:
    """Open the ledger named by *url*: ``memory://``, ``sqlite:///path`` or ``postgresql://…``.

    ``must_exist`` (for readers such as ``inspect`` or ``audit``) refuses to create a missing
    SQLite file instead of silently reading an empty ledger, and a file that is not a ledger
    (not SQLite, a memory catalog, another database) before anything could write to it. A
    writer is refused a file that is not SQLite or is a memory catalog.

    Content encryption (``adapters.content_seal``): *master_key* (32 bytes; by default the
    one configured in the environment, ``CTXLEDGER_MASTER_KEY`` or ``CTXLEDGER_KEY_FILE``)
    opens an encrypted ledger's keys. A new, empty ledger becomes encrypted when a master
    key is configured, unless *encrypt* is False; ``encrypt=True`` without a master key is
    an error. Whether a ledger encrypts is settled when its first event is written.

    Loss (``Ledger.head_loss``): a missing or empty SQLite file whose head file says it held
    events is refused to everyone, and a writer is refused a ledger whose log lost events —
    ``LossError``, one line — unless *loss_check* is False (``doctor --accept-loss``).

    A writer is refused an existing SQLite file of another application (tables, none of
    them the ledger's) unless *allow_foreign*: opening it would add ctxledger's tables.
    *read_only* (implies *must_exist*; commands that only read): a SQLite ledger is opened
    so that no table, journal-mode switch, ``-wal``/``-shm`` or lock file is created."""
    must_exist = must_exist or read_only
    if master_key is FROM_ENV:
        master_key = master_key_from_env()
    if encrypt and master_key is None:
        raise MasterKeyError(
            "content encryption needs a master key: set CTXLEDGER_MASTER_KEY (base64 of 32 "
            "bytes) or pass --key-file"
        )
    ledger = _open_backend(
        url,
        must_exist=must_exist,
        loss_check=loss_check,
        allow_foreign=allow_foreign,
        read_only=read_only,
    )
    try:
        ledger.keyring = Keyring(ledger.backend_key_table(), master_key)
        if loss_check and not must_exist:
            _refuse_loss(ledger)  # (with the keyring: the links of a keyed chain)
        new = not must_exist and not ledger.keyring.encrypted and ledger.max_position() == 0
        if new and encrypt is not False and master_key is not None:
            ledger.keyring.start()
    except BaseException:
        ledger.close()
        raise
    return ledger


def _refuse_loss(ledger: Ledger) -> None:
    """A writer must not open a ledger whose head record shows loss: its appends would take
    the lost positions and bury the evidence."""
    loss = ledger.head_loss()
    if loss is not None:
        raise LossError(f"{_redact(ledger.url)}: refusing to write: {loss.line}{_ACCEPT_HINT}")


_ACCEPT_HINT = (
    "; `ctxledger doctor --store URL` says more, `--accept-loss` records the loss and lets "
    "writers go on"
)


def _emptied(path: Path) -> Loss | None:
    """The loss of a SQLite file whose head file says its log held events while the file is
    missing, empty, or holds no events table (its WAL, where everything was, deleted)."""
    recorded = read_head_record(path)
    if recorded is None or recorded.position <= 0:
        return None
    if path.is_file() and path.stat().st_size > 0:
        try:
            if store_kind(path) != "sqlite":
                return None
        except StoreKindError:
            return None  # not SQLite at all: the file checks say so
    return Loss(0, recorded.position, recorded.where, "emptied")


def _refuse_emptied(url: str, path: Path) -> None:
    """Refuse to open — to read or to write — a missing or empty file whose head file says
    its log held events: opening would make it a new, empty ledger without a word."""
    loss = _emptied(path)
    if loss is not None:
        raise LossError(f"{url}: {loss.line}{_ACCEPT_HINT}")


def accept_emptied(url: str, *, at: str) -> str:
    """``doctor --accept-loss`` on a SQLite ledger file that is missing or empty while its
    head file says it held events: record the acceptance (the head restarts at 0) and return
    the line accepted; "" when *url* is not such a file (it is then opened as usual)."""
    if not url.startswith("sqlite:///"):
        return ""
    path = Path(url[len("sqlite:///") :])
    loss = _emptied(path)
    if loss is None:
        return ""
    write_head_file(path, 0, accept=f"{at}: accepted {loss.line}")
    return loss.line


def _open_backend(
    url: str,
    *,
    must_exist: bool,
    loss_check: bool = True,
    allow_foreign: bool = False,
    read_only: bool = False,
) -> Ledger:
    scheme = url.split(":", 1)[0].lower() if ":" in url else ""
    if scheme == "memory":
        return Ledger(url, _MemoryBackend())
    if scheme == "sqlite":
        if not url.startswith("sqlite:///") or len(url) <= len("sqlite:///"):
            raise StoreURLError(f"{url}: expected sqlite:///path/to/ledger.db")
        path = Path(url[len("sqlite:///") :])
        if path.is_dir():
            raise StoreURLError(f"{url}: {path} is a directory")
        if not path.parent.exists():
            raise StoreURLError(f"{url}: directory {path.parent} does not exist")
        if loss_check:
            _refuse_emptied(url, path)
        if must_exist and not path.is_file():
            raise StoreURLError(f"{url}: no ledger at {path}")
        check_ledger_file(path, must_be_ledger=must_exist, allow_foreign=allow_foreign)
        try:
            return Ledger(url, _SQLiteBackend(str(path), read_only=read_only))
        except PersistenceError as exc:
            raise LedgerUnavailableError(f"{url}: {exc}") from exc
    if scheme in ("postgresql", "postgres"):
        return Ledger(url, _PostgresBackend(url, must_exist=must_exist))
    raise StoreURLError(
        f"{_redact(url)}: unknown store URL scheme (use memory://, sqlite:///path or "
        "postgresql://user@host/db)"
    )
