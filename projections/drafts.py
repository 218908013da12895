"""Mutable drafts of frozen read models, so a batch of events folds without per-event copies.

A fold that returned a new frozen model per event would copy the agent map
(``{**by_agent, agent_id: …}``) and the touched agent's dicts on every event: O(agents +
items) per event, quadratic over a replay. A batch fold (each projection's one fold) thaws
what it touches once, mutates the drafts, and freezes them once at the end of the batch; its
per-event ``evolve_x`` is the same fold over a batch of one (``batch_of_one``). Nothing that existed before the batch is ever mutated (a frozen read model may
have been handed out as a snapshot): every dict or tuple is copied on its first change —
unless nothing outside the fold can reach it any more (``holders``: the fold that owns a
model, ``LiveFolds``, may change in place what no snapshot still holds, as CPython's own
``str`` concatenation does with a string only it references).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any, Generic, Protocol, TypeVar

from ctxledger.domain.events import Event

__all__ = [
    "Additions",
    "AgentDrafts",
    "BatchFold",
    "Handlers",
    "Thawed",
    "agent_owned",
    "batch_of_one",
    "holders",
]

K = TypeVar("K")
V = TypeVar("V")
T = TypeVar("T")
D = TypeVar("D")
S = TypeVar("S")
S_co = TypeVar("S_co", covariant=True)

Handlers = Mapping[type[Event], Callable[[Any], None]]
"""Event type → what a batch fold does with an event of that type (types absent: nothing)."""


_OVERHEAD = 0


def holders(obj: object) -> int:
    """How many references hold *obj*, not counting the argument expression passed here (pass
    an attribute or item, ``holders(self.items)``: a local variable is itself a holder).

    Exact on CPython with the GIL: a fold that can account for every holder of an object (the
    fields of the structs it was given, its own attributes) knows nothing else can reach it,
    so changing it in place is invisible. Elsewhere (PyPy, free-threaded builds) it answers a
    count no caller expects, so every object is copied as before."""
    return sys.getrefcount(obj) - _OVERHEAD


_PROBE = [object()]
_OVERHEAD = holders(_PROBE[0]) - 1 if sys.implementation.name == "cpython" else -(1 << 30)
if not getattr(sys, "_is_gil_enabled", lambda: True)():  # free-threaded: counts are biased
    _OVERHEAD = -(1 << 30)
del _PROBE


def agent_owned(model: list[Any], draft: Any) -> bool:
    """Whether one agent of a batch's model is reachable only through the batch: the model
    (``model[0]``, a ``by_agent`` map's owner) held by the batch's one-element list alone, its
    agent map by the model and the batch's ``AgentDrafts``, and the agent (``draft.source``)
    by that map and its draft. What the agent holds the caller checks itself."""
    return holders(model[0]) == 1 and holders(model[0].by_agent) == 2 and holders(draft.source) == 2


class BatchFold(Protocol[S_co]):
    """One projection folding one batch: built from the state before the batch, fed only the
    events of the types in ``handlers()`` (in log order), frozen once after the last one.

    Folding a batch must equal folding its events one batch each, in any cuts (the property
    tests compare both with the pure folds kept in ``tests/oracles``)."""

    def handlers(self) -> Handlers: ...

    def freeze(self) -> S_co: ...


def batch_of_one(batch: Callable[[S], BatchFold[S]], initial: S) -> Callable[[S, Event], S]:
    """The per-event fold of a batch fold: *batch* over a batch of one event. An event of a
    type it does not act on returns the state itself (no fold is opened); the acting handler
    is looked up by name, so no handler table is built per event. ``evolve`` holds the state
    it is given while the fold runs, so the fold never counts it as its own (``holders``):
    it is copied where it changes, never changed in place."""
    probe = batch(initial)
    names: dict[type[Event], str] = {}
    for kind, handle in probe.handlers().items():
        name = names[kind] = handle.__name__
        if getattr(probe, name, None) != handle:
            raise TypeError(f"the handler of {kind.__name__} is not a method of its fold")

    def evolve(state: S, event: Event) -> S:
        name = names.get(type(event))
        if name is None:
            return state
        fold = batch(state)
        getattr(fold, name)(event)
        return fold.freeze()

    return evolve


class Thawed(Generic[K, V]):
    """A dict of a frozen read model during a batch: read ``current``, change ``edit()``,
    which copies the frozen dict on the first change only."""

    __slots__ = ("_owned", "current")

    def __init__(self, frozen: dict[K, V]) -> None:
        self.current = frozen
        self._owned = False

    @property
    def owned(self) -> bool:
        """Whether ``current`` is this batch's own (copied, or adopted)."""
        return self._owned

    def edit(self) -> dict[K, V]:
        if not self._owned:
            self.current = dict(self.current)
            self._owned = True
        return self.current

    def adopt(self) -> dict[K, V]:
        """``current`` made this batch's own without a copy: for a caller that has made sure
        nothing else can reach it (``holders``)."""
        self._owned = True
        return self.current


class Additions(Generic[T]):
    """A tuple of a frozen read model that a batch only appends to: appended to a list, joined
    once when frozen (appending to a tuple per event copies it per event)."""

    __slots__ = ("added", "frozen")

    def __init__(self, frozen: tuple[T, ...]) -> None:
        self.frozen = frozen
        self.added: list[T] = []

    def append(self, value: T) -> None:
        self.added.append(value)

    def freeze(self) -> tuple[T, ...]:
        return (*self.frozen, *self.added) if self.added else self.frozen


class AgentDrafts(Generic[V, D]):
    """A ``by_agent`` map during a batch: the frozen map, and a draft of each agent the batch
    touched. Agents new to the map are added in the order a per-event fold would add them (at
    their first ``put``), so the frozen map iterates (and encodes) exactly like the pure folds'
    (``tests/oracles``)."""

    __slots__ = ("_frozen", "_new", "_thaw", "drafts")

    def __init__(
        self, frozen: dict[str, V], thaw: Callable[[V], D], new: Callable[[], V] | None = None
    ) -> None:
        self._frozen = frozen
        self._thaw = thaw
        self._new = new
        self.drafts: dict[str, D] = {}
        """Agent id → its draft, for the agents touched so far. Read-only for callers: a hot
        handler looks its agent up here and calls ``put``/``get`` only when it is absent
        (saving a call per event; the result is the same)."""

    def get(self, agent_id: str) -> D | None:
        """The agent's draft, or None when the map does not hold the agent (yet)."""
        draft = self.drafts.get(agent_id)
        if draft is None:
            found = self._frozen.get(agent_id)
            if found is None:
                return None
            draft = self.drafts[agent_id] = self._thaw(found)
        return draft

    def put(self, agent_id: str) -> D:
        """The agent's draft, adding the agent (from its initial state) when it is new: what
        a per-event ``{**by_agent, agent_id: …}`` does."""
        draft = self.drafts.get(agent_id)
        if draft is not None:  # the common case, first: this runs for most events
            return draft
        draft = self.get(agent_id)
        if draft is None:
            if self._new is None:
                raise TypeError("this map has no initial state per agent: use add()")
            draft = self.drafts[agent_id] = self._thaw(self._new())
        return draft

    def add(self, agent_id: str, value: V) -> D:
        """Add an agent the map does not hold yet, as *value*."""
        draft = self.drafts[agent_id] = self._thaw(value)
        return draft

    def freeze(self, freeze: Callable[[D], V]) -> dict[str, V]:
        """The new frozen map: the old one with every draft frozen (the old one if none)."""
        if not self.drafts:
            return self._frozen
        out = dict(self._frozen)
        for agent_id, draft in self.drafts.items():
            out[agent_id] = freeze(draft)
        return out

    def freeze_each(self, freeze: Callable[[str, D], V]) -> dict[str, V]:
        """``freeze``, with a freezing function that is also given the agent's id."""
        if not self.drafts:
            return self._frozen
        out = dict(self._frozen)
        for agent_id, draft in self.drafts.items():
            out[agent_id] = freeze(agent_id, draft)
        return out
