"""`report_usage` takes the SDKs' own usage objects, not only dicts.

The shapes of every SDK are rebuilt here with the same field names and the same kinds, so the
cases run without those packages: pydantic models with ``model_dump()`` and ``to_dict()``
(anthropic ``Usage``, openai ``CompletionUsage`` and ``ResponseUsage``, LiteLLM ``Usage``), a
dataclass holding pydantic details (openai-agents ``Usage``), and plain attribute objects. The
real anthropic and openai SDKs' objects, parsed from a local server's replies, go through
``report_usage`` in tests/integration/test_provider_sdks.py. Expected numbers are worked out
by hand from the provider's documented accounting."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import ContextEngine
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import AgentIdentity, Layer, Source
from ctxledger.domain.usage import Usage, normalize_usage

# --- anthropic (anthropic.types.Usage) ---------------------------------------------------------


class CacheCreation(BaseModel):
    ephemeral_1h_input_tokens: int = 0
    ephemeral_5m_input_tokens: int = 0


class AnthropicUsage(BaseModel):
    input_tokens: int
    output_tokens: int
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation: CacheCreation | None = None
    service_tier: Literal["standard", "priority", "batch"] | None = None

    def to_dict(self) -> dict[str, Any]:  # the SDK's BaseModel has both
        return self.model_dump(exclude_none=True)


# --- openai chat (openai.types.CompletionUsage) ------------------------------------------------


class PromptTokensDetails(BaseModel):
    audio_tokens: int | None = None
    cached_tokens: int | None = None


class CompletionTokensDetails(BaseModel):
    reasoning_tokens: int | None = None


class CompletionUsage(BaseModel):
    completion_tokens: int
    prompt_tokens: int
    total_tokens: int
    completion_tokens_details: CompletionTokensDetails | None = None
    prompt_tokens_details: PromptTokensDetails | None = None


# --- openai responses (openai.types.responses.ResponseUsage) -----------------------------------


class InputTokensDetails(BaseModel):
    cached_tokens: int


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


# --- openai-agents (agents.usage.Usage: a dataclass with pydantic details) ---------------------


@dataclasses.dataclass
class AgentsUsage:
    requests: int = 0
    input_tokens: int = 0
    input_tokens_details: InputTokensDetails = dataclasses.field(
        default_factory=lambda: InputTokensDetails(cached_tokens=0)
    )
    output_tokens: int = 0
    output_tokens_details: OutputTokensDetails = dataclasses.field(
        default_factory=lambda: OutputTokensDetails(reasoning_tokens=0)
    )
    total_tokens: int = 0
    request_usage_entries: list[Any] = dataclasses.field(default_factory=list)


# --- LiteLLM (litellm.Usage for an Anthropic model: OpenAI names, Anthropic cache fields) -------


class LiteLLMUsage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cache_creation_input_tokens: int = Field(default=0)
    cache_read_input_tokens: int = Field(default=0)
    prompt_tokens_details: PromptTokensDetails | None = None


class SlotsUsage:
    """An attribute object with no dict, no model_dump, no dataclass fields."""

    __slots__ = ("cache_read_input_tokens", "input_tokens", "output_tokens")

    def __init__(self, input_tokens: int, read: int, output_tokens: int) -> None:
        self.input_tokens = input_tokens
        self.cache_read_input_tokens = read
        self.output_tokens = output_tokens


CASES: list[tuple[str, object, Usage]] = [
    (
        "anthropic Usage",
        AnthropicUsage(
            input_tokens=214,
            output_tokens=377,
            cache_creation_input_tokens=1536,
            cache_read_input_tokens=6144,
            cache_creation=CacheCreation(ephemeral_5m_input_tokens=1536),
            service_tier="standard",
        ),
        Usage(
            provider="anthropic",
            input_tokens=214,
            cache_read_tokens=6144,
            cache_write_tokens=1536,
            output_tokens=377,
        ),
    ),
    (
        "anthropic Usage without cache fields",
        AnthropicUsage(input_tokens=50, output_tokens=7),
        Usage(provider="anthropic", input_tokens=50, output_tokens=7),
    ),
    (
        "openai CompletionUsage",
        CompletionUsage(
            completion_tokens=120,
            prompt_tokens=2006,
            total_tokens=2126,
            prompt_tokens_details=PromptTokensDetails(audio_tokens=0, cached_tokens=1920),
            completion_tokens_details=CompletionTokensDetails(reasoning_tokens=0),
        ),
        Usage(provider="openai", input_tokens=86, cache_read_tokens=1920, output_tokens=120),
    ),
    (
        "openai CompletionUsage without details",
        CompletionUsage(completion_tokens=3, prompt_tokens=40, total_tokens=43),
        Usage(provider="openai", input_tokens=40, output_tokens=3),
    ),
    (
        "openai ResponseUsage",
        ResponseUsage(
            input_tokens=3000,
            input_tokens_details=InputTokensDetails(cached_tokens=2048),
            output_tokens=90,
            output_tokens_details=OutputTokensDetails(reasoning_tokens=64),
            total_tokens=3090,
        ),
        Usage(provider="openai", input_tokens=952, cache_read_tokens=2048, output_tokens=90),
    ),
    (
        "openai-agents Usage",
        AgentsUsage(
            requests=2,
            input_tokens=5000,
            input_tokens_details=InputTokensDetails(cached_tokens=4096),
            output_tokens=300,
            total_tokens=5300,
        ),
        Usage(provider="openai", input_tokens=904, cache_read_tokens=4096, output_tokens=300),
    ),
    (
        "openai-agents Usage, fresh",
        AgentsUsage(),
        Usage(provider="openai", input_tokens=0),
    ),
    (
        "LiteLLM Usage of an Anthropic model",
        LiteLLMUsage(
            prompt_tokens=7894,
            completion_tokens=377,
            total_tokens=8271,
            cache_creation_input_tokens=1536,
            cache_read_input_tokens=6144,
        ),
        Usage(
            provider="anthropic",
            input_tokens=214,
            cache_read_tokens=6144,
            cache_write_tokens=1536,
            output_tokens=377,
        ),
    ),
    (
        "attribute object with nested attribute details",
        SimpleNamespace(
            prompt_tokens=1000,
            completion_tokens=5,
            prompt_tokens_details=SimpleNamespace(cached_tokens=768),
        ),
        Usage(provider="openai", input_tokens=232, cache_read_tokens=768, output_tokens=5),
    ),
    (
        "slots object",
        SlotsUsage(10, 90, 4),
        Usage(provider="anthropic", input_tokens=10, cache_read_tokens=90, output_tokens=4),
    ),
    (
        "a response object holding usage",
        SimpleNamespace(id="msg_1", usage=AnthropicUsage(input_tokens=8, output_tokens=2)),
        Usage(provider="anthropic", input_tokens=8, output_tokens=2),
    ),
]


@pytest.mark.parametrize(("name", "sdk_usage", "expected"), CASES, ids=[c[0] for c in CASES])
def test_sdk_usage_objects_normalise_like_their_dicts(
    name: str, sdk_usage: object, expected: Usage
) -> None:
    assert normalize_usage(sdk_usage) == expected


@pytest.fixture
def engine() -> Iterator[ContextEngine]:
    eng = open_engine("memory://")
    eng.register_agent(AgentIdentity(agent_id="a", role="primary", task="t", budget=4000))
    eng.record("a", "Fix the login timeout", layer=Layer.L1, source=Source.USER_REQUIREMENT)
    eng.build("a")
    try:
        yield eng
    finally:
        eng.close()


@pytest.mark.parametrize(("name", "sdk_usage", "expected"), CASES, ids=[c[0] for c in CASES])
def test_report_usage_records_an_sdk_object(
    engine: ContextEngine, name: str, sdk_usage: object, expected: Usage
) -> None:
    event = engine.report_usage("a", sdk_usage)
    assert (
        event.provider,
        event.input_tokens,
        event.cache_read_tokens,
        event.cache_write_tokens,
        event.output_tokens,
    ) == (
        expected.provider,
        expected.input_tokens,
        expected.cache_read_tokens,
        expected.cache_write_tokens,
        expected.output_tokens,
    )
    recorded = [r.event for r in engine.ledger.read_all()][-1]
    assert recorded == event


@pytest.mark.parametrize(
    "bad",
    [
        None,
        [],
        [{"input_tokens": 1}],
        ("input_tokens", 1),
        "input_tokens=5",
        42,
        object(),
        SimpleNamespace(tokens=5),
        CompletionUsage(
            completion_tokens=1,
            prompt_tokens=10,
            total_tokens=11,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=11),
        ),  # more cached than sent
        SimpleNamespace(input_tokens=-1),
        SimpleNamespace(prompt_tokens=5, prompt_tokens_details=7),
    ],
    ids=repr,
)
def test_anything_else_is_the_typed_error_and_records_nothing(
    engine: ContextEngine, bad: object
) -> None:
    before = engine.ledger.max_position()
    with pytest.raises(InvalidInputError):
        engine.report_usage("a", bad)
    assert engine.ledger.max_position() == before


def test_a_failing_model_dump_is_the_typed_error() -> None:
    class Broken:
        def model_dump(self) -> dict[str, Any]:
            raise RuntimeError("detached")

    with pytest.raises(InvalidInputError, match="model_dump"):
        normalize_usage(Broken())


class AnthropicBadRequest(Exception):
    """Like ``anthropic.BadRequestError``: the parsed body on ``.body``, the text as str()."""

    def __init__(self, body: dict[str, Any]) -> None:
        super().__init__(f"Error code: 400 - {body}")
        self.body = body
        self.status_code = 400


def test_anthropic_max_tokens_context_limit_error_refreshes_with_its_sizes(
    engine: ContextEngine,
) -> None:
    message = (
        "input length and `max_tokens` exceed context limit: 188240 + 21333 > 200000, "
        "decrease input length or `max_tokens` and try again"
    )
    error = AnthropicBadRequest(
        {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    )
    outcome = engine.on_turn_error("a", error)
    assert outcome.refreshed
    assert outcome.error.error_class == "context_limit"
    assert outcome.error.provider == "anthropic"
    assert (
        outcome.error.prompt_tokens,
        outcome.error.output_tokens,
        outcome.error.limit_tokens,
    ) == (188240, 21333, 200000)
    plain = engine.on_turn_error("a", message)
    assert (plain.error.prompt_tokens, plain.error.limit_tokens) == (188240, 200000)
