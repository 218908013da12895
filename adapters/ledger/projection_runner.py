"""Keeps the persisted read models in step with the ledger, resuming from a tracked position."""

from __future__ import annotations

import contextlib
import gc
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any, TypeVar, cast

import msgspec

from ctxledger.adapters.ledger import Ledger, Recorded
from ctxledger.domain.errors import DecodeError
from ctxledger.domain.events import Event
from ctxledger.projections.batch import LiveFolds, fold_stream
from ctxledger.projections.catalog import PROJECTIONS, Projection, ReadModels, read_models
from ctxledger.projections.context_state import ContextStates
from ctxledger.projections.generations import Generations
from ctxledger.projections.inspector import InspectorState
from ctxledger.projections.pool import Pool

M = TypeVar("M", bound=msgspec.Struct)

__all__ = [
    "ProjectionRunner",
    "decode_state",
    "encode_state",
    "gc_paused",
    "replay_states",
    "store_state",
]

_ENCODER = msgspec.json.Encoder()
REPLAY_PAGE = 2000
"""Events read and folded per batch by a replay (each batch thaws and freezes what it
touches once, so larger batches copy less; the page of rows is held in memory)."""


def encode_state(state: msgspec.Struct) -> bytes:
    """Deterministic bytes of a read model (used for storage and for equality checks)."""
    return _ENCODER.encode(state)


def store_state(projection: Projection[Any], state: msgspec.Struct) -> bytes:
    """The bytes a read model is persisted as: its stored form, or its JSON."""
    stored = projection.stored
    return encode_state(state) if stored is None else stored.encode(state)


def decode_state(projection: Projection[Any], data: bytes) -> Any:
    """Decode a persisted read model; a corrupt one is a DecodeError naming the model."""
    try:
        if projection.stored is not None:
            return projection.stored.decode(data)
        return msgspec.json.decode(data, type=projection.state_type)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise DecodeError(f"persisted read model {projection.name!r} is corrupt: {exc}") from None


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic garbage collector off while a replay builds millions of long-lived objects
    (read models hold no cycles): left on, it traverses the growing heap again and again.
    Restored afterwards, also on an error; a nested pause leaves it to the outermost."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            if gc.get_freeze_count() == 0:
                # Everything allocated during the pause counts as young: the first collection
                # after it would scan all of it at once (a tenth of a 100k-event replay).
                # Freezing and unfreezing moves it to the oldest generation unscanned, where
                # read models belong (a process that froze objects of its own is left alone).
                gc.freeze()
                gc.unfreeze()
            gc.enable()


def replay_states(
    ledger: Ledger,
    projections: Sequence[Projection[Any]] = PROJECTIONS,
    *,
    upto: int | None = None,
) -> tuple[dict[str, Any], int, int]:
    """Fold every projection over the log from the start (up to position *upto*).

    Returns ``(states, events folded, last position)``.
    """
    initial: dict[str, Any] = {p.name: p.initial() for p in projections}
    stream = ledger.events(upto=upto, page=REPLAY_PAGE)
    with gc_paused():
        states = fold_stream(initial, stream, projections)
    count, last = stream.count, stream.last
    return states, count, last


