"""What a reader checks the stored log and its snapshots against.

Each stored event links the one before it in its stream (``domain.chain``: the link of the
stored topic, version and payload bytes, keyed on a keyed chain); ``stored_bytes`` is the
payload as those links digest it. On a keyed chain a persisted read-model snapshot is sealed
with a MAC binding it to its read model's name and log position, so a snapshot put back from
an older copy, or of another model, is refused and rebuilt from the log.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from typing import Any

__all__ = ["SNAPSHOT_MAC", "open_snapshot", "seal_snapshot", "snapshot_mac", "stored_bytes"]

SNAPSHOT_MAC = b"\x00mac1:"
"""A read-model snapshot of a keyed chain: this prefix, its 32-byte HMAC, then the blob."""
_MAC_BYTES = 32
_log = logging.getLogger("ctxledger.ledger")


def stored_bytes(state: Any) -> bytes:
    """A payload column as bytes for digesting: NULL is empty, TEXT its UTF-8 (both damage
    that decoding reports; the chain check sees a payload that is not a JSON object)."""
    if state is None:
        return b""
    if isinstance(state, str):
        return state.encode("utf-8", "surrogatepass")
    return bytes(state)


def snapshot_mac(key: bytes, name: str, position: int, blob: bytes) -> bytes:
    """The MAC binding a snapshot to its read model's name and its log position."""
    h = hmac.new(key, f"ctxledger snapshot\n{name}\n{position}\n".encode(), hashlib.sha256)
    h.update(blob)
    return h.digest()


def seal_snapshot(key: bytes | None, name: str, position: int, blob: bytes) -> bytes:
    """The snapshot *blob* as stored: MAC-prefixed on a keyed chain (*key*), else as is."""
    if key is None:
        return blob
    return SNAPSHOT_MAC + snapshot_mac(key, name, position, blob) + blob


def open_snapshot(
    keyed: bool, key: bytes | None, name: str, position: int, stored: bytes
) -> bytes | None:
    """A stored snapshot's blob, its MAC checked on a keyed chain (*keyed*; *key* None: no
    master key here). None: refused (then rebuilt from the log)."""
    if not keyed:
        return stored
    if key is None or not stored.startswith(SNAPSHOT_MAC):
        return None
    mac, blob = (
        stored[len(SNAPSHOT_MAC) : len(SNAPSHOT_MAC) + _MAC_BYTES],
        stored[len(SNAPSHOT_MAC) + _MAC_BYTES :],
    )
    if not hmac.compare_digest(mac, snapshot_mac(key, name, position, blob)):
        _log.warning("the saved read model %r does not match its MAC: rebuilt from the log", name)
        return None
    return blob
