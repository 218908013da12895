"""``litellm_calls.completion`` over a 12-call tool loop the caller drives, against the real
``litellm`` and a local fake OpenAI (pytest-httpserver): the caller appends each tool call
and its output to its own conversation; every request as it reached the server sends each
output once (recorded into the pool, chosen into the prompt, a stub in the conversation),
carries the agent's ``prompt_cache_key`` and stays within the built prompt plus the
conversation's own messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

from ctxledger.adapters.integrations.litellm_calls import completion
from tests.integration.test_adapter_cache_bound import CALLS, FRAMING, _call, _output, _serve_loop
from tests.integration.test_integrations import AGENT, ANSWER, MODEL, OBJECTIVE, _bodies, _engine
from tests.integration.test_litellm import ASK, _litellm_loop  # noqa: F401  (autouse fixture)

pytestmark = pytest.mark.filterwarnings("ignore:.*the `ReadOnly` qualifier:UserWarning")


def test_a_caller_driven_tool_loop_sends_each_output_once(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    _serve_loop(httpserver)
    engine = _engine(tmp_path / "ledger.db")
    conversation: list[dict[str, Any]] = [ASK]
    try:
        for n in range(CALLS + 1):
            response = completion(
                engine,
                AGENT,
                f"openai/{MODEL}",
                messages=conversation,
                build={"keywords": ["auth"]},
                prompt_cache_key=f"ctxledger:{AGENT}",
                api_base=httpserver.url_for("/v1"),
                api_key="test",
                max_retries=0,
            )
            message = response.choices[0].message
            if n == CALLS:
                assert message.content == ANSWER["content"]
                break
            (call,) = message.tool_calls
            assert call.id == _call(n)["tool_calls"][0]["id"]
            conversation += [
                {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                {"role": "tool", "tool_call_id": call.id, "content": _output(n)},
            ]
        bodies = _bodies(httpserver)
        assert len(bodies) == CALLS + 1
        for k, body in enumerate(bodies):
            system, dynamic, *turn = body["messages"]
            assert OBJECTIVE in system["content"]
            assert body["prompt_cache_key"] == f"ctxledger:{AGENT}"
            assert [m["role"] for m in turn] == ["user", *["assistant", "tool"] * k]
            for n, m in enumerate(m for m in turn if m["role"] == "tool"):
                assert m["content"].startswith(f"[output recorded as tool:{AGENT}:call_{n}")
                assert _output(n) in dynamic["content"]  # sent once: in the prompt
            prompt = system["content"] + dynamic["content"]
            own = sum(len(json.dumps(m)) for m in turn)
            assert len(json.dumps(body)) <= len(prompt.encode()) + own + FRAMING
        # the caller's own conversation keeps the outputs as they were
        assert conversation[2]["content"] == _output(0)
    finally:
        engine.close()
