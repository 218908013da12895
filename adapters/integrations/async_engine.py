"""``AsyncContextEngine``: the engine's API awaitable from an event loop.

Every call runs on a worker thread of its own (one per ``AsyncContextEngine``), one call at a
time in the order awaited, with the caller's context variables (an OpenTelemetry span stays the
parent of the engine's); the loop only awaits the call's future, so it goes on running other
tasks while a call commits, waits for a stream lock, or waits for the engine lock that another
thread holds — no call blocks the loop. The engine is safe from many threads (its lock,
``adapters.engine.core``), so the same engine may be called directly from other threads at the
same time. ``render`` is pure and runs inline; ``input_limits`` is frozen.

    engine = AsyncContextEngine(open_engine("sqlite:///ledger.db"))
    await engine.record("worker-1", tool_output)
    result = await engine.build("worker-1", keywords=["auth"])
    request = engine.render(result, "anthropic", "claude-sonnet-4-5")
    ...
    await engine.report_usage("worker-1", response.usage)
    await engine.aclose()
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from ctxledger.adapters.engine import BuildResult, ContextEngine
from ctxledger.adapters.engine.render import Renderer
from ctxledger.domain import events as ev
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import Item
from ctxledger.domain.settings import AgentSettings, InputLimits
from ctxledger.projections.catalog import ReadModels
from ctxledger.projections.generations import AgentGenerations
from ctxledger.projections.pool import AgentPool

__all__ = ["AsyncContextEngine"]

T = TypeVar("T")


class AsyncContextEngine:
    """Awaitable facade over one :class:`ContextEngine` (which it owns: ``aclose`` closes it)."""

    def __init__(self, engine: ContextEngine) -> None:
        self.engine = engine
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ctxledger")
        self._closed = False

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the worker thread, awaited (the loop stays free)."""
        if self._closed:
            raise InvalidInputError("this AsyncContextEngine is closed")
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, fn, *args, **kwargs)
        return await loop.run_in_executor(self._worker, call)

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the engine's worker thread, awaited: for a step of
        several engine calls on ``self.engine`` (an adapter's record-then-build) that must
        not block the loop."""
        return await self._run(fn, *args, **kwargs)

    @property
    def input_limits(self) -> InputLimits:
        """``ContextEngine.input_limits`` (frozen: no await)."""
        return self.engine.input_limits

    async def register_agent(self, *args: Any, **kwargs: Any) -> None:
        await self._run(self.engine.register_agent, *args, **kwargs)

    async def configure(self, agent_id: str, **kwargs: Any) -> AgentSettings:
        return await self._run(self.engine.configure, agent_id, **kwargs)

    async def make_item(self, agent_id: str, content: str, **kwargs: Any) -> Item:
        return await self._run(self.engine.make_item, agent_id, content, **kwargs)

    async def record(self, agent_id: str, item: Item | str, **kwargs: Any) -> Item:
        return await self._run(self.engine.record, agent_id, item, **kwargs)

    async def record_many(self, agent_id: str, items: list[Item]) -> list[Item]:
        return await self._run(self.engine.record_many, agent_id, items)

    async def add_steering_note(self, agent_id: str, text: str, *, stage: str = "") -> Item:
        return await self._run(self.engine.add_steering_note, agent_id, text, stage=stage)

    async def pin(self, agent_id: str, item_id: str, **kwargs: Any) -> None:
        await self._run(self.engine.pin, agent_id, item_id, **kwargs)

    async def unpin(self, agent_id: str, item_id: str, **kwargs: Any) -> None:
        await self._run(self.engine.unpin, agent_id, item_id, **kwargs)

    async def remove(self, agent_id: str, item_id: str, **kwargs: Any) -> None:
        await self._run(self.engine.remove, agent_id, item_id, **kwargs)

    async def verify_finding(self, agent_id: str, item_id: str, **kwargs: Any) -> Any:
        return await self._run(self.engine.verify_finding, agent_id, item_id, **kwargs)

    async def promote_finding(self, agent_id: str, item_id: str, **kwargs: Any) -> Item:
        return await self._run(self.engine.promote_finding, agent_id, item_id, **kwargs)

    async def set_recall(self, enabled: bool, **kwargs: Any) -> bool:
        return await self._run(self.engine.set_recall, enabled, **kwargs)

    async def recall_enabled(self) -> bool:
        """``ContextEngine.recall_enabled`` (a property there: it reads the folded log)."""
        return await self._run(lambda: self.engine.recall_enabled)

    async def build(self, agent_id: str, **kwargs: Any) -> BuildResult:
        return await self._run(self.engine.build, agent_id, **kwargs)

    async def rebuild(self, agent_id: str, **kwargs: Any) -> BuildResult:
        return await self._run(self.engine.rebuild, agent_id, **kwargs)

    async def refresh(self, agent_id: str, **kwargs: Any) -> Any:
        return await self._run(self.engine.refresh, agent_id, **kwargs)

    @property
    def render(self) -> Renderer:
        """``ContextEngine.render`` itself (pure: no await), typed the same way per provider."""
        return self.engine.render

    async def report_usage(
        self, agent_id: str, usage: object, *, provider: str | None = None
    ) -> ev.CacheUsageRecorded:
        return await self._run(self.engine.report_usage, agent_id, usage, provider=provider)

    async def turn_succeeded(self, agent_id: str) -> None:
        await self._run(self.engine.turn_succeeded, agent_id)

    async def on_turn_error(self, agent_id: str, error: object, **kwargs: Any) -> Any:
        return await self._run(self.engine.on_turn_error, agent_id, error, **kwargs)

    async def erase(self, agent_id: str, item_id: str = "", *, reason: str) -> ev.ContentErased:
        return await self._run(self.engine.erase, agent_id, item_id, reason=reason)

    async def promote(self, agent_id: str, item_id: str) -> str:
        return await self._run(self.engine.promote, agent_id, item_id)

    async def verify_memory(self, memory_id: str, *, by: str = "") -> None:
        await self._run(self.engine.verify_memory, memory_id, by=by)

    async def retire_memory(self, memory_id: str, *, reason: str = "") -> None:
        await self._run(self.engine.retire_memory, memory_id, reason=reason)

    async def delete_memory(self, memory_id: str) -> ev.MemoryDeleted:
        return await self._run(self.engine.delete_memory, memory_id)

    async def report_to_parent(self, worker_id: str) -> Item:
        return await self._run(self.engine.report_to_parent, worker_id)

    async def decide_and_append(
        self, stream: str, decide: Callable[[int], Sequence[ev.Event]]
    ) -> list[ev.Event]:
        """``ContextEngine.decide_and_append`` (*decide* runs on the worker thread)."""
        return await self._run(self.engine.decide_and_append, stream, decide)

    async def agent(self, agent_id: str) -> AgentGenerations:
        return await self._run(self.engine.agent, agent_id)

    async def pool(self, agent_id: str) -> AgentPool:
        return await self._run(self.engine.pool, agent_id)

    async def building(self, agent_id: str) -> str:
        return await self._run(self.engine.building, agent_id)

    async def states(self) -> ReadModels:
        return await self._run(lambda: self.engine.states)

    async def catch_up(self) -> None:
        await self._run(self.engine.catch_up)

    async def checkpoint(self) -> None:
        await self._run(self.engine.checkpoint)

    async def close(self) -> None:
        """``aclose`` (the engine's ``close``, awaitable)."""
        await self.aclose()

    async def aclose(self) -> None:
        """Close the engine (saving its read models, after every call awaited before) and stop
        the worker, without blocking the loop; a second call does nothing."""
        if self._closed:
            return
        try:
            await self._run(self.engine.close)
        finally:
            self._closed = True
            self._worker.shutdown(wait=False)

    async def __aenter__(self) -> AsyncContextEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
