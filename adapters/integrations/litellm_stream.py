"""A LiteLLM stream handed back to its caller, its usage booked when it ends.

``litellm.completion(stream=True)`` returns a ``CustomStreamWrapper`` whose chunks arrive as
the caller reads them; the usage comes with the last one (LiteLLM's
``stream_options={"include_usage": True}``, which ``completion`` / ``acompletion`` set).
:class:`BookedStream` and :class:`AsyncBookedStream` iterate exactly as the wrapped stream
does and, when it is exhausted, report the last usage seen to the engine (``event`` is then
the recorded ``CacheUsageRecorded``); a stream that ended without any usage counts as a call
that went through (``turn_succeeded``). A stream the caller stops reading early books
nothing. Every other attribute is the wrapped stream's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.integrations.async_engine import AsyncContextEngine
from ctxledger.domain import events as ev

__all__ = ["AsyncBookedStream", "BookedStream", "chunk_usage"]


def chunk_usage(chunk: Any) -> Any:
    """The usage a stream chunk carries (LiteLLM's ``Usage`` on the last one), else None."""
    usage = getattr(chunk, "usage", None)
    if usage is None and isinstance(chunk, dict):
        usage = chunk.get("usage")
    return usage


class BookedStream:
    """A sync LiteLLM stream whose usage is booked to *agent_id* under *provider* when it
    ends (see the module)."""

    def __init__(
        self, stream: Any, engine: ContextEngine, agent_id: str, *, provider: str | None
    ) -> None:
        self._stream = stream
        self._iter: Iterator[Any] = iter(stream)
        self._engine = engine
        self._agent_id = agent_id
        self._provider = provider
        self._usage: Any = None
        self._booked = False
        self.event: ev.CacheUsageRecorded | None = None

    def __iter__(self) -> BookedStream:
        return self

    def __next__(self) -> Any:
        try:
            chunk = next(self._iter)
        except StopIteration:
            if not self._booked:
                self._booked = True
                self.event = self._book()
            raise
        usage = chunk_usage(chunk)
        if usage is not None:
            self._usage = usage
        return chunk

    def _book(self) -> ev.CacheUsageRecorded | None:
        if self._usage is None:
            self._engine.turn_succeeded(self._agent_id)
            return None
        return self._engine.report_usage(self._agent_id, self._usage, provider=self._provider)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class AsyncBookedStream:
    """An async LiteLLM stream whose usage is booked to *agent_id* under *provider* when it
    ends (see the module)."""

    def __init__(
        self, stream: Any, engine: AsyncContextEngine, agent_id: str, *, provider: str | None
    ) -> None:
        self._stream = stream
        self._iter: AsyncIterator[Any] = stream.__aiter__()
        self._engine = engine
        self._agent_id = agent_id
        self._provider = provider
        self._usage: Any = None
        self._booked = False
        self.event: ev.CacheUsageRecorded | None = None

    def __aiter__(self) -> AsyncBookedStream:
        return self

    async def __anext__(self) -> Any:
        try:
            chunk = await self._iter.__anext__()
        except StopAsyncIteration:
            if not self._booked:
                self._booked = True
                self.event = await self._book()
            raise
        usage = chunk_usage(chunk)
        if usage is not None:
            self._usage = usage
        return chunk

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    async def _book(self) -> ev.CacheUsageRecorded | None:
        if self._usage is None:
            await self._engine.turn_succeeded(self._agent_id)
            return None
        return await self._engine.report_usage(self._agent_id, self._usage, provider=self._provider)
