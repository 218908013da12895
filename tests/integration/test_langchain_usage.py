"""LangChain / LangGraph usage booked from ``AIMessage.usage_metadata`` under the provider
that answered, against a local fake OpenAI (pytest-httpserver), streaming and not.

A streamed ``ChatOpenAI`` answer carries no ``response_metadata["token_usage"]`` (the call
the docs used to show is a KeyError there), but its ``usage_metadata`` holds the counts,
cache reads included, and ``response_metadata["model_provider"]`` names the provider."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from ctxledger.adapters.integrations.langgraph import message_provider, report_message_usage
from ctxledger.domain.errors import InvalidInputError
from tests.integration.test_integrations import AGENT, ANSWER, MODEL, _completion, _engine
from tests.integration.test_litellm_stream import USAGE, WORDS, _chat_chunks, _sse


def _model(server: HTTPServer, **kwargs: Any) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=MODEL,
        base_url=server.url_for("/v1"),
        api_key="test",  # type: ignore[arg-type]
        max_retries=0,
        use_responses_api=False,
        **kwargs,
    )


def test_a_streamed_answer_is_booked_from_usage_metadata(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_data(
        _sse(_chat_chunks(USAGE)), content_type="text/event-stream"
    )
    engine = _engine(tmp_path / "ledger.db")
    try:
        message = _model(httpserver, streaming=True, stream_usage=True).invoke("Fix it")
        assert message.content == "".join(WORDS)
        assert "token_usage" not in message.response_metadata  # the old call's KeyError
        assert message_provider(message) == "openai"
        event = report_message_usage(engine, AGENT, message)
        assert (event.provider, event.input_tokens, event.cache_read_tokens) == (
            "openai",
            504,
            896,
        )
        assert (event.cache_write_tokens, event.output_tokens) == (0, 20)
    finally:
        engine.close()


def test_the_provider_passed_wins_and_a_message_without_usage_is_refused(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    from langchain_core.messages import AIMessage

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_json(
        _completion(ANSWER, (1400, 896, 20))
    )
    engine = _engine(tmp_path / "ledger.db")
    try:
        message = _model(httpserver).invoke("Fix it")
        # e.g. DeepSeek behind an OpenAI-compatible endpoint: the caller knows better
        event = report_message_usage(engine, AGENT, message, provider="deepseek")
        assert (event.provider, event.input_tokens, event.cache_read_tokens) == (
            "deepseek",
            504,
            896,
        )
        before = engine.ledger.max_position()
        with pytest.raises(InvalidInputError, match="no usage_metadata"):
            report_message_usage(engine, AGENT, AIMessage(content="x"))
        with pytest.raises(InvalidInputError, match="model_provider"):
            report_message_usage(
                engine,
                AGENT,
                AIMessage(
                    content="x",
                    usage_metadata={"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
                ),
            )
        assert engine.ledger.max_position() == before
    finally:
        engine.close()
