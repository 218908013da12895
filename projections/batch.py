"""Folding a batch of events into the read models, equal to folding them one by one with
every projection's ``evolve`` (its fold over a batch of one), and to the pure folds kept in
``tests/oracles`` as the specification.

Two costs of a per-event fold are gone here: every projection sees every event (most return
the state unchanged), and a projection that acts copies its agent map and the agent's dicts
per event. A batch sends each event type only to the projections that act on it, and each
projection folds into mutable drafts thawed once per batch and frozen once at its end
(``projections.drafts``). For a handful of events opening every projection's fold costs more
than it saves, so small batches go event by event to ``evolve`` (dispatched by type: only
the projections acting on an event open a fold).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, TypeVar, overload

import msgspec

from ctxledger.domain.events import EVENT_TYPES, Event
from ctxledger.projections.catalog import PROJECTIONS, Projection, ReadModels, read_models
from ctxledger.projections.drafts import BatchFold, Handlers

__all__ = ["SMALL_BATCH", "LiveFolds", "evolve_each", "fold_batch", "fold_stream"]

S = TypeVar("S", bound=msgspec.Struct)

SMALL_BATCH = 4
"""Below this many events, ``fold_batch`` folds event by event with ``evolve`` (measured: a
1-event catch-up opening every projection's drafts is slower, the break-even is at a few
events)."""


@overload
def fold_batch(states: ReadModels, events: Sequence[Event]) -> ReadModels: ...


@overload
def fold_batch(
    states: dict[str, Any],
    events: Sequence[Event],
    projections: Sequence[Projection[Any]] = ...,
) -> dict[str, Any]: ...


def fold_batch(
    states: ReadModels | dict[str, Any],
    events: Sequence[Event],
    projections: Sequence[Projection[Any]] = PROJECTIONS,
) -> ReadModels | dict[str, Any]:
    """The read models after *events*, from *states* (typed, or name → state for the
    *projections*). Never mutates *states* nor anything it holds: they may be snapshots
    handed out earlier."""
    if isinstance(states, ReadModels):
        named = {name: getattr(states, name) for name in ReadModels.__struct_fields__}
        return read_models(_fold(named, events, PROJECTIONS))
    return _fold(dict(states), events, projections)


def evolve_each(
    states: dict[str, Any], events: Sequence[Event], projections: Sequence[Projection[Any]]
) -> dict[str, Any]:
    """The per-event fold, in place in *states* (a dict of frozen models), each event sent
    only to the projections acting on its type."""
    for event in events:
        kind = type(event)
        for p in projections:
            if kind in p.acts_on:
                states[p.name] = p.evolve(states[p.name], event)
    return states


def _fold(
    states: dict[str, Any], events: Sequence[Event], projections: Sequence[Projection[Any]]
) -> dict[str, Any]:
    if len(events) < SMALL_BATCH:
        return evolve_each(states, events, projections)
    folds = [(p.name, _batch_fold(p, states[p.name])) for p in projections]
    dispatch = _dispatch(fold for _, fold in folds)
    for event in events:
        for handle in dispatch.get(type(event), ()):
            handle(event)
    for name, fold in folds:
        states[name] = fold.freeze()
    return states


def fold_stream(
    states: dict[str, Any], events: Iterable[Event], projections: Sequence[Projection[Any]]
) -> dict[str, Any]:
    """``fold_batch`` of *events* taken one by one from an iterable (a replay's stream of
    decoded rows), all of them one batch: each projection thaws what it touches once and
    freezes once after the last event, however long the stream (per-page batches copied a
    growing agent's dicts once per page: quadratic in one agent's history). Returns a new
    dict; *states* and what it holds are never mutated."""
    folds = [(p.name, _batch_fold(p, states[p.name])) for p in projections]
    dispatch = _dispatch(fold for _, fold in folds)
    get = dispatch.get
    for event in events:
        for handle in get(type(event), ()):
            handle(event)
    out = dict(states)
    for name, fold in folds:
        out[name] = fold.freeze()
    return out


def _batch_fold(projection: Projection[S], state: S) -> BatchFold[S]:
    if projection.batch is not None:
        return projection.batch(state)
    return _EvolveFold(projection, state)


def _dispatch(
    folds: Iterable[BatchFold[Any]],
) -> dict[type[Event], tuple[Callable[[Any], None], ...]]:
    """Event type → the handlers of every fold acting on it."""
    table: dict[type[Event], list[Callable[[Any], None]]] = {}
    for fold in folds:
        for kind, handle in fold.handlers().items():
            table.setdefault(kind, []).append(handle)
    return {kind: tuple(handles) for kind, handles in table.items()}


class _EvolveFold(Generic[S]):
    """A projection with no batch fold of its own: its ``evolve``, event by event."""

    def __init__(self, projection: Projection[S], state: S) -> None:
        self.projection = projection
        self.state = state

    def handlers(self) -> Handlers:
        return dict.fromkeys(self.projection.acts_on, self._evolve)

    def _evolve(self, event: Event) -> None:
        self.state = self.projection.evolve(self.state, event)

    def freeze(self) -> S:
        return self.state


class LiveFolds:
    """Read models kept open between catch-ups: equal, at every read, to the per-event folds.

    A projection that receives events gets a batch fold (its drafts) that stays open across
    catch-ups until someone reads that projection: only then is it frozen, and the next event
    opens a new fold from the frozen model (copying what it changes, once). So an engine that
    records many items and reads only the generations between them keeps the pool's drafts
    open — one copy of the agent's dicts per read of the pool (a build), not per recorded
    item — while every model handed out stays an immutable snapshot. An open fold owns its
    model (it is handed over, not kept beside it), so once every snapshot of it has been
    dropped the fold may extend it in place instead (``projections.drafts.holders``): an
    engine's turn then copies no agent's history at all.
    """

    def __init__(self, states: dict[str, Any], projections: Sequence[Projection[Any]]) -> None:
        self._projections = {p.name: p for p in projections}
        self._frozen = dict(states)
        self._open: dict[str, tuple[BatchFold[Any], Handlers]] = {}
        self._route: dict[type[Any], tuple[str, ...]] = {
            kind: tuple(p.name for p in projections if kind in p.acts_on)
            for kind in EVENT_TYPES.values()
        }
        self._table: dict[type[Any], tuple[Callable[[Any], None], ...]] = {}
        """Event type → the handlers of the open folds acting on it: filled as events of a
        type arrive (opening those folds), emptied whenever a fold is frozen."""

    def _handlers(self, kind: type[Any]) -> tuple[Callable[[Any], None], ...]:
        """The handlers for *kind*, opening the folds acting on it that are not open."""
        opened, frozen = self._open, self._frozen
        handles = []
        for name in self._route.get(kind, ()):
            entry = opened.get(name)
            if entry is None:
                fold = _batch_fold(self._projections[name], frozen.pop(name))
                entry = opened[name] = (fold, fold.handlers())
            handles.append(entry[1][kind])
        found = self._table[kind] = tuple(handles)
        return found

    def feed(self, events: Iterable[Event]) -> None:
        """Fold *events*, in log order, into the open folds (opening them as needed)."""
        table = self._table
        for event in events:
            handles = table.get(type(event))
            if handles is None:
                handles = self._handlers(type(event))
            for handle in handles:
                handle(event)

    def get(self, name: str) -> Any:
        """One projection's model now (freezing its open fold, if any)."""
        entry = self._open.pop(name, None)
        if entry is not None:
            self._table.clear()  # some of its handlers belong to the fold just frozen
            self._frozen[name] = entry[0].freeze()
        return self._frozen[name]

    def all(self) -> dict[str, Any]:
        """Every model now, name → state (a new dict: the caller may keep it)."""
        for name in list(self._open):
            self.get(name)
        return dict(self._frozen)
