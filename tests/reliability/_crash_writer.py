"""The writer that the crash-safety test SIGKILLs: appends all-or-nothing batches to a SQLite
ledger and writes an ack line (flushed to the OS) after each committed append."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from typing import Any

from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.ledger.projection_runner import ProjectionRunner
from ctxledger.domain import events as ev

__all__ = ["batch", "crash_writer", "parse_batch_id"]

AT = datetime(2026, 1, 1, tzinfo=UTC)
STREAMS = 4


def batch(batch_id: str, stream: str, k: int, pad: int) -> list[ev.Event]:
    """k ≥ 2 events: Started, k − 2 ItemPinned, Built — each naming ``batch_id`` and k."""
    events: list[ev.Event] = [
        ev.ContextBuildingStarted(at=AT, agent_id=stream, pack_id=f"{batch_id}/k{k}")
    ]
    events += [
        ev.ItemPinned(at=AT, agent_id=stream, item_id=f"{batch_id}/{j}/k{k}", by="x" * pad)
        for j in range(k - 2)
    ]
    events.append(ev.ContextPackBuilt(at=AT, agent_id=stream, pack_id=f"{batch_id}/k{k}"))
    return events


def parse_batch_id(event: ev.Event) -> tuple[str, int]:
    """``(batch id, k)`` of an event written by :func:`batch`."""
    name = event.item_id if isinstance(event, ev.ItemPinned) else getattr(event, "pack_id", "")
    head, _, k = name.rpartition("/k")
    return head.split("/")[0], int(k)


def crash_writer(url: str, ack_path: str, run: int, ready: Any) -> None:
    """Append until killed. Ack line: ``<batch id> <stream> <first version> <k>``."""
    rng = random.Random(run)
    ledger = open_ledger(url)
    runner = ProjectionRunner(ledger, batch_size=rng.randint(5, 60))
    with open(ack_path, "a", buffering=1, encoding="utf-8") as ack:
        ready.set()
        i = 0
        while True:
            stream = f"s{rng.randrange(STREAMS)}"
            k = rng.randint(2, 12)
            batch_id = f"r{run}.{i}"
            version = ledger.stream_version(stream)
            ledger.append(
                stream, batch(batch_id, stream, k, rng.randint(0, 600)), expected_version=version
            )
            ack.write(f"{batch_id} {stream} {version + 1} {k}\n")  # line-buffered: flushed
            i += 1
            if rng.random() < 0.25:
                runner.run_once()  # persists read models: kills land in these commits too
