"""The auditor: replays the log and checks the engine's invariants, naming each violation's
position. A pure fold over ``(position, event)`` pairs."""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

from ctxledger.domain.events import (
    AgentRegistered,
    CacheUsageRecorded,
    ContextBuildingStarted,
    ContextPackBuilt,
    Event,
    FindingVerified,
    GenerationRefreshed,
    ItemPinned,
    ItemRecorded,
    ItemRemoved,
    ItemUnpinned,
    MemoryPromoted,
    RecallRendered,
    SteeringNoteAdded,
    TurnFailed,
    TurnSucceeded,
)
from ctxledger.domain.free_text import ERASED_REASON
from ctxledger.domain.model import Decision, Source, apply_decision_delta, selection_matches
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
    )

    def __init__(self) -> None:
        self.generation = 1
        self.pinned: set[str] = set()
        self.recorded: set[str] = set()  # every item id recorded for the agent
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
      unverified hypothesis recorded verified, or a memory promoted as verified;
    - ``recall_caps``: a recall group above 4 entries, 300 tokens or 1200 bytes;
    - ``refresh_without_cause``: a context-limit refresh with no context-limit error since the
      last successful turn (the refresh ladder may refresh several times for one error);
    - ``generation_gap``: generation numbers that are not contiguous;
    - ``unknown_agent``: events for an agent never registered;
    - ``unknown_item``: a pin, unpin, removal or verification of an item never recorded for
      that agent.
    """
    agents: dict[str, _Agent] = {}
    out: list[Violation] = []

    def agent(pos: int, agent_id: str) -> _Agent:
        a = agents.get(agent_id)
        if a is None:
            a = agents[agent_id] = _Agent()
            out.append(Violation(position=pos, rule="unknown_agent", agent_id=agent_id))
            a.registered = True
        return a

    def unknown_item(pos: int, a: _Agent, aid: str, item_id: str) -> None:
        if item_id not in a.recorded:
            out.append(Violation(position=pos, rule="unknown_item", agent_id=aid, detail=item_id))

    for pos, event in records:
        match event:
            case AgentRegistered(agent=identity):
                a = agents.setdefault(identity.agent_id, _Agent())
                a.registered = True
            case ItemRecorded(agent_id=aid, item=item) | SteeringNoteAdded(agent_id=aid, item=item):
                a = agent(pos, aid)
                # The pool keeps an item's first recording (observing it again changes none
                # of its flags), so only the first recording of an id says what is forced.
                first = item.id not in a.recorded
                a.recorded.add(item.id)
                steering = type(event) is SteeringNoteAdded or item.source == Source.STEERING_NOTE
                if first and (item.pinned or item.mandatory or steering):
                    a.pinned.add(item.id)
                if first and (item.mandatory or steering):
                    a.mandatory.add(item.id)
                if first and steering and item.stage:
                    a.note_stages[item.id] = item.stage
                if first and item.source == Source.EVENT_HISTORY:
                    a.event_history.add(item.id)
                if first and item.group:
                    a.groups[item.id] = item.group
                if item.source == Source.VERIFIED_FACT and not item.verified:
                    out.append(
                        Violation(
                            position=pos,
                            rule="unverified_as_verified",
                            agent_id=aid,
                            detail=item.id,
                        )
                    )
                if item.verified and item.source in _NEVER_RECORDED_VERIFIED:
                    out.append(
                        Violation(
                            position=pos,
                            rule="unverified_as_verified",
                            agent_id=aid,
                            detail=item.id,
                        )
                    )
            case ItemPinned(agent_id=aid, item_id=iid):
                a = agent(pos, aid)
                unknown_item(pos, a, aid, iid)
                a.pinned.add(iid)
            case ItemUnpinned(agent_id=aid, item_id=iid):
                a = agent(pos, aid)
                unknown_item(pos, a, aid, iid)
                if iid not in a.mandatory:
                    a.pinned.discard(iid)
            case ItemRemoved(agent_id=aid, item_id=iid, reason=reason):
                a = agent(pos, aid)
                unknown_item(pos, a, aid, iid)
                if iid in a.pinned and not reason.startswith(ERASED_REASON):
                    out.append(
                        Violation(position=pos, rule="pinned_removed", agent_id=aid, detail=iid)
                    )
            case ContextBuildingStarted(agent_id=aid, stage_id=stage):
                if (known := agents.get(aid)) is not None:
                    known.stage = stage
            case FindingVerified(agent_id=aid, item_id=iid):
                unknown_item(pos, agent(pos, aid), aid, iid)
            case MemoryPromoted(verified=True):
                out.append(
                    Violation(position=pos, rule="unverified_as_verified", detail=event.memory_id)
                )
            case TurnFailed(agent_id=aid, error_class="context_limit"):
                agent(pos, aid).context_limit_pending = True
            case CacheUsageRecorded(agent_id=aid) | TurnSucceeded(agent_id=aid):
                agent(pos, aid).context_limit_pending = False  # a successful turn
            case GenerationRefreshed(agent_id=aid):
                a = agent(pos, aid)
                if event.from_generation != a.generation or event.to_generation != a.generation + 1:
                    out.append(
                        Violation(
                            position=pos,
                            rule="generation_gap",
                            agent_id=aid,
                            detail=(
                                f"{event.from_generation} → {event.to_generation} "
                                f"at generation {a.generation}"
                            ),
                        )
                    )
                if (
                    event.kind == "refresh"
                    and event.trigger == "context_limit"
                    and not a.context_limit_pending
                ):
                    out.append(Violation(position=pos, rule="refresh_without_cause", agent_id=aid))
                if event.kind == "refresh" and event.trigger == "budget":
                    out.append(
                        Violation(
                            position=pos,
                            rule="refresh_without_cause",
                            agent_id=aid,
                            detail="trigger budget",
                        )
                    )
                a.generation = event.to_generation
                a.decisions = {}
            case ContextPackBuilt(agent_id=aid):
                a = agent(pos, aid)
                if event.generation != a.generation:
                    out.append(
                        Violation(
                            position=pos,
                            rule="generation_gap",
                            agent_id=aid,
                            detail=f"pack of generation {event.generation} in {a.generation}",
                        )
                    )
                prompt_decisions = a.decisions
                a.decisions = apply_decision_delta(
                    {} if event.purpose else a.decisions, event.decisions, event.retired
                )
                if (
                    event.budget_used > event.budget_limit
                    and event.overflow != event.budget_used - event.budget_limit
                ):
                    out.append(
                        Violation(
                            position=pos,
                            rule="over_budget",
                            agent_id=aid,
                            detail=(
                                f"{event.budget_used} > {event.budget_limit}, "
                                f"overflow {event.overflow}"
                            ),
                        )
                    )
                if event.budget_used > event.budget_limit:
                    forced = a.pinned | (a.event_history if event.strategy == "layered" else set())
                    forced_groups = {a.groups[i] for i in forced if i in a.groups}
                    forced |= {i for i, g in a.groups.items() if g in forced_groups}
                    loose = sorted(
                        iid
                        for iid, d in a.decisions.items()
                        if d.action != "dropped" and iid not in forced
                    )
                    if loose:
                        out.append(
                            Violation(
                                position=pos,
                                rule="unforced_over_budget",
                                agent_id=aid,
                                detail=(
                                    f"{event.budget_used} > {event.budget_limit} with "
                                    f"{len(loose)} unpinned items in, e.g. {loose[0]}"
                                ),
                            )
                        )
                if event.selection_hash and not selection_matches(
                    a.decisions, event.selection_hash
                ):
                    out.append(
                        Violation(
                            position=pos, rule="selection_hash", agent_id=aid, detail=event.pack_id
                        )
                    )
                for iid in a.pinned:
                    d = a.decisions.get(iid)
                    if d is not None and d.action != "included" and not _other_stage(a, iid, d):
                        out.append(
                            Violation(
                                position=pos,
                                rule="pinned_dropped",
                                agent_id=aid,
                                detail=f"{iid}: {d.action} ({d.reason})",
                            )
                        )
                if event.purpose:  # the generation's prompt decisions are unchanged by it
                    a.decisions = prompt_decisions
            case RecallRendered(agent_id=aid):
                agent(pos, aid)
                if (
                    len(event.memory_ids) > RECALL_MAX_ENTRIES
                    or event.tokens > RECALL_MAX_TOKENS
                    or event.bytes > RECALL_MAX_BYTES
                ):
                    out.append(
                        Violation(
                            position=pos,
                            rule="recall_caps",
                            agent_id=aid,
                            detail=(
                                f"{len(event.memory_ids)} entries, {event.tokens} tokens, "
                                f"{event.bytes} bytes"
                            ),
                        )
                    )
            case _:
                pass
    return out
