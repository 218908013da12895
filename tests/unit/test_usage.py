"""Usage normalisation on real-looking provider bodies, and the hit-rate formula."""

from __future__ import annotations

from typing import Any

import pytest

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.usage import Usage, hit_rate, normalize_usage

ANTHROPIC_MESSAGE: dict[str, Any] = {
    "id": "msg_01XFDUDYJgAACzvnptvVoYEL",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5-20250929",
    "content": [{"type": "text", "text": "The expiry is compared in milliseconds."}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {
        "input_tokens": 214,
        "cache_creation_input_tokens": 1536,
        "cache_read_input_tokens": 6144,
        "cache_creation": {"ephemeral_5m_input_tokens": 1536, "ephemeral_1h_input_tokens": 0},
        "output_tokens": 377,
        "service_tier": "standard",
    },
}

OPENAI_CHAT_COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-B9MHDbslfkBeAs8l4bebGdFOJ6PeG",
    "object": "chat.completion",
    "created": 1741570283,
    "model": "gpt-4.1-2025-04-14",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Done.", "refusal": None},
            "logprobs": None,
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 2006,
        "completion_tokens": 300,
        "total_tokens": 2306,
        "prompt_tokens_details": {"cached_tokens": 1920, "audio_tokens": 0},
        "completion_tokens_details": {
            "reasoning_tokens": 0,
            "audio_tokens": 0,
            "accepted_prediction_tokens": 0,
            "rejected_prediction_tokens": 0,
        },
    },
    "service_tier": "default",
    "system_fingerprint": "fp_b7faba9ef5",
}

OPENAI_RESPONSES_USAGE: dict[str, Any] = {
    "input_tokens": 3328,
    "input_tokens_details": {"cached_tokens": 3072},
    "output_tokens": 58,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 3386,
}

DEEPSEEK_CHAT_COMPLETION: dict[str, Any] = {
    "id": "930c60df-bf64-41c9-a88e-3ec75f81e00e",
    "object": "chat.completion",
    "created": 1705651092,
    "model": "deepseek-chat",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello!"},
            "finish_reason": "stop",
        }
    ],
    "usage": {
        "prompt_tokens": 1234,
        "completion_tokens": 50,
        "total_tokens": 1284,
        "prompt_tokens_details": {"cached_tokens": 1024},
        "prompt_cache_hit_tokens": 1024,
        "prompt_cache_miss_tokens": 210,
    },
    "system_fingerprint": "fp_8802369eaa_prod0623",
}


def test_anthropic_response_body() -> None:
    assert normalize_usage(ANTHROPIC_MESSAGE) == Usage(
        provider="anthropic",
        input_tokens=214,
        cache_read_tokens=6144,
        cache_write_tokens=1536,
        output_tokens=377,
    )


def test_anthropic_usage_object_with_null_cache_fields() -> None:
    raw = {
        "input_tokens": 12,
        "cache_creation_input_tokens": None,
        "cache_read_input_tokens": None,
        "output_tokens": 6,
    }
    assert normalize_usage(raw) == Usage(provider="anthropic", input_tokens=12, output_tokens=6)


def test_openai_chat_completion_subtracts_cached_from_prompt_tokens() -> None:
    assert normalize_usage(OPENAI_CHAT_COMPLETION) == Usage(
        provider="openai", input_tokens=86, cache_read_tokens=1920, output_tokens=300
    )


def test_openai_without_details_has_no_cached_tokens() -> None:
    raw = {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29}
    assert normalize_usage(raw) == Usage(provider="openai", input_tokens=19, output_tokens=10)


def test_openai_responses_usage() -> None:
    assert normalize_usage(OPENAI_RESPONSES_USAGE) == Usage(
        provider="openai", input_tokens=256, cache_read_tokens=3072, output_tokens=58
    )


def test_deepseek_wins_over_its_openai_compatible_fields() -> None:
    assert normalize_usage(DEEPSEEK_CHAT_COMPLETION) == Usage(
        provider="deepseek", input_tokens=210, cache_read_tokens=1024, output_tokens=50
    )


@pytest.mark.parametrize(
    "raw",
    [
        {},
        {"total_tokens": 5},
        {"usage": None, "object": "chat.completion.chunk"},
        {"usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 3}},
        {"output_tokens": 15},
    ],
)
def test_unknown_shapes_are_rejected(raw: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError, match="unknown usage shape"):
        normalize_usage(raw)


@pytest.mark.parametrize(
    "raw",
    [
        {"input_tokens": -1, "output_tokens": 3},
        {"input_tokens": "12", "output_tokens": 3},
        {"input_tokens": True, "output_tokens": 3},
        {"input_tokens": 1.5},
        {"prompt_tokens": 10, "prompt_tokens_details": {"cached_tokens": 11}},
        {"prompt_tokens": 10, "prompt_tokens_details": [1]},
        {"prompt_cache_hit_tokens": 5},
        {"prompt_tokens": None, "completion_tokens": 1},
    ],
)
def test_malformed_counts_are_rejected(raw: dict[str, Any]) -> None:
    with pytest.raises(InvalidInputError):
        normalize_usage(raw)


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        ((0, 0, 0), 0.0),
        ((0, 0, 50), 0.0),
        ((100, 900, 0), 0.9),
        ((1, 1, 2), 0.25),
        ((0, 7, 0), 1.0),
        ((214, 6144, 1536), 6144 / 7894),
    ],
)
def test_hit_rate(counts: tuple[int, int, int], expected: float) -> None:
    assert hit_rate(*counts) == pytest.approx(expected)


def test_hit_rate_rejects_negative_counts() -> None:
    with pytest.raises(InvalidInputError):
        hit_rate(1, -1, 0)


def test_usage_hit_rate_and_prompt_tokens() -> None:
    u = normalize_usage(ANTHROPIC_MESSAGE)
    assert u.prompt_tokens == 214 + 6144 + 1536
    assert u.hit_rate == pytest.approx(6144 / 7894)


def test_litellm_wrapped_anthropic_usage_splits_cache_writes_from_input() -> None:
    """LiteLLM reports Anthropic usage with OpenAI names; prompt_tokens includes the cache
    read and write tokens (seen in the shared OpenHands trajectory)."""
    from ctxledger.domain.usage import normalize_usage

    u = normalize_usage(
        {
            "prompt_tokens": 3439,
            "completion_tokens": 120,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 3435,
        }
    )
    assert (u.provider, u.input_tokens, u.cache_read_tokens, u.cache_write_tokens) == (
        "anthropic",
        4,
        0,
        3435,
    )
    assert u.output_tokens == 120
