"""The LiteLLM helpers drive the real ``litellm`` against a local fake provider.

A pytest-httpserver stands in for OpenAI's chat completions (``model="openai/…"``) and for
Anthropic's Messages API (``model="anthropic/…"``). Each test reads the request as it reached
the server — so what is checked is what LiteLLM made of ``completion_kwargs``, not the dict
itself — and the usage the engine recorded from LiteLLM's own response objects. A 400 with
OpenAI's context-length body becomes LiteLLM's ``ContextWindowExceededError``, which
``on_turn_error`` classes (sizes read from its message) and answers with a new generation.
No network: every call goes to the local server, and a subprocess checks that importing the
adapter and calling LiteLLM asks no other host for anything."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import litellm
import pytest
from litellm.exceptions import ContextWindowExceededError
from litellm.router import Router
from pytest_httpserver import HTTPServer

from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.integrations.async_engine import AsyncContextEngine
from ctxledger.adapters.integrations.litellm_calls import (
    acompletion,
    completion,
    completion_kwargs,
    report_response,
    request_shape,
)
from ctxledger.domain import events as ev
from ctxledger.domain.model import Layer, Source
from ctxledger.domain.render import count_breakpoints
from ctxledger.domain.turn_errors import classify_turn_error
from tests.integration.test_integrations import AGENT, OBJECTIVE, TOOL_OUTPUT, _engine

# pydantic warns while building some of LiteLLM's own response schemas (its TypedDicts use
# ReadOnly); that is LiteLLM's business, not what is tested here
pytestmark = pytest.mark.filterwarnings("ignore:.*the `ReadOnly` qualifier:UserWarning")

MODEL = "gpt-4.1"
CLAUDE = "claude-sonnet-4-5"
ASK = {"role": "user", "content": "Fix the failing test"}
TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "run_tests",
        "description": "Run the test suite.",
        "parameters": {"type": "object", "properties": {}},
    },
}
# a long pinned spec: the session segment passes Anthropic's 1024-token minimum for a breakpoint
SPEC = "Design notes: " + " ".join(
    f"step {i}: the session token refresh calls auth.refresh() before expiry" for i in range(150)
)
CONTEXT_LIMIT_BODY = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages "
        "resulted in 9000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}


@pytest.fixture(autouse=True)
def _litellm_loop(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """LiteLLM's sync ``completion`` logs its timing through ``asyncio.get_event_loop()``,
    which creates and sets a loop that nothing closes; a later ``asyncio.run`` drops it and
    its ResourceWarning lands in whatever test runs then. Each test gets its own loop here,
    closed after it. (LiteLLM also prints a "Give Feedback" banner on errors unless told not
    to.)"""
    monkeypatch.setattr(litellm, "suppress_debug_info", True)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    yield
    asyncio.set_event_loop(None)
    loop.close()


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    eng = _engine(tmp_path / "ledger.db")
    eng.record(AGENT, SPEC, layer=Layer.L1, source=Source.USER_REQUIREMENT, pinned=True)
    eng.record(AGENT, TOOL_OUTPUT, layer=Layer.L0, source=Source.TOOL_LOG)
    yield eng
    eng.close()


def _chat_reply(usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1772366400,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Fixed in auth/session.py."},
                "finish_reason": "stop",
            }
        ],
        "usage": usage,
    }


CHAT_USAGE = {
    "prompt_tokens": 1400,
    "completion_tokens": 20,
    "total_tokens": 1420,
    "prompt_tokens_details": {"cached_tokens": 896},
}


def _bodies(server: HTTPServer) -> list[dict[str, Any]]:
    return [json.loads(request.get_data()) for request, _ in server.log]


def _usage(engine: ContextEngine) -> list[ev.CacheUsageRecorded]:
    return [r.event for r in engine.ledger.read_all() if isinstance(r.event, ev.CacheUsageRecorded)]


def test_request_shape_follows_the_litellm_route() -> None:
    assert request_shape("anthropic/claude-sonnet-4-5") == "anthropic"
    assert request_shape("claude-3-5-haiku-20241022") == "anthropic"
    assert request_shape("openai/gpt-4.1") == "openai"
    assert request_shape("gpt-4.1") == "openai"
    # an OpenAI-compatible route serving Claude takes OpenAI's shape
    assert request_shape("openai/claude-sonnet-4-5") == "openai"


def test_openai_route_turn(engine: ContextEngine, httpserver: HTTPServer) -> None:
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_json(
        _chat_reply(CHAT_USAGE)
    )
    result = engine.build(AGENT, keywords=["auth", "timeout"])
    kwargs = completion_kwargs(
        engine, result, f"openai/{MODEL}", messages=[ASK], tools=[TOOL], prompt_cache_key="w-1"
    )
    response = litellm.completion(
        **kwargs, api_base=httpserver.url_for("/v1"), api_key="test", max_retries=0
    )
    event = report_response(engine, AGENT, response)

    (body,) = _bodies(httpserver)
    assert body["model"] == MODEL
    system, dynamic, ask = body["messages"]
    # the stable prefix first, as a system message: the pinned objective and spec
    assert system["role"] == "system"
    assert OBJECTIVE in system["content"]
    assert SPEC in system["content"]
    assert TOOL_OUTPUT not in system["content"]
    # then the volatile part, then the caller's own turn
    assert dynamic["role"] == "user"
    assert TOOL_OUTPUT in dynamic["content"]
    assert ask == ASK
    assert body["tools"] == [TOOL]
    assert body["prompt_cache_key"] == "w-1"
    assert count_breakpoints(body) == 0  # OpenAI caches prefixes by itself
    # LiteLLM's Usage object, recorded as OpenAI counts it (prompt tokens include the cached)
    assert type(response.usage).__module__.startswith("litellm.")
    assert (event.provider, event.input_tokens, event.cache_read_tokens) == ("openai", 504, 896)
    assert (event.cache_write_tokens, event.output_tokens) == (0, 20)
    assert [(u.generation, u.input_tokens) for u in _usage(engine)] == [(1, 504)]


def test_anthropic_route_turn_keeps_the_breakpoints(
    engine: ContextEngine, httpserver: HTTPServer
) -> None:
    httpserver.expect_request("/v1/messages", method="POST").respond_with_json(
        {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": CLAUDE,
            "content": [{"type": "text", "text": "Fixed in auth/session.py."}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": 40,
                "cache_creation_input_tokens": 1200,
                "cache_read_input_tokens": 3000,
                "output_tokens": 9,
            },
        }
    )
    result = engine.build(AGENT, keywords=["auth", "timeout"])
    cached_tool = {**TOOL, "cache_control": {"type": "ephemeral"}}
    kwargs = completion_kwargs(
        engine, result, f"anthropic/{CLAUDE}", messages=[ASK], tools=[cached_tool], max_tokens=512
    )
    response = litellm.completion(
        **kwargs, api_base=httpserver.url_for(""), api_key="test", max_retries=0
    )
    event = report_response(engine, AGENT, response)

    (body,) = _bodies(httpserver)  # Anthropic's Messages API, as LiteLLM sent it
    assert body["model"] == CLAUDE
    assert body["max_tokens"] == 512
    # the engine's segments in prompt order, one block each: session (the pinned objective
    # and spec), generation (the tool log), volatile (the generation's status) last
    session, generation, volatile = body["system"]
    assert OBJECTIVE in session["text"]
    assert SPEC in session["text"]
    assert TOOL_OUTPUT in generation["text"]
    assert volatile["text"].startswith("### generation status")
    # breakpoints at the ends of session and generation; the volatile block never has one
    assert session["cache_control"] == generation["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in volatile
    # the caller's tool kept its breakpoint through LiteLLM's conversion to Anthropic's shape
    (tool,) = body["tools"]
    assert (tool["name"], tool["cache_control"]) == ("run_tests", {"type": "ephemeral"})
    assert count_breakpoints(body) == 3
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert body["messages"][0]["content"] == [{"type": "text", "text": ASK["content"]}]
    # LiteLLM's Usage: prompt_tokens = 40 + 1200 + 3000 with Anthropic's cache fields beside
    # (from litellm 1.77.3; 1.77.2 left the 1200 written out)
    assert response.usage.prompt_tokens == 4240
    assert (event.provider, event.input_tokens) == ("anthropic", 40)
    assert (event.cache_read_tokens, event.cache_write_tokens, event.output_tokens) == (
        3000,
        1200,
        9,
    )


def test_context_limit_error_refreshes_into_a_new_generation(
    engine: ContextEngine, httpserver: HTTPServer
) -> None:
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_json(
        CONTEXT_LIMIT_BODY, status=400
    )
    result = engine.build(AGENT, keywords=["auth"])
    kwargs = completion_kwargs(engine, result, f"openai/{MODEL}", messages=[ASK])
    with pytest.raises(ContextWindowExceededError) as raised:
        litellm.completion(
            **kwargs, api_base=httpserver.url_for("/v1"), api_key="test", max_retries=0
        )
    outcome = engine.on_turn_error(AGENT, raised.value)
    assert outcome.error.error_class == "context_limit"
    assert (outcome.error.prompt_tokens, outcome.error.limit_tokens) == (9000, 8192)
    assert outcome.refreshed
    assert outcome.result is not None
    assert (result.generation, outcome.result.generation) == (1, 2)
    failed = [r.event for r in engine.ledger.read_all() if isinstance(r.event, ev.TurnFailed)]
    assert [(f.generation, f.error_class) for f in failed] == [(1, "context_limit")]
    # the retry's request carries the refreshed generation's prompt, pinned items kept
    retry = completion_kwargs(engine, outcome.result, f"openai/{MODEL}", messages=[ASK])
    assert OBJECTIVE in retry["messages"][0]["content"]
    assert "Generation 2" in json.dumps(retry["messages"])


def test_completion_turn_retries_after_a_context_limit(
    engine: ContextEngine, httpserver: HTTPServer
) -> None:
    httpserver.expect_ordered_request("/v1/chat/completions", method="POST").respond_with_json(
        CONTEXT_LIMIT_BODY, status=400
    )
    httpserver.expect_ordered_request("/v1/chat/completions", method="POST").respond_with_json(
        _chat_reply(CHAT_USAGE)
    )
    response = completion(
        engine,
        AGENT,
        f"openai/{MODEL}",
        messages=[ASK],
        build={"keywords": ["auth"]},
        api_base=httpserver.url_for("/v1"),
        api_key="test",
        max_retries=0,
    )
    assert response.choices[0].message.content == "Fixed in auth/session.py."
    first, second = _bodies(httpserver)
    assert "Generation 1" in json.dumps(first["messages"])
    assert "Generation 2" in json.dumps(second["messages"])
    assert first["messages"][-1] == second["messages"][-1] == ASK
    failed = [r.event for r in engine.ledger.read_all() if isinstance(r.event, ev.TurnFailed)]
    assert [(f.generation, f.provider) for f in failed] == [(1, "openai")]
    # the usage of the call that went through, on the refreshed generation
    assert [(u.generation, u.input_tokens, u.cache_read_tokens) for u in _usage(engine)] == [
        (2, 504, 896)
    ]


def test_acompletion_with_the_async_engine(tmp_path: Path, httpserver: HTTPServer) -> None:
    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_json(
        _chat_reply({"prompt_tokens": 300, "completion_tokens": 5, "total_tokens": 305})
    )

    async def turn() -> tuple[Any, list[ev.CacheUsageRecorded]]:
        async with AsyncContextEngine(_engine(tmp_path / "async.db")) as engine:
            response = await acompletion(
                engine,
                AGENT,
                f"openai/{MODEL}",
                messages=[ASK],
                api_base=httpserver.url_for("/v1"),
                api_key="test",
                max_retries=0,
            )
            return response, _usage(engine.engine)

    response, usage = asyncio.run(turn())
    assert response.choices[0].message.content == "Fixed in auth/session.py."
    (body,) = _bodies(httpserver)
    assert OBJECTIVE in body["messages"][0]["content"]
    assert body["messages"][-1] == ASK
    assert [(u.input_tokens, u.output_tokens) for u in usage] == [(300, 5)]


def test_router_pre_call_check_states_its_sizes(engine: ContextEngine) -> None:
    # LiteLLM's Router refuses a call above a deployment's window before sending anything
    router = Router(
        model_list=[
            {
                "model_name": "small",
                "litellm_params": {
                    "model": f"openai/{MODEL}",
                    "api_base": "http://127.0.0.1:9/v1",
                    "api_key": "test",
                },
                "model_info": {"max_input_tokens": 50},
            }
        ],
        enable_pre_call_checks=True,
        num_retries=0,
    )
    result = engine.build(AGENT)
    kwargs = completion_kwargs(engine, result, "small", messages=[ASK])
    with pytest.raises(ContextWindowExceededError) as raised:
        router.completion(**kwargs)
    # the engine classes it with LiteLLM's sizes (a refresh could not fit a 50-token window)
    verdict = classify_turn_error(raised.value)
    assert verdict.error_class == "context_limit"
    assert verdict.limit_tokens == 50
    counted = litellm.token_counter(model=f"openai/{MODEL}", messages=kwargs["messages"])
    assert verdict.prompt_tokens == counted > 50


GUARD = """
import socket, sys
asked = []
real = socket.getaddrinfo
def getaddrinfo(host, *args, **kwargs):
    if host not in ("localhost", "127.0.0.1", "::1"):
        asked.append(host)
        raise OSError(f"no network in this test: {host}")
    return real(host, *args, **kwargs)
socket.getaddrinfo = getaddrinfo
import ctxledger.adapters.integrations.litellm_calls
import litellm, os
reply = litellm.completion(model="openai/gpt-4.1", messages=[{"role": "user", "content": "hi"}],
                           mock_response="ok")
print(os.environ["LITELLM_LOCAL_MODEL_COST_MAP"], reply.choices[0].message.content, asked)
"""


def test_import_and_call_ask_no_other_host() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LITELLM_", "PYTHON"))}
    out = subprocess.run(
        [sys.executable, "-c", GUARD],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    # the adapter set the local cost map before LiteLLM's import: no fetch was tried
    assert out.stdout.strip().splitlines()[-1] == "True ok []"
