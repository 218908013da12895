"""Manual-control decisions on one item of an agent's pool: pin, unpin, remove, verify.

Each takes the item as the pool holds it now (``None``: the pool has no such item) and returns
the event to append or raises the domain error. The engine calls them inside
``decide_and_append``, under the agent's stream lock and after catching up, so the guard rests
on the state the event is appended to; ``now`` is read only once the guard has passed.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from ctxledger.domain import events as ev
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import Item, Source

__all__ = ["decide_pin", "decide_remove", "decide_unpin", "decide_verify", "known_item"]


def known_item(agent_id: str, item_id: str, item: Item | None) -> Item:
    """*item*, or ``InvalidInputError`` if the agent's pool has no item *item_id*."""
    if item is None:
        raise InvalidInputError(f"agent {agent_id!r} has no item {item_id[:80]!r}")
    return item


def decide_pin(
    agent_id: str, item_id: str, item: Item | None, *, now: Callable[[], datetime], by: str = ""
) -> list[ev.Event]:
    known_item(agent_id, item_id, item)
    return [ev.ItemPinned(at=now(), agent_id=agent_id, item_id=item_id, by=by)]


def decide_unpin(
    agent_id: str, item_id: str, item: Item | None, *, now: Callable[[], datetime], by: str = ""
) -> list[ev.Event]:
    known_item(agent_id, item_id, item)
    return [ev.ItemUnpinned(at=now(), agent_id=agent_id, item_id=item_id, by=by)]


def decide_remove(
    agent_id: str, item_id: str, item: Item | None, *, now: Callable[[], datetime], reason: str
) -> list[ev.Event]:
    """Remove an item; a pinned or mandatory one must be unpinned first."""
    current = known_item(agent_id, item_id, item)
    if current.pinned or current.mandatory:
        raise InvalidInputError(f"item {item_id!r} is pinned or mandatory; unpin it first")
    return [ev.ItemRemoved(at=now(), agent_id=agent_id, item_id=item_id, reason=reason)]


def decide_verify(
    agent_id: str,
    item_id: str,
    item: Item | None,
    *,
    now: Callable[[], datetime],
    by: str = "",
    evidence: str = "",
) -> list[ev.Event]:
    """Verify exactly one finding; recalled memory is never a verified fact."""
    current = known_item(agent_id, item_id, item)
    if current.source == Source.RECALLED_MEMORY:
        raise InvalidInputError("recalled memory cannot be verified as a fact")
    return [
        ev.FindingVerified(at=now(), agent_id=agent_id, item_id=item_id, by=by, evidence=evidence)
    ]
