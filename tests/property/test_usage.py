"""Properties of usage normalisation and the hit rate."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain.usage import hit_rate, normalize_usage

COUNT = st.integers(min_value=0, max_value=10**9)


@given(input_tokens=COUNT, read=COUNT, write=COUNT)
def test_hit_rate_is_a_fraction(input_tokens: int, read: int, write: int) -> None:
    rate = hit_rate(input_tokens, read, write)
    assert 0.0 <= rate <= 1.0
    assert (rate == 0.0) == (read == 0)


@given(cached=COUNT, uncached=COUNT, completion=COUNT)
def test_openai_prompt_tokens_split_into_input_and_read(
    cached: int, uncached: int, completion: int
) -> None:
    raw = {
        "prompt_tokens": cached + uncached,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }
    usage = normalize_usage(raw)
    assert (usage.input_tokens, usage.cache_read_tokens) == (uncached, cached)
    assert usage.prompt_tokens == cached + uncached
    assert usage.output_tokens == completion


@given(read=COUNT, write=COUNT, uncached=COUNT)
def test_anthropic_counts_pass_through(read: int, write: int, uncached: int) -> None:
    raw = {
        "input_tokens": uncached,
        "cache_read_input_tokens": read,
        "cache_creation_input_tokens": write,
        "output_tokens": 1,
    }
    usage = normalize_usage(raw)
    assert (usage.input_tokens, usage.cache_read_tokens, usage.cache_write_tokens) == (
        uncached,
        read,
        write,
    )
