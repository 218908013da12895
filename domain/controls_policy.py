"""Manual-control decisions on one item of an agent's pool: pin, unpin, remove, verify, promote
a finding into a context pool; and the ledger-wide recall switch.

Each takes the item as the pool holds it now (``None``: the pool has no such item) and returns
the event to append or raises the domain error. The engine calls them inside
``decide_and_append``, under the agent's stream lock and after catching up, so the guard rests
on the state the event is appended to; ``now`` is read only once the guard has passed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime

from ctxledger.domain import events as ev
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import Durability, Item, Layer, Source, content_hash

__all__ = [
    "NOT_FINDINGS",
    "decide_pin",
    "decide_promote_finding",
    "decide_recall_switch",
    "decide_remove",
    "decide_unpin",
    "decide_verify",
    "known_item",
    "promoted_finding",
    "promoted_id",
]

NOT_FINDINGS = frozenset(
    {
        Source.USER_REQUIREMENT,
        Source.STEERING_NOTE,
        Source.ROLE_INSTRUCTION,
        Source.RECALLED_MEMORY,
        Source.PARENT_REPORT,
        Source.EVENT_HISTORY,
    }
)
"""Sources no finding promotion takes: requirements, guidance and instructions are not
findings, recalled memory is rendered by recall only, a parent report is already the worker's
message to its parent, and event history is observability."""


def known_item(agent_id: str, item_id: str, item: Item | None) -> Item:
    """*item*, or ``InvalidInputError`` if the agent's pool has no item *item_id*."""
    if item is None:
        raise InvalidInputError(f"agent {agent_id!r} has no item {item_id[:80]!r}")
    return item


def decide_pin(
    agent_id: str, item_id: str, item: Item | None, *, now: Callable[[], datetime], by: str = ""
) -> list[ev.Event]:
    known_item(agent_id, item_id, item)
    return [ev.ItemPinned(at=now(), agent_id=agent_id, item_id=item_id, by=by)]


def decide_unpin(
    agent_id: str, item_id: str, item: Item | None, *, now: Callable[[], datetime], by: str = ""
) -> list[ev.Event]:
    known_item(agent_id, item_id, item)
    return [ev.ItemUnpinned(at=now(), agent_id=agent_id, item_id=item_id, by=by)]


def decide_remove(
    agent_id: str, item_id: str, item: Item | None, *, now: Callable[[], datetime], reason: str
) -> list[ev.Event]:
    """Remove an item; a pinned or mandatory one must be unpinned first."""
    current = known_item(agent_id, item_id, item)
    if current.pinned or current.mandatory:
        raise InvalidInputError(f"item {item_id!r} is pinned or mandatory; unpin it first")
    return [ev.ItemRemoved(at=now(), agent_id=agent_id, item_id=item_id, reason=reason)]


def decide_verify(
    agent_id: str,
    item_id: str,
    item: Item | None,
    *,
    now: Callable[[], datetime],
    by: str = "",
    evidence: str = "",
) -> list[ev.Event]:
    """Verify exactly one finding; recalled memory is never a verified fact."""
    current = known_item(agent_id, item_id, item)
    if current.source == Source.RECALLED_MEMORY:
        raise InvalidInputError("recalled memory cannot be verified as a fact")
    return [
        ev.FindingVerified(at=now(), agent_id=agent_id, item_id=item_id, by=by, evidence=evidence)
    ]


def promoted_id(from_agent: str, from_item: str) -> str:
    """The id of the pool item promoting *from_item* of *from_agent* (one per origin and
    target pool: derived from the origin, not the content, so it never meets another item)."""
    return "it_" + content_hash(f"promoted\x1f{from_agent}\x1f{from_item}")[:24]


def promoted_finding(from_agent: str, origin: Item) -> Item:
    """The structured finding a promotion stores: an L2 finding (``verified_fact`` when the
    origin is verified now, else an unverified ``worker_finding``) with the origin's content
    and provenance (agent, task, time, confidence, relevance, files, symbols), at least
    session-durable; not pinned, grouped, staged or a failure of the target's own steps."""
    return Item(
        id=promoted_id(from_agent, origin.id),
        layer=Layer.L2,
        source=Source.VERIFIED_FACT if origin.verified else Source.WORKER_FINDING,
        content=origin.content,
        agent=origin.agent or from_agent,
        task=origin.task,
        phase=origin.phase,
        observed_at=origin.observed_at,
        confidence=origin.confidence,
        relevance=origin.relevance,
        durability=max(origin.durability, Durability.SESSION),
        verified=origin.verified,
        files=origin.files,
        symbols=origin.symbols,
        redacted=origin.redacted,
    )


def decide_promote_finding(
    from_agent: str,
    from_item: str,
    origin: Item | None,
    *,
    to_agent: str,
    promoted: Mapping[str, tuple[str, str]],
    now: Callable[[], datetime],
    by: str = "",
    sized: Callable[[Item], Item] = lambda item: item,
) -> list[ev.Event]:
    """Promote one finding of *from_agent*'s pool (*origin*, as the pool holds it now) into
    *to_agent*'s context pool: the new item (``ItemRecorded``) and the promotion with its
    provenance (``FindingPromoted``), both on *to_agent*'s stream. *promoted* is the target
    pool's promotions (item id → origin); promoting the same origin twice is refused."""
    current = known_item(from_agent, from_item, origin)
    if current.source in NOT_FINDINGS:
        raise InvalidInputError(f"a {current.source.value} item is not a finding to promote")
    item_id = promoted_id(from_agent, from_item)
    if item_id in promoted:
        raise InvalidInputError(
            f"item {from_item[:80]!r} of {from_agent!r} is already promoted into {to_agent!r}"
        )
    item = sized(promoted_finding(from_agent, current))
    at = now()
    return [
        ev.ItemRecorded(at=at, agent_id=to_agent, item=item),
        ev.FindingPromoted(
            at=at,
            agent_id=to_agent,
            item_id=item_id,
            from_agent=from_agent,
            from_item=from_item,
            verified=current.verified,
            by=by,
        ),
    ]


def decide_recall_switch(
    enabled: bool, current: bool, *, now: Callable[[], datetime], by: str = ""
) -> list[ev.Event]:
    """Turn project-memory recall on or off for the ledger; nothing when it already is."""
    if enabled == current:
        return []
    return [ev.RecallSwitched(at=now(), enabled=enabled, by=by)]
