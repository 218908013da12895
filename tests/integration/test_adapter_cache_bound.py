"""LangChain / LangGraph adapters over a 12-call tool loop against a local fake OpenAI
(pytest-httpserver): the cache markers are on the wire and no request outgrows the bound.

The fake model calls ``run_tests`` twelve times (each output ~1.5 KB), then answers. Every
request as it reached the server is checked:

- the system message is two text parts, the first the agent's own prompt plus the static
  prefix (with ``cache_control`` when the adapter is told the model is Anthropic's, e.g.
  ``ChatOpenAI`` against a LiteLLM proxy serving Claude), the second the dynamic part; an
  OpenAI model's request carries the agent's ``prompt_cache_key``;
- every tool result in the turn whose output the prompt holds is a stub, so each output is
  sent once;
- the byte bound: the request's body is at most the built prompt plus the current turn's
  own messages (the user's request, the tool calls and their stubs) plus a fixed framing
  allowance — where resending the loop's outputs would add ~1.5 KB per call."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from ctxledger.adapters.engine import ContextEngine
from tests.integration.test_integrations import (
    AGENT,
    ANSWER,
    MODEL,
    OBJECTIVE,
    _bodies,
    _completion,
    _engine,
)

CALLS = 12
OWN = "You are a careful engineer."
ASK = "Fix the failing test"
FRAMING = 2_500  # JSON framing, the model name, the tool schema, settings: fixed per request


def _output(n: int) -> str:
    return f"run {n}: " + " ".join(f"FAILED tests/test_auth.py::test_{n}_{k}" for k in range(40))


def _call(n: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": "run_tests", "arguments": json.dumps({"n": n})},
            }
        ],
    }


def _serve_loop(server: HTTPServer) -> None:
    for n in range(CALLS):
        server.expect_ordered_request("/v1/chat/completions", method="POST").respond_with_json(
            _completion(_call(n), (900 + n, 0, 5))
        )
    server.expect_ordered_request("/v1/chat/completions", method="POST").respond_with_json(
        _completion(ANSWER, (1400, 896, 20))
    )


def _chat_model(server: HTTPServer) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=MODEL,
        base_url=server.url_for("/v1"),
        api_key="test",  # type: ignore[arg-type]
        max_retries=0,
        use_responses_api=False,
    )


def _tool() -> Any:
    from langchain_core.tools import tool

    @tool
    def run_tests(n: int) -> str:
        """Run the test suite."""
        return _output(n)

    return run_tests


def _check_bound(bodies: list[dict[str, Any]], prompts: list[str]) -> None:
    assert len(bodies) == CALLS + 1
    assert len(prompts) == CALLS + 1
    for k, (body, prompt) in enumerate(zip(bodies, prompts, strict=True)):
        system, *turn = body["messages"]
        static, dynamic = system["content"]
        assert OBJECTIVE in static["text"]
        assert static["text"] + dynamic["text"] == f"{OWN}\n\n{prompt}"
        assert [m["role"] for m in turn] == ["user", *["assistant", "tool"] * k]
        tool_results = [m for m in turn if m["role"] == "tool"]
        for n, result in enumerate(tool_results):
            # sent once: in the prompt, and a stub in the turn
            assert f"tool:{AGENT}:call_{n}" in result["content"]
            assert _output(n) not in result["content"]
            assert _output(n) in prompt
        own_messages = sum(len(json.dumps(m)) for m in turn)
        size = len(json.dumps(body))
        assert size <= len(prompt.encode()) + len(OWN) + own_messages + FRAMING
        # what resending would have cost: every output again
        assert size < len(prompt.encode()) + sum(len(_output(n)) for n in range(k)) + FRAMING


def test_langchain_middleware_keeps_the_cache_and_the_bound(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    from langchain.agents import create_agent

    from ctxledger.adapters.integrations.langchain_agents import ContextMiddleware

    _serve_loop(httpserver)
    engine = _engine(tmp_path / "ledger.db")
    prompts: list[str] = []

    class Recording(ContextMiddleware):
        def _shaped(self, request: Any) -> Any:
            shaped = super()._shaped(request)
            prompts.append(self.last.prompt.text)
            return shaped

    try:
        agent = create_agent(
            _chat_model(httpserver),
            [_tool()],
            system_prompt=OWN,
            middleware=[Recording(engine, AGENT, keywords=["auth"])],
        )
        state: Any = agent.invoke({"messages": [("user", ASK)]})  # type: ignore[call-overload]
        assert state["messages"][-1].content == ANSWER["content"]
        bodies = _bodies(httpserver)
        _check_bound(bodies, prompts)
        # OpenAI's model (langchain_openai): one prompt_cache_key per agent, no cache_control
        assert {b["prompt_cache_key"] for b in bodies} == {f"ctxledger:{AGENT}"}
        assert all("cache_control" not in b["messages"][0]["content"][0] for b in bodies)
        # the agent's own state keeps the whole loop, outputs and all
        assert sum(m.type == "tool" for m in state["messages"]) == CALLS
    finally:
        engine.close()


def test_langchain_middleware_marks_the_static_block_for_anthropic(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    from langchain.agents import create_agent

    from ctxledger.adapters.integrations.langchain_agents import ContextMiddleware

    httpserver.expect_request("/v1/chat/completions", method="POST").respond_with_json(
        _completion(ANSWER, (1400, 896, 20))
    )
    engine = _engine(tmp_path / "ledger.db")
    try:
        middleware = ContextMiddleware(engine, AGENT, provider="anthropic")
        agent = create_agent(
            _chat_model(httpserver), [], system_prompt=OWN, middleware=[middleware]
        )
        agent.invoke({"messages": [("user", ASK)]})  # type: ignore[call-overload]
        (body,) = _bodies(httpserver)
        static, *rest = body["messages"][0]["content"]
        assert static["cache_control"] == {"type": "ephemeral"}
        assert static["text"].startswith(f"{OWN}\n\n")
        assert all("cache_control" not in block for block in rest)
        assert "prompt_cache_key" not in body  # Anthropic has none
    finally:
        engine.close()


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_langgraph_hook_keeps_the_cache_and_the_bound(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    from langgraph.prebuilt import create_react_agent

    from ctxledger.adapters.integrations.langgraph import ContextHook

    _serve_loop(httpserver)
    engine: ContextEngine = _engine(tmp_path / "ledger.db")
    prompts: list[str] = []

    class Recording(ContextHook):
        def __call__(self, state: Any) -> dict[str, Any]:
            update = super().__call__(state)
            prompts.append(self.last.prompt.text)
            system = update["llm_input_messages"][0]
            # the graph has no system prompt of its own: the hook's leads with OWN here so
            # the bound check reads the same for both adapters
            first, *rest = system.content
            system.content = [{**first, "text": f"{OWN}\n\n{first['text']}"}, *rest]
            return update

    try:
        hook = Recording(engine, AGENT, provider="anthropic", keywords=["auth"])
        graph = create_react_agent(_chat_model(httpserver), [_tool()], pre_model_hook=hook)
        state = graph.invoke({"messages": [("user", ASK)]})
        assert state["messages"][-1].content == ANSWER["content"]
        bodies = _bodies(httpserver)
        _check_bound(bodies, prompts)
        for body in bodies:
            system = body["messages"][0]
            assert system["content"][0]["cache_control"] == {"type": "ephemeral"}
            # one system message per request, whatever the graph holds
            assert sum(m["role"] == "system" for m in body["messages"]) == 1
    finally:
        engine.close()


def test_agents_sdk_filter_sends_each_output_once(tmp_path: Path, httpserver: HTTPServer) -> None:
    import asyncio

    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
    from openai import AsyncOpenAI

    from ctxledger.adapters.integrations.openai_agents import ContextInputFilter, cache_settings

    @function_tool
    def run_tests(n: int) -> str:
        """Run the test suite."""
        return _output(n)

    _serve_loop(httpserver)
    engine = _engine(tmp_path / "ledger.db")
    prompts: list[str] = []

    class Recording(ContextInputFilter):
        def _shape(self, eng: ContextEngine, data: Any) -> Any:
            shaped = super()._shape(eng, data)
            prompts.append(self.last.prompt.text)
            return shaped

    async def run() -> Any:
        client = AsyncOpenAI(base_url=httpserver.url_for("/v1"), api_key="test", max_retries=0)
        agent = Agent(
            name="worker",
            instructions=OWN,
            model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
            tools=[run_tests],
            model_settings=cache_settings(AGENT),
        )
        try:
            return await Runner.run(
                agent,
                ASK,
                max_turns=CALLS + 2,
                run_config=RunConfig(
                    call_model_input_filter=Recording(engine, AGENT, keywords=["auth"]),
                    tracing_disabled=True,
                ),
            )
        finally:
            await client.close()

    try:
        result = asyncio.run(run())
        assert result.final_output == ANSWER["content"]
        bodies = _bodies(httpserver)
        assert len(bodies) == len(prompts) == CALLS + 1
        for k, (body, prompt) in enumerate(zip(bodies, prompts, strict=True)):
            system, *turn = body["messages"]
            assert system["content"] == f"{OWN}\n\n{prompt}"  # the static prefix leads
            assert body["prompt_cache_key"] == f"ctxledger:{AGENT}"
            results = [m for m in turn if m["role"] == "tool"]
            assert len(results) == k
            for n, message in enumerate(results):
                assert f"tool:{AGENT}:call_{n}" in message["content"]
                assert _output(n) not in message["content"]
                assert _output(n) in prompt
            own_messages = sum(len(json.dumps(m)) for m in turn)
            assert len(json.dumps(body)) <= len(prompt.encode()) + len(OWN) + own_messages + FRAMING
    finally:
        engine.close()


@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_one_system_message_with_the_agent_s_own_prompt(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    from langchain.agents import create_agent
    from langgraph.prebuilt import create_react_agent

    from ctxledger.adapters.integrations.langchain_agents import ContextMiddleware
    from ctxledger.adapters.integrations.langgraph import ContextHook

    for _ in range(2):
        httpserver.expect_ordered_request("/v1/chat/completions", method="POST").respond_with_json(
            _completion(ANSWER, (1400, 896, 20))
        )
    engine = _engine(tmp_path / "ledger.db")
    try:
        hook = ContextHook(engine, AGENT, system_prompt=OWN)
        create_react_agent(_chat_model(httpserver), [], pre_model_hook=hook).invoke(
            {"messages": [("user", ASK)]}
        )
        middleware = ContextMiddleware(engine, AGENT)
        agent = create_agent(
            _chat_model(httpserver), [], system_prompt=OWN, middleware=[middleware]
        )
        agent.invoke({"messages": [("user", ASK)]})  # type: ignore[call-overload]
        for body in _bodies(httpserver):
            roles = [m["role"] for m in body["messages"]]
            assert roles == ["system", "user"]
            static = body["messages"][0]["content"][0]["text"]
            assert static.startswith(f"{OWN}\n\n")
            assert OBJECTIVE in static
    finally:
        engine.close()
