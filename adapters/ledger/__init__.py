"""The append-only ledger over eventsourcing recorders: memory://, sqlite:///path, postgresql://.

The parts (every name below is importable from here, as before the split):

- ``core``: the :class:`Ledger` — append with an expected version, read, follow, the write
  turn, persisted read models, the quarantine's damaged streams;
- ``opening``: ``open_ledger`` (which store a URL names, its keyring, the loss checks);
- ``memory``, ``sqlite``, ``postgres``: one module per store (``backend``: what a store gives
  the ledger, and the tables every store keeps);
- ``urls``: store URLs (scheme, SQLite file, the URL without its password);
- ``decoding``: stored rows back to events (``EventStream``: the replay path);
- ``integrity``: chain-link bytes and the MAC that seals snapshots of a keyed chain;
- ``head``: the head file beside a SQLite ledger and the :class:`Loss` it shows;
- ``quarantine``: damaged rows moved aside;
- ``retry``: the one backoff of every retry loop of the stores.
"""

from ctxledger.adapters.ledger.backend import EVENTS_TABLE, PROJECTIONS_TABLE, QUARANTINE_TABLE
from ctxledger.adapters.ledger.core import WRITE_TURN_TIMEOUT_S, Ledger, Recorded, stream_id_for
from ctxledger.adapters.ledger.decoding import EventStream, decode_row
from ctxledger.adapters.ledger.head import (
    HeadRecord,
    Loss,
    LossError,
    accept_emptied,
    head_file,
    read_head_file,
    read_head_record,
    write_head_file,
)
from ctxledger.adapters.ledger.locks import UNAVAILABLE_AFTER_S
from ctxledger.adapters.ledger.opening import FROM_ENV, open_ledger
from ctxledger.adapters.ledger.quarantine import Quarantined
from ctxledger.domain.errors import LedgerUnavailableError

__all__ = [
    "EVENTS_TABLE",
    "FROM_ENV",
    "PROJECTIONS_TABLE",
    "QUARANTINE_TABLE",
    "UNAVAILABLE_AFTER_S",
    "WRITE_TURN_TIMEOUT_S",
    "EventStream",
    "HeadRecord",
    "Ledger",
    "LedgerUnavailableError",
    "Loss",
    "LossError",
    "Quarantined",
    "Recorded",
    "accept_emptied",
    "decode_row",
    "head_file",
    "open_ledger",
    "read_head_file",
    "read_head_record",
    "stream_id_for",
    "write_head_file",
]
