"""The end of a turn's refresh count: a model call that went through."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from ctxledger.domain import events as ev

__all__ = ["decide_turn_succeeded"]


def decide_turn_succeeded(
    agent_id: str, *, refresh_streak: int, generation: int, now: Callable[[], datetime]
) -> list[ev.Event]:
    """A ``TurnSucceeded`` when refreshes are being counted; nothing otherwise."""
    if not refresh_streak:
        return []
    return [ev.TurnSucceeded(at=now(), agent_id=agent_id, generation=generation)]
