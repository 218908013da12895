"""Provider request bodies pinned byte for byte against hand-written golden files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import Durability, Item, Layer, Source
from ctxledger.domain.prompt import PromptParts, compose
from ctxledger.domain.render import DEFAULT_USER_TURN, count_breakpoints, to_anthropic, to_openai

GOLDEN = Path(__file__).resolve().parent.parent / "golden"


def canonical(body: dict[str, Any]) -> bytes:
    return (json.dumps(body, sort_keys=True, indent=2) + "\n").encode()


def golden(name: str) -> bytes:
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
    assert canonical(body) == golden("anthropic_request.json")


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
    assert canonical(body) == golden("anthropic_request_caller_breakpoints.json")


def test_openai_golden(parts: PromptParts) -> None:
    assert canonical(to_openai(parts, model="gpt-4.1")) == golden("openai_request.json")


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
