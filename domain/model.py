"""The context model: layers, sources, items with provenance, agents, packs, generations."""

from __future__ import annotations

import enum
import functools
import hashlib
from collections.abc import Iterable
from datetime import datetime
from typing import Annotated, Literal

import msgspec

__all__ = [
    "COUNT_MAX",
    "Count",
    "AgentIdentity",
    "CompressionMetadata",
    "ContextPack",
    "Decision",
    "DecisionAction",
    "Durability",
    "Generation",
    "GenerationKind",
    "Item",
    "Layer",
    "Source",
    "content_hash",
    "apply_decision_delta",
    "decision_delta",
    "item_id_for",
    "selection_hash",
    "selection_matches",
    "updated_selection_hash",
    "legacy_selection_hash",
    "rehashed_selection",
    "SELECTION_HASH_PREFIX",
]


COUNT_MAX = 2**62
Count = Annotated[int, msgspec.Meta(ge=0, le=COUNT_MAX)]
"""A non-negative count (tokens, bytes, versions) with an upper bound, so stored payloads
cannot smuggle numbers no database column holds."""


class Layer(enum.IntEnum):
    """Information class of an item (core-context L0–L4 = the seed's information classes)."""

    L0 = 0  # live execution / ephemeral
    L1 = 1  # stage-local / task state
    L2 = 2  # compressed session memory / findings
    L3 = 3  # durable project memory
    L4 = 4  # archival history / raw history

    @property
    def information_class(self) -> str:
        return _CLASS_NAMES[self]


_CLASS_NAMES = {
    Layer.L0: "ephemeral",
    Layer.L1: "task_state",
    Layer.L2: "findings",
    Layer.L3: "project_memory",
    Layer.L4: "raw_history",
}


class Source(enum.StrEnum):
    """Provenance kind of an item."""

    USER_REQUIREMENT = "user_requirement"
    STEERING_NOTE = "steering_note"
    ROLE_INSTRUCTION = "role_instruction"
    VERIFIED_FACT = "verified_fact"
    WORKER_FINDING = "worker_finding"
    UNVERIFIED_HYPOTHESIS = "unverified_hypothesis"
    GENERATED_SUMMARY = "generated_summary"
    TEST_RESULT = "test_result"
    REPOSITORY_SOURCE = "repository_source"
    PARENT_REPORT = "parent_report"
    RECALLED_MEMORY = "recalled_memory"
    TOOL_LOG = "tool_log"
    CONVERSATION = "conversation"
    ARTIFACT = "artifact"
    EVENT_HISTORY = "event_history"


class Durability(enum.IntEnum):
    """How long an item is worth keeping; higher survives longer."""

    EPHEMERAL = 0
    SESSION = 1
    DURABLE = 2


def content_hash(text: str) -> str:
    """SHA-256 hex digest of the UTF-8 bytes of *text*."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@functools.lru_cache(maxsize=1 << 16)
def _memo_content_hash(text: str) -> str:
    return content_hash(text)


def item_id_for(layer: Layer, source: Source, content: str) -> str:
    """Content-addressed item id used when the caller gives none."""
    return "it_" + content_hash(f"{int(layer)}\x1f{source.value}\x1f{content}")[:24]


class Item(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One piece of context with provenance (core-context ContextEntry)."""

    id: str
    layer: Layer
    source: Source
    content: str
    token_count: Count = 0
    agent: str = ""
    task: str = ""
    stage: str = ""
    phase: str = ""
    observed_at: datetime | None = None
    confidence: float = 1.0
    relevance: float = 0.5
    durability: Durability = Durability.SESSION
    verified: bool = False
    files: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()
    source_id: str = ""
    pinned: bool = False
    mandatory: bool = False
    tool_signature: str = ""
    group: str = ""
    failure: bool = False
    redacted: tuple[str, ...] = ()
    """The kinds of the credentials replaced by typed markers when the item was recorded
    (the agent's secrets policy ``redact``); never the values."""

    @property
    def hash(self) -> str:
        """SHA-256 of the content, memoised by content (prompt keys ask for it on every build)."""
        return _memo_content_hash(self.content)


