"""Generations read model: every generation snapshot of every agent, rebuilt by replay."""

from __future__ import annotations

import msgspec

from ctxledger.domain.events import (
    AgentConfigured,
    AgentRegistered,
    CacheUsageRecorded,
    ContextBuildingStarted,
    ContextPackBuilt,
    Event,
    GenerationRefreshed,
    TurnSucceeded,
)
from ctxledger.domain.model import AgentIdentity, Decision, Generation
from ctxledger.domain.request import BuildRequest, Scope
from ctxledger.domain.settings import AgentSettings
from ctxledger.projections.drafts import (
    Additions,
    AgentDrafts,
    Handlers,
    Thawed,
    agent_owned,
    batch_of_one,
    holders,
)

__all__ = [
    "AgentGenerations",
    "Generations",
    "GenerationsBatch",
    "evolve_generations",
    "pack_figures",
]


class AgentGenerations(msgspec.Struct, frozen=True, kw_only=True):
    """One agent: its identity, its settings and every generation, oldest first.

    ``settings`` is the latest ``AgentConfigured``; ``last_request`` the request of the
    latest recorded build (its query — task, phase, files… — is what a refresh or rebuild
    re-asks); ``scope`` the scope the current generation was built with (fixed within it);
    ``refresh_streak`` the refreshes since the last successful turn; ``window`` the budget cap
    the last context-limit refresh learned (0: none), cleared by an explicit budget
    (``AgentConfigured`` changing it) and by a successful turn larger than it."""

    agent: AgentIdentity
    generations: tuple[Generation, ...]
    settings: AgentSettings = AgentSettings()
    last_request: BuildRequest | None = None
    scope: Scope = Scope()
    refresh_streak: int = 0
    window: int = 0

    @property
    def current(self) -> Generation:
        return self.generations[-1]

    @property
    def window_cap(self) -> int:
        """The budget cap a context-limit refresh learned for this agent (0: none)."""
        return self.window

    def generation(self, number: int) -> Generation | None:
        for g in self.generations:
            if g.number == number:
                return g
        return None


class Generations(msgspec.Struct, frozen=True, kw_only=True):
    """Generations of every agent, keyed by agent id."""

    by_agent: dict[str, AgentGenerations] = {}


def pack_figures(cur: Generation, event: ContextPackBuilt) -> Generation:
    """The generation's pack figures after *event* (its decisions and order are folded by
    the caller: ``_AgentDraft.built`` applies the delta in place)."""
    return msgspec.structs.replace(
        cur,
        strategy=event.strategy,
        budget=event.budget_limit,
        tokens_used=event.budget_used,
        reserved=event.reserved,
        overflow=event.overflow,
        builds=cur.builds + 1,
        last_pack_id=event.pack_id,
        selection_hash=event.selection_hash,
        prompt_bytes=event.prompt_bytes,
        expected_cached_bytes=event.expected_cached_bytes,
    )


# --- the fold --------------------------------------------------------------------------------


class _AgentDraft:
    """One agent during a batch. The current generation is ``current`` (a frozen Generation)
    plus what the batch did to it since: its growing parts — the decisions and the order,
    which a copy per build would make quadratic — edited in place, and its pack figures as
    the last build left them (``packed_by``, ``builds_added``, ``points_added``: not a new
    Generation per build). They are joined to it once, when the generation closes or
    the batch ends (``current_generation``). The decisions are copied on their first change
    only when a snapshot may still hold them (``_owns_decisions``)."""

    __slots__ = (
        "_model",
        "agent",
        "builds_added",
        "closed",
        "current",
        "decisions",
        "last_request",
        "order",
        "packed_by",
        "points_added",
        "previous",
        "refresh_streak",
        "scope",
        "settings",
        "source",
        "window",
    )

    def __init__(self, ag: AgentGenerations, model: list[Generations]) -> None:
        self.source = ag
        self._model = model
        self.agent = ag.agent
        self.closed = Additions(ag.generations[:-1])
        self.previous: dict[str, Decision] = (
            ag.generations[-2].decisions if len(ag.generations) > 1 else {}
        )
        """The decisions of the last closed generation: an equal decision of the current one
        shares its object (a rebuild repeats most of them), so kept generations cost a map
        each, not a decoded copy of every decision."""
        self._open(ag.generations[-1])
        self.settings = ag.settings
        self.last_request = ag.last_request
        self.scope = ag.scope
        self.refresh_streak = ag.refresh_streak
        self.window = ag.window

    def _open(self, gen: Generation) -> None:
        self.current = gen
        self.decisions: Thawed[str, Decision] = Thawed(gen.decisions)
        self.order: list[str] | None = None
        """The current generation's order once this batch changed it (None: unchanged)."""
        self.packed_by: ContextPackBuilt | None = None
        """The last pack of ``current`` folded since it was made (its figures are the
        generation's: ``pack_figures``), or None."""
        self.builds_added = 0
        self.points_added = 0

    def _owns_decisions(self) -> bool:
        """Whether the current generation's decisions are reachable only through this draft:
        this agent only through the batch (``agent_owned``), its generations only through this
        agent, the current generation through them and this draft, its decisions through it
        and this draft."""
        return (
            self.current is self.source.generations[-1]
            and agent_owned(self._model, self)
            and holders(self.source.generations) == 1
            and holders(self.current) == 2
            and holders(self.decisions.current) == 2
        )

    def built(self, event: ContextPackBuilt) -> None:
        """A pack of the current generation: ``domain.model.apply_decision_delta`` in place,
        and its retired ids out of the order, its appended ids at its end."""
        thawed = self.decisions
        decisions = thawed.adopt() if not thawed.owned and self._owns_decisions() else thawed.edit()
        for item_id in event.retired:
            decisions.pop(item_id, None)
        previous = self.previous
        for d in event.decisions:
            same = previous.get(d.item_id)
            if same is not None and same == d:
                decisions[same.item_id] = same
            else:
                decisions[d.item_id] = d
        if event.retired or event.order_appended:
            order = self.order if self.order is not None else list(self.current.order)
            if event.retired:
                gone = set(event.retired)
                order = [i for i in order if i not in gone]
            order.extend(event.order_appended)
            self.order = order

    def current_generation(self) -> Generation:
        """The current generation with its pack figures, decisions and order as of now."""
        if self.packed_by is not None or self.points_added:
            gen = self.current
            if self.packed_by is not None:  # ``pack_figures`` of the last pack, every build counted
                gen = pack_figures(gen, self.packed_by)
                if self.builds_added > 1:
                    gen = msgspec.structs.replace(gen, builds=gen.builds + self.builds_added - 1)
            if self.points_added:
                points = gen.decision_points + self.points_added
                gen = msgspec.structs.replace(gen, decision_points=points)
            self.current = gen
            self.packed_by = None
            self.builds_added = self.points_added = 0
        gen = self.current
        order = gen.order if self.order is None else tuple(self.order)
        if self.decisions.current is gen.decisions and order is gen.order:
            return gen
        return msgspec.structs.replace(gen, decisions=self.decisions.current, order=order)

    def start(self, gen: Generation) -> None:
        """Close the current generation and open *gen*."""
        closing = self.current_generation()
        self.closed.append(closing)
        self.previous = closing.decisions
        self._open(gen)

    def freeze(self) -> AgentGenerations:
        return AgentGenerations(
            agent=self.agent,
            generations=(*self.closed.freeze(), self.current_generation()),
            settings=self.settings,
            last_request=self.last_request,
            scope=self.scope,
            refresh_streak=self.refresh_streak,
            window=self.window,
        )


