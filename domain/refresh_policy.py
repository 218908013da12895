"""How a refresh shrinks a generation: what the refresh pipeline carries into the new one and
what it drops, and the smaller window (the budget cap) after a context-limit error.

A refresh runs only when a turn fails with a context-limit error or on a manual control
(``projections.build_view``); it must make progress, so the next prompt is smaller.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.domain.model import Item, Layer

__all__ = ["learned_window", "refresh_split", "shrink_cap"]


def refresh_split(
    candidates: Sequence[Item], latest_ids: frozenset[str]
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The refresh pipeline's cut: ``(carried, dropped)`` item ids.

    Durable state survives (task state L1, findings L2, project memory L3, pinned and
    mandatory items); ephemeral L0 and raw history L4 are dropped, except the latest step's
    observations (``latest_ids``), which the retried turn still needs.
    """
    carried: list[str] = []
    dropped: list[str] = []
    for item in candidates:
        keep = (
            item.pinned
            or item.mandatory
            or item.layer in (Layer.L1, Layer.L2, Layer.L3)
            or item.id in latest_ids
        )
        (carried if keep else dropped).append(item.id)
    return tuple(carried), tuple(dropped)


def learned_window(
    failed_tokens: int,
    current_cap: int,
    attempt: int,
    *,
    prompt_tokens: int = 0,
    limit_tokens: int = 0,
    output_tokens: int = 0,
    floor: int = 1,
) -> int:
    """The agent's window (a budget cap, in this engine's tokens) after a context-limit error.

    With a stated limit it is that limit less the stated output reserve — the same after
    every error, never ratcheted down by repeated errors — scaled by our count of the failed
    prompt over the provider's when the two tokenizers plausibly counted the same prompt (a
    ratio in [0.5, 1)). Without one it shrinks from the prompt size that failed
    (:func:`shrink_cap`). Never below *floor* (what pinned and mandatory content needs)."""
    if limit_tokens > 0:
        window = max(1, limit_tokens - output_tokens)
        if prompt_tokens > 0 and failed_tokens > 0 and 0.5 <= failed_tokens / prompt_tokens < 1:
            window = window * failed_tokens // prompt_tokens
    else:
        window = shrink_cap(failed_tokens or current_cap, current_cap, attempt)
    return max(1, floor, window)


def shrink_cap(
    failed_tokens: int,
    current_cap: int,
    attempt: int,
    *,
    provider_prompt_tokens: int = 0,
    provider_limit_tokens: int = 0,
) -> int:
    """The budget cap after a context-limit error, strictly below what failed.

    When the provider stated both its count of the prompt and its limit, the pack is scaled
    by their ratio (our tokenizer and the provider's may differ) with a 5 % margin per
    attempt; otherwise it shrinks geometrically with each attempt (0.7, 0.49, …). Whatever
    the attempt number (the engine counts from 1), the cap is at least 1 and below both the
    current cap and the failed size (unless that was a single token). Integer arithmetic:
    1000 tokens shrink to exactly 700, 490, 343 (floats would give 489 and 342)."""
    base = min(current_cap, failed_tokens) if current_cap else failed_tokens
    n = max(0, attempt)
    if 0 < provider_limit_tokens < provider_prompt_tokens:
        margin: int = 95**n  # 0.95ⁿ = 95ⁿ / 100ⁿ
        per: int = 100**n
        scaled = failed_tokens * provider_limit_tokens * margin // (provider_prompt_tokens * per)
        return max(1, min(base - 1, scaled))
    shrink: int = 7**n  # 0.7ⁿ = 7ⁿ / 10ⁿ
    per_ten: int = 10**n
    return max(1, min(base - 1, base * shrink // per_ten))
