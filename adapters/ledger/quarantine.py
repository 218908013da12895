"""Damaged rows moved aside (``ctxledger doctor --quarantine``) and the streams they close.

A row that does not decode or breaks its stream's chain is moved, whole and with its
position, from the events table into the quarantine table of the same database (never
deleted; each backend does the move in one transaction). A stream with quarantined rows
refuses appends (``DamagedStreamError``): its next version would link a row that is gone.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Quarantined", "damaged_streams", "quarantined_from_rows"]


@dataclass(frozen=True, slots=True)
class Quarantined:
    """A row moved into the quarantine table: where it was in the log, what it held, why."""

    position: int
    stream_id: str
    version: int
    topic: str | None
    payload: bytes | str | None
    kind: str
    reason: str
    at: str
    """When it was quarantined (ISO 8601, UTC)."""


def quarantined_from_rows(rows: Iterable[Sequence[Any]]) -> list[Quarantined]:
    """The quarantine table's rows ``(position, stream id, version, topic, payload, kind,
    reason, at)`` as :class:`Quarantined`."""
    return [
        Quarantined(int(p), str(sid), int(v or 0), t, s, str(k), str(r), str(at))
        for p, sid, v, t, s, k, r, at in rows
    ]


def damaged_streams(quarantined: Iterable[Quarantined]) -> dict[str, tuple[int, ...]]:
    """Stream id → its quarantined positions (in the order given)."""
    found: dict[str, list[int]] = {}
    for q in quarantined:
        found.setdefault(q.stream_id, []).append(q.position)
    return {sid: tuple(ps) for sid, ps in found.items()}