class GenerationsBatch:
    """The generations' fold over a batch of events (see ``projections.drafts``)."""

    def __init__(self, state: Generations) -> None:
        model = [state]
        """The model before the batch, held only here (see ``PoolBatch``)."""
        self.agents = AgentDrafts(state.by_agent, lambda ag: _AgentDraft(ag, model))
        self._opened = self.agents.drafts.get

    def handlers(self) -> Handlers:
        return {
            AgentRegistered: self.registered,
            AgentConfigured: self.configured,
            ContextBuildingStarted: self.building_started,
            CacheUsageRecorded: self.usage,
            TurnSucceeded: self.turn_succeeded,
            ContextPackBuilt: self.pack_built,
            GenerationRefreshed: self.refreshed,
        }

    def freeze(self) -> Generations:
        return Generations(by_agent=self.agents.freeze(_AgentDraft.freeze))

    def registered(self, event: AgentRegistered) -> None:
        agent = event.agent
        if self.agents.get(agent.agent_id) is None:
            first = Generation(number=1, kind="initial", budget=agent.budget)
            self.agents.add(agent.agent_id, AgentGenerations(agent=agent, generations=(first,)))

    def configured(self, event: AgentConfigured) -> None:
        ag = self.agents.get(event.agent_id)
        if ag is not None:
            if event.settings.budget != ag.settings.budget:
                ag.window = 0
            ag.settings = event.settings

    def building_started(self, event: ContextBuildingStarted) -> None:
        if event.request is not None:
            ag = self.agents.get(event.agent_id)
            if ag is not None:
                ag.last_request = event.request

    def usage(self, event: CacheUsageRecorded) -> None:
        ag = self.agents.get(event.agent_id)
        if ag is None:
            return
        sent = event.input_tokens + event.cache_read_tokens + event.cache_write_tokens
        if ag.window and sent > ag.window:
            ag.window = 0
        ag.refresh_streak = 0

    def turn_succeeded(self, event: TurnSucceeded) -> None:
        ag = self.agents.get(event.agent_id)
        if ag is not None:
            ag.refresh_streak = 0

    def pack_built(self, event: ContextPackBuilt) -> None:
        ag = self._opened(event.agent_id)
        if ag is None:
            ag = self.agents.get(event.agent_id)
        if ag is None or event.generation != ag.current.number:
            return
        if event.purpose == "decision_point":  # a view of its own: the prompt is unchanged
            ag.points_added += 1
            return
        first = ag.current.builds + ag.builds_added == 0
        ag.packed_by = event  # ``pack_figures``, made once when the generation is read
        ag.builds_added += 1
        ag.built(event)
        if first:  # the generation's first pack fixes its scope
            ag.scope = ag.last_request.scope if ag.last_request is not None else Scope()

    def refreshed(self, event: GenerationRefreshed) -> None:
        ag = self.agents.get(event.agent_id)
        if ag is None:
            return
        ag.start(
            Generation(
                number=event.to_generation,
                kind=event.kind,
                reason=event.reason,
                trigger=event.trigger,
                phase=event.phase,
                strategy=event.strategy,
                budget=event.budget,
            )
        )
        if event.kind == "refresh":
            ag.refresh_streak += 1
            if event.trigger == "context_limit" and event.budget:
                ag.window = event.budget
        ag.scope = Scope()


_EVOLVE = batch_of_one(GenerationsBatch, Generations())


def evolve_generations(state: Generations, event: Event) -> Generations:
    """Fold one event: ``GenerationsBatch`` over a batch of one. Events for agents never
    registered are ignored (the audit reports them)."""
    return _EVOLVE(state, event)
