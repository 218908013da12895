"""``open_ledger``: the ledger a store URL names, its keyring, and the loss checks on opening."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eventsourcing.persistence import PersistenceError

from ctxledger.adapters.ledger.core import Ledger
from ctxledger.adapters.ledger.head import ACCEPT_HINT, LossError, refuse_emptied
from ctxledger.adapters.ledger.memory import MemoryBackend
from ctxledger.adapters.ledger.postgres import PostgresBackend
from ctxledger.adapters.ledger.sqlite import SQLiteBackend
from ctxledger.adapters.ledger.store_files import check_ledger_file
from ctxledger.adapters.ledger.urls import redact, sqlite_file, store_scheme
from ctxledger.adapters.security.content_seal import Keyring, MasterKeyError, master_key_from_env
from ctxledger.domain.errors import LedgerUnavailableError, StoreURLError

__all__ = ["FROM_ENV", "open_ledger"]

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
        raise LossError(f"{redact(ledger.url)}: refusing to write: {loss.line}{ACCEPT_HINT}")


def _open_backend(
    url: str,
    *,
    must_exist: bool,
    loss_check: bool = True,
    allow_foreign: bool = False,
    read_only: bool = False,
) -> Ledger:
    scheme = store_scheme(url)
    if scheme == "memory":
        return Ledger(url, MemoryBackend())
    if scheme == "postgresql":
        return Ledger(url, PostgresBackend(url, must_exist=must_exist))
    path = sqlite_file(url)
    if loss_check:
        refuse_emptied(url, path)
    if must_exist and not path.is_file():
        raise StoreURLError(f"{url}: no ledger at {path}")
    check_ledger_file(path, must_be_ledger=must_exist, allow_foreign=allow_foreign)
    return _open_sqlite(url, path, read_only=read_only)


def _open_sqlite(url: str, path: Path, *, read_only: bool) -> Ledger:
    try:
        return Ledger(url, SQLiteBackend(str(path), read_only=read_only))
    except PersistenceError as exc:
        raise LedgerUnavailableError(f"{url}: {exc}") from exc
