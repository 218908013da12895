"""GC indicators per agent (utilization, repetition, stalls, bloat); none refreshes by itself."""

from __future__ import annotations

import msgspec

from ctxledger.domain.events import (
    ContextBuildingStarted,
    ContextPackBuilt,
    Event,
    FindingVerified,
    GenerationRefreshed,
    ItemRecorded,
)
from ctxledger.domain.model import Layer, Source
from ctxledger.projections.drafts import AgentDrafts, Handlers, Thawed, batch_of_one

__all__ = ["AgentIndicators", "GcIndicators", "GcIndicatorsBatch", "evolve_gc_indicators"]

_TRANSCRIPT = (Source.CONVERSATION, Source.TOOL_LOG, Source.EVENT_HISTORY)
_PROGRESS = (Source.WORKER_FINDING, Source.VERIFIED_FACT, Source.PARENT_REPORT)


class AgentIndicators(msgspec.Struct, frozen=True, kw_only=True):
    """Indicators of one agent, as of its latest event.

    - ``utilization``: tokens used / budget of the latest pack (0..n, > 1 means overflow)
    - ``repeated_tool_signatures``: recordings whose tool signature was already seen
    - ``repeated_failed_edits``: failed observations repeating an earlier failed signature
    - ``builds_since_progress``: builds since the last new finding/fact/report (stalls)
    - ``obsolete_phase_items``: items recorded in a phase other than the current one (the
      phase of the latest build or refresh that named one)
    - ``transcript_tokens`` / ``recorded_tokens``: raw transcript share (bloat)
    """

    utilization: float = 0.0
    repeated_tool_signatures: int = 0
    repeated_failed_edits: int = 0
    builds_since_progress: int = 0
    obsolete_phase_items: int = 0
    transcript_tokens: int = 0
    recorded_tokens: int = 0
    phase: str = ""
    signatures: dict[str, int] = {}
    failed_signatures: dict[str, int] = {}
    phases: dict[str, int] = {}

    @property
    def transcript_bloat(self) -> float:
        return self.transcript_tokens / self.recorded_tokens if self.recorded_tokens else 0.0


class GcIndicators(msgspec.Struct, frozen=True, kw_only=True):
    """Indicators of every agent, keyed by agent id."""

    by_agent: dict[str, AgentIndicators] = {}


def _obsolete(phases: dict[str, int], current: str) -> int:
    if not current:
        return 0
    return sum(n for p, n in phases.items() if p and p != current)


# --- the fold --------------------------------------------------------------------------------


def _count(counts: Thawed[str, int], key: str) -> None:
    counts.edit()[key] = counts.current.get(key, 0) + 1


class _IndicatorsDraft:
    """One agent's indicators during a batch; the signature and phase counts are copied on
    their first change (not per recording)."""

    __slots__ = (*AgentIndicators.__struct_fields__, "obsolete_known")
    """The fields of ``AgentIndicators``, and whether ``obsolete_phase_items`` is known."""

    def __init__(self, a: AgentIndicators) -> None:
        self.utilization = a.utilization
        self.repeated_tool_signatures = a.repeated_tool_signatures
        self.repeated_failed_edits = a.repeated_failed_edits
        self.builds_since_progress = a.builds_since_progress
        self.obsolete_phase_items = a.obsolete_phase_items
        self.transcript_tokens = a.transcript_tokens
        self.recorded_tokens = a.recorded_tokens
        self.phase = a.phase
        self.signatures = Thawed(a.signatures)
        self.failed_signatures = Thawed(a.failed_signatures)
        self.phases = Thawed(a.phases)
        self.obsolete_known = False
        """``obsolete_phase_items`` is ``_obsolete(phases, phase)``, computed by this batch
        (so a recording can add to it instead of summing the phases again)."""

    def freeze(self) -> AgentIndicators:
        return AgentIndicators(
            utilization=self.utilization,
            repeated_tool_signatures=self.repeated_tool_signatures,
            repeated_failed_edits=self.repeated_failed_edits,
            builds_since_progress=self.builds_since_progress,
            obsolete_phase_items=self.obsolete_phase_items,
            transcript_tokens=self.transcript_tokens,
            recorded_tokens=self.recorded_tokens,
            phase=self.phase,
            signatures=self.signatures.current,
            failed_signatures=self.failed_signatures.current,
            phases=self.phases.current,
        )


class GcIndicatorsBatch:
    """The GC indicators' fold over a batch of events (see ``projections.drafts``)."""

    def __init__(self, state: GcIndicators) -> None:
        self.agents = AgentDrafts(state.by_agent, _IndicatorsDraft, AgentIndicators)
        self._opened = self.agents.drafts.get

    def handlers(self) -> Handlers:
        return {
            ItemRecorded: self.item_recorded,
            ContextPackBuilt: self.pack_built,
            GenerationRefreshed: self.generation_refreshed,
            ContextBuildingStarted: self.building_started,
            FindingVerified: self.finding_verified,
        }

    def freeze(self) -> GcIndicators:
        return GcIndicators(by_agent=self.agents.freeze(_IndicatorsDraft.freeze))

    def item_recorded(self, event: ItemRecorded) -> None:
        a = self._opened(event.agent_id)
        if a is None:
            a = self.agents.put(event.agent_id)
        item = event.item
        sig = item.tool_signature
        if sig:
            a.repeated_tool_signatures += sig in a.signatures.current
            _count(a.signatures, sig)
            if item.failure:
                a.repeated_failed_edits += sig in a.failed_signatures.current
                _count(a.failed_signatures, sig)
        phase = item.phase
        if phase:
            _count(a.phases, phase)
        if not a.obsolete_known:
            a.obsolete_phase_items = _obsolete(a.phases.current, a.phase)
            a.obsolete_known = True
        elif phase and a.phase and phase != a.phase:  # one more item of an earlier phase
            a.obsolete_phase_items += 1
        tokens = item.token_count
        a.recorded_tokens += tokens
        if item.source in _TRANSCRIPT or item.layer == Layer.L4:
            a.transcript_tokens += tokens
        if item.source in _PROGRESS:
            a.builds_since_progress = 0

    def pack_built(self, event: ContextPackBuilt) -> None:
        a = self._opened(event.agent_id)
        if a is None:
            a = self.agents.put(event.agent_id)
        a.utilization = event.budget_used / event.budget_limit if event.budget_limit else 0.0
        a.builds_since_progress += 1

    def _enter_phase(self, agent_id: str, phase: str) -> None:
        """The agent works in *phase* from now on (an empty phase leaves the current one)."""
        if not phase:
            return
        a = self.agents.get(agent_id)
        if a is None:
            a = self.agents.put(agent_id)  # a new agent's phase is "", so *phase* is new
        elif phase == a.phase:
            return
        a.phase = phase
        a.obsolete_phase_items = _obsolete(a.phases.current, phase)
        a.obsolete_known = True

    def generation_refreshed(self, event: GenerationRefreshed) -> None:
        self._enter_phase(event.agent_id, event.phase)

    def building_started(self, event: ContextBuildingStarted) -> None:
        request = event.request
        self._enter_phase(event.agent_id, request.phase if request is not None else "")

    def finding_verified(self, event: FindingVerified) -> None:
        a = self.agents.get(event.agent_id)
        if a is not None:
            a.builds_since_progress = 0


_EVOLVE = batch_of_one(GcIndicatorsBatch, GcIndicators())


def evolve_gc_indicators(state: GcIndicators, event: Event) -> GcIndicators:
    """Fold one event: ``GcIndicatorsBatch`` over a batch of one."""
    return _EVOLVE(state, event)
