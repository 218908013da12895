"""``ContextEngine.promote_finding`` (seed 000, "Finding promotion stores a structured finding in
the context engine pool"; issue 39): a worker's finding enters its parent's context pool as a
structured L2 finding with its provenance, as two recorded events (``ItemRecorded`` and
``FindingPromoted``) that replay rebuilds; verification is kept, never granted."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.engine.rederive import rederive
from ctxledger.adapters.ledger.projection_runner import encode_state, replay_states
from ctxledger.domain import events as ev
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import AgentIdentity, Item, Layer, Source
from ctxledger.domain.tiers import priority_tier
from ctxledger.projections.audit import audit
from ctxledger.projections.catalog import read_models
from tests.e2e._cli import run

ROOT_CAUSE = "Root cause: auth/session.py refresh() compares naive and aware datetimes"


def _engine(store: str) -> ContextEngine:
    return open_engine(
        store, clock=SteppingClock(datetime(2026, 3, 1, tzinfo=UTC), timedelta(seconds=1))
    )


def _session(store: str) -> tuple[str, str]:
    """A primary and its worker; the worker records a finding and a hypothesis, verifies the
    finding, and both are promoted into the primary's pool. Returns the two promoted ids."""
    engine = _engine(store)
    try:
        engine.register_agent(AgentIdentity(agent_id="primary", role="primary", budget=4_000))
        engine.register_agent(
            AgentIdentity(agent_id="worker", role="worker", parent="primary", task="fix auth")
        )
        engine.record("primary", "Objective: fix auth", layer=Layer.L1,
                      source=Source.USER_REQUIREMENT, pinned=True)  # fmt: skip
        engine.build("primary")
        finding = engine.record(
            "worker", ROOT_CAUSE, layer=Layer.L2, source=Source.WORKER_FINDING,
            files=("auth/session.py",), symbols=("refresh",), task="fix auth",
        )  # fmt: skip
        hypothesis = engine.record(
            "worker", "Maybe the cache key is stale too", layer=Layer.L0,
            source=Source.UNVERIFIED_HYPOTHESIS,
        )  # fmt: skip
        engine.verify_finding("worker", finding.id, by="reviewer", evidence="pytest -k refresh")
        verified = engine.promote_finding("worker", finding.id, by="worker")
        unverified = engine.promote_finding("worker", hypothesis.id)
        assert engine.pool("primary").promoted == {
            verified.id: ("worker", finding.id),
            unverified.id: ("worker", hypothesis.id),
        }
        # a structured L2 finding with the origin's provenance; verification kept, not granted
        assert (verified.layer, verified.source, verified.verified) == (
            Layer.L2, Source.VERIFIED_FACT, True,
        )  # fmt: skip
        assert (verified.agent, verified.task, verified.files, verified.symbols) == (
            "worker", "fix auth", ("auth/session.py",), ("refresh",),
        )  # fmt: skip
        assert verified.content == ROOT_CAUSE
        assert (unverified.layer, unverified.source, unverified.verified) == (
            Layer.L2, Source.WORKER_FINDING, False,
        )  # fmt: skip
        assert (priority_tier(verified), priority_tier(unverified)) == (2, 3)
        # the parent's next prompt carries both; the worker's pool is unchanged
        sent = engine.build("primary").prompt.text
        assert ROOT_CAUSE in sent
        assert "cache key is stale" in sent
        assert verified.id not in engine.pool("worker").items
        return verified.id, unverified.id
    finally:
        engine.close()


