"""Provider request bodies pinned byte for byte against golden files.

Regenerate the golden files after an intended change of a request shape with
``CTXLEDGER_UPDATE_GOLDEN=1 .venv/bin/pytest tests/unit/test_render.py`` and review the diff
(refused under ``CI=true``)."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import ContextEngine
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import AgentIdentity, Durability, Item, Layer, Source
from ctxledger.domain.prompt import PromptParts, Segment, compose
from ctxledger.domain.render import (
    DEFAULT_USER_TURN,
    anthropic_min_cacheable_tokens,
    count_breakpoints,
    render_anthropic,
    to_anthropic,
    to_openai,
    to_openai_responses,
)
from ctxledger.domain.tokens import EstimatingCounter

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def canonical(body: Mapping[str, Any]) -> bytes:
    return (json.dumps(body, sort_keys=True, indent=2) + "\n").encode()


def golden(name: str, body: Mapping[str, Any] | None = None) -> bytes:
    """The golden file *name*; with CTXLEDGER_UPDATE_GOLDEN=1, *body* is written to it first."""
    if body is not None and os.environ.get("CTXLEDGER_UPDATE_GOLDEN") == "1":
        assert os.environ.get("CI") != "true", "golden files are not regenerated under CI"
        (GOLDEN / name).write_bytes(canonical(body))
    return (GOLDEN / name).read_bytes()


@pytest.fixture
def parts() -> PromptParts:
    items = [
        Item(
            id="it_t1",
            layer=Layer.L0,
            source=Source.TEST_RESULT,
            content="FAILED tests/test_token.py::test_expiry - AssertionError",
            durability=Durability.EPHEMERAL,
        ),
        Item(
            id="it_f1",
            layer=Layer.L2,
            source=Source.WORKER_FINDING,
            content="expires_at is computed in seconds but compared in milliseconds.",
            files=("auth/token.py",),
        ),
        Item(
            id="it_s1",
            layer=Layer.L1,
            source=Source.STEERING_NOTE,
            content="Do not touch the database schema.",
        ),
        Item(
            id="it_u1",
            layer=Layer.L1,
            source=Source.USER_REQUIREMENT,
            content="Make login tokens expire after 15 minutes.",
        ),
        Item(
            id="it_r1",
            layer=Layer.L1,
            source=Source.ROLE_INSTRUCTION,
            content="You are a code worker. Edit only files in your scope.",
        ),
    ]
    return compose(items, status="Generation 2 · build 3", latest_user_input="Run the tests again.")


def test_anthropic_golden(parts: PromptParts) -> None:
    body = to_anthropic(parts, model="claude-sonnet-4-5", max_tokens=4096)
    assert canonical(body) == golden("anthropic_request.json", body)


def test_anthropic_golden_with_caller_breakpoints(parts: PromptParts) -> None:
    messages = [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": "Earlier tool output",
                    "cache_control": {"type": "ephemeral"},
                },
                {"type": "text", "text": "Earlier plan", "cache_control": {"type": "ephemeral"}},
                {"type": "text", "text": "Next step?"},
            ],
        }
    ]
    body = to_anthropic(parts, model="claude-sonnet-4-5", max_tokens=1024, messages=messages)
    assert canonical(body) == golden("anthropic_request_caller_breakpoints.json", body)


def test_openai_golden(parts: PromptParts) -> None:
    body = to_openai(parts, model="gpt-4.1")
    assert canonical(body) == golden("openai_request.json", body)


def test_default_user_turn_is_sent_without_messages(parts: PromptParts) -> None:
    body = to_anthropic(parts, model="m", max_tokens=1)
    assert body["messages"] == [{"role": "user", "content": DEFAULT_USER_TURN}]


def test_openai_appends_caller_messages(parts: PromptParts) -> None:
    body = to_openai(parts, model="m", messages=[{"role": "assistant", "content": "ok"}])
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant"]


def test_empty_parts() -> None:
    empty = compose([])
    assert "system" not in to_anthropic(empty, model="m", max_tokens=1)
    with pytest.raises(InvalidInputError, match="empty prompt"):
        to_openai(empty, model="m")


def test_invalid_max_tokens(parts: PromptParts) -> None:
    with pytest.raises(InvalidInputError, match="max_tokens"):
        to_anthropic(parts, model="m", max_tokens=0)


def test_count_breakpoints_counts_nested_markers() -> None:
    value = {
        "tools": [{"name": "t", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {
                "content": [
                    {"type": "tool_result", "content": [{"cache_control": {"type": "ephemeral"}}]},
                    {"type": "text", "cache_control": None},
                ]
            }
        ],
    }
    assert count_breakpoints(value) == 2


# --- caller conversation, tools, TTL, cache key (issue 16, "requests out") -------------------

EPHEMERAL = {"type": "ephemeral"}
HOUR = {"type": "ephemeral", "ttl": "1h"}

ANTHROPIC_TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file of the repository.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
    },
    {
        "name": "run_tests",
        "description": "Run the test suite.",
        "input_schema": {"type": "object", "properties": {}},
        "cache_control": HOUR,
    },
]

CONVERSATION = [
    {"role": "user", "content": [{"type": "text", "text": "Fix it.", "cache_control": EPHEMERAL}]},
    {
        "role": "assistant",
        "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "run_tests", "input": {}},
        ],
    },
    {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "toolu_1",
                "content": "1 failed",
                "cache_control": EPHEMERAL,
            },
            {"type": "text", "text": "Next?", "cache_control": EPHEMERAL},
        ],
    },
]

CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the test suite.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
]

RESPONSES_TOOLS = [
    {
        "type": "function",
        "name": "run_tests",
        "description": "Run the test suite.",
        "parameters": {"type": "object", "properties": {}},
    }
]


def test_anthropic_golden_with_tools_conversation_and_ttl(parts: PromptParts) -> None:
    before = json.dumps([ANTHROPIC_TOOLS, CONVERSATION], sort_keys=True)
    rendered = render_anthropic(
        parts,
        model="claude-sonnet-4-5",
        max_tokens=2048,
        messages=CONVERSATION,
        tools=ANTHROPIC_TOOLS,
        cache_ttl="1h",
    )
    body = rendered.request
    assert canonical(body) == golden("anthropic_request_tools_ttl.json", body)
    # 1 tool + 3 segment ends + 3 in messages = 7: the three oldest (tool, role, session) go
    assert [(n.where, n.caller) for n in rendered.notes] == [
        ("tools[1]", True),
        ("system[role]", False),
        ("system[session]", False),
    ]
    assert count_breakpoints(body) == 4
    assert [b.get("cache_control") for b in body["system"]] == [None, None, HOUR, None]
    assert json.dumps([ANTHROPIC_TOOLS, CONVERSATION], sort_keys=True) == before
    assert body["messages"] == CONVERSATION
    assert list(body) == ["model", "max_tokens", "messages", "tools", "system"]


def test_openai_chat_golden_with_tools_and_cache_key(parts: PromptParts) -> None:
    conversation = [
        {"role": "user", "content": "Fix it."},
        {"role": "assistant", "content": "Running the tests."},
    ]
    body = to_openai(
        parts,
        model="gpt-4.1",
        messages=conversation,
        tools=CHAT_TOOLS,
        prompt_cache_key="ctxledger/primary-1",
    )
    assert canonical(body) == golden("openai_request_tools_cache_key.json", body)
    assert body["messages"][0] == {"role": "system", "content": parts.static}
    assert body["messages"][2:] == conversation
    assert body["prompt_cache_key"] == "ctxledger/primary-1"


def test_openai_responses_golden(parts: PromptParts) -> None:
    items = [
        {"role": "user", "content": "Fix it."},
        {"type": "function_call", "call_id": "call_1", "name": "run_tests", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "1 failed"},
    ]
    body = to_openai_responses(
        parts,
        model="gpt-4.1",
        messages=items,
        tools=RESPONSES_TOOLS,
        prompt_cache_key="ctxledger/primary-1",
    )
    assert canonical(body) == golden("openai_responses_request.json", body)
    assert body["instructions"] == parts.static
    assert body["input"][0] == {"role": "user", "content": parts.dynamic}
    assert body["input"][1:] == items


def test_openai_responses_without_conversation(parts: PromptParts) -> None:
    body = to_openai_responses(parts, model="m")
    assert set(body) == {"model", "instructions", "input"}
    with pytest.raises(InvalidInputError, match="empty prompt"):
        to_openai_responses(compose([]), model="m")
    with pytest.raises(InvalidInputError, match="prompt_cache_key"):
        to_openai_responses(parts, model="m", prompt_cache_key="")


def test_cache_ttl_sets_ttl_on_the_engines_breakpoints(parts: PromptParts) -> None:
    for ttl in ("5m", "1h"):
        body = to_anthropic(parts, model="m", max_tokens=1, cache_ttl=ttl)
        marks = [b["cache_control"] for b in body["system"] if "cache_control" in b]
        assert marks == [{"type": "ephemeral", "ttl": ttl}] * 3
    plain = to_anthropic(parts, model="m", max_tokens=1)
    assert [b.get("cache_control") for b in plain["system"]][:3] == [EPHEMERAL] * 3
    with pytest.raises(InvalidInputError, match="cache_ttl"):
        to_anthropic(parts, model="m", max_tokens=1, cache_ttl="10m")  # type: ignore[arg-type]


def test_a_longer_ttl_after_a_shorter_one_is_refused(parts: PromptParts) -> None:
    tool = {"name": "t", "input_schema": {"type": "object"}, "cache_control": EPHEMERAL}
    with pytest.raises(InvalidInputError, match="longer-lived"):
        to_anthropic(parts, model="m", max_tokens=1, tools=[tool], cache_ttl="1h")
    # the same tool marker with one hour first is fine
    ok = to_anthropic(parts, model="m", max_tokens=1, tools=[{**tool, "cache_control": HOUR}])
    assert count_breakpoints(ok) == 4


def test_minimum_cacheable_prefix_by_model() -> None:
    assert anthropic_min_cacheable_tokens("claude-sonnet-4-5-20250929") == 1024
    assert anthropic_min_cacheable_tokens("claude-opus-4-1") == 1024
    assert anthropic_min_cacheable_tokens("claude-3-5-haiku-20241022") == 2048
    assert anthropic_min_cacheable_tokens("claude-3-haiku-20240307") == 2048
    assert anthropic_min_cacheable_tokens("claude-haiku-4-5") == 4096
    assert anthropic_min_cacheable_tokens("claude-opus-4-5") == 4096
    assert anthropic_min_cacheable_tokens("claude-sonnet-4-6") == 2048


def _parts_of_sizes(role: int, session: int, generation: int) -> PromptParts:
    """Parts whose role, session and generation segments hold about so many bytes."""
    items = [
        Item(id="r", layer=Layer.L1, source=Source.ROLE_INSTRUCTION, content="r" * role),
        Item(id="s", layer=Layer.L1, source=Source.USER_REQUIREMENT, content="s" * session),
        Item(id="g", layer=Layer.L2, source=Source.WORKER_FINDING, content="g" * generation),
    ]
    return compose(items, status="Generation 1 · build 1")


def test_no_breakpoint_below_the_minimum_cacheable_prefix() -> None:
    counter = EstimatingCounter()  # 4 bytes a token: 2000 bytes ≈ 500 tokens
    parts = _parts_of_sizes(2000, 2400, 8000)
    tokens = [counter.count(parts.segments[s]) for s in (Segment.ROLE, Segment.SESSION)]
    assert tokens[0] < 1024 <= sum(tokens) < 2048
    sonnet = render_anthropic(parts, model="claude-sonnet-4-5", max_tokens=1, counter=counter)
    marks = ["cache_control" in b for b in sonnet.request["system"]]
    assert marks == [False, True, True, False]
    assert [n.where for n in sonnet.notes] == ["system[role]"]
    assert f"{tokens[0]} tokens, below" in sonnet.notes[0].reason
    haiku = render_anthropic(parts, model="claude-3-5-haiku", max_tokens=1, counter=counter)
    assert ["cache_control" in b for b in haiku.request["system"]] == [False, False, True, False]
    assert [n.where for n in haiku.notes] == ["system[role]", "system[session]"]
    # the freed breakpoints stay free for the caller's markers: none of theirs is dropped
    four = [
        {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": EPHEMERAL}] * 3}
    ]
    body = to_anthropic(
        parts, model="claude-3-5-haiku", max_tokens=1, messages=four, counter=counter
    )
    assert count_breakpoints(body) == 4
    assert body["messages"] == four


# --- the engine's render --------------------------------------------------------------------


@pytest.fixture
def engine() -> Any:
    eng = open_engine("memory://")
    eng.register_agent(
        AgentIdentity(agent_id="primary-1", role="primary", task="fix auth", budget=8000)
    )
    eng.record(
        "primary-1",
        "Fix the login timeout in auth/session.py",
        layer=Layer.L1,
        source=Source.USER_REQUIREMENT,
        pinned=True,
        mandatory=True,
    )
    eng.record(
        "primary-1",
        "auth/session.py:\n" + "    token = refresh(token)\n" * 3000,
        layer=Layer.L0,
        source=Source.TOOL_LOG,
    )
    yield eng
    eng.close()


def test_engine_render_places_the_callers_conversation_per_provider(engine: ContextEngine) -> None:
    result = engine.build("primary-1")
    chat = [{"role": "user", "content": "Fix it."}]
    anthropic = engine.render(
        result,
        "anthropic",
        "claude-sonnet-4-5",
        messages=chat,
        tools=ANTHROPIC_TOOLS[:1],
        cache_ttl="1h",
    )
    assert anthropic["messages"] == chat
    assert anthropic["tools"] == ANTHROPIC_TOOLS[:1]
    system = anthropic.get("system", [])
    assert "".join(b["text"] for b in system).startswith(result.prompt.static)
    # the static prefix here is far below 1024 tokens: only the (long) generation segment
    # gets a breakpoint, counted with the engine's own counter
    assert engine.counter.count(result.prompt.static) < 1024
    assert [b.get("cache_control") for b in system] == [None, HOUR, None]
    openai = engine.render(
        result, "openai", "gpt-4.1", messages=chat, tools=CHAT_TOOLS, prompt_cache_key="k"
    )
    assert openai["messages"][0] == {"role": "system", "content": result.prompt.static}
    assert openai["messages"][2:] == chat
    assert (openai["tools"], openai["prompt_cache_key"]) == (CHAT_TOOLS, "k")
    responses = engine.render(
        result, "openai-responses", "gpt-4.1", messages=chat, prompt_cache_key="k"
    )
    assert responses["instructions"] == result.prompt.static
    assert responses["input"][1:] == chat
    assert engine.render(result, provider="anthropic", model="m")["messages"] == [
        {"role": "user", "content": DEFAULT_USER_TURN}
    ]


def test_engine_render_refuses_options_of_another_provider(engine: ContextEngine) -> None:
    result = engine.build("primary-1")
    with pytest.raises(InvalidInputError, match="prompt_cache_key"):
        engine.render(result, "anthropic", "m", prompt_cache_key="k")  # type: ignore[call-overload]
    with pytest.raises(InvalidInputError, match="cache_ttl"):
        engine.render(result, "openai", "m", cache_ttl="1h")  # type: ignore[call-overload]
    with pytest.raises(InvalidInputError, match="unknown provider"):
        engine.render(result, "gemini", "m")  # type: ignore[call-overload]


def test_engine_render_logs_dropped_caller_breakpoints(
    engine: ContextEngine, caplog: pytest.LogCaptureFixture
) -> None:
    result = engine.build("primary-1")
    five = [
        {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": EPHEMERAL}] * 5}
    ]
    with caplog.at_level(logging.DEBUG, logger="ctxledger.render"):
        body = engine.render(result, "anthropic", "claude-sonnet-4-5", messages=five)
    assert count_breakpoints(body) == 4
    dropped = [r for r in caplog.records if r.levelno == logging.WARNING]
    # the generation segment's breakpoint and the first of the caller's five are the oldest
    assert [r.getMessage().split(":")[0] for r in dropped] == ["messages[0].content[0]"]
    assert dropped[0].__dict__["agent_id"] == "primary-1"
    assert any(r.getMessage().startswith("system[generation]") for r in caplog.records)
