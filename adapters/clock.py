"""Clocks: the real UTC clock, and a stepping clock for reproducible runs and tests."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

__all__ = ["SteppingClock", "SystemClock"]


class SystemClock:
    """The real clock (UTC, timezone-aware)."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class SteppingClock:
    """Starts at *start* and advances by *step* on every read: deterministic timestamps."""

    def __init__(
        self,
        start: datetime = datetime(2026, 1, 1, tzinfo=UTC),
        step: timedelta = timedelta(seconds=1),
    ) -> None:
        if start.tzinfo is None:
            raise ValueError("start must be timezone-aware")
        self._next = start
        self._step = step
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            value = self._next
            self._next = value + self._step
            return value

    def set(self, when: datetime) -> None:
        """Jump to *when* (e.g. a trajectory step's recorded time)."""
        with self._lock:
            self._next = when
