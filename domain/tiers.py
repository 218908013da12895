"""Packing tiers and drop reasons: the priority an item packs at, whether it is forced in
whatever the budget, and the reasons a dropped decision may give (shared by the packer,
the strategies, the pool facts and the read models)."""

from __future__ import annotations

from datetime import UTC

from ctxledger.domain.memo import memo_table, remember
from ctxledger.domain.model import Decision, Item, Layer, Source

__all__ = [
    "DROP_REASONS",
    "DUPLICATE",
    "EXCLUDED_BY_SCOPE",
    "KEPT_CLIPPED",
    "OMITTED_BY_STRATEGY",
    "OTHER_PHASE",
    "OTHER_STAGE",
    "OUTSIDE_WINDOW",
    "OVER_BUDGET",
    "RAW_HISTORY",
    "SUPERSEDED",
    "DROP_MEMO_MAX",
    "dropped_decision",
    "tier_memo",
    "is_forced",
    "priority_tier",
    "tier_ts",
]

OVER_BUDGET = "over_budget"
EXCLUDED_BY_SCOPE = "excluded_by_scope"
SUPERSEDED = "superseded"
DUPLICATE = "duplicate"
OTHER_PHASE = "other_phase"
OTHER_STAGE = "other_stage"
OMITTED_BY_STRATEGY = "omitted_by_strategy"
OUTSIDE_WINDOW = "outside_conversation_window"
RAW_HISTORY = "raw_history"
KEPT_CLIPPED = "kept_clipped"
DROP_REASONS = frozenset(
    {
        OVER_BUDGET,
        EXCLUDED_BY_SCOPE,
        SUPERSEDED,
        DUPLICATE,
        OTHER_PHASE,
        OTHER_STAGE,
        OMITTED_BY_STRATEGY,
        OUTSIDE_WINDOW,
        RAW_HISTORY,
    }
)

_NEG_INF = float("-inf")
_L1 = Layer.L1
_L3 = Layer.L3
_TOOL_LOG = Source.TOOL_LOG
_CONVERSATION = Source.CONVERSATION
_WORKER_FINDING = Source.WORKER_FINDING
_TIER1_SOURCES = frozenset({Source.USER_REQUIREMENT, Source.STEERING_NOTE, Source.ROLE_INSTRUCTION})
_TIER2_SOURCES = frozenset({Source.REPOSITORY_SOURCE, Source.VERIFIED_FACT, Source.TEST_RESULT})
_TIER3_SOURCES = frozenset(
    {Source.PARENT_REPORT, Source.RECALLED_MEMORY, Source.WORKER_FINDING, Source.GENERATED_SUMMARY}
)


def priority_tier(item: Item) -> int:
    """Packing tier (seed 000's priority): 0 pinned/mandatory; 1 objective, task, acceptance,
    constraints, steering (user requirements, steering notes, role instructions, other L1 task
    state); 2 code, verified findings, failures and test results; 3 architecture memory (every
    other L3 item, verified facts included: durable project memory ranks below the task's own
    code and findings), parent reports, unverified findings; 4 historical / optional (L0
    ephemera, L4 raw history, logs…). The L3 rule runs before the tier-2 rule."""
    if item.pinned or item.mandatory:
        return 0
    src = item.source
    if src in _TIER1_SOURCES:
        return 1
    layer = item.layer
    if layer is _L3:
        return 3
    if item.failure or src in _TIER2_SOURCES or (src is _WORKER_FINDING and item.verified):
        return 2
    if layer is _L1 and src is not _TOOL_LOG and src is not _CONVERSATION:
        return 1
    if src in _TIER3_SOURCES:
        return 3
    return 4


_ROLE_INSTRUCTION = Source.ROLE_INSTRUCTION


def is_forced(item: Item) -> bool:
    """Whether packing includes *item* whatever the budget (recording any excess as
    overflow): pinned and mandatory items, and role instructions — the tool syntax and the
    rules of the role are never traded for history (an agent without them cannot act)."""
    return item.pinned or item.mandatory or item.source is _ROLE_INSTRUCTION


def _ts(item: Item) -> float:
    at = item.observed_at
    if at is None:
        return _NEG_INF
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at.timestamp()


tier_memo: dict[int, tuple[Item, int, float, str, bool]] = memo_table()
_STATIC_MAX = 131_072  # above the largest pool: see retrieval._MEMO_MAX


def tier_ts(item: Item) -> tuple[Item, int, float, str, bool]:
    """(item, tier, timestamp, id, forced), memoised per item object (the entry keeps the
    item alive, so its ``id`` cannot be reused while cached)."""
    st = tier_memo.get(id(item))
    if st is None or st[0] is not item:
        st = (item, priority_tier(item), _ts(item), item.id, is_forced(item))
        remember(tier_memo, id(item), st, _STATIC_MAX)
    return st


_drop_memo: dict[tuple[str, str, int], Decision] = memo_table()
DROP_MEMO_MAX = 131_072


def dropped_decision(item_id: str, reason: str, tokens: int) -> Decision:
    """A dropped decision; equal decisions are shared between builds (they are immutable)."""
    key = (item_id, reason, tokens)
    d = _drop_memo.get(key)
    if d is None:
        d = Decision(item_id=item_id, action="dropped", reason=reason, tokens_before=tokens)
        remember(_drop_memo, key, d, DROP_MEMO_MAX)
    return d
