"""The auditor: replays the log and checks the engine's invariants, naming each violation's
position. A pure fold over ``(position, event)`` pairs."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import msgspec

from ctxledger.domain.events import (
    AgentRegistered,
    CacheUsageRecorded,
    ContextBuildingStarted,
    ContextPackBuilt,
    Event,
    FindingPromoted,
    FindingVerified,
    GenerationRefreshed,
    ItemPinned,
    ItemRecorded,
    ItemRemoved,
    ItemUnpinned,
    MemoryPromoted,
    RecallRendered,
    RecallSwitched,
    SteeringNoteAdded,
    TurnFailed,
    TurnSucceeded,
)
from ctxledger.domain.free_text import ERASED_REASON
from ctxledger.domain.model import Decision, Item, Source, apply_decision_delta, selection_matches
from ctxledger.domain.packing import OTHER_STAGE

__all__ = [
    "RECALL_MAX_BYTES",
    "RECALL_MAX_ENTRIES",
    "RECALL_MAX_TOKENS",
    "Violation",
    "audit",
]

RECALL_MAX_ENTRIES = 4
RECALL_MAX_TOKENS = 300
RECALL_MAX_BYTES = 1200

# Sources that only an explicit verify event may turn verified: recorded verified, they lie.
_NEVER_RECORDED_VERIFIED = frozenset({Source.RECALLED_MEMORY, Source.UNVERIFIED_HYPOTHESIS})


class Violation(msgspec.Struct, frozen=True, kw_only=True):
    """One broken invariant at one log position."""

    position: int
    rule: str
    agent_id: str = ""
    detail: str = ""


class _Agent:
    __slots__ = (
        "context_limit_pending",
        "decisions",
        "event_history",
        "generation",
        "groups",
        "mandatory",
        "note_stages",
        "pinned",
        "recorded",
        "registered",
        "stage",
        "verified",
    )

    def __init__(self) -> None:
        self.generation = 1
        self.pinned: set[str] = set()
        self.recorded: set[str] = set()  # every item id recorded for the agent
        self.verified: set[str] = set()  # recorded verified, or verified since
        self.mandatory: set[str] = set()  # stays forced through an unpin
        self.decisions: dict[str, Decision] = {}
        self.context_limit_pending = False
        self.registered = False
        self.note_stages: dict[str, str] = {}  # steering note id → the stage it is scoped to
        self.event_history: set[str] = set()  # layered keeps these like pinned items
        self.groups: dict[
            str, str
        ] = {}  # item id → its group (a group with a forced member is forced)
        self.stage = ""  # stage of the build in flight


def _other_stage(a: _Agent, item_id: str, d: Decision) -> bool:
    """A steering note scoped to another stage than the build's, dropped for that reason."""
    stage = a.note_stages.get(item_id, "")
    return d.action == "dropped" and d.reason == OTHER_STAGE and stage not in ("", a.stage)


