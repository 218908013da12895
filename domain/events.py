"""The event catalogue: every fact the ledger records, as frozen, tagged msgspec Structs.

Each type carries a ``schema_version`` (a ClassVar, also written into the stored topic as
``Name.vN``); older payloads are lifted by :data:`UPCASTERS` before decoding. Decoding uses the
allow-list :data:`EVENT_TYPES` only: no module or class named by stored data is ever imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, ClassVar, Literal

import msgspec

from ctxledger.domain.model import AgentIdentity, CompressionMetadata, Count, Decision, Item
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.settings import AgentSettings

__all__ = [
    "EVENT_TYPES",
    "UPCASTERS",
    "AgentConfigured",
    "AgentRegistered",
    "ContentErased",
    "CacheUsageRecorded",
    "ContextBuildingFailed",
    "ContextBuildingInterrupted",
    "ContextBuildingStarted",
    "ContextPackBuilt",
    "Event",
    "EventBase",
    "FindingPromoted",
    "FindingVerified",
    "GenerationKindName",
    "GenerationRefreshed",
    "ItemPinned",
    "ItemRecorded",
    "ItemRemoved",
    "ItemUnpinned",
    "MemoryDeleted",
    "MemoryMarkedStale",
    "MemoryPromoted",
    "MemoryRetired",
    "MemoryVerified",
    "RecallRendered",
    "RecallSwitched",
    "SteeringNoteAdded",
    "TurnFailed",
    "TurnSucceeded",
    "Upcaster",
    "event_agent",
    "topic_of",
]


class EventBase(
    msgspec.Struct, frozen=True, kw_only=True, tag=True, tag_field="type", omit_defaults=True
):
    """Common shape: an aware timestamp passed in by the caller (never read from a clock here).
    (The stored payload also carries ``prev``, the stream's hash-chain link: a storage field
    that decoding ignores; see ``domain/chain.py``.)"""

    schema_version: ClassVar[int] = 1
    at: datetime


# --- agents and items -------------------------------------------------------------------------


class AgentRegistered(EventBase, frozen=True, kw_only=True):
    """An agent identity was recorded; it survives every generation."""

    agent: AgentIdentity


class AgentConfigured(EventBase, frozen=True, kw_only=True):
    """The agent's build settings (the whole new value, not a patch): what every later build,
    refresh and rebuild uses unless the caller overrides it for one build."""

    agent_id: str
    settings: AgentSettings
    by: str = ""


class ItemRecorded(EventBase, frozen=True, kw_only=True):
    """An observation (tool output, file view, failure, finding…) entered the agent's pool."""

    agent_id: str
    item: Item


class SteeringNoteAdded(EventBase, frozen=True, kw_only=True):
    """User guidance for the session, optionally scoped to a stage; never dropped."""

    agent_id: str
    item: Item


class ItemPinned(EventBase, frozen=True, kw_only=True):
    """Manual control: the item is kept in every pack and never clipped."""

    agent_id: str
    item_id: str
    by: str = ""


class ItemUnpinned(EventBase, frozen=True, kw_only=True):
    """Manual control: the item competes for the budget again."""

    agent_id: str
    item_id: str
    by: str = ""


class ItemRemoved(EventBase, frozen=True, kw_only=True):
    """Manual control or supersession: the item leaves the pool (the ledger keeps it)."""

    agent_id: str
    item_id: str
    reason: str = "manual"


class FindingVerified(EventBase, frozen=True, kw_only=True):
    """An explicit verification of exactly one finding identity."""

    agent_id: str
    item_id: str
    by: str = ""
    evidence: str = ""


class FindingPromoted(EventBase, frozen=True, kw_only=True):
    """A finding of one agent's pool was promoted into the context pool of *agent_id* (the
    agent itself or another, e.g. its parent) as a structured finding: the ``ItemRecorded``
    just before it on the same stream holds the new pool item *item_id*. ``from_agent`` and
    ``from_item`` are its provenance; ``verified`` is the origin's verification when promoted
    (promotion never verifies)."""

    agent_id: str
    item_id: str
    from_agent: str
    from_item: str
    verified: bool = False
    by: str = ""


# --- context building lifecycle (core-context) ------------------------------------------------


