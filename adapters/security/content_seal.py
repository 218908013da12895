"""Crypto-shredding: the ledger's free text stored as AES-GCM ciphertext, erasable by key.

A ledger created while a master key is configured (``CTXLEDGER_MASTER_KEY``: base64 of 32
bytes, or a key file named by ``CTXLEDGER_KEY_FILE`` / ``--key-file``) seals the free text of
its events before they are stored: every field ``domain.free_text.map_sealed_text`` names —
item content, task, stage, phase, tool signature, files and symbols, the sent text of
clipped and compressed items, ``by`` of pins, unpins, verifications and settings,
verification evidence, removal reasons, the build request's task, phase, files, symbols,
keywords, failures and stage, rebuild, refresh and failure reasons, provider error messages
and codes, the agent's task. Each (agent, item) has its own random 256-bit data key,
kept wrapped by the master key in the key table (``adapters.key_table``), outside the event
stream; the persisted read models are sealed too, under a snapshot key.

Erasing an item or an agent destroys its wrapped keys: the ciphertext stays in the log, so
positions, versions, the hash chain and every decision replay as before, but its text reads
``[erased: reason, at]``. Nothing here decides what goes into a prompt; the events the
engine folds and decides on are the plaintext ones, sealed on the way to the store and
opened on the way back.
"""

from __future__ import annotations

import base64
import binascii
import os
import secrets
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ctxledger.adapters.security.key_table import KeyRow, KeyTable
from ctxledger.domain import events as ev
from ctxledger.domain.errors import CtxLedgerError, InvalidInputError
from ctxledger.domain.free_text import map_sealed_text

__all__ = [
    "KEY_FILE_ENV",
    "MASTER_KEY_ENV",
    "Keyring",
    "MasterKeyError",
    "SEALED_PREFIX",
    "erased_text",
    "master_key_from_env",
    "read_key_file",
]

MASTER_KEY_ENV = "CTXLEDGER_MASTER_KEY"
KEY_FILE_ENV = "CTXLEDGER_KEY_FILE"
SEALED_PREFIX = "\x00sealed1:"
"""Sealed text: the prefix, then URL-safe base64 of a 12-byte nonce and the ciphertext."""
_BLOB_PREFIX = b"\x00sealedblob1:"
_CHECK = ("", "#check")
"""(Rows of the agent id "", which no agent has, belong to the ledger itself.) The key
table's check row: a known value sealed under the master key (a wrong master key
is said at open, not discovered as garbage later)."""
_CHAIN = ("", "#chain")
"""The key table's row of the chain key: a random 256-bit HMAC key wrapped by the master
key (``domain.chain``: the links of a keyed chain, the MACs of read-model snapshots, the
signatures of published heads). A ledger has it when it was created encrypted."""
_SNAPSHOT = "#snapshot:"
_CHECK_VALUE = b"ctxledger master key check"
_AGENT_TEXT = ""
"""The item id of an agent's own text that belongs to no item (provider error messages)."""


class MasterKeyError(CtxLedgerError):
    """No master key where one is needed, or one that does not open this ledger's keys."""


