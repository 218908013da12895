"""The rendered requests go through the real anthropic and openai SDKs, on the wire.

A local HTTP server (pytest-httpserver) stands in for the provider: the SDK client sends
``render``'s request to it exactly as an orchestrator would (``client.messages.create(**req)``,
``client.chat.completions.create(**req)``, ``client.responses.create(**req)``), the test reads
the JSON body the server received, and the SDK's own parsed response — its ``usage`` object
and, for a context-limit reply, its exception — goes back into the engine
(``report_usage``, ``on_turn_error``). The usage figures below are the ones the fake server
answers with; the expected cache split is worked out by hand from each provider's accounting
(Anthropic: ``input_tokens`` excludes cache reads and writes; OpenAI: ``prompt_tokens`` /
``input_tokens`` include ``cached_tokens``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anthropic  # the SDKs and the test server come with ctxledger[dev]
import openai
import pytest
from pytest_httpserver import HTTPServer

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import ContextEngine, EngineSettings
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain.model import AgentIdentity, Layer, Source

AGENT = "sdk-agent"
MODEL_A = "claude-sonnet-4-5"
MODEL_O = "gpt-4.1"


NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[ContextEngine]:
    eng = open_engine(
        open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}"),
        counter=default_counter(),
        clock=SteppingClock(NOW, timedelta(0)),  # a fixed time
        settings=EngineSettings(session_id="sdk"),
    )
    eng.register_agent(AgentIdentity(agent_id=AGENT, role="worker", task="fix auth", budget=20_000))
    # enough stable text that the ROLE/SESSION prefix reaches Anthropic's minimum cacheable
    # length, so the engine spends its breakpoints
    rules = " ".join(f"rule {k}: keep the session token refresh idempotent." for k in range(300))
    eng.record(AGENT, rules, layer=Layer.L1, source=Source.USER_REQUIREMENT, pinned=True)
    eng.record(AGENT, "pytest tests/test_auth.py: 1 failed (timeout)", source=Source.TEST_RESULT)
    yield eng
    eng.close()


def _body(server: HTTPServer) -> dict[str, Any]:
    assert len(server.log) == 1, [r.path for r, _ in server.log]
    request, _response = server.log[0]
    body: dict[str, Any] = json.loads(request.get_data())
    return body


def _breakpoints(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every ``cache_control`` in tools, system blocks and message content blocks."""
    marks = [t["cache_control"] for t in body.get("tools", []) if "cache_control" in t]
    marks += [b["cache_control"] for b in body["system"] if "cache_control" in b]
    for m in body["messages"]:
        if isinstance(m["content"], list):
            marks += [b["cache_control"] for b in m["content"] if "cache_control" in b]
    return marks


def test_anthropic_messages_on_the_wire(engine: ContextEngine, httpserver: HTTPServer) -> None:
    result = engine.build(AGENT, keywords=["auth"])
    tools = [
        {
            "name": f"tool_{k}",
            "description": "run a command",
            "input_schema": {"type": "object", "properties": {}},
            # Anthropic requires longer-lived entries first: the caller's are 1h too
            "cache_control": {"type": "ephemeral", "ttl": "1h"},
        }
        for k in range(3)
    ]
    messages = [{"role": "user", "content": "Fix the failing test."}]
    req = engine.render(
        result, "anthropic", MODEL_A, messages=messages, tools=tools, cache_ttl="1h"
    )
    httpserver.expect_request("/v1/messages", method="POST").respond_with_json(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": MODEL_A,
            "content": [{"type": "text", "text": "ok"}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 40,
                "output_tokens": 7,
                "cache_creation_input_tokens": 1500,
                "cache_read_input_tokens": 2600,
            },
        }
    )
    client = anthropic.Anthropic(base_url=httpserver.url_for(""), api_key="test", max_retries=0)
    response = client.messages.create(**req)

    body = _body(httpserver)
    assert body["model"] == MODEL_A
    assert body["messages"][-1] == {"role": "user", "content": "Fix the failing test."}
    # the system prompt as sent is the engine's prompt, segment by segment
    sent = "".join(b["text"] for b in body["system"])
    assert sent == "".join(b["text"] for b in req["system"])
    assert "rule 299: keep the session token refresh idempotent." in sent
    # 3 caller breakpoints + 2 of the engine's (ROLE/SESSION and GENERATION ends; never the
    # VOLATILE tail) = 5 > 4: the oldest in cache order, the first tool's, is dropped
    assert len(_breakpoints(body)) == 4  # Anthropic refuses more than four
    assert "cache_control" not in body["tools"][0]
    assert [t.get("cache_control") for t in body["tools"][1:]] == [tools[1]["cache_control"]] * 2
    engine_marks = [b.get("cache_control") for b in body["system"]]
    assert engine_marks == [{"type": "ephemeral", "ttl": "1h"}] * 2 + [None]

    event = engine.report_usage(AGENT, response.usage)  # the SDK's own pydantic Usage
    assert type(response.usage).__module__.startswith("anthropic.")
    assert (event.provider, event.input_tokens, event.output_tokens) == ("anthropic", 40, 7)
    assert (event.cache_read_tokens, event.cache_write_tokens) == (2600, 1500)


