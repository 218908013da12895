"""The in-memory store (``memory://``): eventsourcing's POPO recorder, read models in a dict."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import ApplicationRecorder
from eventsourcing.popo import POPOApplicationRecorder

from ctxledger.adapters.ledger.backend import NoHeadFile
from ctxledger.adapters.ledger.locks import LocalStreamLocks, StreamLocks
from ctxledger.adapters.security.key_table import KeyTable, MemoryKeyTable
from ctxledger.domain.errors import StoreURLError

__all__ = ["MemoryBackend"]


class MemoryBackend(NoHeadFile):
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
        time.sleep(timeout)  # polling: the follower's interval

    def key_table(self) -> KeyTable:
        return self._keys

    def close(self) -> None:
        return None
