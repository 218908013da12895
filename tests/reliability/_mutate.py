"""Mutations of stored event payloads and topics, for the decoder fuzzing test."""

from __future__ import annotations

import random
from typing import Any

import msgspec

from ctxledger.domain.events import EVENT_TYPES

__all__ = ["HOSTILE_TOPICS", "HOSTILE_VALUES", "mutate", "mutate_topic"]

HOSTILE_TOPICS = (
    # type names of arbitrary modules (several not imported by this process)
    "os.system.v1",
    "subprocess.Popen.v1",
    "builtins.eval.v1",
    "builtins:exec.v1",
    "__main__.Evil.v1",
    "importlib.import_module.v1",
    "antigravity.v1",
    "this.v1",
    "tkinter.Tk.v1",
    "turtle.Turtle.v1",
    "smtplib.SMTP.v1",
    "xmlrpc.server.SimpleXMLRPCServer.v1",
    "ctypes.CDLL.v1",
    "pickle.loads.v1",
    "ctxledger.adapters.cli.main:main.v1",
    "ctxledger.domain.events.ItemPinned.v1",
    "eventsourcing.domain:Aggregate.Event.v1",
    "tests.reliability.evil.v1",
    # catalogue look-alikes and non-event classes
    "Item.v1",
    "EventBase.v1",
    "Event.v1",
    "AgentIdentity.v1",
    "itempinned.v1",
    "ItemPinned.V1",
    "ItemPinned .v1",
    " ItemPinned.v1",
    "ItemPinned\x00.v1",
    "ItemPinned.v1.v1",
    # malformed and future versions
    "ItemPinned",
    "ItemPinned.v",
    "ItemPinned.v0",
    "ItemPinned.v-1",
    "ItemPinned.v+1",
    "ItemPinned.v1 ",
    "ItemPinned.v 1",
    "ItemPinned.v²",
    "ItemPinned.v١",
    "ItemPinned.v0x1",
    "ItemPinned.v2",
    "ItemPinned.v99999999",
    "ItemPinned.v" + "9" * 5000,
    "",
    ".v1",
    "\x00",
    "\ud800.v1",
)

HOSTILE_VALUES: tuple[bytes, ...] = (
    b"null",
    b"true",
    b"false",
    b"-1",
    b"0",
    b"1.5",
    b"-0.0",
    b"9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551616",
    b"9" * 400,
    b"-" + b"9" * 400,
    b"1e400",
    b"-1e400",
    b"1e-400",
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b'""',
    b'"x"',
    b'"' + b"A" * 70_000 + b'"',
    b"[]",
    b"{}",
    b"[" * 200 + b"]" * 200,
    b"[" * 5000 + b"]" * 5000,
    b'{"type":"ItemPinned"}',
    b'{"type":"os.system"}',
    b'{"__class__":"os.system","args":["id"]}',
    b'{"py/object":"subprocess.Popen"}',
    b'{"!!python/object/apply:os.system":["id"]}',
    b'"os.system"',
    b'"\\ud800"',
    b'"\\u0000"',
    b'"\\u202e\\u2066"',
    b'"2026-13-45T99:99:99Z"',
    b'"2026-01-01T00:00:00+99:00"',
    b'"2026-01-01T00:00:00"',
    b'"0000-00-00"',
    b'"L0"',
    b'"not_a_layer"',
    b"[1,2,3]",
    b'{"a":' * 100 + b"1" + b"}" * 100,
)

_SENTINEL = "\x00fuzz-sentinel\x00"
_SENTINEL_JSON = msgspec.json.encode(_SENTINEL)


def _slots(value: Any, out: list[tuple[Any, Any]]) -> None:
    if isinstance(value, dict):
        for key in list(value):
            out.append((value, key))
            _slots(value[key], out)
    elif isinstance(value, list):
        for i in range(len(value)):
            out.append((value, i))
            _slots(value[i], out)


def _structural(payload: bytes, rnd: random.Random) -> bytes:
    try:
        doc = msgspec.json.decode(payload)
    except msgspec.DecodeError:
        return payload
    slots: list[tuple[Any, Any]] = []
    _slots(doc, slots)
    if not slots:
        return payload
    container, key = rnd.choice(slots)
    action = rnd.randrange(6)
    if action == 0 and isinstance(container, dict):
        del container[key]  # a required field missing
        return msgspec.json.encode(doc)
    if action == 1 and isinstance(container, dict):
        container["type" if rnd.random() < 0.5 else "__class__"] = rnd.choice(
            [*EVENT_TYPES, "os.system", "builtins.eval", "Item", "", "ItemPinned\x00"]
        )
        return msgspec.json.encode(doc)
    if action == 2:
        container[key] = container[key] if rnd.random() < 0.5 else [container[key]]
        return msgspec.json.encode(doc)
    container[key] = _SENTINEL  # a wrong type or a hostile value at any depth
    return msgspec.json.encode(doc).replace(_SENTINEL_JSON, rnd.choice(HOSTILE_VALUES), 1)


def _bytewise(payload: bytes, rnd: random.Random) -> bytes:
    data = bytearray(payload)
    action = rnd.randrange(7)
    if action == 0 or not data:
        return bytes(data[: rnd.randrange(len(data) + 1)])  # truncated JSON
    i = rnd.randrange(len(data))
    if action == 1:
        data[i] = rnd.randrange(256)
    elif action == 2:
        data.insert(i, rnd.choice(b'{}[]",:\\0123456789eE+-.\x00\xff'))
    elif action == 3:
        del data[i : i + rnd.randint(1, 16)]
    elif action == 4:
        return b"\xef\xbb\xbf" + bytes(data)  # BOM
    elif action == 5:
        return bytes(data).decode("utf-8", "replace").encode("utf-16")
    else:
        j = rnd.randrange(len(data))
        data[i], data[j] = data[j], data[i]
    return bytes(data)


def mutate(payload: bytes, rnd: random.Random) -> bytes:
    """One mutated payload: structural (wrong types, hostile values, missing fields, foreign
    tags, at any depth), byte-level (truncation, flips, inserts, encodings) or both."""
    kind = rnd.random()
    if kind < 0.55:
        return _structural(payload, rnd)
    if kind < 0.85:
        return _bytewise(payload, rnd)
    return _bytewise(_structural(payload, rnd), rnd)


def mutate_topic(topic: str, rnd: random.Random) -> str:
    """Mostly the event's own topic; sometimes another type's, or a hostile one."""
    roll = rnd.random()
    if roll < 0.7:
        return topic
    if roll < 0.85:
        name = rnd.choice(list(EVENT_TYPES))
        return f"{name}.v{EVENT_TYPES[name].schema_version}"
    return rnd.choice(HOSTILE_TOPICS)
