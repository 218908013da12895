"""Head/tail clipping of oversized items with the marker ``[… N tokens clipped …]``."""

from __future__ import annotations

from ctxledger.domain.memo import memo_table, remember
from ctxledger.domain.ports import TokenCounter

__all__ = ["CLIP_METHOD", "CLIP_REASON", "clip_marker", "clip_text"]

# Clipped decisions: action "clipped", this reason and method.
CLIP_REASON = "scope_clip"
CLIP_METHOD = "head_tail"

_MARKER_ALLOWANCE = 12  # tokens reserved for the clip marker and its newlines


def clip_marker(n: int) -> str:
    """The marker that replaces clipped text: ``[… N tokens clipped …]``."""
    return f"[… {n} tokens clipped …]"


_clip_memo: dict[tuple[str, int, int, str], tuple[str, int] | None] = memo_table()
_CLIP_MEMO_MAX = 8_192


def clip_text(text: str, tokens: int, limit: int, counter: TokenCounter) -> tuple[str, int] | None:
    """Head/tail excerpt of *text* (``tokens`` long) aiming at ≤ *limit* tokens.

    The middle is replaced by :func:`clip_marker` with N = tokens − head − tail (at least 1);
    cuts snap to line breaks when one is near. Returns ``(text, tokens)`` — fewer tokens than
    the input, and ≤ *limit* unless the marker alone does not fit — or ``None`` when no
    excerpt is shorter than the text itself. Memoised per (text, tokens, limit, counter).
    """
    memo_key = (text, tokens, limit, counter.name)
    if memo_key in _clip_memo:
        return _clip_memo[memo_key]
    n = len(text)
    keep = int(max(limit - _MARKER_ALLOWANCE, 0) * n / max(tokens, 1))
    best: tuple[str, int] | None = None
    for _ in range(8):
        keep = max(0, min(keep, n - 1))
        h = keep // 2
        t = keep - h
        head = text[:h]
        tail = text[n - t :] if t else ""
        nl = head.rfind("\n")
        if nl >= 0 and nl >= h // 2:
            head = head[: nl + 1]
        nl = tail.find("\n")
        if 0 <= nl < t // 2:
            tail = tail[nl + 1 :]
        ht = counter.count(head) if head else 0
        tt = counter.count(tail) if tail else 0
        marker = clip_marker(max(1, tokens - ht - tt))
        sep_head = "" if not head or head.endswith("\n") else "\n"
        sep_tail = "\n" if tail else ""
        clipped = f"{head}{sep_head}{marker}{sep_tail}{tail}"
        ct = counter.count(clipped)
        if ct < tokens and (best is None or ct < best[1]):
            best = (clipped, ct)
        if ct <= limit or keep == 0:
            break
        keep = int(keep * limit / ct * 0.9)
    return remember(_clip_memo, memo_key, best, _CLIP_MEMO_MAX)
