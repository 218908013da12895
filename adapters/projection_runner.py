"""Keeps the persisted read models in step with the ledger, resuming from a tracked position."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import msgspec

from ctxledger.adapters.ledger import Ledger
from ctxledger.domain.errors import DecodeError
from ctxledger.domain.events import Event
from ctxledger.projections.catalog import PROJECTIONS, Projection, ReadModels, read_models

__all__ = ["ProjectionRunner", "decode_state", "encode_state", "replay_states"]

_ENCODER = msgspec.json.Encoder()


def encode_state(state: msgspec.Struct) -> bytes:
    """Deterministic bytes of a read model (used for storage and for equality checks)."""
    return _ENCODER.encode(state)


def decode_state(projection: Projection[Any], data: bytes) -> Any:
    """Decode a persisted read model; a corrupt one is a DecodeError naming the model."""
    try:
        return msgspec.json.decode(data, type=projection.state_type)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise DecodeError(f"persisted read model {projection.name!r} is corrupt: {exc}") from None


def replay_states(
    ledger: Ledger,
    projections: Sequence[Projection[Any]] = PROJECTIONS,
    *,
    upto: int | None = None,
) -> tuple[dict[str, Any], int, int]:
    """Fold every projection over the log from the start (up to position *upto*).

    Returns ``(states, events folded, last position)``.
    """
    states: dict[str, Any] = {p.name: p.initial() for p in projections}
    count = 0
    last = 0
    limit = None if upto is None else upto
    for rec in ledger.read_all(limit=limit):
        if upto is not None and rec.position > upto:
            break
        for p in projections:
            states[p.name] = p.evolve(states[p.name], rec.event)
        count += 1
        last = rec.position
    return states, count, last


class ProjectionRunner:
    """Folds new events into every read model and persists them with their position.

    A batch is folded in memory and saved in one transaction, so a crash or a decode error
    leaves the persisted models at the last complete batch: never partially applied.
    """

    def __init__(
        self,
        ledger: Ledger,
        projections: Sequence[Projection[Any]] = PROJECTIONS,
        *,
        batch_size: int = 1000,
    ) -> None:
        self.ledger = ledger
        self.projections = tuple(projections)
        self.batch_size = batch_size
        self.states: dict[str, Any] = {}
        self.position = 0
        self.applied = 0
        self._load()

    @property
    def models(self) -> ReadModels:
        """The read models at ``position``, typed: a snapshot that later folds do not change."""
        return read_models(self.states)

    def _load(self) -> None:
        loaded: dict[str, Any] = {}
        positions = set()
        for p in self.projections:
            row = self.ledger.load_projection(p.name)
            if row is None:
                break
            positions.add(row[0])
            loaded[p.name] = decode_state(p, row[1])
        if len(loaded) == len(self.projections) and len(positions) == 1:
            self.states = loaded
            self.position = positions.pop()
        else:  # missing or inconsistent: rebuild from the start
            self.states = {p.name: p.initial() for p in self.projections}
            self.position = 0

    def apply(self, position: int, event: Event) -> None:
        """Fold one event that the caller read or appended (must be the next position)."""
        for p in self.projections:
            self.states[p.name] = p.evolve(self.states[p.name], event)
        self.position = position
        self.applied += 1

    def save(self) -> None:
        self.ledger.save_projections(
            {name: encode_state(state) for name, state in self.states.items()}, self.position
        )

    def catch_up(self) -> int:
        """Fold events appended since the last look, in memory (``save`` persists them)."""
        total = 0
        evolvers = [(p.name, p.evolve) for p in self.projections]
        states = self.states
        for rec in self.ledger.read_all(after=self.position):
            event = rec.event
            for name, evolve in evolvers:
                states[name] = evolve(states[name], event)
            self.position = rec.position
            total += 1
        self.applied += total
        return total

    def run_once(self) -> int:
        """Catch up with the log; returns the number of events applied."""
        total = 0
        while True:
            batch = list(self.ledger.read_all(after=self.position, limit=self.batch_size))
            if not batch:
                return total
            states = dict(self.states)
            for rec in batch:
                for p in self.projections:
                    states[p.name] = p.evolve(states[p.name], rec.event)
            self.states = states
            self.position = batch[-1].position
            self.applied += len(batch)
            total += len(batch)
            self.save()

    def follow(self, stop: threading.Event, *, poll_interval: float = 0.2) -> None:
        """Apply new events as they arrive until *stop* is set."""
        while not stop.is_set():
            if self.run_once() == 0:
                stop.wait(poll_interval)