def test_a_promoted_finding_enters_the_parent_pool_and_replay_rebuilds_it(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    store = f"sqlite:///{db}"
    verified_id, unverified_id = _session(store)
    reopened = _engine(store)
    try:
        events = [r.event for r in reopened.ledger.read_all()]
        promotions = [e for e in events if isinstance(e, ev.FindingPromoted)]
        assert [(p.agent_id, p.item_id, p.from_agent, p.verified) for p in promotions] == [
            ("primary", verified_id, "worker", True),
            ("primary", unverified_id, "worker", False),
        ]
        assert promotions[0].by == "worker"
        # each promotion follows the ItemRecorded of its item, on the parent's stream
        for p in promotions:
            i = events.index(p)
            before = events[i - 1]
            assert isinstance(before, ev.ItemRecorded)
            assert (before.agent_id, before.item.id) == ("primary", p.item_id)
        # a new process sees the promotions, folded from the log
        assert set(reopened.pool("primary").promoted) == {verified_id, unverified_id}
        controls = reopened.states.inspector.by_agent["primary"].controls
        assert [c.kind for c in controls if c.kind == "promote_finding"] == ["promote_finding"] * 2
        # replay from scratch equals the persisted read models; audit and rederive are clean
        states, _, _ = replay_states(reopened.ledger)
        assert encode_state(read_models(states)) == encode_state(reopened.states)
        assert audit([(r.position, r.event) for r in reopened.ledger.read_all()]) == []
        report = rederive(reopened.ledger.read_all())
        assert report.builds == report.rederived == 2
        assert report.mismatches == 0
    finally:
        reopened.close()
    verify = run("replay", "--store", store, "--verify", "--json", cwd=tmp_path)
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["equal"] is True
    audited = run("audit", "--store", store, "--rederive", "--json", cwd=tmp_path)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert json.loads(audited.stdout)["mismatches"] == 0


def test_promotion_refuses_non_findings_twice_and_unknown_items(tmp_path: Path) -> None:
    engine = _engine(f"sqlite:///{tmp_path / 'ledger.db'}")
    try:
        engine.register_agent(AgentIdentity(agent_id="solo", role="worker"))
        note = engine.record("solo", "Must keep the API", layer=Layer.L1,
                             source=Source.USER_REQUIREMENT)  # fmt: skip
        log = engine.record("solo", "grep: auth/session.py:12: def refresh()",
                            source=Source.TOOL_LOG)  # fmt: skip
        before = engine.ledger.max_position()
        with pytest.raises(InvalidInputError, match="user_requirement item is not a finding"):
            engine.promote_finding("solo", note.id)
        with pytest.raises(InvalidInputError, match="has no item"):
            engine.promote_finding("solo", "it_nope")
        assert engine.ledger.max_position() == before
        # an agent without a parent promotes into its own pool: an L0 log becomes a finding
        promoted = engine.promote_finding("solo", log.id)
        assert (promoted.layer, promoted.source) == (Layer.L2, Source.WORKER_FINDING)
        assert engine.pool("solo").promoted == {promoted.id: ("solo", log.id)}
        with pytest.raises(InvalidInputError, match="already promoted"):
            engine.promote_finding("solo", log.id)
    finally:
        engine.close()


def test_audit_flags_a_promotion_more_verified_than_its_origin() -> None:
    at = datetime(2026, 3, 1, tzinfo=UTC)
    base: list[ev.Event] = [
        ev.AgentRegistered(at=at, agent=AgentIdentity(agent_id="w", role="worker")),
        ev.ItemRecorded(at=at, agent_id="w", item=_item("o", Source.WORKER_FINDING, False)),
        ev.ItemRecorded(at=at, agent_id="w", item=_item("p", Source.VERIFIED_FACT, True)),
    ]
    forged = ev.FindingPromoted(at=at, agent_id="w", item_id="p", from_agent="w",
                                from_item="o", verified=True)  # fmt: skip
    found = audit(enumerate([*base, forged], 1))
    assert [(v.rule, v.detail) for v in found] == [("unverified_as_verified", "p")]
    unknown = ev.FindingPromoted(at=at, agent_id="w", item_id="p", from_agent="w",
                                 from_item="gone")  # fmt: skip
    assert [v.rule for v in audit(enumerate([*base, unknown], 1))] == [
        "unknown_item", "unverified_as_verified",
    ]  # fmt: skip


def _item(item_id: str, source: Source, verified: bool) -> Item:
    return Item(id=item_id, layer=Layer.L2, source=source, content=item_id, verified=verified)