class _Auditor:
    """The fold's state: what each agent has recorded, pinned and decided so far, and the
    violations found; one handler per event type (``_HANDLERS``)."""

    def __init__(self) -> None:
        self.agents: dict[str, _Agent] = {}
        self.out: list[Violation] = []
        self.recall_on = True  # the ledger's recall switch (RecallSwitched), on until switched

    def flag(self, pos: int, rule: str, agent_id: str = "", detail: str = "") -> None:
        self.out.append(Violation(position=pos, rule=rule, agent_id=agent_id, detail=detail))

    def agent(self, pos: int, agent_id: str) -> _Agent:
        """The agent's state; an agent never registered is flagged once, then known."""
        a = self.agents.get(agent_id)
        if a is None:
            a = self.agents[agent_id] = _Agent()
            self.flag(pos, "unknown_agent", agent_id)
            a.registered = True
        return a

    def item_of(self, pos: int, agent_id: str, item_id: str) -> _Agent:
        """The agent's state, flagging *item_id* if it was never recorded for the agent."""
        a = self.agent(pos, agent_id)
        if item_id not in a.recorded:
            self.flag(pos, "unknown_item", agent_id, item_id)
        return a

    def registered(self, pos: int, event: AgentRegistered) -> None:
        self.agents.setdefault(event.agent.agent_id, _Agent()).registered = True

    def recorded(self, pos: int, event: ItemRecorded | SteeringNoteAdded) -> None:
        aid, item = event.agent_id, event.item
        a = self.agent(pos, aid)
        # The pool keeps an item's first recording (observing it again changes none of its
        # flags), so only the first recording of an id says what is forced.
        if item.id not in a.recorded:
            _first_recording(a, item, steering=type(event) is SteeringNoteAdded)
        a.recorded.add(item.id)
        if item.verified:
            a.verified.add(item.id)
        if item.source == Source.VERIFIED_FACT and not item.verified:
            self.flag(pos, "unverified_as_verified", aid, item.id)
        if item.verified and item.source in _NEVER_RECORDED_VERIFIED:
            self.flag(pos, "unverified_as_verified", aid, item.id)

    def pinned(self, pos: int, event: ItemPinned) -> None:
        self.item_of(pos, event.agent_id, event.item_id).pinned.add(event.item_id)

    def unpinned(self, pos: int, event: ItemUnpinned) -> None:
        a = self.item_of(pos, event.agent_id, event.item_id)
        if event.item_id not in a.mandatory:
            a.pinned.discard(event.item_id)

    def removed(self, pos: int, event: ItemRemoved) -> None:
        a = self.item_of(pos, event.agent_id, event.item_id)
        if event.item_id in a.pinned and not event.reason.startswith(ERASED_REASON):
            self.flag(pos, "pinned_removed", event.agent_id, event.item_id)

    def started(self, pos: int, event: ContextBuildingStarted) -> None:
        if (known := self.agents.get(event.agent_id)) is not None:
            known.stage = event.stage_id

    def verified(self, pos: int, event: FindingVerified) -> None:
        self.item_of(pos, event.agent_id, event.item_id).verified.add(event.item_id)

    def finding_promoted(self, pos: int, event: FindingPromoted) -> None:
        """The promoted item was recorded in the target's pool, its origin in the origin's;
        a promotion is never more verified than its origin was."""
        target = self.item_of(pos, event.agent_id, event.item_id)
        origin = self.item_of(pos, event.from_agent, event.from_item)
        claims = event.verified or event.item_id in target.verified
        if claims and event.from_item not in origin.verified:
            self.flag(pos, "unverified_as_verified", event.agent_id, event.item_id)

    def recall_switched(self, pos: int, event: RecallSwitched) -> None:
        self.recall_on = event.enabled

    def promoted(self, pos: int, event: MemoryPromoted) -> None:
        if event.verified:
            self.flag(pos, "unverified_as_verified", detail=event.memory_id)

    def turn_failed(self, pos: int, event: TurnFailed) -> None:
        if event.error_class == "context_limit":
            self.agent(pos, event.agent_id).context_limit_pending = True

    def turn_succeeded(self, pos: int, event: CacheUsageRecorded | TurnSucceeded) -> None:
        self.agent(pos, event.agent_id).context_limit_pending = False

    def refreshed(self, pos: int, event: GenerationRefreshed) -> None:
        aid = event.agent_id
        a = self.agent(pos, aid)
        if event.from_generation != a.generation or event.to_generation != a.generation + 1:
            moved = f"{event.from_generation} → {event.to_generation}"
            self.flag(pos, "generation_gap", aid, f"{moved} at generation {a.generation}")
        if (
            event.kind == "refresh"
            and event.trigger == "context_limit"
            and not a.context_limit_pending
        ):
            self.flag(pos, "refresh_without_cause", aid)
        if event.kind == "refresh" and event.trigger == "budget":
            self.flag(pos, "refresh_without_cause", aid, "trigger budget")
        a.generation = event.to_generation
        a.decisions = {}

    def pack_built(self, pos: int, event: ContextPackBuilt) -> None:
        aid = event.agent_id
        a = self.agent(pos, aid)
        if event.generation != a.generation:
            detail = f"pack of generation {event.generation} in {a.generation}"
            self.flag(pos, "generation_gap", aid, detail)
        prompt_decisions = a.decisions
        a.decisions = apply_decision_delta(
            {} if event.purpose else a.decisions, event.decisions, event.retired
        )
        self.check_budget(pos, a, event)
        if event.selection_hash and not selection_matches(a.decisions, event.selection_hash):
            self.flag(pos, "selection_hash", aid, event.pack_id)
        for iid in a.pinned:
            d = a.decisions.get(iid)
            if d is not None and d.action != "included" and not _other_stage(a, iid, d):
                self.flag(pos, "pinned_dropped", aid, f"{iid}: {d.action} ({d.reason})")
        if event.purpose:  # the generation's prompt decisions are unchanged by it
            a.decisions = prompt_decisions

    def check_budget(self, pos: int, a: _Agent, event: ContextPackBuilt) -> None:
        """``over_budget`` and ``unforced_over_budget`` for a pack above its budget."""
        used, limit = event.budget_used, event.budget_limit
        if used <= limit:
            return
        if event.overflow != used - limit:
            detail = f"{used} > {limit}, overflow {event.overflow}"
            self.flag(pos, "over_budget", event.agent_id, detail)
        forced = a.pinned | (a.event_history if event.strategy == "layered" else set())
        forced_groups = {a.groups[i] for i in forced if i in a.groups}
        forced |= {i for i, g in a.groups.items() if g in forced_groups}
        loose = sorted(
            iid for iid, d in a.decisions.items() if d.action != "dropped" and iid not in forced
        )
        if loose:
            detail = f"{used} > {limit} with {len(loose)} unpinned items in, e.g. {loose[0]}"
            self.flag(pos, "unforced_over_budget", event.agent_id, detail)

    def recall_rendered(self, pos: int, event: RecallRendered) -> None:
        self.agent(pos, event.agent_id)
        entries = len(event.memory_ids)
        if entries and not self.recall_on:
            self.flag(pos, "recall_while_off", event.agent_id, f"{entries} entries")
        if (
            entries > RECALL_MAX_ENTRIES
            or event.tokens > RECALL_MAX_TOKENS
            or event.bytes > RECALL_MAX_BYTES
        ):
            detail = f"{entries} entries, {event.tokens} tokens, {event.bytes} bytes"
            self.flag(pos, "recall_caps", event.agent_id, detail)


