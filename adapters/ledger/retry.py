"""Waiting before trying again: the one backoff of the stores' retry loops.

Every pause between two tries is ``backoff(attempt, first=…, cap=…, jitter=…)``: *first*
doubled per attempt up to *cap* (a constant pause is ``first == cap``), with *jitter* a
uniform draw below it. The callers and their parameters:

- a store that went away (a PostgreSQL server restarting): ``OUTAGE_PAUSE_S`` between tries,
  for at most ``UNAVAILABLE_AFTER_S`` (``retry_unavailable``; the ledger's inserts and
  PostgreSQL's stream locks);
- SQLite's switch to WAL mode (``store_files.wal_mode``): 1 ms doubling to 50 ms;
- a waiter in a stream's ticket queue (``stream_locks``): a pause by its place in the queue,
  at most 10 ms (attempt 0: no doubling);
- the engine after a ConflictError: ``backoff(attempt, first=0.002, cap=math.inf,
  jitter=True)``, i.e. ``random.uniform(0, 0.002 * 2**attempt)``.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from eventsourcing.persistence import IntegrityError, PersistenceError

from ctxledger.domain.errors import CtxLedgerError, LedgerUnavailableError

__all__ = [
    "OUTAGE_PAUSE_S",
    "backoff",
    "call_once",
    "pause",
    "retry_unavailable",
]

T = TypeVar("T")

OUTAGE_PAUSE_S = 0.1
"""The pause between two tries of a store that did not answer."""
_MAX_DOUBLINGS = 1000
"""More doublings than this would overflow a float (the cap is reached long before)."""


def backoff(attempt: int, *, first: float, cap: float = math.inf, jitter: bool = False) -> float:
    """Seconds to wait after failed try number *attempt* (0: the first failure): *first*
    doubled *attempt* times, at most *cap*; with *jitter*, a uniform draw in ``[0, that]``
    (spreads writers that failed together)."""
    delay = min(first * 2.0 ** min(attempt, _MAX_DOUBLINGS), cap)
    return random.uniform(0, delay) if jitter else delay


def pause(attempt: int, *, first: float, cap: float = math.inf, jitter: bool = False) -> None:
    """Sleep ``backoff(attempt, …)``."""
    time.sleep(backoff(attempt, first=first, cap=cap, jitter=jitter))


def call_once(where: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, a store that fails to answer (eventsourcing's
    PersistenceError, an OSError) as ``LedgerUnavailableError`` naming *where*; ctxledger's
    own errors and a key violation (IntegrityError: a concurrent append) pass as they are."""
    try:
        return fn(*args, **kwargs)
    except (CtxLedgerError, IntegrityError):
        raise
    except (PersistenceError, OSError) as exc:
        raise LedgerUnavailableError(f"{where}: {exc}") from exc


def retry_unavailable(call: Callable[[], T], *, within: float) -> T:
    """``call()`` (a read, or a write that is safe to repeat), tried again after
    ``LedgerUnavailableError`` every ``OUTAGE_PAUSE_S`` while a store that restarts comes
    back, until *within* seconds have passed since the first try (then its error)."""
    deadline = time.monotonic() + within
    attempt = 0
    while True:
        try:
            return call()
        except LedgerUnavailableError:
            if time.monotonic() >= deadline:
                raise
        pause(attempt, first=OUTAGE_PAUSE_S, cap=OUTAGE_PAUSE_S)
        attempt += 1
