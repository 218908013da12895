"""The inspector's views show an item as the prompt shows it: a finding verified in the pool
is a verified fact in the Context view and in generation diffs."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

from ctxledger.domain.events import Event, FindingVerified, ItemRecorded
from ctxledger.domain.model import AgentIdentity, Decision, Generation, Item, Layer, Source
from ctxledger.projections.context_state import ContextStates
from ctxledger.projections.gc_indicators import GcIndicators
from ctxledger.projections.generations import AgentGenerations, Generations
from ctxledger.projections.inspector import (
    InspectorState,
    ItemView,
    diff_generations,
    inspect_agent,
)
from ctxledger.projections.pool import Pool, evolve_pool

AT = datetime(2026, 1, 1, tzinfo=UTC)
FINDING = Item(
    id="f", layer=Layer.L2, source=Source.WORKER_FINDING, content="Root cause: naive datetime"
)
HYPOTHESIS = Item(
    id="h", layer=Layer.L2, source=Source.UNVERIFIED_HYPOTHESIS, content="maybe the cache"
)
LOG = Item(id="g", layer=Layer.L0, source=Source.TOOL_LOG, content="grep hits")


@dataclass(frozen=True)
class Models:
    """The read models the views read (a stand-in for the catalog's)."""

    generations: Generations
    pool: Pool
    gc_indicators: GcIndicators = field(default_factory=GcIndicators)
    inspector: InspectorState = field(default_factory=InspectorState)
    context_state: ContextStates = field(default_factory=ContextStates)


def pool_of(*events: Event) -> Pool:
    state = Pool()
    for e in events:
        state = evolve_pool(state, e)
    return state


def recorded(*its: Item) -> list[Event]:
    return [ItemRecorded(at=AT, agent_id="a", item=it) for it in its]


VERIFY = FindingVerified(at=AT, agent_id="a", item_id="f", by="reviewer")


def inc(item_id: str, tokens: int) -> Decision:
    return Decision(item_id=item_id, action="included", tokens_before=tokens, tokens_after=tokens)


FIRST = Generation(
    number=1,
    budget=100,
    tokens_used=8,
    builds=1,
    decisions={
        "f": inc("f", 5),
        "h": inc("h", 3),
        "g": Decision(item_id="g", action="dropped", reason="over_budget", tokens_before=40),
    },
    order=("f", "h"),
)


def models(pool: Pool, *generations: Generation) -> Models:
    agent = AgentGenerations(
        agent=AgentIdentity(agent_id="a", role="primary"), generations=generations
    )
    return Models(generations=Generations(by_agent={"a": agent}), pool=pool)


def by_id(views: tuple[ItemView, ...]) -> dict[str, tuple[str, bool]]:
    return {v.id: (v.source, v.verified) for v in views}


def test_a_finding_verified_in_the_pool_shows_as_a_verified_fact() -> None:
    view = inspect_agent(models(pool_of(*recorded(FINDING, HYPOTHESIS, LOG), VERIFY), FIRST), "a")
    assert by_id(view.included) == {
        "f": ("verified_fact", True),
        "h": ("unverified_hypothesis", False),
    }
    assert by_id(view.excluded) == {"g": ("tool_log", False)}
    assert view.by_source == {"unverified_hypothesis": 3, "verified_fact": 5}


def test_an_unverified_finding_shows_as_recorded() -> None:
    view = inspect_agent(models(pool_of(*recorded(FINDING, HYPOTHESIS, LOG)), FIRST), "a")
    assert by_id(view.included) == {
        "f": ("worker_finding", False),
        "h": ("unverified_hypothesis", False),
    }
    assert view.by_source == {"unverified_hypothesis": 3, "worker_finding": 5}


def test_a_pack_that_sent_the_item_verified_shows_it_verified() -> None:
    sent = Decision(item_id="f", action="included", tokens_before=5, tokens_after=5, verified=True)
    gen = Generation(number=1, budget=100, tokens_used=5, builds=1, decisions={"f": sent})
    view = inspect_agent(models(pool_of(*recorded(FINDING)), gen), "a")
    assert by_id(view.included) == {"f": ("verified_fact", True)}


def test_a_diff_shows_the_verified_form_of_what_entered_and_left() -> None:
    second = Generation(
        number=2,
        kind="rebuild",
        reason="budget",
        budget=100,
        tokens_used=40,
        builds=1,
        decisions={
            "g": inc("g", 40),
            "f": Decision(item_id="f", action="dropped", reason="over_budget", tokens_before=5),
        },
        order=("g",),
    )
    pool = pool_of(*recorded(FINDING, HYPOTHESIS, LOG), VERIFY)
    diff = diff_generations(models(pool, FIRST, second), "a", 1, 2)
    assert by_id(diff.entered) == {"g": ("tool_log", False)}
    assert by_id(diff.left) == {
        "f": ("verified_fact", True),
        "h": ("unverified_hypothesis", False),
    }
