"""Prompt-prefix reuse estimates: longest common prefixes of consecutive prompts, in UTF-8 bytes."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from ctxledger.domain.prompt import SEGMENT_ORDER, PromptParts

__all__ = ["changed_segment", "lcp_bytes", "prefix_reuse", "prefix_reuse_within_generations"]

_SMALL = 64


def lcp_bytes(a: bytes, b: bytes) -> int:
    """Length of the longest common prefix of *a* and *b*.

    Compares whole slices (``memcmp`` in C), never byte by byte in Python: one comparison of
    the shorter length, then a bisection in which every step compares only the half-window
    still in doubt, so the total bytes compared stay within about twice the prefix length and
    the number of Python steps is logarithmic (about 0.4 ms for 4 MB on one core)."""
    shorter, longer = (a, b) if len(a) <= len(b) else (b, a)
    if longer.startswith(shorter):
        return len(shorter)
    lo, hi = 0, len(shorter)  # invariant: a[:lo] == b[:lo] and a[:hi] != b[:hi]
    while hi - lo > _SMALL:
        mid = (lo + hi) // 2
        if longer.startswith(shorter[lo:mid], lo):
            lo = mid
        else:
            hi = mid
    while lo < hi and a[lo] == b[lo]:  # at most _SMALL steps
        lo += 1
    return lo


def prefix_reuse(prompts: Sequence[str]) -> float:
    """Estimated prompt-prefix reuse of a sequence of prompts, in [0, 1].

    ``Σ_{i≥1} lcp(p[i-1], p[i]) / Σ_{i≥1} len(p[i])`` over UTF-8 bytes: each prompt after the
    first is compared with the one before it, and the denominator is the sum of the bytes of
    every prompt *after the first* (the first prompt can reuse nothing). A perfectly
    append-only transcript approaches 1.0 as it grows; 0.0 when there is nothing to compare
    (fewer than two prompts, or only empty prompts after the first)."""
    encoded = [p.encode("utf-8") for p in prompts]
    shared = sum(lcp_bytes(prev, cur) for prev, cur in pairwise(encoded))
    total = sum(len(cur) for cur in encoded[1:])
    return shared / total if total else 0.0


def prefix_reuse_within_generations(prompts_with_generation: Sequence[tuple[int, str]]) -> float:
    """:func:`prefix_reuse` counting only consecutive pairs of the *same* generation.

    A pair that crosses a generation boundary (rebuild or refresh) is left out of both sums, so
    the figure measures how well builds within a generation only append; 0.0 when no pair
    qualifies."""
    shared = 0
    total = 0
    for (gen_prev, prev), (gen_cur, cur) in pairwise(prompts_with_generation):
        if gen_prev != gen_cur:
            continue
        cur_bytes = cur.encode("utf-8")
        shared += lcp_bytes(prev.encode("utf-8"), cur_bytes)
        total += len(cur_bytes)
    return shared / total if total else 0.0


def changed_segment(prev: PromptParts, cur: PromptParts) -> str:
    """Name of the first segment (in prompt order) whose text differs, or ``""`` if none.

    Any difference counts, an append included: ``"generation"`` after a within-generation
    build that added items, ``"volatile"`` when only the tail changed, ``"role"`` or
    ``"session"`` when the static prefix (and so ``prefix_hash``) changed."""
    for segment in SEGMENT_ORDER:
        if prev.segments[segment] != cur.segments[segment]:
            return segment.value
    return ""
