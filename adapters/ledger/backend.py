"""What a store gives the ledger (:class:`Backend`; ``memory``, ``sqlite`` and ``postgres``
hold one each) and the tables every store keeps."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from eventsourcing.persistence import ApplicationRecorder

from ctxledger.adapters.ledger.head import HeadRecord
from ctxledger.adapters.ledger.locks import StreamLocks
from ctxledger.adapters.ledger.store_files import LEDGER_TABLE
from ctxledger.adapters.security.key_table import KeyTable

__all__ = ["EVENTS_TABLE", "PROJECTIONS_TABLE", "QUARANTINE_TABLE", "Backend", "NoHeadFile"]

EVENTS_TABLE = LEDGER_TABLE
PROJECTIONS_TABLE = "ctxledger_projections"
QUARANTINE_TABLE = "ctxledger_quarantine"
"""Damaged rows moved aside by ``ctxledger doctor --quarantine`` (same database; kept whole,
with their original position, the kind of damage, the reason and when)."""


class Backend(Protocol):
    """A store as the ledger uses it: eventsourcing's recorder plus what it lacks."""

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
        """The per-stream writer locks of this store (see ``adapters/ledger/locks.py``)."""
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


class NoHeadFile:
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
