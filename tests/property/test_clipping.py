"""Head/tail clipping: shorter, honest marker, real prefix and suffix, fits the limit."""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxledger.adapters.tokens import TiktokenCounter
from ctxledger.domain.clipping import clip_text
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.tokens import EstimatingCounter

MARKER = re.compile(r"\n?\[… (\d+) tokens clipped …\]\n?")
TIKTOKEN = TiktokenCounter()

texts = st.one_of(
    st.text(min_size=40, max_size=4000),
    st.lists(st.text(max_size=80), min_size=5, max_size=200).map("\n".join),
)


def check(text: str, fraction: float, counter: TokenCounter) -> None:
    tokens = counter.count(text)
    limit = max(1, int(tokens * fraction))
    result = clip_text(text, tokens, limit, counter)
    if result is None:
        return
    clipped, after = result
    assert after == counter.count(clipped)
    assert after < tokens
    m = MARKER.search(clipped)
    assert m is not None
    assert int(m.group(1)) >= 1
    head, tail = clipped[: m.start()], clipped[m.end() :]
    assert text.startswith(head)
    assert text.endswith(tail)
    assert len(head) + len(tail) < len(text)
    if limit >= 40:  # room for the marker: the excerpt fits
        assert after <= limit


fractions = st.floats(min_value=0.0, max_value=0.95)


@given(texts, fractions)
def test_clip_with_the_estimate(text: str, fraction: float) -> None:
    check(text, fraction, EstimatingCounter())


@settings(max_examples=25)
@given(texts, fractions)
def test_clip_with_real_tokens(text: str, fraction: float) -> None:
    check(text, fraction, TIKTOKEN)
