"""Usage read from each SDK's own usage type (the real SDK classes, as installed), booked
under the provider of the call, never guessed from key names.

Each case constructs the SDK's own usage object and reports it through a real engine
(SQLite file); the recorded ``CacheUsageRecorded`` must carry the provider passed (or the
one the SDK type speaks for) and the cache reads and writes the SDK reported."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # before LiteLLM's import

import pytest
from agents.usage import Usage as AgentsUsage
from anthropic.types import Usage as AnthropicUsage
from hypothesis import given
from hypothesis import strategies as st
from langchain_core.messages import AIMessage
from litellm.types.utils import Usage as LiteLLMUsage
from openai.types import CompletionUsage
from openai.types.completion_usage import PromptTokensDetails
from openai.types.responses import ResponseUsage
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.usage_types import read_langchain_usage, read_usage
from ctxledger.domain import events as ev
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import AgentIdentity, Layer, Source
from ctxledger.domain.usage import Usage

pytestmark = pytest.mark.filterwarnings("ignore:.*the `ReadOnly` qualifier:UserWarning")


@pytest.fixture
def engine(tmp_path: Path) -> Iterator[ContextEngine]:
    eng = open_engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    eng.register_agent(AgentIdentity(agent_id="a", role="primary", task="t", budget=4000))
    eng.record("a", "Fix the login timeout", layer=Layer.L1, source=Source.USER_REQUIREMENT)
    eng.build("a")
    try:
        yield eng
    finally:
        eng.close()


def _counts(event: ev.CacheUsageRecorded | Usage) -> tuple[str, int, int, int, int]:
    return (
        event.provider,
        event.input_tokens,
        event.cache_read_tokens,
        event.cache_write_tokens,
        event.output_tokens,
    )


def _litellm_anthropic() -> LiteLLMUsage:
    # what LiteLLM makes of an Anthropic reply: prompt_tokens = 40 + 3000 read + 1200 written
    return LiteLLMUsage(
        prompt_tokens=4240,
        completion_tokens=9,
        total_tokens=4249,
        cache_read_input_tokens=3000,
        cache_creation_input_tokens=1200,
    )


# (name, the SDK's own usage object, provider passed, expected booking)
CASES: list[tuple[str, Any, str | None, tuple[str, int, int, int, int]]] = [
    (
        "anthropic Usage",
        AnthropicUsage(
            input_tokens=40,
            cache_read_input_tokens=3000,
            cache_creation_input_tokens=1200,
            output_tokens=9,
        ),
        None,
        ("anthropic", 40, 3000, 1200, 9),
    ),
    (
        "openai chat CompletionUsage",
        CompletionUsage(
            prompt_tokens=1400,
            completion_tokens=20,
            total_tokens=1420,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=896),
        ),
        None,
        ("openai", 504, 896, 0, 20),
    ),
    (
        "openai ResponseUsage",
        ResponseUsage(
            input_tokens=3000,
            input_tokens_details=InputTokensDetails(cached_tokens=2048, cache_write_tokens=0),
            output_tokens=90,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
            total_tokens=3090,
        ),
        None,
        ("openai", 952, 2048, 0, 90),
    ),
    (
        "openai chat CompletionUsage with cache writes",
        CompletionUsage(
            prompt_tokens=1400,
            completion_tokens=20,
            total_tokens=1420,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=896, cache_write_tokens=400),
        ),
        None,
        ("openai", 104, 896, 400, 20),
    ),
    ("LiteLLM Usage, Claude", _litellm_anthropic(), "anthropic", ("anthropic", 40, 3000, 1200, 9)),
    (
        "LiteLLM Usage, GPT",
        LiteLLMUsage(
            prompt_tokens=1400,
            completion_tokens=20,
            total_tokens=1420,
            prompt_tokens_details={"cached_tokens": 896},
        ),
        "openai",
        ("openai", 504, 896, 0, 20),
    ),
    (
        # Claude through an OpenAI-compatible route: the call says Anthropic, the names don't
        "LiteLLM Usage, Claude with only cached_tokens",
        LiteLLMUsage(
            prompt_tokens=3040,
            completion_tokens=9,
            total_tokens=3049,
            prompt_tokens_details={"cached_tokens": 3000},
        ),
        "anthropic",
        ("anthropic", 40, 3000, 0, 9),
    ),
    (
        "openai-agents Usage, GPT",
        AgentsUsage(
            requests=2,
            input_tokens=5000,
            input_tokens_details=InputTokensDetails(cached_tokens=4096, cache_write_tokens=0),
            output_tokens=300,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
            total_tokens=5300,
        ),
        "openai",
        ("openai", 904, 4096, 0, 300),
    ),
    (
        # the Agents SDK's LiteLLM model fills the writes in: booked as writes, not input
        "openai-agents Usage, Claude via LiteLLM",
        AgentsUsage(
            requests=1,
            input_tokens=4240,
            input_tokens_details=InputTokensDetails(cached_tokens=3000, cache_write_tokens=1200),
            output_tokens=9,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
            total_tokens=4249,
        ),
        "anthropic",
        ("anthropic", 40, 3000, 1200, 9),
    ),
    (
        "a whole anthropic-shaped response holding usage, provider given",
        {"usage": {"input_tokens": 8, "output_tokens": 2}},
        "anthropic",
        ("anthropic", 8, 0, 0, 2),
    ),
]


@pytest.mark.parametrize(
    ("name", "usage", "provider", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_each_sdk_usage_type_is_booked_with_the_call_s_provider(
    engine: ContextEngine, name: str, usage: Any, provider: str | None, expected: tuple[Any, ...]
) -> None:
    assert _counts(read_usage(usage, provider=provider)) == expected
    event = engine.report_usage("a", usage, provider=provider)
    assert _counts(event) == expected
    assert [r.event for r in engine.ledger.read_all()][-1] == event


def test_the_provider_passed_wins_over_the_type_s_own(engine: ContextEngine) -> None:
    # a Chat Completions usage from DeepSeek's OpenAI-compatible endpoint, booked as DeepSeek's
    usage = CompletionUsage(prompt_tokens=100, completion_tokens=1, total_tokens=101)
    event = engine.report_usage("a", usage, provider="deepseek")
    assert _counts(event) == ("deepseek", 100, 0, 0, 1)


def test_langchain_usage_metadata_keeps_cache_reads_and_writes(engine: ContextEngine) -> None:
    # ChatAnthropic's usage_metadata: input_tokens is the sum of every input token type
    message = AIMessage(
        content="Fixed.",
        usage_metadata={
            "input_tokens": 4240,
            "output_tokens": 9,
            "total_tokens": 4249,
            "input_token_details": {"cache_read": 3000, "cache_creation": 1200},
        },
    )
    expected = ("anthropic", 40, 3000, 1200, 9)
    assert _counts(read_langchain_usage(message, provider="anthropic")) == expected
    assert message.usage_metadata is not None
    usage = read_langchain_usage(message.usage_metadata, provider="anthropic")
    assert _counts(engine.report_usage("a", usage)) == expected
    # no details (a model that reports none): all of it uncached
    plain = AIMessage(
        content="x", usage_metadata={"input_tokens": 7, "output_tokens": 1, "total_tokens": 8}
    )
    assert _counts(read_langchain_usage(plain, provider="openai")) == ("openai", 7, 0, 0, 1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: read_usage(AnthropicUsage(input_tokens=1, output_tokens=1), provider="x"),
            "one of",
        ),
        (lambda: read_langchain_usage(AIMessage(content="x"), provider="openai"), "mapping"),
        (lambda: read_langchain_usage({"output_tokens": 1}, provider="openai"), "input_tokens"),
        (
            lambda: read_langchain_usage(
                {"input_tokens": 5, "input_token_details": {"cache_read": 9}}, provider="openai"
            ),
            "exceed",
        ),
        (
            lambda: read_usage(
                LiteLLMUsage(prompt_tokens=10, completion_tokens=1, cache_read_input_tokens=11),
                provider="anthropic",
            ),
            "exceed",
        ),
    ],
)
def test_bad_usage_is_the_typed_error(call: Any, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message):
        call()


def test_an_unknown_provider_records_nothing(engine: ContextEngine) -> None:
    before = engine.ledger.max_position()
    with pytest.raises(InvalidInputError, match="provider must be one of"):
        engine.report_usage(
            "a", AnthropicUsage(input_tokens=1, output_tokens=1), provider="bedrock"
        )
    assert engine.ledger.max_position() == before


counts = st.integers(min_value=0, max_value=10**7)


@given(uncached=counts, read=counts, write=counts, output=counts)
def test_litellm_usage_splits_into_the_prompt_it_came_from(
    uncached: int, read: int, write: int, output: int
) -> None:
    usage = LiteLLMUsage(
        prompt_tokens=uncached + read + write,
        completion_tokens=output,
        cache_read_input_tokens=read,
        cache_creation_input_tokens=write,
    )
    booked = read_usage(usage, provider="anthropic")
    assert _counts(booked) == ("anthropic", uncached, read, write, output)
    assert booked.prompt_tokens == usage.prompt_tokens


@given(uncached=counts, read=counts, write=counts, output=counts)
def test_langchain_metadata_splits_into_the_prompt_it_came_from(
    uncached: int, read: int, write: int, output: int
) -> None:
    metadata = {
        "input_tokens": uncached + read + write,
        "output_tokens": output,
        "total_tokens": uncached + read + write + output,
        "input_token_details": {"cache_read": read, "cache_creation": write},
    }
    booked = read_langchain_usage(metadata, provider="anthropic")
    assert _counts(booked) == ("anthropic", uncached, read, write, output)


def test_pydantic_ai_usage_when_installed() -> None:
    usage_module = pytest.importorskip("pydantic_ai.usage")
    run_usage = usage_module.RunUsage(
        input_tokens=4240, cache_read_tokens=3000, cache_write_tokens=1200, output_tokens=9
    )
    assert _counts(read_usage(run_usage, provider="anthropic")) == ("anthropic", 40, 3000, 1200, 9)
