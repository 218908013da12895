"""Which text of which event is free text: what redaction screens and content sealing encrypts.

One table for both, so a field the scanner screens is a field ``erase`` can destroy, and a
new field is added in one place. ``map_sealed_text`` visits the free text that belongs to an
agent — sealed under the key of the item it is about, or under the agent's own key (item id
``""``) — so erasing the item or the agent leaves none of it readable. ``map_plain_text``
visits the free text that stays in the clear: project-memory events (no agent key; memory
bodies live in the erasable catalog) and the reason of an erase (what ``inspect`` shows of
the erase after it). Identifiers (item, agent, pack, memory and group ids, source ids), enum
values, hashes and names the engine chose are not free text: ids are screened when recorded
(``ContextEngine._screened``) and must stay readable for streams and keys.
"""

from __future__ import annotations

from collections.abc import Callable

import msgspec

from ctxledger.domain import events as ev
from ctxledger.domain.model import Item
from ctxledger.domain.request import BuildRequest

__all__ = [
    "ERASED_REASON",
    "ITEM_TEXT_FIELDS",
    "TextFn",
    "map_item",
    "map_plain_text",
    "map_sealed_text",
]

TextFn = Callable[[str, str], str]
"""``fn(item_id, text)``: the text to keep in place of *text* (item id ``""``: the agent's
own text). Called only for non-empty text."""

ITEM_TEXT_FIELDS = ("content", "task", "stage", "phase", "tool_signature")
"""An item's free-text fields besides its ``files`` and ``symbols``."""

ERASED_REASON = "erased: "
"""How the removal reasons of an erase start (``erased: <the erase's reason>``): they stay in
the clear, as the erase's own reason does, so a writer without the master key can erase."""

_REQUEST_TEXT_FIELDS = ("task", "phase")
_REQUEST_LIST_FIELDS = ("files", "symbols", "keywords", "failures")

_replace = msgspec.structs.replace


def _one(fn: TextFn, key: str, text: str) -> str:
    # A value of the wrong type is left for the append's typed check to refuse.
    return fn(key, text) if isinstance(text, str) and text else text


def _many(fn: TextFn, key: str, texts: object) -> tuple[str, ...]:
    if not isinstance(texts, tuple | list):
        return texts  # type: ignore[return-value]  # refused later, as in _one
    return tuple(_one(fn, key, t) for t in texts)


def map_item(item: Item, fn: TextFn) -> Item:
    """*item* with *fn* applied to its free text (under the item's own key)."""
    changes: dict[str, object] = {}
    for name in ITEM_TEXT_FIELDS:
        value = getattr(item, name)
        if value and isinstance(value, str):
            new = fn(item.id, value)
            if new != value:
                changes[name] = new
    for name in ("files", "symbols"):
        values: tuple[str, ...] = getattr(item, name)
        if values and isinstance(values, tuple):
            new_values = _many(fn, item.id, values)
            if new_values != values:
                changes[name] = new_values
    return _replace(item, **changes) if changes else item


def _request(request: BuildRequest, fn: TextFn) -> BuildRequest:
    changes: dict[str, object] = {}
    for name in _REQUEST_TEXT_FIELDS:
        value = getattr(request, name)
        if value and (new := fn("", value)) != value:
            changes[name] = new
    for name in _REQUEST_LIST_FIELDS:
        values: tuple[str, ...] = getattr(request, name)
        if values and (new_values := _many(fn, "", values)) != values:
            changes[name] = new_values
    return _replace(request, **changes) if changes else request


def map_sealed_text(event: ev.Event, fn: TextFn) -> ev.Event:
    """*event* with *fn* applied to each free-text field that belongs to its agent."""
    match event:
        case ev.ItemRecorded() | ev.SteeringNoteAdded():
            item = map_item(event.item, fn)
            return event if item is event.item else _replace(event, item=item)
        case ev.ItemPinned() | ev.ItemUnpinned():
            return _replace(event, by=_one(fn, event.item_id, event.by)) if event.by else event
        case ev.ItemRemoved():
            if event.reason.startswith(ERASED_REASON):
                return event
            return _replace(event, reason=_one(fn, event.item_id, event.reason))
        case ev.FindingVerified():
            if not (event.by or event.evidence):
                return event
            return _replace(
                event,
                by=_one(fn, event.item_id, event.by),
                evidence=_one(fn, event.item_id, event.evidence),
            )
        case ev.AgentRegistered():
            if not event.agent.task:
                return event
            agent = _replace(event.agent, task=fn("", event.agent.task))
            return _replace(event, agent=agent)
        case ev.AgentConfigured():
            return _replace(event, by=fn("", event.by)) if event.by else event
        case ev.FindingPromoted():
            return _replace(event, by=_one(fn, event.item_id, event.by)) if event.by else event
        case ev.ContextBuildingStarted():
            request = _request(event.request, fn) if event.request is not None else None
            force = _one(fn, "", event.force_rebuild)
            if request is event.request and force == event.force_rebuild:
                return event
            return _replace(event, request=request, force_rebuild=force)
        case ev.ContextPackBuilt():
            if not any(d.content for d in event.decisions):
                return event
            decisions = tuple(
                _replace(d, content=fn(d.item_id, d.content)) if d.content else d
                for d in event.decisions
            )
            return _replace(event, decisions=decisions)
        case ev.GenerationRefreshed():
            if not (event.reason or event.phase):
                return event
            return _replace(
                event, reason=_one(fn, "", event.reason), phase=_one(fn, "", event.phase)
            )
        case ev.ContextBuildingFailed() | ev.ContextBuildingInterrupted():
            return _replace(event, reason=fn("", event.reason)) if event.reason else event
        case ev.TurnFailed():
            if not (event.message or event.code):
                return event
            return _replace(
                event, message=_one(fn, "", event.message), code=_one(fn, "", event.code)
            )
    return event


def map_plain_text(event: ev.Event, fn: TextFn) -> ev.Event:
    """*event* with *fn* applied to its free text that stays in the clear."""
    match event:
        case ev.MemoryVerified() | ev.RecallSwitched():
            return _replace(event, by=fn("", event.by)) if event.by else event
        case ev.MemoryMarkedStale() | ev.MemoryRetired() | ev.ContentErased():
            return _replace(event, reason=fn("", event.reason)) if event.reason else event
        case ev.ItemRemoved() if event.reason.startswith(ERASED_REASON):
            return _replace(event, reason=fn(event.item_id, event.reason))
    return event
