"""Allow-list decoding: every bad stored payload is a typed DecodeError naming its position."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest

from ctxledger.domain.codec import decode_event, encode_event
from ctxledger.domain.errors import DecodeError, FutureSchemaError, UnknownEventTypeError
from ctxledger.domain.events import EVENT_TYPES, ContextPackBuilt, ItemPinned

AT = datetime(2026, 1, 1, tzinfo=UTC)


def test_topic_is_an_allow_listed_name_with_version() -> None:
    topic, payload = encode_event(ItemPinned(at=AT, agent_id="a", item_id="i"))
    assert topic == "ItemPinned.v1"
    assert msgspec.json.decode(payload)["type"] == "ItemPinned"


@pytest.mark.parametrize(
    ("topic", "error"),
    [
        ("os.system.v1", UnknownEventTypeError),
        ("eventsourcing.domain:Aggregate.Event.v1", UnknownEventTypeError),
        ("ItemPinned", UnknownEventTypeError),
        ("ItemPinned.vX", UnknownEventTypeError),
        ("ItemPinned.v99", FutureSchemaError),
        ("", UnknownEventTypeError),
    ],
)
def test_bad_topics_are_typed_errors_and_import_nothing(
    topic: str, error: type[DecodeError]
) -> None:
    before = set(sys.modules)
    with pytest.raises(error) as info:
        decode_event(topic, b"{}", position=42)
    assert info.value.position == 42
    assert "position 42" in str(info.value)
    assert set(sys.modules) == before


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b'{"type":"ItemPinned","at":"2026-01-01T00:00:00Z","agent_id":"a"',  # truncated
        b'{"type":"ItemPinned","at":"2026-01-01T00:00:00Z","agent_id":1,"item_id":"i"}',
        b'{"type":"ItemPinned","at":"not a time","agent_id":"a","item_id":"i"}',
        b'{"type":"ItemUnpinned","at":"2026-01-01T00:00:00Z","agent_id":"a","item_id":"i"}',
        b"[1,2,3]",
        b"\xff\xfe",
        b'{"type":"ItemPinned","at":"2026-01-01T00:00:00","agent_id":"a","item_id":"i"}'[:-1],
    ],
)
def test_corrupt_payloads_are_decode_errors(payload: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        decode_event("ItemPinned.v1", payload, position=7)
    assert info.value.position == 7


def test_huge_numbers_are_decode_errors() -> None:
    payload = (
        b'{"type":"ContextPackBuilt","at":"2026-01-01T00:00:00Z","agent_id":"a",'
        b'"pack_id":"p","budget_used":' + b"9" * 400 + b"}"
    )
    with pytest.raises(DecodeError):
        decode_event("ContextPackBuilt.v1", payload)


def test_upcasting_hook_lifts_an_old_payload() -> None:
    # A hypothetical v0 of ContextPackBuilt named the field "used"; the hook renames it.
    def v0_to_v1(raw: dict[str, Any]) -> dict[str, Any]:
        raw = dict(raw)
        raw["budget_used"] = raw.pop("used")
        return raw

    payload = (
        b'{"type":"ContextPackBuilt","at":"2026-01-01T00:00:00Z","agent_id":"a",'
        b'"pack_id":"p","used":12}'
    )
    event = decode_event(
        "ContextPackBuilt.v0", payload, upcasters={("ContextPackBuilt", 0): v0_to_v1}
    )
    assert isinstance(event, ContextPackBuilt)
    assert event.budget_used == 12


def test_missing_upcaster_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="no upcaster"):
        decode_event("ContextPackBuilt.v0", b'{"type":"ContextPackBuilt"}', upcasters={})


def test_catalogue_names_the_mandatory_lifecycle_events() -> None:
    for name in (
        "ContextBuildingStarted",
        "ContextPackBuilt",
        "ContextBuildingFailed",
        "ContextBuildingInterrupted",
        "GenerationRefreshed",
        "MemoryPromoted",
    ):
        assert name in EVENT_TYPES