def _first_recording(a: _Agent, item: Item, *, steering: bool) -> None:
    """What an item's first recording says is forced, scoped or grouped."""
    steering = steering or item.source == Source.STEERING_NOTE
    if item.pinned or item.mandatory or steering:
        a.pinned.add(item.id)
    if item.mandatory or steering:
        a.mandatory.add(item.id)
    if steering and item.stage:
        a.note_stages[item.id] = item.stage
    if item.source == Source.EVENT_HISTORY:
        a.event_history.add(item.id)
    if item.group:
        a.groups[item.id] = item.group


_HANDLERS: dict[type[Event], Callable[[_Auditor, int, Any], None]] = {
    AgentRegistered: _Auditor.registered,
    ItemRecorded: _Auditor.recorded,
    SteeringNoteAdded: _Auditor.recorded,
    ItemPinned: _Auditor.pinned,
    ItemUnpinned: _Auditor.unpinned,
    ItemRemoved: _Auditor.removed,
    ContextBuildingStarted: _Auditor.started,
    FindingVerified: _Auditor.verified,
    FindingPromoted: _Auditor.finding_promoted,
    RecallSwitched: _Auditor.recall_switched,
    MemoryPromoted: _Auditor.promoted,
    TurnFailed: _Auditor.turn_failed,
    CacheUsageRecorded: _Auditor.turn_succeeded,
    TurnSucceeded: _Auditor.turn_succeeded,
    GenerationRefreshed: _Auditor.refreshed,
    ContextPackBuilt: _Auditor.pack_built,
    RecallRendered: _Auditor.recall_rendered,
}


def audit(records: Iterable[tuple[int, Event]]) -> list[Violation]:
    """Check every invariant over the whole log:

    - ``pinned_removed``: a pinned or mandatory item (or steering note) removed — erasing
      its text (``ItemRemoved`` reason ``erased: …``) is the one removal a pin allows;
    - ``pinned_dropped``: a pinned or mandatory item (or steering note) dropped, clipped or
      compressed — except a steering note of another stage than the build's, which is
      dropped ``other_stage``;
    - ``over_budget``: a pack above its budget without the overflow recorded;
    - ``unforced_over_budget``: a pack above its budget holding anything but pinned or
      mandatory content (and, for ``layered``, steering notes and event history): the budget
      is a hard limit that only forced content alone may exceed;
    - ``selection_hash``: a pack whose recorded delta does not rebuild its selection hash;
    - ``unverified_as_verified``: a verified_fact recorded unverified, recalled memory or an
      unverified hypothesis recorded verified, a memory promoted as verified, or a finding
      promoted into a pool as verified while its origin was not;
    - ``recall_caps``: a recall group above 4 entries, 300 tokens or 1200 bytes;
    - ``recall_while_off``: a recall group with entries rendered while the ledger's recall
      switch (``RecallSwitched``) is off;
    - ``refresh_without_cause``: a context-limit refresh with no context-limit error since the
      last successful turn (the refresh ladder may refresh several times for one error);
    - ``generation_gap``: generation numbers that are not contiguous;
    - ``unknown_agent``: events for an agent never registered;
    - ``unknown_item``: a pin, unpin, removal, verification or finding promotion of an item
      never recorded for that agent (a promotion: its new item in the target's pool, its
      origin in the origin agent's).
    """
    auditor = _Auditor()
    for pos, event in records:
        handler = _HANDLERS.get(type(event))
        if handler is not None:
            handler(auditor, pos, event)
    return auditor.out
