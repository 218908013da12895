"""Refresh on context-limit errors, the bounded refresh ladder, and the auditor's rules."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import ContextEngine, EngineSettings
from ctxledger.adapters.ledger import open_ledger
from ctxledger.domain import events as ev
from ctxledger.domain.errors import RefreshExhaustedError
from ctxledger.domain.model import AgentIdentity, Decision, Item, Layer, Source
from ctxledger.projections.audit import audit

ANTHROPIC_TOO_LONG = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 215634 tokens > 200000 maximum",
    },
}
AT = datetime(2026, 1, 1, tzinfo=UTC)


def engine(budget: int = 2000) -> ContextEngine:
    e = open_engine(
        open_ledger("memory://"), clock=SteppingClock(), settings=EngineSettings(session_id="s")
    )
    e.register_agent(AgentIdentity(agent_id="a", role="primary", task="fix auth", budget=budget))
    e.record(
        "a",
        "Objective: fix auth timeout",
        layer=Layer.L1,
        source=Source.USER_REQUIREMENT,
        pinned=True,
        mandatory=True,
    )
    return e


def test_refresh_keeps_durable_state_and_drops_ephemeral_history() -> None:
    e = engine()
    finding = e.record(
        "a",
        "Root cause: naive datetime at auth/session.py:88",
        layer=Layer.L2,
        source=Source.WORKER_FINDING,
    )
    old_grep = e.record("a", "grep hits " + "x " * 300, layer=Layer.L0, source=Source.TOOL_LOG)
    history = e.record("a", "transcript " + "y " * 300, layer=Layer.L4, source=Source.CONVERSATION)
    e.build("a")
    latest = e.record("a", "latest output: 3 failed", layer=Layer.L0, source=Source.TOOL_LOG)
    e.build("a")
    before = e.agent("a").current
    outcome = e.on_turn_error("a", ANTHROPIC_TOO_LONG)
    assert outcome.refreshed
    assert (
        outcome.message
        == f"Context refreshed · Generation {before.number} → {before.number + 1} · Reason: context-limit error from anthropic"
    )
    assert outcome.result is not None
    included = {d.item_id for d in outcome.result.pack.decisions if d.action != "dropped"}
    assert finding.id in included
    assert latest.id in included
    assert old_grep.id not in included
    assert history.id not in included
    assert outcome.result.pack.budget_used < before.tokens_used
    assert e.agent("a").agent.agent_id == "a"  # same identity
    assert audit([(r.position, r.event) for r in e.ledger.read_all()]) == []


def test_other_errors_are_recorded_and_do_not_refresh() -> None:
    e = engine()
    e.build("a")
    outcome = e.on_turn_error(
        "a", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    )
    assert not outcome.refreshed
    assert e.agent("a").current.number == 1
    failures = [r.event for r in e.ledger.read_all() if isinstance(r.event, ev.TurnFailed)]
    assert [f.error_class for f in failures] == ["other"]


def test_refresh_ladder_terminates_when_pinned_content_exceeds_the_window() -> None:
    e = engine(budget=100)
    e.record("a", "constraint " * 400, layer=Layer.L1, source=Source.STEERING_NOTE, pinned=True)
    e.build("a")

    def keep_retrying() -> None:  # an orchestrator that retries on every refresh
        for _ in range(10):
            e.on_turn_error("a", ANTHROPIC_TOO_LONG)

    with pytest.raises(RefreshExhaustedError, match="refreshes without a successful turn"):
        keep_retrying()
    refreshes = [
        r.event for r in e.ledger.read_all() if isinstance(r.event, ev.GenerationRefreshed)
    ]
    assert 1 <= len(refreshes) <= EngineSettings().max_refreshes
    assert audit([(r.position, r.event) for r in e.ledger.read_all()]) == []


def test_successful_turn_resets_the_ladder() -> None:
    e = engine(budget=3000)
    for round_ in range(3):
        for i in range(10):
            e.record(
                "a", f"round {round_} step {i} " + "z " * 80, layer=Layer.L0, source=Source.TOOL_LOG
            )
            e.build("a")
        outcome = e.on_turn_error("a", ANTHROPIC_TOO_LONG)
        assert outcome.refreshed
        e.report_usage(
            "a",
            {"input_tokens": 10, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
        )
    refreshes = [
        r.event for r in e.ledger.read_all() if isinstance(r.event, ev.GenerationRefreshed)
    ]
    assert len([r for r in refreshes if r.kind == "refresh"]) == 3
    assert audit([(r.position, r.event) for r in e.ledger.read_all()]) == []


def _pack(
    pos_decisions: tuple[Decision, ...], used: int = 10, limit: int = 100, overflow: int = 0
) -> ev.ContextPackBuilt:
    return ev.ContextPackBuilt(
        at=AT,
        agent_id="a",
        pack_id="p",
        budget_used=used,
        budget_limit=limit,
        overflow=overflow,
        decisions=pos_decisions,
    )


def _note(stage: str) -> Item:
    return Item(
        id="n",
        layer=Layer.L1,
        source=Source.STEERING_NOTE,
        content="only while fixing",
        stage=stage,
        pinned=True,
    )


@pytest.mark.parametrize(
    ("events", "rule"),
    [
        ([_pack((), used=120, limit=100, overflow=0)], "over_budget"),
        (
            [
                ev.ItemRecorded(
                    at=AT,
                    agent_id="a",
                    item=Item(
                        id="i", layer=Layer.L1, source=Source.TOOL_LOG, content="c", pinned=True
                    ),
                ),
                _pack((Decision(item_id="i", action="dropped", reason="over_budget"),)),
            ],
            "pinned_dropped",
        ),
        (
            [
                ev.ItemRecorded(
                    at=AT,
                    agent_id="a",
                    item=Item(id="i", layer=Layer.L2, source=Source.VERIFIED_FACT, content="c"),
                )
            ],
            "unverified_as_verified",
        ),
        (
            [
                ev.ItemRecorded(
                    at=AT,
                    agent_id="a",
                    item=Item(
                        id="h",
                        layer=Layer.L2,
                        source=Source.UNVERIFIED_HYPOTHESIS,
                        content="maybe the cache",
                        verified=True,
                    ),
                )
            ],
            "unverified_as_verified",
        ),
        (
            [
                ev.SteeringNoteAdded(
                    at=AT,
                    agent_id="a",
                    item=Item(id="n", layer=Layer.L1, source=Source.TOOL_LOG, content="c"),
                ),
                _pack((Decision(item_id="n", action="dropped", reason="over_budget"),)),
            ],
            "pinned_dropped",
        ),
        (
            [
                ev.SteeringNoteAdded(at=AT, agent_id="a", item=_note("fix")),
                ev.ContextBuildingStarted(at=AT, agent_id="a", pack_id="p", stage_id="fix"),
                _pack((Decision(item_id="n", action="dropped", reason="other_stage"),)),
            ],
            "pinned_dropped",
        ),
        (
            [ev.RecallRendered(at=AT, agent_id="a", memory_ids=("1", "2", "3", "4", "5"))],
            "recall_caps",
        ),
        ([ev.RecallRendered(at=AT, agent_id="a", tokens=301)], "recall_caps"),
        (
            [
                ev.GenerationRefreshed(
                    at=AT,
                    agent_id="a",
                    kind="refresh",
                    from_generation=1,
                    to_generation=2,
                    reason="x",
                    trigger="context_limit",
                )
            ],
            "refresh_without_cause",
        ),
        (
            [
                ev.GenerationRefreshed(
                    at=AT,
                    agent_id="a",
                    kind="rebuild",
                    from_generation=1,
                    to_generation=3,
                    reason="x",
                )
            ],
            "generation_gap",
        ),
        ([ev.ItemPinned(at=AT, agent_id="ghost", item_id="i")], "unknown_agent"),
    ],
)
def test_audit_names_each_violation_with_its_position(events: list[ev.Event], rule: str) -> None:
    registered = [ev.AgentRegistered(at=AT, agent=AgentIdentity(agent_id="a", role="primary"))]
    records = list(enumerate([*registered, *events], start=1))
    violations = audit(records)
    assert rule in {v.rule for v in violations}
    hit = next(v for v in violations if v.rule == rule)
    assert hit.position == len(records)


def _registered(*events: ev.Event) -> list[tuple[int, ev.Event]]:
    registered = ev.AgentRegistered(at=AT, agent=AgentIdentity(agent_id="a", role="primary"))
    return list(enumerate([registered, *events], start=1))


@pytest.mark.parametrize("stage_id", ["plan", ""])
def test_audit_accepts_a_steering_note_left_out_of_another_stages_build(stage_id: str) -> None:
    records = _registered(
        ev.SteeringNoteAdded(at=AT, agent_id="a", item=_note("fix")),
        ev.ContextBuildingStarted(at=AT, agent_id="a", pack_id="p", stage_id=stage_id),
        _pack((Decision(item_id="n", action="dropped", reason="other_stage"),)),
    )
    assert audit(records) == []


def test_audit_accepts_a_hypothesis_recorded_unverified_and_verified_explicitly() -> None:
    hypothesis = Item(
        id="h", layer=Layer.L2, source=Source.UNVERIFIED_HYPOTHESIS, content="maybe the cache"
    )
    records = _registered(
        ev.ItemRecorded(at=AT, agent_id="a", item=hypothesis),
        ev.FindingVerified(at=AT, agent_id="a", item_id="h", by="reviewer"),
    )
    assert audit(records) == []


class _FlakyCounter:
    """A TokenCounter fake that fails on demand (the port is the unit under test's seam)."""

    def __init__(self) -> None:
        self.broken: type[BaseException] | None = None

    @property
    def name(self) -> str:
        return "flaky"

    def count(self, text: str) -> int:
        if self.broken is not None:
            raise self.broken("tokenizer unavailable")
        return len(text.split())


@pytest.mark.parametrize(
    ("error", "last"),
    [(RuntimeError, ev.ContextBuildingFailed), (KeyboardInterrupt, ev.ContextBuildingInterrupted)],
)
def test_a_build_that_raises_records_its_lifecycle(
    error: type[BaseException], last: type[ev.EventBase]
) -> None:
    counter = _FlakyCounter()
    e = open_engine(
        open_ledger("memory://"),
        counter=counter,
        clock=SteppingClock(),
        settings=EngineSettings(session_id="s"),
    )
    e.register_agent(AgentIdentity(agent_id="a", role="primary", budget=500))
    e.record("a", "some observation")
    counter.broken = error
    with pytest.raises(error):
        e.build("a")
    events = [r.event for r in e.ledger.read_all()]
    assert isinstance(events[-2], ev.ContextBuildingStarted)
    assert isinstance(events[-1], last)
    end = events[-1]
    assert isinstance(end, ev.ContextBuildingFailed | ev.ContextBuildingInterrupted)
    assert end.reason == (
        "interrupted" if error is KeyboardInterrupt else "RuntimeError: tokenizer unavailable"
    )
    state = e.runner.models.context_state.by_agent["a"]
    assert not state.building_in_progress
    assert state.interrupted is (error is KeyboardInterrupt)
    counter.broken = None
    e.build("a")  # the engine recovers on the next build
    assert e.runner.models.context_state.by_agent["a"].built_pack_ids
    assert audit([(r.position, r.event) for r in e.ledger.read_all()]) == []


def test_audit_reads_an_items_flags_from_its_first_recording_as_the_pool_does(
    tmp_path: Path,
) -> None:
    """Observing an item again does not pin it (the pool keeps its first recording), so the
    audit does not call a later pack that keeps it dropped ``pinned_dropped``; a pinned first
    recording dropped is still one (the shape a random sweep of bad values found)."""
    e = open_engine(
        open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}"),
        clock=SteppingClock(),
        settings=EngineSettings(session_id="s"),
    )
    e.register_agent(AgentIdentity(agent_id="a", role="worker", budget=4000))
    e.record("a", "a first observation")
    e.build("a")
    e.record("a", "observed " * 40)
    e.build("a", budget=22)  # a rebuild: the new item is dropped over budget
    e.record("a", "observed " * 40, pinned=True)  # observed again, pinned: the pool keeps it
    e.record("a", "something else")
    e.build("a", budget=100_000)  # an append: the first item's decision stays as it was
    records = [(r.position, r.event) for r in e.ledger.read_all()]
    dropped = [
        d
        for _, event in records
        if isinstance(event, ev.ContextPackBuilt)
        for d in event.decisions
        if d.action == "dropped"
    ]
    assert dropped  # the case holds a drop of the item observed again
    assert audit(records) == []
    pinned_first = [
        (p, msgspec.structs.replace(event, item=msgspec.structs.replace(event.item, pinned=True)))
        if isinstance(event, ev.ItemRecorded) and event.item.id == dropped[0].item_id
        else (p, event)
        for p, event in records
    ]
    assert "pinned_dropped" in {v.rule for v in audit(pinned_first)}
    e.close()
