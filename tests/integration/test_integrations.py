"""The framework adapters run inside the real frameworks, against a local fake provider.

An OpenAI Agents SDK agent (``Runner.run`` with ``ContextInputFilter`` and
``UsageHooks``) and a LangGraph ``create_react_agent`` (with ``ContextHook``), each with one
tool, talk to a pytest-httpserver standing in for OpenAI's chat completions: the first reply
calls the tool, the second answers. The test reads both requests as they reached the server:
the first carries the engine's prompt (the pinned objective recorded beforehand), the second
also the tool's output — recorded into the agent's pool by the adapter and chosen by the
engine — and only the current turn of the conversation. ``AsyncContextEngine`` runs a turn
from an event loop. No network: the SDKs' base URLs point at the local server."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import ContextEngine, EngineSettings
from ctxledger.adapters.integrations.async_engine import AsyncContextEngine
from ctxledger.adapters.integrations.turns import tool_item_id
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain import events as ev
from ctxledger.domain.model import AgentIdentity, Layer, Source

AGENT = "worker"
MODEL = "gpt-4.1"
OBJECTIVE = "Objective: fix the auth session timeout in auth/session.py"
TOOL_OUTPUT = "FAILED tests/test_auth.py::test_refresh - TimeoutError after 30s"


NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _engine(path: Path) -> ContextEngine:
    engine = open_engine(
        open_ledger(f"sqlite:///{path}"),
        counter=default_counter(),
        clock=SteppingClock(NOW, timedelta(0)),  # a fixed time
        settings=EngineSettings(session_id="frameworks"),
    )
    engine.register_agent(
        AgentIdentity(agent_id=AGENT, role="worker", task="fix auth", budget=8_000)
    )
    engine.record(AGENT, OBJECTIVE, layer=Layer.L1, source=Source.USER_REQUIREMENT, pinned=True)
    return engine


@pytest.fixture
def engine(tmp_path: Path) -> Any:
    eng = _engine(tmp_path / "ledger.db")
    yield eng
    eng.close()


def _completion(message: dict[str, Any], usage: tuple[int, int, int]) -> dict[str, Any]:
    prompt, cached, completion = usage
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1772366400,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }


CALL_TOOL: dict[str, Any] = {
    "role": "assistant",
    "content": None,
    "tool_calls": [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "run_tests", "arguments": "{}"},
        }
    ],
}
ANSWER: dict[str, Any] = {
    "role": "assistant",
    "content": "The refresh times out; fix in auth/session.py.",
}
USAGES = [(900, 0, 12), (1400, 896, 20)]


def _serve_two_turns(server: HTTPServer) -> None:
    for message, usage in zip((CALL_TOOL, ANSWER), USAGES, strict=True):
        server.expect_ordered_request("/v1/chat/completions", method="POST").respond_with_json(
            _completion(message, usage)
        )


def _bodies(server: HTTPServer) -> list[dict[str, Any]]:
    return [json.loads(request.get_data()) for request, _ in server.log]


def _system(body: dict[str, Any]) -> str:
    first = body["messages"][0]
    assert first["role"] in ("system", "developer")
    content = first["content"]
    return content if isinstance(content, str) else "".join(p["text"] for p in content)


def _check_the_two_calls(server: HTTPServer, engine: ContextEngine) -> None:
    first, second = _bodies(server)
    assert OBJECTIVE in _system(first)
    assert TOOL_OUTPUT not in _system(first)
    # the tool's output reached the pool through the adapter, and the prompt through a build
    assert tool_item_id(AGENT, "call_1") in engine.pool(AGENT).items
    assert OBJECTIVE in _system(second)
    assert TOOL_OUTPUT in _system(second)
    # the conversation sent is the current turn: the user's request, the tool call, its output
    rest = second["messages"][1:]
    assert [m["role"] for m in rest] == ["user", "assistant", "tool"]
    assert rest[0]["content"] == "Fix the failing test"
    assert rest[2]["tool_call_id"] == "call_1"


def test_openai_agents_sdk(engine: ContextEngine, httpserver: HTTPServer) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
    from openai import AsyncOpenAI

    from ctxledger.adapters.integrations.openai_agents import ContextInputFilter, UsageHooks

    @function_tool
    def run_tests() -> str:
        """Run the test suite."""
        return TOOL_OUTPUT

    _serve_two_turns(httpserver)
    context_filter = ContextInputFilter(engine, AGENT, keywords=["auth", "timeout"])

    async def run() -> Any:
        client = AsyncOpenAI(base_url=httpserver.url_for("/v1"), api_key="test", max_retries=0)
        agent = Agent(
            name="worker",
            instructions="You are a careful engineer.",
            model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
            tools=[run_tests],
        )
        try:
            return await Runner.run(
                agent,
                "Fix the failing test",
                run_config=RunConfig(call_model_input_filter=context_filter, tracing_disabled=True),
                hooks=UsageHooks(engine, AGENT),
            )
        finally:
            await client.close()

    result = asyncio.run(run())
    assert result.final_output == ANSWER["content"]
    _check_the_two_calls(httpserver, engine)
    # the agent's own instructions lead, the engine's prompt follows
    first = _bodies(httpserver)[0]
    assert _system(first).startswith("You are a careful engineer.\n\n")
    # each model call's usage was reported: prompt_tokens include the cached part
    usage = [
        r.event for r in engine.ledger.read_all() if isinstance(r.event, ev.CacheUsageRecorded)
    ]
    assert [(u.input_tokens, u.cache_read_tokens, u.output_tokens) for u in usage] == [
        (900, 0, 12),
        (504, 896, 20),
    ]
    assert context_filter.last is not None
    assert context_filter.last.generation == 1


def _chat_model(server: HTTPServer) -> Any:
    from langchain_openai import ChatOpenAI

    return ChatOpenAI(
        model=MODEL,
        base_url=server.url_for("/v1"),
        api_key="test",  # type: ignore[arg-type]
        max_retries=0,
        use_responses_api=False,
    )


# LangGraph 1.x deprecates create_react_agent (moved to langchain.agents.create_agent, whose
# middleware is tested below); the pre_model_hook is what LangGraph users still run.
@pytest.mark.filterwarnings("ignore:create_react_agent has been moved")
def test_langgraph_pre_model_hook(engine: ContextEngine, httpserver: HTTPServer) -> None:
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool
    from langgraph.prebuilt import create_react_agent

    from ctxledger.adapters.integrations.langgraph import ContextHook

    @tool
    def run_tests() -> str:
        """Run the test suite."""
        return TOOL_OUTPUT

    _serve_two_turns(httpserver)
    hook = ContextHook(engine, AGENT, keywords=["auth", "timeout"])
    graph = create_react_agent(_chat_model(httpserver), [run_tests], pre_model_hook=hook)
    state = graph.invoke({"messages": [("user", "Fix the failing test")]})
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    assert last.content == ANSWER["content"]
    _check_the_two_calls(httpserver, engine)
    # the graph's own state keeps the whole conversation (the hook only shaped the model input)
    assert [m.type for m in state["messages"]] == ["human", "ai", "tool", "ai"]
    # the provider's usage on the message goes back to the engine as OpenAI counts it
    event = engine.report_usage(AGENT, last.response_metadata["token_usage"])
    assert (event.input_tokens, event.cache_read_tokens, event.output_tokens) == (504, 896, 20)


def test_langchain_agent_middleware(engine: ContextEngine, httpserver: HTTPServer) -> None:
    from langchain.agents import create_agent
    from langchain_core.messages import AIMessage
    from langchain_core.tools import tool

    from ctxledger.adapters.integrations.langchain_agents import ContextMiddleware

    @tool
    def run_tests() -> str:
        """Run the test suite."""
        return TOOL_OUTPUT

    _serve_two_turns(httpserver)
    middleware = ContextMiddleware(engine, AGENT, keywords=["auth", "timeout"])
    agent = create_agent(
        _chat_model(httpserver),
        [run_tests],
        system_prompt="You are a careful engineer.",
        middleware=[middleware],
    )
    state: Any = agent.invoke({"messages": [("user", "Fix the failing test")]})  # type: ignore[call-overload]
    last = state["messages"][-1]
    assert isinstance(last, AIMessage)
    assert last.content == ANSWER["content"]
    _check_the_two_calls(httpserver, engine)
    assert _system(_bodies(httpserver)[0]).startswith("You are a careful engineer.\n\n")
    assert [m.type for m in state["messages"]] == ["human", "ai", "tool", "ai"]
    assert middleware.last is not None
    assert middleware.last.kind in ("append", "initial")


def test_async_engine_runs_a_turn_from_an_event_loop(tmp_path: Path) -> None:
    async def turn() -> tuple[int, int, str]:
        async with AsyncContextEngine(_engine(tmp_path / "async.db")) as engine:
            await asyncio.gather(
                *(engine.record(AGENT, f"observation {k}: auth timeout") for k in range(5))
            )
            result = await engine.build(AGENT, keywords=["auth"])
            request = engine.render(result, "openai", MODEL)
            usage = {"prompt_tokens": 300, "completion_tokens": 5}
            await engine.report_usage(AGENT, usage)
            pool = await engine.pool(AGENT)
            sent = json.dumps(request["messages"])
            return len(pool.items), result.generation, sent

    items, generation, sent = asyncio.run(turn())
    assert items == 6  # the objective and five observations, each recorded once
    assert generation == 1
    assert OBJECTIVE in sent
    assert all(f"observation {k}: auth timeout" in sent for k in range(5))
    # closed by the context manager: its read models were saved and the worker stopped
    reopened = open_engine(open_ledger(f"sqlite:///{tmp_path / 'async.db'}"))
    assert reopened.runner.ahead == 0
    assert len(reopened.pool(AGENT).items) == 6
    reopened.close()


SECOND_ASK = "Now add a regression test for the refresh"
SECOND_ANSWER: dict[str, Any] = {"role": "assistant", "content": "Added test_refresh_timeout."}


def test_openai_agents_session_kept_in_the_ledger(tmp_path: Path, httpserver: HTTPServer) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, function_tool
    from openai import AsyncOpenAI

    from ctxledger.adapters.integrations.openai_agents import ContextInputFilter, LedgerSession

    @function_tool
    def run_tests() -> str:
        """Run the test suite."""
        return TOOL_OUTPUT

    _serve_two_turns(httpserver)
    httpserver.expect_ordered_request("/v1/chat/completions", method="POST").respond_with_json(
        _completion(SECOND_ANSWER, (700, 600, 9))
    )

    async def run(engine: ContextEngine, ask: str) -> Any:
        client = AsyncOpenAI(base_url=httpserver.url_for("/v1"), api_key="test", max_retries=0)
        agent = Agent(
            name="worker",
            instructions="You are a careful engineer.",
            model=OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
            tools=[run_tests],
        )
        try:
            return await Runner.run(
                agent,
                ask,
                session=LedgerSession(engine, AGENT, "chat-1"),
                run_config=RunConfig(
                    call_model_input_filter=ContextInputFilter(engine, AGENT),
                    tracing_disabled=True,
                ),
            )
        finally:
            await client.close()

    path = tmp_path / "session.db"
    engine = _engine(path)
    asyncio.run(run(engine, "Fix the failing test"))
    engine.close()
    first_turn = [
        {"role": "user", "content": "Fix the failing test"},
        {"type": "function_call", "call_id": "call_1", "name": "run_tests", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": TOOL_OUTPUT},
        {"role": "assistant", "content": ANSWER["content"]},
    ]

    # a new process: the session is the ledger's, not the first engine's memory
    engine = open_engine(open_ledger(f"sqlite:///{path}"), clock=SteppingClock(NOW, timedelta(0)))
    session = LedgerSession(engine, AGENT, "chat-1")
    assert asyncio.run(session.get_items()) == first_turn
    assert asyncio.run(session.get_items(limit=2)) == first_turn[-2:]
    assert asyncio.run(LedgerSession(engine, AGENT, "another").get_items()) == []

    result = asyncio.run(run(engine, SECOND_ASK))
    assert result.final_output == SECOND_ANSWER["content"]
    third = _bodies(httpserver)[2]
    # the model got the current turn; the first turn reached it through the engine's prompt
    assert [m["role"] for m in third["messages"][1:]] == ["user"]
    assert third["messages"][1]["content"] == SECOND_ASK
    assert ANSWER["content"] in _system(third)
    assert TOOL_OUTPUT in _system(third)
    second_turn = [
        {"role": "user", "content": SECOND_ASK},
        {"role": "assistant", "content": SECOND_ANSWER["content"]},
    ]
    assert asyncio.run(session.get_items()) == first_turn + second_turn

    assert asyncio.run(session.pop_item()) == second_turn[-1]
    assert asyncio.run(session.get_items()) == [*first_turn, second_turn[0]]
    asyncio.run(session.clear_session())
    assert asyncio.run(session.get_items()) == []
    assert asyncio.run(session.pop_item()) is None
    # every step is an event: the removals replay, the pool keeps the objective
    removed = [r.event for r in engine.ledger.read_all() if isinstance(r.event, ev.ItemRemoved)]
    assert {e.reason for e in removed} == {"session pop", "session cleared"}
    assert len(removed) == 6
    assert next(iter(engine.pool(AGENT).candidates())).content == OBJECTIVE
    engine.close()