def read_key_file(path: str | Path) -> bytes:
    """A master key from a file: 32 raw bytes, or base64 of them (whitespace ignored)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise MasterKeyError(f"key file {path}: {exc.strerror or exc}") from exc
    if len(data) == 32:
        return data
    return _decode_key(data.strip(), f"key file {path}")


def _decode_key(text: bytes | str, where: str) -> bytes:
    try:
        key = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MasterKeyError(f"{where}: not base64 of 32 bytes") from exc
    if len(key) != 32:
        raise MasterKeyError(f"{where}: {len(key)} bytes, a master key is 32 (base64 of them)")
    return key


def master_key_from_env() -> bytes | None:
    """The configured master key: ``CTXLEDGER_MASTER_KEY``, else the file named by
    ``CTXLEDGER_KEY_FILE``, else None."""
    value = os.environ.get(MASTER_KEY_ENV, "").strip()
    if value:
        return _decode_key(value, MASTER_KEY_ENV)
    path = os.environ.get(KEY_FILE_ENV, "").strip()
    return read_key_file(path) if path else None


def erased_text(reason: str, at: str) -> str:
    """What erased text reads as."""
    return f"[erased: {reason}, {at}]" if at else f"[erased: {reason}]"


_LOCKED = "[sealed: no master key configured]"


def _aad(agent_id: str, item_id: str) -> bytes:
    return f"{agent_id}\x00{item_id}".encode()


class Keyring:
    """Seals and opens the free text of events for one ledger.

    ``encrypted`` says whether the store seals content (its key table has the check row).
    Without a master key an encrypted store can be read — sealed text reads as
    ``[sealed: no master key configured]`` and the hash chain still verifies — but not
    written."""

    def __init__(
        self, table: KeyTable, master: bytes | None, *, encrypted: bool | None = None
    ) -> None:
        """*encrypted* None: read the key table to find out (``False``: a plain store,
        nothing read)."""
        self.table = table
        self._master = AESGCM(master) if master is not None else None
        self._keys: dict[tuple[str, str], AESGCM | str] = {}
        """(agent, item) → its data key, or the text an erased key's content reads as."""
        self._lock = threading.Lock()
        self._loaded: set[str] = set()
        """Agents whose keys were all read (a miss after that is a new item)."""
        self.chain_keyed = False
        """Whether the store's links are keyed (it has a chain key)."""
        self.chain_key: bytes | None = None
        """The chain key, when the store has one and the master key opens it."""
        if encrypted is False:
            self.encrypted = False
            return
        own = table.rows("")
        check = [r for r in own if (r.agent_id, r.item_id) == _CHECK]
        chain = [r for r in own if (r.agent_id, r.item_id) == _CHAIN and r.wrapped is not None]
        self.encrypted = bool(check)
        self.chain_keyed = bool(chain)
        if check and self._master is not None:
            try:
                self._unwrap(check[0].wrapped or b"", *_CHECK, expect=_CHECK_VALUE)
            except MasterKeyError:
                raise MasterKeyError(
                    "the configured master key does not open this ledger's keys"
                ) from None
            if chain:
                self.chain_key = self._unwrap(chain[0].wrapped or b"", *_CHAIN)

    @property
    def can_write(self) -> bool:
        return not self.encrypted or self._master is not None

    def start(self) -> None:
        """Make a new store encrypted (write the check row under the master key) with a keyed
        chain (a random chain key, wrapped by the master key)."""
        if self._master is None or self.encrypted:
            return
        nonce = secrets.token_bytes(12)
        check = nonce + self._master.encrypt(nonce, _CHECK_VALUE, _aad(*_CHECK))
        chain_key = secrets.token_bytes(32)
        nonce = secrets.token_bytes(12)
        chain = nonce + self._master.encrypt(nonce, chain_key, _aad(*_CHAIN))
        self.table.insert([KeyRow(*_CHECK, check), KeyRow(*_CHAIN, chain)])
        self.encrypted = True
        # another writer starting the same new store may have won: its key is the store's
        [stored] = self.table.get([_CHAIN])
        self.chain_keyed, self.chain_key = True, self._unwrap(stored.wrapped or b"", *_CHAIN)

    # --- keys --------------------------------------------------------------------------------

    def _unwrap(self, wrapped: bytes, agent_id: str, item_id: str, *, expect: bytes = b"") -> bytes:
        assert self._master is not None
        try:
            key = self._master.decrypt(wrapped[:12], wrapped[12:], _aad(agent_id, item_id))
        except (InvalidTag, ValueError) as exc:
            raise MasterKeyError(
                f"the key of {agent_id[:60]!r}/{item_id[:60]!r} does not open"
            ) from exc
        if expect and key != expect:
            raise MasterKeyError("the master key check does not match")
        return key

    def _load(self, agent_id: str) -> None:
        """Every key of *agent_id* into the cache (one read per agent, not per item)."""
        for row in self.table.rows(agent_id):
            self._cache(row)
        self._loaded.add(agent_id)

    def _cache(self, row: KeyRow) -> None:
        key = (row.agent_id, row.item_id)
        if key in (_CHECK, _CHAIN):
            return
        if row.wrapped is None:
            self._keys[key] = erased_text(row.erased_reason, row.erased_at)
        elif self._master is not None:
            self._keys[key] = AESGCM(self._unwrap(row.wrapped, row.agent_id, row.item_id))
        else:
            self._keys[key] = _LOCKED

    def _key(self, agent_id: str, item_id: str) -> AESGCM | str | None:
        found = self._keys.get((agent_id, item_id))
        if found is None:
            with self._lock:
                if agent_id in self._loaded:  # a key another writer made since
                    for row in self.table.get([(agent_id, item_id)]):
                        self._cache(row)
                else:
                    self._load(agent_id)
            found = self._keys.get((agent_id, item_id))
        return found

    def _ensure(self, wanted: Iterable[tuple[str, str]]) -> None:
        """Create (in one write) the data keys of the pairs that have none yet."""
        missing = {w for w in wanted if w not in self._keys}
        if not missing:
            return
        with self._lock:
            for agent in {a for a, _ in missing} - self._loaded:
                self._load(agent)
            missing = {w for w in missing if w not in self._keys}
            if not missing:
                return
            assert self._master is not None
            rows = []
            for agent_id, item_id in sorted(missing):
                nonce = secrets.token_bytes(12)
                data_key = AESGCM.generate_key(bit_length=256)
                wrapped = nonce + self._master.encrypt(nonce, data_key, _aad(agent_id, item_id))
                rows.append(KeyRow(agent_id, item_id, wrapped))
            self.table.insert(rows)
            for row in self.table.get(sorted(missing)):  # another writer's key may have won
                self._cache(row)

    # --- text --------------------------------------------------------------------------------

    def _seal(self, agent_id: str, item_id: str, text: str) -> str:
        if not text:
            return text
        key = self._keys[agent_id, item_id]
        if isinstance(key, str):  # erased: nothing new is written under a destroyed key
            return key
        nonce = secrets.token_bytes(12)
        sealed = key.encrypt(nonce, text.encode("utf-8", "surrogatepass"), _aad(agent_id, item_id))
        return SEALED_PREFIX + base64.urlsafe_b64encode(nonce + sealed).decode("ascii")

    def _open(self, agent_id: str, item_id: str, text: str) -> str:
        if not text.startswith(SEALED_PREFIX):
            return text
        key = self._key(agent_id, item_id)
        if key is None:
            return "[sealed: no key in the key table]"
        if isinstance(key, str):
            return key
        try:
            raw = base64.urlsafe_b64decode(text[len(SEALED_PREFIX) :])
            plain = key.decrypt(raw[:12], raw[12:], _aad(agent_id, item_id))
        except (InvalidTag, ValueError, binascii.Error):
            return "[sealed: does not open (damaged)]"
        return plain.decode("utf-8", "surrogatepass")

    # --- events ------------------------------------------------------------------------------

    def seal_events(self, events: Sequence[ev.Event]) -> list[ev.Event]:
        """*events* with their free text sealed (new data keys written first, in one go)."""
        if not self.encrypted:
            return list(events)
        pairs = [pair for e in events for pair in _pairs(e)]
        if not pairs:
            return list(events)
        if self._master is None:
            raise MasterKeyError(
                "this ledger encrypts content: set CTXLEDGER_MASTER_KEY or pass --key-file "
                "to write to it"
            )
        self._ensure(pairs)
        for agent_id, item_id in pairs:
            if isinstance(self._keys[agent_id, item_id], str) and any(
                isinstance(e, ev.ItemRecorded | ev.SteeringNoteAdded) and e.item.id == item_id
                for e in events
            ):
                raise InvalidInputError(
                    f"the content of item {item_id[:80]!r} of agent {agent_id[:80]!r} was "
                    "erased; record new content under a new item id"
                )
        return [_transform(e, self._seal) for e in events]

    def open_events(self, events: list[ev.Event]) -> list[ev.Event]:
        """*events* with their sealed text opened (in place; erased text as its marker)."""
        if not self.encrypted:
            return events
        for n, e in enumerate(events):
            events[n] = _transform(e, self._open)
        return events

    def open_event(self, event: ev.Event) -> ev.Event:
        if not self.encrypted:
            return event
        return _transform(event, self._open)

    # --- read-model snapshots ----------------------------------------------------------------

    def _snapshot_key(self) -> str:
        """The name of the live snapshot key (one is made when there is none)."""
        live = sorted(
            r.item_id
            for r in self.table.rows("")
            if r.item_id.startswith(_SNAPSHOT) and r.wrapped is not None
        )
        if live:
            return live[-1]
        name = _SNAPSHOT + secrets.token_hex(8)
        self._ensure([("", name)])
        return name

    def seal_blob(self, data: bytes) -> bytes:
        """A read-model snapshot sealed under the snapshot key (as is on a plain store)."""
        if not self.encrypted or self._master is None:
            return data
        name = self._snapshot_key()
        key = self._key("", name)
        assert isinstance(key, AESGCM)
        nonce = secrets.token_bytes(12)
        body = key.encrypt(nonce, data, _aad("", name))
        return _BLOB_PREFIX + name.encode() + b"\n" + nonce + body

    def open_blob(self, data: bytes) -> bytes | None:
        """A sealed snapshot's bytes; None when it cannot be opened (no master key, its key
        erased): the read models are then rebuilt from the log."""
        if not data.startswith(_BLOB_PREFIX):
            return None if self.encrypted else data
        name, _, rest = data[len(_BLOB_PREFIX) :].partition(b"\n")
        key = self._key("", name.decode("utf-8", "replace"))
        if not isinstance(key, AESGCM):
            return None
        try:
            return key.decrypt(rest[:12], rest[12:], _aad("", name.decode()))
        except (InvalidTag, ValueError):
            return None

    # --- erasing -----------------------------------------------------------------------------

    def erase(
        self, agent_id: str, item_ids: Sequence[str] | None, *, reason: str, at: str
    ) -> list[str]:
        """Destroy the data keys of *agent_id* (all, or those of *item_ids*) and every
        snapshot key, delete the persisted read models and wipe deleted rows from the
        database; returns the item ids whose key was destroyed."""
        if not reason.strip():
            raise InvalidInputError("an erase needs a reason")
        with self._lock:
            gone = self.table.destroy(agent_id, item_ids, reason, at)
            snapshots = [r.item_id for r in self.table.rows("") if r.item_id.startswith(_SNAPSHOT)]
            self.table.destroy("", snapshots, "erase", at)
            self._keys.clear()
            self._loaded.clear()
        return gone

    def erased(self) -> set[tuple[str, str]]:
        """Every (agent, item) whose key was erased."""
        return {(r.agent_id, r.item_id) for r in self.table.rows() if r.wrapped is None}


# --- which text of which event (domain.free_text) ---------------------------------------------


def _pairs(e: ev.Event) -> list[tuple[str, str]]:
    """The (agent, item) keys *e*'s free text is sealed under (item ``""``: the agent's own)."""
    agent = ev.event_agent(e)
    found: list[tuple[str, str]] = []

    def note(item_id: str, text: str) -> str:
        found.append((agent, item_id))
        return text

    if agent:
        map_sealed_text(e, note)
    return list(dict.fromkeys(found))


def _transform(e: ev.Event, fn: Callable[[str, str, str], str]) -> ev.Event:
    """*e* with *fn* applied to each of its free-text fields (``domain.free_text``)."""
    agent = ev.event_agent(e)
    if not agent:
        return e
    return map_sealed_text(e, lambda item_id, text: fn(agent, item_id, text))