class ContextBuildingStarted(EventBase, frozen=True, kw_only=True):
    """A build of the next pack began. Committed on its own, before planning, with the whole
    request, so a build in flight is visible and every build can be re-derived later.

    ``request`` is what the planner was asked (its budget is the whole prompt's; the pack's
    own budget is that less the outcome's ``reserved``); ``watermark``, ``counter`` (the
    tokenizer's name), ``planner_version`` and ``force_rebuild`` (a manual rebuild's reason)
    complete the planner's inputs; ``overrides`` names the settings this build overrode for
    itself only. ``generation`` is the agent's generation when the build started (a rebuild
    outcome lands in the next one)."""

    agent_id: str
    pack_id: str
    session_id: str = ""
    stage_id: str = ""
    generation: Count = 1
    request: BuildRequest | None = None
    watermark: float = 0.0
    counter: str = ""
    planner_version: Count = 0
    force_rebuild: str = ""
    overrides: tuple[str, ...] = ()


class ContextPackBuilt(EventBase, frozen=True, kw_only=True):
    """A pack was built. Carries the *delta* of decisions against the previous pack of the
    same generation (``decisions`` changed, ``retired`` no longer candidates) plus a hash of
    the whole selection, so the ledger grows with what changed, not with the pack.
    ``order_appended`` lists the GENERATION-segment item ids this build appended (the first
    build of a generation lists the whole order), so the emitted order is rebuilt by replay.
    ``budget_used`` counts the whole rendered prompt: the pack's items as rendered plus
    ``reserved``, the tokens held for the VOLATILE tail."""

    agent_id: str
    pack_id: str
    generation: Count = 1
    strategy: str = "variable"
    counter: str = ""
    budget_limit: Count = 0
    budget_used: Count = 0
    reserved: Count = 0
    overflow: Count = 0
    decisions: tuple[Decision, ...] = ()
    retired: tuple[str, ...] = ()
    order_appended: tuple[str, ...] = ()
    selection_hash: str = ""
    included_count: Count = 0
    compression: CompressionMetadata = CompressionMetadata()
    prefix_hash: str = ""
    prompt_bytes: Count = 0
    expected_cached_bytes: Count = 0
    changed_segment: str = ""
    purpose: str = ""


class ContextBuildingFailed(EventBase, frozen=True, kw_only=True):
    """A build failed; the reason is kept."""

    agent_id: str
    pack_id: str
    reason: str = ""


class ContextBuildingInterrupted(EventBase, frozen=True, kw_only=True):
    """A build was interrupted before it produced a pack."""

    agent_id: str
    pack_id: str
    reason: str = ""


GenerationKindName = Literal["rebuild", "refresh"]


class GenerationRefreshed(EventBase, frozen=True, kw_only=True):
    """The agent's context moved to a new generation (budget rebuild or refresh)."""

    agent_id: str
    kind: GenerationKindName
    from_generation: Count
    to_generation: Count
    reason: str
    trigger: Literal["budget", "context_limit", "manual"] = "budget"
    phase: str = ""
    strategy: str = "variable"
    budget: Count = 0
    carried: tuple[str, ...] = ()
    dropped: tuple[str, ...] = ()


class TurnFailed(EventBase, frozen=True, kw_only=True):
    """A model call failed; ``error_class`` is the classifier's verdict."""

    agent_id: str
    generation: Count = 1
    error_class: Literal["context_limit", "other"] = "other"
    provider: str = ""
    code: str = ""
    message: str = ""


class TurnSucceeded(EventBase, frozen=True, kw_only=True):
    """A model call went through with no usage to report (reported usage implies success):
    it ends the refresh ladder's count of refreshes without a successful turn."""

    agent_id: str
    generation: Count = 1


class CacheUsageRecorded(EventBase, frozen=True, kw_only=True):
    """Provider-reported token usage of one call (Anthropic or OpenAI shapes, normalised)."""

    agent_id: str
    generation: Count = 1
    provider: str = ""
    input_tokens: Count = 0
    cache_read_tokens: Count = 0
    cache_write_tokens: Count = 0
    output_tokens: Count = 0
    expected_cached_tokens: Count = 0


# --- project memory (bodies live only in the erasable catalog) --------------------------------


