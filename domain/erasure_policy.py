"""The decision of an erase: which items leave the pool, and the ``ContentErased`` record."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime

from ctxledger.domain import events as ev
from ctxledger.domain.free_text import ERASED_REASON

__all__ = ["decide_erase"]


def decide_erase(
    agent_id: str,
    item_id: str,
    *,
    pool_items: Sequence[str],
    removed: Collection[str],
    at: datetime,
    reason: str,
) -> list[ev.Event]:
    """Erase one item (*item_id*) or every item of the pool (``""``): an ``ItemRemoved`` per
    item still in the pool, then the ``ContentErased`` (always last)."""
    targets = (item_id,) if item_id else tuple(pool_items)
    removals: list[ev.Event] = [
        ev.ItemRemoved(at=at, agent_id=agent_id, item_id=i, reason=ERASED_REASON + reason)
        for i in targets
        if i not in removed
    ]
    erased = ev.ContentErased(
        at=at, agent_id=agent_id, item_id=item_id, reason=reason, items=targets
    )
    return [*removals, erased]
