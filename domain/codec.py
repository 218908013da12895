"""Encoding and allow-list decoding of events (msgspec JSON; no imports from stored data)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

import msgspec

from ctxledger.domain.errors import (
    DecodeError,
    FutureSchemaError,
    InvalidInputError,
    UnknownEventTypeError,
)
from ctxledger.domain.events import EVENT_TYPES, UPCASTERS, Event, EventBase, Upcaster, topic_of

__all__ = [
    "check_struct",
    "decode_event",
    "encode_checked",
    "encode_event",
    "encode_read_back",
    "parse_topic",
]

_ENCODER = msgspec.json.Encoder()
_DECODERS: dict[str, msgspec.json.Decoder[Any]] = {
    name: msgspec.json.Decoder(cls) for name, cls in EVENT_TYPES.items()
}
_MAX_PAYLOAD = 64 * 1024 * 1024


def encode_event(event: EventBase) -> tuple[str, bytes]:
    """Return ``(topic, payload)`` for storage."""
    return topic_of(event), _ENCODER.encode(event)


def encode_checked(event: EventBase) -> tuple[str, bytes]:
    """``encode_event``, refused unless the payload decodes with the very decoder that will
    read it back: msgspec encodes whatever it is given (a float where the schema says int,
    a bool, None, an out-of-range count), and one such event would make every later reader
    of the ledger fail. InvalidInputError names the event and the field; nothing is stored."""
    topic, payload, _ = encode_read_back(event)
    return topic, payload


def encode_read_back(event: EventBase) -> tuple[str, bytes, Event]:
    """``encode_checked``, and the event its payload decodes to: what every reader of the
    stored row gets (the storage fields a ledger adds in front, ``prev`` and ``op``, are
    ignored by the decoder)."""
    name = type(event).__name__
    try:
        topic, payload = encode_event(event)
    except (msgspec.EncodeError, TypeError, ValueError, OverflowError, UnicodeError) as exc:
        raise InvalidInputError(f"{name} cannot be stored: {exc}") from None
    if len(payload) > _MAX_PAYLOAD:
        raise InvalidInputError(f"{name} payload of {len(payload)} bytes is too large")
    decoder = _DECODERS.get(name)
    if decoder is None:
        raise InvalidInputError(f"{name} is not in the event catalogue")
    try:
        back: Event = decoder.decode(payload)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as exc:
        raise InvalidInputError(f"{name} would not read back: {exc}") from None
    except RecursionError:
        raise InvalidInputError(f"{name} nests too deeply") from None
    return topic, payload, back


_STRUCT_DECODERS: dict[type[Any], msgspec.json.Decoder[Any]] = {}

S = TypeVar("S", bound=msgspec.Struct)


def check_struct(value: S, what: str = "") -> S:
    """*value* (a model struct from a caller), refused with InvalidInputError naming the field
    unless it reads back as its own type: struct constructors check nothing, so a budget of
    ``None`` or ``8000.0`` would otherwise reach the planner or the log."""
    cls = type(value)
    decoder = _STRUCT_DECODERS.get(cls)
    if decoder is None:
        decoder = _STRUCT_DECODERS[cls] = msgspec.json.Decoder(cls)
    try:
        decoder.decode(_ENCODER.encode(value))
    except (msgspec.EncodeError, msgspec.DecodeError, ValueError, TypeError, OverflowError) as exc:
        raise InvalidInputError(f"{what or cls.__name__}: {exc}") from None
    return value


def parse_topic(topic: str, *, position: int | None = None) -> tuple[str, int]:
    """Split ``Name.vN``; the name must be in the allow-list."""
    name, sep, version_text = topic.rpartition(".v")
    # isascii: str.isdigit() also accepts "²" or "١", which int() rejects or reads as 1.
    if not sep or not (version_text.isascii() and version_text.isdigit()) or len(version_text) > 6:
        raise UnknownEventTypeError(f"malformed event topic {topic[:80]!r}", position=position)
    if name not in EVENT_TYPES:
        raise UnknownEventTypeError(
            f"unknown event type {name[:80]!r} (not in the catalogue)", position=position
        )
    return name, int(version_text)


def decode_event(
    topic: str,
    payload: bytes,
    *,
    position: int | None = None,
    upcasters: Mapping[tuple[str, int], Upcaster] = UPCASTERS,
) -> Event:
    """Decode one stored event, upcasting older versions; every failure is a DecodeError."""
    name, version = parse_topic(topic, position=position)
    cls = EVENT_TYPES[name]
    current = cls.schema_version
    if version > current:
        raise FutureSchemaError(
            f"{name} schema version {version} is newer than this code's {current}",
            position=position,
        )
    if len(payload) > _MAX_PAYLOAD:
        raise DecodeError(f"{name} payload of {len(payload)} bytes is too large", position=position)
    try:
        if version == current:
            return cast(Event, _DECODERS[name].decode(payload))
        raw = msgspec.json.decode(payload)
        if not isinstance(raw, dict):
            raise DecodeError(f"{name} payload is not a JSON object", position=position)
        for step in range(version, current):
            upcast = upcasters.get((name, step))
            if upcast is None:
                raise DecodeError(
                    f"no upcaster for {name} from schema version {step}", position=position
                )
            raw = upcast(raw)
        return cast(Event, msgspec.convert(raw, cls))
    except DecodeError:
        raise
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as exc:
        raise DecodeError(f"{name} payload does not decode: {exc}", position=position) from None
    except RecursionError:
        raise DecodeError(f"{name} payload nests too deeply", position=position) from None