class AgentIdentity(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Who an agent is; survives every generation."""

    agent_id: str
    role: str
    task: str = ""
    parent: str = ""
    scope: tuple[str, ...] = ()
    model: str = ""
    workspace: str = ""
    budget: Count = 0
    session_id: str = ""


class CompressionMetadata(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """What compression did to a pack (non-authoritative; the events are the truth)."""

    strategies_applied: tuple[str, ...] = ()
    layers_truncated: tuple[Layer, ...] = ()
    entries_dropped: Count = 0


DecisionAction = Literal["included", "dropped", "compressed", "clipped"]


class Decision(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The fate of one candidate item in one build."""

    item_id: str
    action: DecisionAction
    reason: str = ""
    tokens_before: Count = 0
    tokens_after: Count = 0
    method: str = ""
    content: str = ""
    """The text sent, for compressed and clipped items only (replay shows exactly what went in)."""
    verified: bool = False
    """The item was shown as verified (after an explicit FindingVerified) in this pack."""


class ContextPack(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A complete, layered context ready for inference. Its token budget (seed 004's
    TokenBudget: limit and used) is ``budget_limit``, ``budget_used`` and ``overflow``."""

    id: str
    session_id: str
    stage_id: str
    agent_id: str
    generation: int
    layers: dict[Layer, tuple[Item, ...]]
    budget_used: Count
    budget_limit: Count
    compression_metadata: CompressionMetadata = CompressionMetadata()
    decisions: tuple[Decision, ...] = ()
    overflow: Count = 0
    counter: str = ""
    strategy: str = "variable"
    prefix_hash: str = ""

    @property
    def items(self) -> tuple[Item, ...]:
        return tuple(i for layer in sorted(self.layers) for i in self.layers[layer])


GenerationKind = Literal["initial", "rebuild", "refresh"]


class Generation(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """Snapshot of what one generation of an agent's context actually held.

    ``decisions`` is the fate of every candidate in the generation's latest build; included,
    dropped, compressed and clipped items are views over it."""

    number: Count
    kind: GenerationKind = "initial"
    reason: str = ""
    trigger: str = ""
    phase: str = ""
    strategy: str = "variable"
    budget: Count = 0
    tokens_used: Count = 0
    reserved: Count = 0
    overflow: Count = 0
    builds: Count = 0
    last_pack_id: str = ""
    selection_hash: str = ""
    decisions: dict[str, Decision] = {}
    order: tuple[str, ...] = ()
    prompt_bytes: Count = 0
    expected_cached_bytes: Count = 0
    decision_points: Count = 0

    def _with(self, *actions: str) -> tuple[Decision, ...]:
        return tuple(d for d in self.decisions.values() if d.action in actions)

    @property
    def included(self) -> tuple[Decision, ...]:
        """Items in the prompt (whole, compressed or clipped)."""
        return self._with("included", "compressed", "clipped")

    @property
    def dropped(self) -> tuple[Decision, ...]:
        return self._with("dropped")

    @property
    def compressed(self) -> tuple[Decision, ...]:
        return self._with("compressed", "clipped")


SELECTION_HASH_PREFIX = "sum:"
"""Marks the order-independent selection hash (a sum of per-decision digests); a hash without
it is the legacy one (SHA-256 over the decisions sorted by item id), verified as it was."""

_MOD = 1 << 256


def _decision_digest(d: Decision) -> int:
    return int.from_bytes(
        hashlib.sha256(f"{d.item_id}\x1f{d.action}\x1f{d.tokens_after}".encode()).digest()
    )


def _hash_text(total: int) -> str:
    return f"{SELECTION_HASH_PREFIX}{total % _MOD:064x}"


def selection_hash(decisions: dict[str, Decision]) -> str:
    """Hash of a whole selection (every candidate's fate), independent of dict order: the sum
    modulo 2²⁵⁶ of one SHA-256 digest per decision, so a build that changes k decisions
    updates it in O(k) (:func:`updated_selection_hash`) instead of re-hashing the selection."""
    return _hash_text(sum(_decision_digest(d) for d in decisions.values()))


def updated_selection_hash(
    previous_hash: str, removed: Iterable[Decision], added: Iterable[Decision]
) -> str | None:
    """The selection hash after replacing the *removed* decisions by the *added* ones, from
    the previous selection's hash; None when *previous_hash* is not an order-independent hash
    (a legacy ledger: the caller hashes the whole selection once)."""
    if not previous_hash.startswith(SELECTION_HASH_PREFIX):
        return None
    total = int(previous_hash[len(SELECTION_HASH_PREFIX) :], 16)
    total += sum(_decision_digest(d) for d in added)
    total -= sum(_decision_digest(d) for d in removed)
    return _hash_text(total)


def rehashed_selection(
    previous_hash: str,
    previous: dict[str, Decision],
    current: dict[str, Decision],
    delta: tuple[tuple[Decision, ...], tuple[str, ...]] | None = None,
) -> str:
    """``selection_hash(current)``, digesting only the decisions that differ from *previous*
    when *previous_hash* is that selection's order-independent hash: a rebuild or a full build
    over a pool that moved little re-digests a few of its decisions, not all of them (hashing
    10k decisions whole takes 8–13 ms on the bench machine). *delta* is ``decision_delta(previous, current)`` when the caller has it.
    A legacy or missing previous hash, or a delta as large as the selection, hashes *current*
    whole."""
    if not previous or not previous_hash.startswith(SELECTION_HASH_PREFIX):
        return selection_hash(current)
    changed, retired = delta if delta is not None else decision_delta(previous, current)
    removed = [previous[d.item_id] for d in changed if d.item_id in previous]
    removed.extend(previous[k] for k in retired)
    if len(changed) + len(removed) >= len(current):
        return selection_hash(current)
    updated = updated_selection_hash(previous_hash, removed, changed)
    return updated if updated is not None else selection_hash(current)


def legacy_selection_hash(decisions: dict[str, Decision]) -> str:
    """The hash ledgers recorded before the order-independent one (decisions sorted by id)."""
    h = hashlib.sha256()
    for item_id in sorted(decisions):
        d = decisions[item_id]
        h.update(f"{item_id}\x1f{d.action}\x1f{d.tokens_after}\x1e".encode())
    return h.hexdigest()


def selection_matches(decisions: dict[str, Decision], recorded: str) -> bool:
    """Whether *decisions* hash to the *recorded* selection hash, in the scheme it was
    recorded with (legacy hashes carry no prefix)."""
    if recorded.startswith(SELECTION_HASH_PREFIX):
        return selection_hash(decisions) == recorded
    return legacy_selection_hash(decisions) == recorded


def apply_decision_delta(
    previous: dict[str, Decision], changed: tuple[Decision, ...], retired: tuple[str, ...]
) -> dict[str, Decision]:
    """The full selection after a build, from the previous one and the recorded delta."""
    result = dict(previous)
    for item_id in retired:
        result.pop(item_id, None)
    for d in changed:
        result[d.item_id] = d
    return result


def decision_delta(
    previous: dict[str, Decision], current: dict[str, Decision]
) -> tuple[tuple[Decision, ...], tuple[str, ...]]:
    """What a build must record so that ``apply_decision_delta`` rebuilds ``current``."""
    if not previous:  # a generation's first pack (initial, or a rebuild): every decision
        return tuple(current.values()), ()
    changed = tuple(d for k, d in current.items() if previous.get(k) != d)
    retired = tuple(sorted(k for k in previous if k not in current))
    return changed, retired