def test_openai_chat_on_the_wire(engine: ContextEngine, httpserver: HTTPServer) -> None:
    result = engine.build(AGENT, keywords=["auth"])
    tools = [
        {
            "type": "function",
            "function": {"name": "run", "parameters": {"type": "object", "properties": {}}},
        }
    ]
    messages = [{"role": "user", "content": "Fix the failing test."}]
    req = engine.render(
        result, "openai", MODEL_O, messages=messages, tools=tools, prompt_cache_key="sdk-agent"
    )
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_json(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1772366400,
            "model": MODEL_O,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 4200,
                "completion_tokens": 9,
                "total_tokens": 4209,
                "prompt_tokens_details": {"cached_tokens": 3968},
            },
        }
    )
    client = openai.OpenAI(base_url=httpserver.url_for("/v1"), api_key="test", max_retries=0)
    response = client.chat.completions.create(**req)

    body = _body(httpserver)
    assert body["model"] == MODEL_O
    assert body["prompt_cache_key"] == "sdk-agent"
    assert body["tools"] == tools
    # the engine's prompt leads (the cacheable prefix), the caller's turn follows it
    assert body["messages"][0]["role"] in ("system", "developer")
    assert "rule 299" in json.dumps(body["messages"][0])
    assert body["messages"][-1] == {"role": "user", "content": "Fix the failing test."}

    event = engine.report_usage(AGENT, response.usage)  # openai's CompletionUsage
    assert type(response.usage).__module__.startswith("openai.")
    # prompt_tokens includes the cached part: 4200 - 3968 uncached
    assert (event.provider, event.input_tokens, event.cache_read_tokens) == ("openai", 232, 3968)
    assert event.output_tokens == 9


def test_openai_responses_on_the_wire(engine: ContextEngine, httpserver: HTTPServer) -> None:
    result = engine.build(AGENT, keywords=["auth"])
    req = engine.render(
        result,
        "openai-responses",
        MODEL_O,
        messages=[{"role": "user", "content": "Fix the failing test."}],
        prompt_cache_key="sdk-agent",
    )
    httpserver.expect_request("/v1/responses", method="POST").respond_with_json(
        {
            "id": "resp_1",
            "object": "response",
            "created_at": 1772366400,
            "model": MODEL_O,
            "status": "completed",
            "output": [
                {
                    "type": "message",
                    "id": "msg_1",
                    "status": "completed",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "ok", "annotations": []}],
                }
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": 4200,
                "input_tokens_details": {"cached_tokens": 4096},
                "output_tokens": 5,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": 4205,
            },
        }
    )
    client = openai.OpenAI(base_url=httpserver.url_for("/v1"), api_key="test", max_retries=0)
    response = client.responses.create(**req)

    body = _body(httpserver)
    assert body["model"] == MODEL_O
    assert body["prompt_cache_key"] == "sdk-agent"
    assert "rule 299" in body["instructions"]  # the stable prefix
    assert json.dumps(body["input"][-1]).count("Fix the failing test.") == 1

    event = engine.report_usage(AGENT, response.usage)  # openai's ResponseUsage
    assert (event.input_tokens, event.cache_read_tokens, event.output_tokens) == (104, 4096, 5)


@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_a_context_limit_reply_from_the_sdk_refreshes_the_generation(
    engine: ContextEngine, httpserver: HTTPServer, provider: str
) -> None:
    """The SDK's own exception for a 400 context-limit reply is what ``on_turn_error``
    classifies: the agent gets a new generation."""
    result = engine.build(AGENT, keywords=["auth"])
    before = engine.agent(AGENT).current.number
    if provider == "anthropic":
        path, error = (
            "/v1/messages",
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 208440 tokens > 200000 maximum",
                },
            },
        )
        client = anthropic.Anthropic(base_url=httpserver.url_for(""), api_key="test", max_retries=0)
        request = engine.render(result, "anthropic", MODEL_A)

        def send() -> object:
            return client.messages.create(**request)

        kind: type[Exception] = anthropic.BadRequestError
    else:
        path, error = (
            "/v1/chat/completions",
            {
                "error": {
                    "message": "This model's maximum context length is 128000 tokens. However,"
                    " your messages resulted in 130512 tokens. Please reduce the length of"
                    " the messages.",
                    "type": "invalid_request_error",
                    "param": "messages",
                    "code": "context_length_exceeded",
                }
            },
        )
        chat_client = openai.OpenAI(
            base_url=httpserver.url_for("/v1"), api_key="test", max_retries=0
        )
        chat_request = engine.render(result, "openai", MODEL_O)

        def send() -> object:
            return chat_client.chat.completions.create(**chat_request)

        kind = openai.BadRequestError
    httpserver.expect_request(path, method="POST").respond_with_json(error, status=400)
    with pytest.raises(kind) as caught:
        send()
    engine.on_turn_error(AGENT, caught.value)
    after = engine.agent(AGENT)
    assert after.current.number == before + 1
    assert after.current.trigger == "context_limit"
