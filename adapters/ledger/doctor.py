"""Damage contained: one pass over every stored row lists each that does not decode (with the
kind of damage and a one-line reason), and ``quarantine`` moves them aside in one transaction
so that the rest of the log replays; streams that lost rows refuse appends until repaired."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec

from ctxledger.adapters.ledger import Ledger, Loss, decode_row
from ctxledger.domain.errors import (
    DecodeError,
    FutureSchemaError,
    StoredRowError,
    UnknownEventTypeError,
)

__all__ = ["DAMAGE_KINDS", "Damaged", "DoctorReport", "damage_of", "examine", "quarantine"]

DAMAGE_KINDS = (
    "unknown_topic",
    "future_schema",
    "malformed_json",
    "wrong_type",
    "invalid_payload",
    "null_payload",
    "text_payload",
    "bad_payload",
    "null_topic",
    "bad_topic",
    "bad_key",
)
"""Every kind of damage ``examine`` names (see ``damage_of``)."""

_PAGE = 1000


@dataclass(frozen=True, slots=True)
class Damaged:
    """A stored row that does not decode: where it is, its stream and version, its topic,
    the kind of damage (one of ``DAMAGE_KINDS``) and a one-line reason."""

    position: int
    stream_id: str
    version: int
    topic: str
    kind: str
    reason: str


@dataclass(frozen=True, slots=True)
class DoctorReport:
    """What one pass found: rows checked, the damaged ones, the rows already in quarantine,
    and the loss (events the store recorded holding that its log no longer has; "" none)."""

    rows: int
    damaged: tuple[Damaged, ...]
    quarantined: int
    loss: str = ""


def loss_of(ledger: Ledger) -> Loss | None:
    """Events the store recorded holding that its log no longer has — what ``audit``,
    ``doctor`` and ``replay --verify`` all report, in the same words: the head record's
    verdict (``Ledger.head_loss``: a deleted WAL, an emptied, truncated or replaced file, an
    older copy restored, rows deleted at the end), else persisted read models claiming a
    position past the end. None when nothing is missing."""
    from ctxledger.projections.catalog import PROJECTIONS

    found = ledger.head_loss()
    if found is not None:
        return found
    recorded = ledger.recorded_head([p.name for p in PROJECTIONS])
    end = ledger.max_position()
    if recorded is None or recorded[0] <= end:
        return None
    return Loss(end, recorded[0], recorded[1], "models")


def snapshots_differing(ledger: Ledger) -> list[str]:
    """The saved read models that differ from a replay of the log up to the position they
    were saved at — edited behind the ledger's back (on a plain ledger nothing else notices:
    an edited pool snapshot un-pins an item for every later build). None are loaded when
    they are missing, refused (a keyed ledger's MAC) or ahead of the log: then nothing is
    trusted and nothing differs."""
    from ctxledger.adapters.ledger.projection_runner import (
        ProjectionRunner,
        encode_state,
        replay_states,
    )

    runner = ProjectionRunner(ledger)
    if runner.position == 0:
        return []
    saved = runner.states
    replayed, _, _ = replay_states(ledger, upto=runner.position)
    return [n for n, state in replayed.items() if encode_state(state) != encode_state(saved[n])]


def damage_of(
    position: int, stream_id: Any, version: Any, topic: Any, state: Any
) -> Damaged | None:
    """The damage of one stored row as the driver returned it, or None when it decodes with
    the very decoder every reader uses."""
    sid = stream_id if isinstance(stream_id, str) else ""
    ver = version if isinstance(version, int) else 0
    shown = topic[:80] if isinstance(topic, str) else ""
    if not sid or not isinstance(version, int) or version < 1:
        reason = f"stream {str(stream_id)[:80]!r}, version {str(version)[:20]!r}: not a stream key"
        return Damaged(position, sid, ver, shown, "bad_key", reason)
    try:
        decode_row(position, topic, state)
    except StoredRowError as exc:
        return Damaged(position, sid, ver, shown, exc.kind, exc.reason)
    except FutureSchemaError as exc:
        return Damaged(position, sid, ver, shown, "future_schema", exc.reason)
    except UnknownEventTypeError as exc:
        return Damaged(position, sid, ver, shown, "unknown_topic", exc.reason)
    except DecodeError as exc:
        return Damaged(position, sid, ver, shown, _payload_damage(topic, state), exc.reason)
    return None


def _payload_damage(topic: str, state: bytes) -> str:
    """A payload that does not decode: not JSON at all, a JSON object tagged as another event
    type, or JSON that does not fit its type."""
    try:
        raw = msgspec.json.decode(bytes(state))
    except (msgspec.DecodeError, RecursionError):
        return "malformed_json"
    name = topic.rpartition(".v")[0]
    if isinstance(raw, dict) and "type" in raw and raw["type"] != name:
        return "wrong_type"
    return "invalid_payload"


def examine(ledger: Ledger, *, page: int = _PAGE) -> DoctorReport:
    """One pass over every stored row, each decoded on its own; never stops at the first."""
    damaged: list[Damaged] = []
    rows = 0
    after = 0
    while True:
        batch = ledger.raw_rows(after=after, limit=page)
        for position, stream_id, version, topic, state in batch:
            rows += 1
            found = damage_of(int(position), stream_id, version, topic, state)
            if found is not None:
                damaged.append(found)
        if len(batch) < page:
            break
        after = int(batch[-1][0])
    ledger.refresh_quarantine()
    lost = loss_of(ledger)
    return DoctorReport(rows, tuple(damaged), len(ledger.quarantined()), lost.line if lost else "")


def quarantine(ledger: Ledger, damaged: tuple[Damaged, ...], now: datetime | None = None) -> int:
    """Move *damaged* rows into the quarantine table in one transaction (kept, never deleted);
    returns how many moved."""
    at = (now or datetime.now(UTC)).isoformat(timespec="seconds")
    return ledger.quarantine([(d.position, d.kind, d.reason) for d in damaged], at)