class ProjectionRunner:
    """Folds new events into every read model and persists them with their position.

    Events are folded a run at a time (up to 64 rows of a page, ``EventStream.runs``), each
    run decoded whole, so a decode error leaves the models at the end of the last complete
    run; they are saved in one transaction with their position: the persisted models are
    never partially applied. ``run_once`` saves when it has caught up (and, on a long
    catch-up, every ``save_every_s`` seconds or more: re-encoding every model per 1,000
    events made opening an unsaved log quadratic).

    Not thread-safe: one caller at a time (two folding the same new events at once would
    count them twice). The engine calls its runner only under the engine lock
    (``adapters.engine.core``), the web app under its own read lock."""

    def __init__(
        self,
        ledger: Ledger,
        projections: Sequence[Projection[Any]] = PROJECTIONS,
        *,
        batch_size: int = REPLAY_PAGE,
        save_every_s: float = 5.0,
    ) -> None:
        self.ledger = ledger
        self.projections = tuple(projections)
        self.batch_size = batch_size
        self.save_every_s = save_every_s
        self._live = LiveFolds({}, self.projections)
        self.position = 0
        self.applied = 0
        self._saved_position = 0
        self._save_seconds = 0.0
        self.ahead = 0
        """How many positions past the end of the log the saved read models claimed (0: not
        ahead); such models are discarded and rebuilt."""
        self._load()

    @property
    def states(self) -> dict[str, Any]:
        """Every read model at ``position``, name → state (snapshots later folds never change)."""
        return self._live.all()

    @states.setter
    def states(self, value: dict[str, Any]) -> None:
        self._live = LiveFolds(value, self.projections)

    def _typed(self, name: str, kind: type[M]) -> M:
        """One read model at ``position``: only that projection's open fold is frozen, so the
        others keep folding in place (reading the generations between recordings leaves the
        pool's drafts open)."""
        return cast(M, self._live.get(name))

    @property
    def generations(self) -> Generations:
        """The generations read model at ``position``."""
        return self._typed("generations", Generations)

    @property
    def pool(self) -> Pool:
        """The pool read model at ``position``."""
        return self._typed("pool", Pool)

    @property
    def context_state(self) -> ContextStates:
        """The context-state read model at ``position``."""
        return self._typed("context_state", ContextStates)

    @property
    def inspector(self) -> InspectorState:
        """The inspector read model at ``position``."""
        return self._typed("inspector", InspectorState)

    @property
    def models(self) -> ReadModels:
        """The read models at ``position``, typed: a snapshot that later folds do not change
        (folds build new models; they never mutate one handed out)."""
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
            saved = positions.pop()
            end = self.ledger.max_position()
            if saved <= end:
                self.states = loaded
                self.position = self._saved_position = saved
                return
            # Saved past the end of the log: the log lost events (a deleted WAL, a restored
            # older file) or the models belong to another log. Never trust them: new events
            # at those positions would be skipped. Rebuild, and say by how much they were ahead.
            self.ahead = saved - end
        # missing, inconsistent or ahead of the log: rebuild from the start
        self.states = {p.name: p.initial() for p in self.projections}
        self.position = 0

    def apply(self, position: int, event: Event) -> None:
        """Fold one event that the caller read or appended (must be the next position)."""
        self._live.feed((event,))
        self.position = position
        self.applied += 1

    def save(self) -> None:
        """Persist every model and the position, in one transaction."""
        started = time.monotonic()
        states = self.states
        with gc_paused():  # the stored forms allocate per generation over a large heap
            stored = {p.name: store_state(p, states[p.name]) for p in self.projections}
        self.ledger.save_projections(stored, self.position)
        self._saved_position = self.position
        self._save_seconds = time.monotonic() - started

    def _fold(self, events: list[Event], last: int) -> int:
        """Fold one run of events, the last at position *last*; returns how many."""
        self._live.feed(events)
        self.position = last
        self.applied += len(events)
        return len(events)

    def fold_appended(self, recorded: Sequence[Recorded]) -> bool:
        """Fold events this process has just appended, as read back from the bytes stored
        (``Ledger.append``'s *read_back*), when they are the log's next positions: nothing
        else landed since this runner's position, so they are what ``catch_up`` would read.
        False, and nothing folded, otherwise (``catch_up`` then reads them)."""
        start = self.position + 1
        if not recorded or any(r.position != start + n for n, r in enumerate(recorded)):
            return False
        with gc_paused():
            self._live.feed([r.event for r in recorded])
        self.position = recorded[-1].position
        self.applied += len(recorded)
        return True

    def catch_up(self) -> int:
        """Fold events appended since the last look, in memory (``save`` persists them)."""
        total = 0
        stream = self.ledger.events(after=self.position, page=self.batch_size)
        with gc_paused():
            for events in stream.runs():
                total += self._fold(events, stream.last)
        return total

    def run_once(self) -> int:
        """Catch up with the log and persist the models; returns the number of events applied.

        A row that does not decode stops it: the runs before it are saved, then the
        DecodeError is raised."""
        total = 0
        last_save = time.monotonic()
        stream = self.ledger.events(after=self.position, page=self.batch_size)
        with gc_paused():
            try:
                for events in stream.runs():
                    total += self._fold(events, stream.last)
                    if time.monotonic() - last_save >= self._save_interval():
                        self.save()
                        last_save = time.monotonic()
            except DecodeError:
                self._save_if_behind()
                raise
        self._save_if_behind()
        return total

    def _save_interval(self) -> float:
        """Seconds between saves during a long catch-up: ``save_every_s``, or ten times what
        the last save took, so saving large models stays a small share of the time."""
        return max(self.save_every_s, 10 * self._save_seconds)

    def _save_if_behind(self) -> None:
        if self.position != self._saved_position:
            self.save()

    def follow(self, stop: threading.Event, *, poll_interval: float = 0.2) -> None:
        """Apply new events as they arrive until *stop* is set."""
        while not stop.is_set():
            if self.run_once() == 0:
                stop.wait(poll_interval)
