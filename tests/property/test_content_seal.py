"""Crypto-shredding invariants of ``adapters.content_seal`` over arbitrary events.

* Sealing then opening any list of events gives the events back, field for field.
* A sealed event carries none of its free text in the clear: each free-text field is empty or
  sealed (``SEALED_PREFIX``), and the stored JSON holds no free text of 8+ characters.
* After erasing some (agent, item) pairs, exactly the free text under those pairs reads as
  the erased marker; every other field — ids, token counts, decisions, order — is unchanged.
* Snapshots seal and open; after an erase the old snapshot no longer opens.

The free-text fields are listed here, by hand, as the specification (not taken from the
module under test)."""

from __future__ import annotations

import base64
from datetime import datetime
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.adapters.content_seal import SEALED_PREFIX, Keyring, MasterKeyError
from ctxledger.adapters.key_table import MemoryKeyTable
from ctxledger.adapters.testing import events
from ctxledger.domain import events as ev
from ctxledger.domain.codec import encode_event
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import Item, Layer, Source

MASTER = bytes(range(32))
AT = "2026-12-04T12:00:00+00:00"


def _keyring(table: MemoryKeyTable | None = None, master: bytes | None = MASTER) -> Keyring:
    table = table or MemoryKeyTable()
    ring = Keyring(table, master)
    ring.start()
    return ring


def free_text(e: ev.Event) -> list[tuple[str, str, str]]:
    """(agent, item, text) of every free-text field of *e* — the specification."""
    if isinstance(e, ev.ItemRecorded | ev.SteeringNoteAdded):
        return [(e.agent_id, e.item.id, e.item.content)]
    if isinstance(e, ev.ContextPackBuilt):
        return [(e.agent_id, d.item_id, d.content) for d in e.decisions]
    if isinstance(e, ev.FindingVerified):
        return [(e.agent_id, e.item_id, e.evidence)]
    if isinstance(e, ev.TurnFailed):
        return [(e.agent_id, "", e.message)]
    return []


def without_text(e: ev.Event) -> Any:
    """*e* as builtins with its free-text fields blanked."""
    data: Any = msgspec.to_builtins(e)
    if isinstance(e, ev.ItemRecorded | ev.SteeringNoteAdded):
        data["item"]["content"] = ""
    elif isinstance(e, ev.ContextPackBuilt):
        for d in data.get("decisions", []):
            d["content"] = ""
    elif isinstance(e, ev.FindingVerified):
        data["evidence"] = ""
    elif isinstance(e, ev.TurnFailed):
        data["message"] = ""
    return data


event_lists = st.lists(events(), max_size=12)


@given(event_lists)
def test_sealing_then_opening_gives_the_events_back(batch: list[ev.Event]) -> None:
    ring = _keyring()
    sealed = ring.seal_events(batch)
    for original, stored in zip(batch, sealed, strict=True):
        assert without_text(stored) == without_text(original)
        payload = encode_event(stored)[1]
        elsewhere = msgspec.json.encode(without_text(stored))  # ids, tasks… may repeat it
        for (_, _, text), (_, _, kept) in zip(free_text(original), free_text(stored), strict=True):
            assert kept == "" if not text else kept.startswith(SEALED_PREFIX)
            as_json = msgspec.json.encode(text)[1:-1]
            if len(text) >= 8 and as_json not in elsewhere:
                assert as_json not in payload
    assert ring.open_events(list(sealed)) == batch


@given(event_lists, st.data())
def test_an_erase_changes_exactly_the_erased_text(
    batch: list[ev.Event], data: st.DataObject
) -> None:
    table = MemoryKeyTable()
    ring = _keyring(table)
    sealed = ring.seal_events(batch)
    pairs = sorted({(a, i) for e in batch for a, i, t in free_text(e) if t})
    chosen = data.draw(st.lists(st.sampled_from(pairs), unique=True) if pairs else st.just([]))
    for agent, item in chosen:
        ring.erase(agent, [item], reason="leak", at=AT)
    reader = Keyring(table, MASTER)  # a fresh process: nothing cached
    for original, opened in zip(batch, reader.open_events(list(sealed)), strict=True):
        assert without_text(opened) == without_text(original)
        for (a, i, text), (_, _, now) in zip(free_text(original), free_text(opened), strict=True):
            if text and (a, i) in chosen:
                assert now == f"[erased: leak, {AT}]"
            else:
                assert now == text
    assert reader.erased() >= set(chosen)


def _item(item_id: str, content: str) -> Item:
    return Item(id=item_id, layer=Layer.L0, source=Source.TOOL_LOG, content=content)


def _recorded(agent: str, item_id: str, content: str) -> ev.ItemRecorded:
    return ev.ItemRecorded(
        at=datetime.fromisoformat(AT), agent_id=agent, item=_item(item_id, content)
    )


def test_a_wrong_master_key_is_said_at_open() -> None:
    table = MemoryKeyTable()
    _keyring(table)
    with pytest.raises(MasterKeyError, match="does not open"):
        Keyring(table, bytes(32))


def test_without_a_master_key_sealed_text_reads_as_sealed_and_nothing_is_written() -> None:
    table = MemoryKeyTable()
    sealed = _keyring(table).seal_events([_recorded("a", "i1", "secret text")])
    reader = Keyring(table, None)
    assert reader.encrypted
    opened = reader.open_events(list(sealed))[0]
    assert isinstance(opened, ev.ItemRecorded)
    assert opened.item.content == "[sealed: no master key configured]"
    with pytest.raises(MasterKeyError, match="CTXLEDGER_MASTER_KEY"):
        reader.seal_events([_recorded("a", "i2", "more")])
    # events without free text need no key (an erase appends them)
    removed = ev.ItemRemoved(at=opened.at, agent_id="a", item_id="i1")
    assert reader.seal_events([removed]) == [removed]


def test_an_erased_item_id_cannot_be_recorded_again() -> None:
    ring = _keyring()
    ring.seal_events([_recorded("a", "i1", "one")])
    ring.erase("a", ["i1"], reason="leak", at=AT)
    with pytest.raises(InvalidInputError, match="new item id"):
        ring.seal_events([_recorded("a", "i1", "two")])


def test_snapshots_are_sealed_and_an_erase_retires_their_key() -> None:
    table = MemoryKeyTable()
    ring = _keyring(table)
    blob = b'{"pool": "the text of an item"}'
    sealed = ring.seal_blob(blob)
    assert blob not in sealed
    assert Keyring(table, MASTER).open_blob(sealed) == blob
    ring.erase("someone", None, reason="leak", at=AT)
    assert Keyring(table, MASTER).open_blob(sealed) is None
    assert ring.open_blob(ring.seal_blob(blob)) == blob  # a new snapshot key


def test_an_erase_needs_a_reason() -> None:
    with pytest.raises(InvalidInputError, match="reason"):
        _keyring().erase("a", None, reason=" ", at=AT)


def test_a_master_key_must_be_32_bytes_of_base64(monkeypatch: pytest.MonkeyPatch) -> None:
    from ctxledger.adapters.content_seal import master_key_from_env

    monkeypatch.setenv("CTXLEDGER_MASTER_KEY", base64.b64encode(b"short").decode())
    with pytest.raises(MasterKeyError, match="5 bytes"):
        master_key_from_env()
    monkeypatch.setenv("CTXLEDGER_MASTER_KEY", "not base64!")
    with pytest.raises(MasterKeyError, match="not base64"):
        master_key_from_env()
    monkeypatch.setenv("CTXLEDGER_MASTER_KEY", base64.b64encode(MASTER).decode())
    assert master_key_from_env() == MASTER
