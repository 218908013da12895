"""``completion(stream=True)`` / ``acompletion(stream=True)`` hand the stream back and book its
usage when it ends, against the real ``litellm`` and a local fake provider streaming SSE.

The fake server answers OpenAI's chat completions with ``text/event-stream`` chunks and, as
OpenAI does when the request asks ``stream_options.include_usage``, a last chunk that carries
the usage and no choices; the Anthropic route streams Messages API events (``message_start``
with the cache counts, ``message_delta`` with the output count). Nothing is booked before
the caller has read the stream to its end."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from ctxledger.adapters.integrations.async_engine import AsyncContextEngine
from ctxledger.adapters.integrations.litellm_calls import acompletion, completion
from ctxledger.adapters.integrations.litellm_stream import AsyncBookedStream, BookedStream
from ctxledger.domain import events as ev
from ctxledger.domain.model import Layer, Source
from tests.integration.test_integrations import AGENT, OBJECTIVE, _engine
from tests.integration.test_litellm import (  # noqa: F401  (the autouse loop fixture)
    ASK,
    CLAUDE,
    MODEL,
    SPEC,
    _bodies,
    _litellm_loop,
    _usage,
)

# LiteLLM's own schemas (ReadOnly TypedDicts) and its stream handler (an instance's
# ``model_computed_fields``, deprecated by pydantic 2.11) warn: LiteLLM's business, not tested
pytestmark = [
    pytest.mark.filterwarnings("ignore:.*the `ReadOnly` qualifier:UserWarning"),
    pytest.mark.filterwarnings(
        "ignore:Accessing the 'model_(computed_)?fields' attribute on the instance:DeprecationWarning"
    ),
]

WORDS = ["Fixed ", "in ", "auth/session.py."]


def _sse(events: list[dict[str, Any]], *, done: bool = True, named: bool = False) -> str:
    lines = []
    for event in events:
        if named:
            lines.append(f"event: {event['type']}")
        lines.append(f"data: {json.dumps(event)}\n")
    if done:
        lines.append("data: [DONE]\n")
    return "\n".join(lines) + "\n"


def _chat_chunks(usage: dict[str, Any] | None) -> list[dict[str, Any]]:
    base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": MODEL}
    chunks = [
        {**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": word}}]}
        for word in WORDS
    ]
    chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    if usage is not None:
        chunks.append({**base, "choices": [], "usage": usage})
    return chunks


def _serve_chat(server: HTTPServer, usage: dict[str, Any] | None) -> None:
    server.expect_request("/v1/chat/completions", method="POST").respond_with_data(
        _sse(_chat_chunks(usage)), content_type="text/event-stream"
    )


USAGE = {
    "prompt_tokens": 1400,
    "completion_tokens": 20,
    "total_tokens": 1420,
    "prompt_tokens_details": {"cached_tokens": 896},
}


def _text(chunks: list[Any]) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def test_streamed_completion_returns_the_stream_and_books_usage_at_its_end(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    _serve_chat(httpserver, USAGE)
    engine = _engine(tmp_path / "ledger.db")
    try:
        stream = completion(
            engine,
            AGENT,
            f"openai/{MODEL}",
            messages=[ASK],
            stream=True,
            api_base=httpserver.url_for("/v1"),
            api_key="test",
            max_retries=0,
        )
        assert isinstance(stream, BookedStream)
        (body,) = _bodies(httpserver)
        assert body["stream"] is True
        assert body["stream_options"] == {"include_usage": True}
        assert OBJECTIVE in body["messages"][0]["content"]
        assert body["messages"][-1] == ASK
        first = next(stream)
        assert _usage(engine) == []  # nothing booked while the caller is still reading
        chunks = [first, *stream]
        assert _text(chunks) == "".join(WORDS)
        (event,) = _usage(engine)
        assert stream.event == event
        assert (event.provider, event.input_tokens, event.cache_read_tokens) == (
            "openai",
            504,
            896,
        )
        assert (event.cache_write_tokens, event.output_tokens) == (0, 20)
        assert list(stream) == []  # read again: ended, booked once
        assert len(_usage(engine)) == 1
    finally:
        engine.close()


def test_caller_stream_options_are_kept(tmp_path: Path, httpserver: HTTPServer) -> None:
    _serve_chat(httpserver, USAGE)
    engine = _engine(tmp_path / "ledger.db")
    try:
        stream = completion(
            engine,
            AGENT,
            f"openai/{MODEL}",
            messages=[ASK],
            stream=True,
            stream_options={"include_usage": False},
            api_base=httpserver.url_for("/v1"),
            api_key="test",
            max_retries=0,
        )
        list(stream)
        (body,) = _bodies(httpserver)
        # the usage is what the adapter books: include_usage stays on whatever was passed
        assert body["stream_options"] == {"include_usage": True}
        assert [u.input_tokens for u in _usage(engine)] == [504]
    finally:
        engine.close()


def test_stream_without_provider_usage_books_litellm_s_count_once(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    _serve_chat(httpserver, None)
    engine = _engine(tmp_path / "ledger.db")
    try:
        stream = completion(
            engine,
            AGENT,
            f"openai/{MODEL}",
            messages=[ASK],
            stream=True,
            api_base=httpserver.url_for("/v1"),
            api_key="test",
            max_retries=0,
        )
        assert _text(list(stream)) == "".join(WORDS)
        # LiteLLM fills in its own count when the provider sent none: booked once, as
        # openai's, all of it uncached (no provider figure claims a cache read)
        (event,) = _usage(engine)
        assert stream.event == event
        assert (event.provider, event.cache_read_tokens, event.cache_write_tokens) == (
            "openai",
            0,
            0,
        )
        assert event.input_tokens > 0
    finally:
        engine.close()


def test_streamed_anthropic_route_books_cache_reads_and_writes(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    start = {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": CLAUDE,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {
                "input_tokens": 40,
                "cache_creation_input_tokens": 1200,
                "cache_read_input_tokens": 3000,
                "output_tokens": 1,
            },
        },
    }
    events: list[dict[str, Any]] = [
        start,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        *[
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": w}}
            for w in WORDS
        ],
        {"type": "content_block_stop", "index": 0},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 9},
        },
        {"type": "message_stop"},
    ]
    httpserver.expect_request("/v1/messages", method="POST").respond_with_data(
        _sse(events, done=False, named=True), content_type="text/event-stream"
    )
    engine = _engine(tmp_path / "ledger.db")
    engine.record(AGENT, SPEC, layer=Layer.L1, source=Source.USER_REQUIREMENT, pinned=True)
    try:
        stream = completion(
            engine,
            AGENT,
            f"anthropic/{CLAUDE}",
            messages=[ASK],
            stream=True,
            api_base=httpserver.url_for(""),
            api_key="test",
            max_retries=0,
        )
        assert _text(list(stream)) == "".join(WORDS)
        (body,) = _bodies(httpserver)
        assert body["stream"] is True
        assert any("cache_control" in block for block in body["system"])
        (event,) = _usage(engine)
        assert event.provider == "anthropic"
        assert (event.input_tokens, event.cache_read_tokens, event.cache_write_tokens) == (
            40,
            3000,
            1200,
        )
        assert event.output_tokens == 9
    finally:
        engine.close()


def test_async_stream_books_usage_at_its_end(tmp_path: Path, httpserver: HTTPServer) -> None:
    _serve_chat(httpserver, USAGE)

    async def turn() -> tuple[str, list[ev.CacheUsageRecorded], list[ev.CacheUsageRecorded]]:
        async with AsyncContextEngine(_engine(tmp_path / "async.db")) as engine:
            stream = await acompletion(
                engine,
                AGENT,
                f"openai/{MODEL}",
                messages=[ASK],
                stream=True,
                api_base=httpserver.url_for("/v1"),
                api_key="test",
                max_retries=0,
            )
            assert isinstance(stream, AsyncBookedStream)
            before = _usage(engine.engine)
            chunks = [chunk async for chunk in stream]
            return _text(chunks), before, _usage(engine.engine)

    text, before, after = asyncio.run(turn())
    assert text == "".join(WORDS)
    assert before == []
    assert [(u.provider, u.input_tokens, u.cache_read_tokens, u.output_tokens) for u in after] == [
        ("openai", 504, 896, 20)
    ]
