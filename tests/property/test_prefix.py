"""Properties of the prefix-reuse estimate against a naive reference."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from ctxledger.domain.prefix import lcp_bytes, prefix_reuse, prefix_reuse_within_generations

# Small alphabets make long shared prefixes (and late differences) likely.
BLOBS = st.binary(max_size=300) | st.lists(st.sampled_from([b"a", b"b"]), max_size=400).map(
    b"".join
)


def naive_lcp(a: bytes, b: bytes) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


@given(a=BLOBS, b=BLOBS)
def test_lcp_matches_the_naive_reference(a: bytes, b: bytes) -> None:
    assert lcp_bytes(a, b) == naive_lcp(a, b)


@given(shared=st.binary(min_size=65, max_size=3000), a=BLOBS, b=BLOBS)
def test_lcp_with_a_long_shared_prefix_matches_the_reference(
    shared: bytes, a: bytes, b: bytes
) -> None:
    # Random (non-periodic) shared prefixes longer than the bisection window, so every
    # bisection step compares a window at a non-zero offset.
    assert lcp_bytes(shared + a, shared + b) == naive_lcp(shared + a, shared + b)
    assert lcp_bytes(shared, shared + a) == len(shared)


@given(prompts=st.lists(st.text(max_size=40), max_size=8))
def test_prefix_reuse_is_a_fraction(prompts: list[str]) -> None:
    assert 0.0 <= prefix_reuse(prompts) <= 1.0


@given(start=st.text(max_size=30), appends=st.lists(st.text(max_size=30), min_size=1, max_size=8))
def test_append_only_reuse_is_previous_over_current_bytes(start: str, appends: list[str]) -> None:
    prompts = [start]
    for extra in appends:
        prompts.append(prompts[-1] + extra)
    sizes = [len(p.encode()) for p in prompts]
    total = sum(sizes[1:])
    expected = sum(sizes[:-1]) / total if total else 0.0
    assert prefix_reuse(prompts) == expected


@given(prompts=st.lists(st.text(max_size=30), max_size=8))
def test_one_generation_equals_plain_reuse(prompts: list[str]) -> None:
    assert prefix_reuse_within_generations([(4, p) for p in prompts]) == prefix_reuse(prompts)
