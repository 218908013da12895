"""The Agents SDK adapter with an ``AsyncContextEngine``, across a handoff, against a local
fake provider (pytest-httpserver standing in for OpenAI's chat completions).

A triage agent hands off to a fixer: the first reply calls ``transfer_to_fixer``, the second
(the fixer's) answers. Each SDK agent is its own ctxledger agent (``agents=``): the fixer's
request carries the fixer's context and not the triage agent's, and each call's usage is
booked to the agent that made it, under the provider its model calls."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before LiteLLM's import

import pytest
from pytest_httpserver import HTTPServer

from ctxledger.adapters.integrations.async_engine import AsyncContextEngine
from ctxledger.adapters.integrations.openai_agents import (
    ContextInputFilter,
    UsageHooks,
    model_provider,
)
from ctxledger.domain import events as ev
from ctxledger.domain.model import AgentIdentity, Layer, Source
from tests.integration.test_integrations import (
    AGENT,
    ANSWER,
    MODEL,
    OBJECTIVE,
    _bodies,
    _completion,
    _engine,
    _system,
)

FIXER = "fixer-1"
FIXER_OBJECTIVE = "Objective (fixer): patch auth/session.py so the refresh never times out"
HANDOFF: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_h",
            "type": "function",
            "function": {"name": "transfer_to_fixer", "arguments": "{}"},
        }
    ],
}


def _usage(records: Any) -> list[ev.CacheUsageRecorded]:
    return [r.event for r in records if isinstance(r.event, ev.CacheUsageRecorded)]


def test_a_handoff_gives_the_second_agent_its_own_context_and_usage(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner
    from openai import AsyncOpenAI

    for message, counts in ((HANDOFF, (900, 0, 12)), (ANSWER, (1400, 896, 20))):
        httpserver.expect_ordered_request("/v1/chat/completions", method="POST").respond_with_json(
            _completion(message, counts)
        )
    sync_engine = _engine(tmp_path / "ledger.db")
    sync_engine.register_agent(
        AgentIdentity(agent_id=FIXER, role="worker", task="patch auth", budget=8_000)
    )
    sync_engine.record(
        FIXER, FIXER_OBJECTIVE, layer=Layer.L1, source=Source.USER_REQUIREMENT, pinned=True
    )
    names = {"triage": AGENT, "fixer": FIXER}

    async def run() -> tuple[Any, list[ev.CacheUsageRecorded]]:
        client = AsyncOpenAI(base_url=httpserver.url_for("/v1"), api_key="test", max_retries=0)
        model = OpenAIChatCompletionsModel(model=MODEL, openai_client=client)
        fixer = Agent(name="fixer", instructions="You fix code.", model=model)
        triage = Agent(name="triage", instructions="You route work.", model=model, handoffs=[fixer])
        async with AsyncContextEngine(sync_engine) as engine:
            context_filter = ContextInputFilter(engine, AGENT, agents=names)
            try:
                result = await Runner.run(
                    triage,
                    "Fix the failing test",
                    run_config=RunConfig(
                        call_model_input_filter=context_filter, tracing_disabled=True
                    ),
                    hooks=UsageHooks(engine, AGENT, agents=names),
                )
            finally:
                await client.close()
            return result, _usage(engine.engine.ledger.read_all())

    result, usage = asyncio.run(run())
    assert result.final_output == ANSWER["content"]
    first, second = _bodies(httpserver)
    assert _system(first).startswith("You route work.\n\n")
    assert OBJECTIVE in _system(first)
    assert FIXER_OBJECTIVE not in _system(first)
    # the fixer's call carries the fixer's own context, not the triage agent's
    assert _system(second).startswith("You fix code.\n\n")
    assert FIXER_OBJECTIVE in _system(second)
    assert OBJECTIVE not in _system(second)
    # each call's usage booked to the agent that made it, as OpenAI's
    assert [(u.agent_id, u.provider, u.input_tokens, u.cache_read_tokens) for u in usage] == [
        (AGENT, "openai", 900, 0),
        (FIXER, "openai", 504, 896),
    ]


def test_the_provider_is_read_from_the_agent_s_model() -> None:
    pytest.importorskip("litellm")
    from agents import OpenAIChatCompletionsModel, OpenAIResponsesModel
    from agents.extensions.models.litellm_model import LitellmModel
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url="http://127.0.0.1:9/v1", api_key="test")
    assert model_provider(LitellmModel(model="anthropic/claude-sonnet-4-5")) == "anthropic"
    assert model_provider(LitellmModel(model="openai/gpt-4.1")) == "openai"
    assert model_provider("litellm/anthropic/claude-sonnet-4-5") == "anthropic"
    assert model_provider(OpenAIResponsesModel(model=MODEL, openai_client=client)) == "openai"
    assert model_provider(OpenAIChatCompletionsModel(model=MODEL, openai_client=client)) == "openai"
    assert model_provider(MODEL) == "openai"
    assert model_provider(None) == "openai"  # the SDK's default model is OpenAI's


def _stream_agent(tmp_path: Path, httpserver: HTTPServer, settings: Any) -> Any:
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner
    from openai import AsyncOpenAI

    from tests.integration.test_litellm_stream import USAGE, _chat_chunks, _sse

    # the fake server streams the usage chunk only when the request asks for it, as OpenAI does
    def reply(request: Any) -> Any:
        from werkzeug import Response

        body = json.loads(request.get_data())
        wanted = (body.get("stream_options") or {}).get("include_usage")
        text = _sse(_chat_chunks(USAGE if wanted else None))
        return Response(text, content_type="text/event-stream")

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_handler(reply)
    engine = _engine(tmp_path / "ledger.db")

    async def run() -> list[ev.CacheUsageRecorded]:
        client = AsyncOpenAI(base_url=httpserver.url_for("/v1"), api_key="test", max_retries=0)
        agent = Agent(
            name="worker",
            instructions="You are a careful engineer.",
            model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
            model_settings=settings,
        )
        try:
            streamed = Runner.run_streamed(
                agent,
                "Fix the failing test",
                run_config=RunConfig(
                    call_model_input_filter=ContextInputFilter(engine, AGENT),
                    tracing_disabled=True,
                ),
                hooks=UsageHooks(engine, AGENT),
            )
            async for _ in streamed.stream_events():
                pass
            return _usage(engine.ledger.read_all())
        finally:
            await client.close()

    try:
        return asyncio.run(run()), _bodies(httpserver), engine.agent(AGENT).refresh_streak
    finally:
        engine.close()


def test_a_streamed_run_with_cache_settings_books_its_usage(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    from ctxledger.adapters.integrations.openai_agents import cache_settings

    usage, bodies, _ = _stream_agent(tmp_path, httpserver, cache_settings(AGENT))
    (body,) = bodies
    assert body["stream_options"] == {"include_usage": True}
    assert body["prompt_cache_key"] == f"ctxledger:{AGENT}"
    assert [(u.provider, u.input_tokens, u.cache_read_tokens, u.output_tokens) for u in usage] == [
        ("openai", 504, 896, 20)
    ]


def test_a_streamed_run_without_usage_books_no_zeros(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    from agents import ModelSettings

    usage, bodies, streak = _stream_agent(tmp_path, httpserver, ModelSettings())
    (body,) = bodies
    assert "stream_options" not in body  # the SDK asks only api.openai.com for the usage
    assert usage == []  # no all-zero booking: the call counts as one that went through
    assert streak == 0