class MemoryPromoted(EventBase, frozen=True, kw_only=True):
    """An item became a project-memory candidate; verified stays false until MemoryVerified."""

    memory_id: str
    item_id: str
    agent_id: str
    body_hash: str
    partition: str = ""
    verified: bool = False


class MemoryVerified(EventBase, frozen=True, kw_only=True):
    """An explicit verification of one memory entry."""

    memory_id: str
    body_hash: str = ""
    by: str = ""


class MemoryMarkedStale(EventBase, frozen=True, kw_only=True):
    """A memory entry no longer matches the worktree (or its evidence is too old)."""

    memory_id: str
    reason: str = ""


class MemoryRetired(EventBase, frozen=True, kw_only=True):
    """A memory entry was retired; it is no longer recalled."""

    memory_id: str
    reason: str = ""


class MemoryDeleted(EventBase, frozen=True, kw_only=True):
    """A memory body was erased from the catalog; ``erasure`` reports the policy's outcome."""

    memory_id: str
    erasure: str = ""


class ContentErased(EventBase, frozen=True, kw_only=True):
    """Free text of an agent was erased by destroying its content keys (crypto-shredding):
    one item's (``item_id``) or the whole agent's (``item_id`` empty). ``items`` lists the
    items whose keys were destroyed; the events stay, their text reads ``[erased: …]``."""

    agent_id: str
    item_id: str = ""
    reason: str
    items: tuple[str, ...] = ()


class RecallRendered(EventBase, frozen=True, kw_only=True):
    """The recalled-memory group of one prompt (replaces the previous group)."""

    agent_id: str
    pack_id: str = ""
    memory_ids: tuple[str, ...] = ()
    skipped: dict[str, str] = {}
    tokens: Count = 0
    bytes: Count = 0


class RecallSwitched(EventBase, frozen=True, kw_only=True):
    """Project-memory recall turned on or off for the whole ledger (every agent, every
    process that opens it), until the next switch; an agent's own ``AgentSettings.recall``
    can still turn it off for that agent."""

    enabled: bool
    by: str = ""


Event = (
    AgentRegistered
    | AgentConfigured
    | ItemRecorded
    | SteeringNoteAdded
    | ItemPinned
    | ItemUnpinned
    | ItemRemoved
    | FindingVerified
    | FindingPromoted
    | ContextBuildingStarted
    | ContextPackBuilt
    | ContextBuildingFailed
    | ContextBuildingInterrupted
    | GenerationRefreshed
    | TurnFailed
    | TurnSucceeded
    | CacheUsageRecorded
    | MemoryPromoted
    | MemoryVerified
    | MemoryMarkedStale
    | MemoryRetired
    | MemoryDeleted
    | RecallRendered
    | RecallSwitched
    | ContentErased
)

EVENT_TYPES: Mapping[str, type[EventBase]] = {
    cls.__name__: cls
    for cls in (
        AgentRegistered,
        AgentConfigured,
        ItemRecorded,
        SteeringNoteAdded,
        ItemPinned,
        ItemUnpinned,
        ItemRemoved,
        FindingVerified,
        FindingPromoted,
        ContextBuildingStarted,
        ContextPackBuilt,
        ContextBuildingFailed,
        ContextBuildingInterrupted,
        GenerationRefreshed,
        TurnFailed,
        TurnSucceeded,
        CacheUsageRecorded,
        MemoryPromoted,
        MemoryVerified,
        MemoryMarkedStale,
        MemoryRetired,
        MemoryDeleted,
        RecallRendered,
        RecallSwitched,
        ContentErased,
    )
}
"""The allow-list: stored type name → class. Nothing outside it is ever decoded."""

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

UPCASTERS: Mapping[tuple[str, int], Upcaster] = {}
"""(type name, from version) → function lifting a payload dict to version + 1.

Every type is at schema version 1 today, so the table is empty; docs/events.md states the
rules for adding an entry when a type's shape changes incompatibly."""


def topic_of(event: EventBase) -> str:
    """Stored topic of an event: ``TypeName.vN`` (a name from the allow-list, never a path)."""
    cls = type(event)
    return f"{cls.__name__}.v{cls.schema_version}"


def event_agent(event: Event) -> str:
    """The agent an event concerns, or ``""`` for project-level (memory) events."""
    if isinstance(event, AgentRegistered):
        return event.agent.agent_id
    return getattr(event, "agent_id", "")
