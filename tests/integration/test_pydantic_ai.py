"""The Pydantic AI history processor inside a real ``pydantic_ai.Agent`` (its OpenAI chat
model, pointed at a local fake provider: pytest-httpserver), over a 12-call tool loop.

Every request as it reached the server carries the engine's prompt in its system message
(the agent's own system prompt first), only the current turn, each tool output once (a stub
in the turn, the output in the prompt), and stays within the built prompt plus the turn's own
messages; the run's ``RunUsage`` is booked with its cache reads under the provider named."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from tests.integration.test_adapter_cache_bound import (
    ASK,
    CALLS,
    FRAMING,
    OWN,
    _output,
    _serve_loop,
)
from tests.integration.test_integrations import AGENT, ANSWER, MODEL, OBJECTIVE, _bodies, _engine

pytest.importorskip("pydantic_ai")


def test_history_processor_keeps_the_context_and_the_bound(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from ctxledger.adapters.integrations.pydantic_ai_history import (
        ContextHistory,
        report_run_usage,
    )

    _serve_loop(httpserver)
    engine = _engine(tmp_path / "ledger.db")
    prompts: list[str] = []

    class Recording(ContextHistory):
        def __call__(self, messages: list[Any]) -> list[Any]:
            shaped = super().__call__(messages)
            prompts.append(self.last.prompt.text)
            return shaped

    provider = OpenAIProvider(base_url=httpserver.url_for("/v1"), api_key="test")
    agent = Agent(
        OpenAIChatModel(MODEL, provider=provider),
        system_prompt=OWN,
        capabilities=[ProcessHistory(Recording(engine, AGENT, keywords=["auth"]))],
    )

    @agent.tool_plain
    def run_tests(n: int) -> str:
        """Run the test suite."""
        return _output(n)

    try:
        result = asyncio.run(agent.run(ASK))  # run_sync leaves its event loop open
        assert result.output == ANSWER["content"]
        bodies = _bodies(httpserver)
        assert len(bodies) == len(prompts) == CALLS + 1
        for k, (body, prompt) in enumerate(zip(bodies, prompts, strict=True)):
            system, *turn = body["messages"]
            assert system["role"] in ("system", "developer")
            assert system["content"] == f"{OWN}\n\n{prompt}"  # no prompt of an earlier call
            assert OBJECTIVE in system["content"]
            assert [m["role"] for m in turn] == ["user", *["assistant", "tool"] * k]
            for n, message in enumerate(m for m in turn if m["role"] == "tool"):
                assert f"tool:{AGENT}:call_{n}" in message["content"]
                assert _output(n) not in message["content"]
                assert _output(n) in prompt
            own_messages = sum(len(json.dumps(m)) for m in turn)
            assert len(json.dumps(body)) <= len(prompt.encode()) + len(OWN) + own_messages + FRAMING
        event = report_run_usage(engine, AGENT, result.usage, provider="openai")
        prompt_tokens = sum(900 + n for n in range(CALLS)) + 1400
        assert (event.provider, event.cache_read_tokens) == ("openai", 896)
        assert event.input_tokens == prompt_tokens - 896
        assert event.output_tokens == 5 * CALLS + 20
    finally:
        engine.close()
