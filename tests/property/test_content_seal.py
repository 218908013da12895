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

from ctxledger.adapters.security.content_seal import SEALED_PREFIX, Keyring, MasterKeyError
from ctxledger.adapters.security.key_table import MemoryKeyTable
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


_ITEM_PATHS = ("content", "task", "stage", "phase", "tool_signature", "files[]", "symbols[]")
_REQUEST_PATHS = ("task", "phase", "files[]", "symbols[]", "keywords[]", "failures[]")

# (event type) → (path of a struct holding free text, its fields, the field naming the item
# the text is sealed under — None: the agent's own key, item "")
SPEC: dict[type[ev.EventBase], list[tuple[str, tuple[str, ...], str | None]]] = {
    ev.ItemRecorded: [("item", _ITEM_PATHS, "item.id")],
    ev.SteeringNoteAdded: [("item", _ITEM_PATHS, "item.id")],
    ev.ItemPinned: [("", ("by",), "item_id")],
    ev.ItemUnpinned: [("", ("by",), "item_id")],
    ev.ItemRemoved: [("", ("reason",), "item_id")],  # but an erase's "erased: …" stays plain
    ev.FindingVerified: [("", ("by", "evidence"), "item_id")],
    ev.FindingPromoted: [("", ("by",), "item_id")],
    ev.AgentRegistered: [("agent", ("task",), None)],
    ev.AgentConfigured: [("", ("by",), None)],
    ev.ContextBuildingStarted: [("request", _REQUEST_PATHS, None), ("", ("force_rebuild",), None)],
    ev.ContextPackBuilt: [("decisions[]", ("content",), ".item_id")],
    ev.ContextBuildingFailed: [("", ("reason",), None)],
    ev.ContextBuildingInterrupted: [("", ("reason",), None)],
    ev.GenerationRefreshed: [("", ("reason", "phase"), None)],
    ev.TurnFailed: [("", ("message", "code"), None)],
}
"""Every free-text field sealed under an agent's keys: the specification, by hand."""


def _get(data: Any, path: str) -> Any:
    for part in path.split(".") if path else []:
        data = data.get(part) if isinstance(data, dict) else None
    return data


def _holders(data: Any, path: str) -> list[Any]:
    """The dicts at *path* (``x[]``: each element of the list at x)."""
    if path.endswith("[]"):
        found = _get(data, path[:-2])
        return [d for d in found or [] if isinstance(d, dict)]
    found = _get(data, path)
    return [found] if isinstance(found, dict) else []


def _fields(e: ev.Event) -> list[tuple[dict[str, Any], str, str]]:
    """(holder dict, field, item id) of each free-text field of *e*, as builtins."""
    data: Any = msgspec.to_builtins(e)
    agent = ev.event_agent(e)
    found: list[tuple[dict[str, Any], str, str]] = []
    if not agent:
        return found
    if isinstance(e, ev.ItemRemoved) and e.reason.startswith("erased: "):
        return found
    for holder_path, names, key in SPEC.get(type(e), []):
        for holder in _holders(data, holder_path):
            item = (
                ""
                if key is None
                else str(holder.get(key[1:], "") if key.startswith(".") else _get(data, key) or "")
            )
            for name in names:
                found.append((holder, name, item))
    return found


def free_text(e: ev.Event) -> list[tuple[str, str, str]]:
    """(agent, item, text) of every free-text field of *e* — the specification."""
    agent = ev.event_agent(e)
    out: list[tuple[str, str, str]] = []
    for holder, name, item in _fields(e):
        if name.endswith("[]"):
            out += [(agent, item, t) for t in holder.get(name[:-2], [])]
        else:
            out.append((agent, item, holder.get(name, "")))
    return out


def without_text(e: ev.Event) -> Any:
    """*e* as builtins with its free-text fields blanked."""
    data: Any = msgspec.to_builtins(e)
    if not _fields(e):
        return data
    for holder_path, names, _ in SPEC.get(type(e), []):
        for holder in _holders(data, holder_path):
            for name in names:
                if name.endswith("[]"):
                    if name[:-2] in holder:
                        holder[name[:-2]] = ["" for _ in holder[name[:-2]]]
                elif name in holder:
                    holder[name] = ""
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
    # events without sealed text need no key (an erase appends them: its reasons stay plain)
    removed = ev.ItemRemoved(at=opened.at, agent_id="a", item_id="i1", reason="erased: leak")
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
    from ctxledger.adapters.security.content_seal import master_key_from_env

    monkeypatch.setenv("CTXLEDGER_MASTER_KEY", base64.b64encode(b"short").decode())
    with pytest.raises(MasterKeyError, match="5 bytes"):
        master_key_from_env()
    monkeypatch.setenv("CTXLEDGER_MASTER_KEY", "not base64!")
    with pytest.raises(MasterKeyError, match="not base64"):
        master_key_from_env()
    monkeypatch.setenv("CTXLEDGER_MASTER_KEY", base64.b64encode(MASTER).decode())
    assert master_key_from_env() == MASTER
