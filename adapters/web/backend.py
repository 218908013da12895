"""The inspector's one ledger: read models folded to the log's end on every request, traced
builds kept per log position, and controls appended through a fresh engine."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.engine.manual_controls import apply_control
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.ledger.projection_runner import ProjectionRunner
from ctxledger.adapters.memory.catalog import MemoryCatalog
from ctxledger.adapters.memory.project import ProjectMemory
from ctxledger.adapters.tokens import default_counter
from ctxledger.adapters.web import why
from ctxledger.adapters.web.controls import ControlForm, FormError, check_item, control_of
from ctxledger.domain import events as ev
from ctxledger.domain.errors import UnknownAgentError
from ctxledger.domain.ports import TokenCounter
from ctxledger.projections.build_trace import BuildTrace, trace_builds
from ctxledger.projections.catalog import ReadModels

__all__ = ["TRACED_KEPT", "InspectorBackend"]

_T = TypeVar("_T")
TRACED_KEPT = 16
"""Traced builds kept by the server (per agent, page kind and log position)."""


class InspectorBackend:
    """One ledger for the server's life. Read models are folded up to the end of the log on
    every request (so pages follow other writers); controls go through a fresh engine."""

    def __init__(self, store_url: str, catalog: Path | None) -> None:
        self.ledger = open_ledger(store_url)
        try:
            self._runner = ProjectionRunner(self.ledger)
        except BaseException:
            self.ledger.close()
            raise
        self._catalog = catalog
        self._read_lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._counter: TokenCounter | None = None
        self._traced: dict[tuple[str, str, int], Any] = {}
        self._traced_lock = threading.Lock()

    def _remember(self, key: tuple[str, str, int], make: Callable[[], _T]) -> _T:
        """*make()* kept by (agent, what, log position): the log is the only state, so a
        result computed at a position stays right for that position."""
        with self._traced_lock:
            if key in self._traced:
                found: _T = self._traced[key]
                return found
        value = make()
        with self._traced_lock:
            while len(self._traced) >= TRACED_KEPT:
                self._traced.pop(next(iter(self._traced)))
            self._traced[key] = value
        return value

    def _trace(
        self,
        agent_id: str,
        position: int,
        keep_view: Callable[[ev.ContextBuildingStarted], bool] | None = None,
        until: int | None = None,
    ) -> list[BuildTrace]:
        with self._read_lock:
            records = itertools.takewhile(lambda r: r.position <= position, self.ledger.read_all())
            return trace_builds(
                ((r.position, r.event) for r in records),
                agent_id,
                keep_view=keep_view,
                until=until,
            )

    def generation_why(self, agent_id: str, number: int, position: int) -> why.GenerationWhy:
        """The builds of generation *number* with their planner inputs, traced once per log
        position (a rebuild's Started is in the generation before)."""

        def make() -> why.GenerationWhy:
            traces = self._trace(
                agent_id, position, keep_view=lambda s: s.generation in (number - 1, number)
            )
            return why.GenerationWhy(
                [t for t in traces if t.built.generation == number and t.kind != "decision point"]
            )

        return self._remember((agent_id, f"generation {number}", position), make)

    def builds(self, agent_id: str, position: int) -> list[BuildTrace]:
        """Every build of the agent, without planner inputs."""
        return self._remember(
            (agent_id, "builds", position), lambda: self._trace(agent_id, position)
        )

    def build_traces(self, agent_id: str, pack_id: str, position: int) -> list[BuildTrace]:
        """Every build of the agent up to *pack_id*'s, with the planner inputs of that build
        and of the one before it."""

        def make() -> list[BuildTrace]:
            light = self.builds(agent_id, position)
            at = next((k for k, t in enumerate(light) if t.built.pack_id == pack_id), None)
            if at is None:
                raise UnknownAgentError(f"agent {agent_id[:80]!r} has no build {pack_id[:80]!r}")
            wanted = {t.built.pack_id for t in light[max(0, at - 3) : at + 1]}
            return self._trace(
                agent_id,
                position,
                keep_view=lambda s: s.pack_id in wanted,
                until=light[at].position,
            )

        return self._remember((agent_id, f"build {pack_id}", position), make)

    def states(self) -> tuple[ReadModels, int]:
        """A consistent snapshot of every read model and the log position it reflects."""
        with self._read_lock:
            self._runner.catch_up()
            return self._runner.models, self._runner.position

    def _engine(self, memory: ProjectMemory | None) -> ContextEngine:
        if self._counter is None:
            self._counter = default_counter()
        return open_engine(self.ledger, counter=self._counter, memory=memory)

    @contextlib.contextmanager
    def _memory(self) -> Iterator[ProjectMemory]:
        """The project memory over the configured catalog, open for one control only."""
        if self._catalog is None:
            raise FormError(400, "project memory needs a catalog: start with --catalog PATH")
        if not self._catalog.is_file():
            raise FormError(400, f"no catalog file at {self._catalog}")
        catalog = MemoryCatalog.open(self._catalog)
        try:
            yield ProjectMemory(catalog)
        finally:
            catalog.close()

    def control(self, agent_id: str, form: ControlForm, actor: str) -> int | None:
        """Check the control against the read models, then append through the engine."""
        needs_memory = form.action == "promote"
        with (
            self._write_lock,
            self._memory() if needs_memory else contextlib.nullcontext() as memory,
        ):
            engine = self._engine(memory)
            engine.agent(agent_id)
            check_item(engine.pool(agent_id), form)
            return apply_control(engine, control_of(agent_id, form, actor)).generation

    def memory_control(self, form: ControlForm, actor: str) -> None:
        """Verify one memory entry through the engine (catalog and MemoryVerified event)."""
        with self._write_lock, self._memory() as memory:
            self._engine(memory).verify_memory(form.memory_id, by=actor)

    def close(self) -> None:
        self.ledger.close()
