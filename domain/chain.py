"""Tamper evidence: a hash chain per stream over the stored bytes.

Every payload the ledger stores carries ``prev``: the link of its stream's previous event
(the first event of a stream links to the stream id). It is a field of the stored JSON, not
of the event types: decoding ignores it, so events read back equal to what was appended. A link digests what is stored — the topic,
the stream version and the payload bytes, which hold the event's own ``prev`` — so changing,
removing or inserting any event of a stream breaks the link of the event after it, and a
version gap shows where rows went. What the chain cannot show by itself: a change to the
*last* event of a stream (nothing links to it yet), or a file rewritten whole with a rebuilt
chain. Publishing the stream heads (``ctxledger audit --heads``) and comparing them later
anchors those too.

Links are the first 128 bits of SHA-256, hex: collision resistance far beyond what an
edit needs to be caught, at 32 characters per event. Anyone can recompute them, so on their
own they show accidents and careless edits, not a forger who rewrites the links too. A
*keyed* chain (an encrypted ledger created since links could be keyed: its key table holds a
random chain key wrapped by the master key) links with HMAC-SHA-256 under that key instead:
without the master key no one can make a link that verifies.

Ledgers written before the chain have events without ``prev``: a stream's chain starts at
its first event that has one (the audit says how many events precede it).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from ctxledger.domain.free_text import ERASED_REASON

__all__ = [
    "LINK_HEX",
    "ChainCheck",
    "Tamper",
    "chain_start",
    "head_signature",
    "keyless_erasure",
    "link",
    "payload_agent",
    "stored_prev",
    "stream_agent",
    "with_prev",
]

LINK_HEX = 32


def _digest(key: bytes | None) -> Any:
    return hashlib.sha256() if key is None else hmac.new(key, digestmod=hashlib.sha256)


def chain_start(stream_id: str, key: bytes | None = None) -> str:
    """The link the first event of *stream_id* carries (keyed under *key*, if any)."""
    h = _digest(key)
    h.update(b"ctxledger stream\n" + stream_id.encode("utf-8", "surrogatepass"))
    return str(h.hexdigest()[:LINK_HEX])


def link(topic: str, version: int, payload: bytes, key: bytes | None = None) -> str:
    """The link of one stored event: what the next event of its stream carries as ``prev``
    (an HMAC under *key* on a keyed chain)."""
    h = _digest(key)
    # surrogatepass: a damaged stored topic (lone surrogates) still has one digest
    h.update(f"{topic}\n{version}\n".encode("utf-8", "surrogatepass"))
    h.update(payload)
    return str(h.hexdigest()[:LINK_HEX])


def head_signature(key: bytes, stream_id: str, version: int, head_link: str) -> str:
    """The signature of a published stream head (``audit --heads`` on a keyed chain)."""
    data = f"ctxledger head\n{stream_id}\n{version}\n{head_link}"
    return hmac.new(key, data.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def with_prev(payload: bytes, prev: str, op: str = "") -> bytes:
    """The stored form of an encoded event: its JSON object with ``"prev"`` first (and
    ``"op"``, the append's idempotency key, on the first event of an append). Decoding into
    the event's type ignores both (they belong to storage, like the topic), so an event reads
    back equal to what was appended."""
    if not payload.startswith(b"{"):
        raise ValueError("an encoded event is a JSON object")
    rest = payload[1:]
    sep = b"" if rest == b"}" else b","
    head = b'{"prev":"' + prev.encode("ascii") + b'"'
    if op:
        head += b',"op":"' + op.encode("ascii") + b'"'
    return head + sep + rest


class _Prev(msgspec.Struct):
    prev: str = ""


_PREV = msgspec.json.Decoder(_Prev)


def stored_prev(payload: bytes) -> str | None:
    """The ``prev`` a stored payload carries ("" when it has none); None when the payload is
    not a JSON object (damage the decoder reports on its own)."""
    try:
        return _PREV.decode(payload).prev
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


class _AgentRef(msgspec.Struct):
    agent_id: str = ""


class _Agentful(msgspec.Struct):
    agent_id: str = ""
    agent: _AgentRef | None = None


_AGENT = msgspec.json.Decoder(_Agentful)


def payload_agent(payload: bytes) -> str:
    """The agent a stored event is about ("" when it names none or does not decode)."""
    try:
        found = _AGENT.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return ""
    return found.agent_id or (found.agent.agent_id if found.agent is not None else "")


def stream_agent(stream_id: str, agent_id: str) -> bool:
    """Whether *agent_id* may appear in *stream_id*: an agent stream (``ctx/<session>/<agent>``)
    holds only its own agent's events; other streams are not checked."""
    return not stream_id.startswith("ctx/") or stream_id.endswith("/" + agent_id)


@dataclass(frozen=True, slots=True)
class Tamper:
    """One break in a chain, at the global position of the event where it shows."""

    position: int
    stream_id: str
    version: int
    kind: str
    """``version_gap`` (rows removed, or a row inserted past the end), ``rewritten`` (the
    previous event's stored bytes changed, or an event was inserted or removed before this
    one), ``unlinked`` (an event without ``prev`` after the stream's chain began), or
    ``undecodable`` (a payload that is not a JSON object), ``agent_mismatch`` (an event about
    another agent than its stream's)."""
    detail: str = ""


@dataclass(slots=True)
class _Stream:
    version: int
    link: str
    chained: bool
    legacy: int
    plain: str = ""
    """On a keyed chain, the unkeyed link of the same event (what a writer without the key
    puts in an erasure's ``prev``)."""


class _Erasure(msgspec.Struct):
    reason: str = ""


_ERASURE = msgspec.json.Decoder(_Erasure)


def keyless_erasure(topic: str, payload: bytes) -> bool:
    """Whether a stored event is one a writer without the master key may append to a keyed
    chain: an erasure (``ContentErased``, or the ``ItemRemoved`` "erased: …" it comes with) —
    destroying keys needs no master key, so its link is unkeyed."""
    if topic.startswith("ContentErased."):
        return True
    if not topic.startswith("ItemRemoved."):
        return False
    try:
        return _ERASURE.decode(payload).reason.startswith(ERASED_REASON)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False


@dataclass(slots=True)
class ChainCheck:
    """Checks every stream's chain over stored rows fed in log order (``add``)."""

    streams: dict[str, _Stream] = field(default_factory=dict)
    tampered: list[Tamper] = field(default_factory=list)
    key: bytes | None = None
    """The chain key of a keyed chain (links are HMACs under it)."""
    links: bool = True
    """False: compare versions and agents only (a keyed chain read without its key)."""
    wanted: dict[tuple[str, int], str] = field(default_factory=dict)
    """(stream, version) pairs whose link to keep (``audit --against``): filled in by ``add``."""
    keyless: int = 0
    """Erasures a writer without the key appended to a keyed chain (``keyless_erasure``)."""

    def add(self, position: int, stream_id: str, version: int, topic: str, payload: bytes) -> None:
        s = self.streams.get(stream_id)
        expected_version = 1 if s is None else s.version + 1
        expected_link = chain_start(stream_id, self.key) if s is None else s.link
        prev = stored_prev(payload)
        if prev is None:
            self._flag(position, stream_id, version, "undecodable", "payload is not a JSON object")
        elif version != expected_version:
            self._flag(
                position,
                stream_id,
                version,
                "version_gap",
                f"version {version} follows {expected_version - 1}",
            )
        elif prev:
            # (the first linked event after legacy ones links to the last legacy event)
            if self.links and prev != expected_link:
                plain = chain_start(stream_id) if s is None else s.plain
                if self.key is not None and prev == plain and keyless_erasure(topic, payload):
                    self.keyless += 1
                else:
                    self._flag(position, stream_id, version, "rewritten", "previous link differs")
        elif s is not None and s.chained:
            self._flag(position, stream_id, version, "unlinked", "no link after the chain began")
        agent_id = payload_agent(payload) if prev is not None else ""
        if agent_id and not stream_agent(stream_id, agent_id):
            self._flag(position, stream_id, version, "agent_mismatch", f"event of {agent_id!r}")
        chained = bool(prev) or (s is not None and s.chained)
        legacy = (0 if s is None else s.legacy) + (0 if chained else 1)
        own = link(topic, version, payload, self.key)
        if (stream_id, version) in self.wanted:
            self.wanted[stream_id, version] = own
        plain = link(topic, version, payload) if self.key is not None else own
        self.streams[stream_id] = _Stream(version, own, chained, legacy, plain)

    def _flag(self, position: int, stream_id: str, version: int, kind: str, detail: str) -> None:
        self.tampered.append(Tamper(position, stream_id, version, kind, detail))

    def feed(self, rows: Iterable[tuple[int, str, int, str, bytes]]) -> ChainCheck:
        for position, stream_id, version, topic, payload in rows:
            self.add(position, stream_id, version, topic, payload)
        return self

    @property
    def heads(self) -> dict[str, tuple[int, str]]:
        """Each stream's last version and the link of its last event: what to publish."""
        return {sid: (s.version, s.link) for sid, s in sorted(self.streams.items())}

    @property
    def legacy_events(self) -> int:
        """Events stored before their stream's chain began (ledgers older than the chain)."""
        return sum(s.legacy for s in self.streams.values())
