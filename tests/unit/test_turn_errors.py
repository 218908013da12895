"""Provider error classification, with real error bodies of each provider."""

from __future__ import annotations

from typing import Any

import pytest

from ctxledger.domain.turn_errors import classify_turn_error

ANTHROPIC_TOO_LONG = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 215634 tokens > 200000 maximum",
    },
}
OPENAI_CONTEXT = {
    "error": {
        "message": (
            "This model's maximum context length is 128000 tokens. However, your messages "
            "resulted in 130512 tokens. Please reduce the length of the messages."
        ),
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
ANTHROPIC_OVERLOADED = {
    "type": "error",
    "error": {"type": "overloaded_error", "message": "Overloaded"},
}
ANTHROPIC_BAD_REQUEST = {
    "type": "error",
    "error": {"type": "invalid_request_error", "message": "messages: roles must alternate"},
}
OPENAI_RATE_LIMIT = {
    "error": {
        "message": "Rate limit reached for gpt-4o in organization org-x on tokens per min (TPM)",
        "type": "tokens",
        "param": None,
        "code": "rate_limit_exceeded",
    }
}


class FakeProviderError(Exception):
    """An SDK-style exception carrying the response body (as anthropic/openai SDKs do)."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__("Error code: 400")
        self.body = body


@pytest.mark.parametrize(
    ("error", "expected_class", "provider"),
    [
        (ANTHROPIC_TOO_LONG, "context_limit", "anthropic"),
        (OPENAI_CONTEXT, "context_limit", "openai"),
        (FakeProviderError(ANTHROPIC_TOO_LONG), "context_limit", "anthropic"),
        (FakeProviderError(OPENAI_CONTEXT), "context_limit", "openai"),
        ("litellm.ContextWindowExceededError: context window exceeded", "context_limit", ""),
        ("Input is too long for requested model.", "context_limit", ""),
        ("error: too many tokens in request", "context_limit", ""),
        (ANTHROPIC_OVERLOADED, "other", "anthropic"),
        (ANTHROPIC_BAD_REQUEST, "other", "anthropic"),
        (OPENAI_RATE_LIMIT, "other", "openai"),
        (TimeoutError("read timed out"), "other", ""),
        ("HTTP 500 internal server error", "other", ""),
    ],
)
def test_classifier_table(error: object, expected_class: str, provider: str) -> None:
    verdict = classify_turn_error(error)
    assert verdict.error_class == expected_class
    assert verdict.provider == provider


def test_rate_limit_on_tokens_is_not_a_context_limit() -> None:
    assert classify_turn_error(OPENAI_RATE_LIMIT).code == "rate_limit_exceeded"


def test_message_is_bounded() -> None:
    verdict = classify_turn_error("x" * 10_000)
    assert len(verdict.message) == 500


def test_stated_sizes_are_parsed() -> None:
    a = classify_turn_error(ANTHROPIC_TOO_LONG)
    assert (a.prompt_tokens, a.limit_tokens) == (215634, 200000)
    o = classify_turn_error(OPENAI_CONTEXT)
    assert (o.prompt_tokens, o.limit_tokens) == (130512, 128000)
    assert classify_turn_error(OPENAI_RATE_LIMIT).limit_tokens == 0
