"""``audit --rederive`` (adapters/engine/rederive.py): a real engine's builds under several strategies
all re-derive; copies of its log with one fact tampered with are caught — a changed selection
hash or decision is a mismatch naming the agent, generation, pack and first differing item; a
build of another planner version or without a recorded request is *not re-derivable*, never
equal."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import EngineSettings
from ctxledger.adapters.engine.rederive import first_difference, rederive
from ctxledger.adapters.ledger import Ledger, Recorded, open_ledger
from ctxledger.domain import events as ev
from ctxledger.domain.generation_policy import PLANNER_VERSION
from ctxledger.domain.model import AgentIdentity, Decision, Layer, Source, selection_hash
from ctxledger.projections.audit import audit
from tests.e2e._cli import run

Tamper = Callable[[Recorded], ev.Event]
ANTHROPIC_TOO_LONG = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 215634 tokens > 200000 maximum",
    },
}


def _scenario(url: str) -> list[str]:
    """Two agents; alice builds under four strategies (settings and a one-off override), a
    budget rebuild, a manual rebuild, a context-limit refresh and a build capped by the window
    it learned; bob builds twice. Returns alice's build kinds."""
    e = open_engine(url, clock=SteppingClock(), settings=EngineSettings(session_id="s"))
    try:
        e.register_agent(
            AgentIdentity(agent_id="alice", role="primary", task="fix auth timeout", budget=1200)
        )
        e.register_agent(AgentIdentity(agent_id="bob", role="worker", task="read", budget=800))
        e.record(
            "alice",
            "Objective: fix the auth timeout",
            layer=Layer.L1,
            source=Source.USER_REQUIREMENT,
            pinned=True,
            mandatory=True,
        )
        e.record(
            "alice",
            "Root cause: naive datetime at auth/session.py:88",
            layer=Layer.L2,
            source=Source.WORKER_FINDING,
        )
        log = "\n".join(f"FAILED tests/test_auth.py::test_{k} - AssertionError" for k in range(40))
        e.record("alice", log, layer=Layer.L0, source=Source.TOOL_LOG)
        e.record("bob", "bob reads the config loader", layer=Layer.L0, source=Source.TOOL_LOG)
        kinds: list[str] = [e.build("alice").kind]
        e.build("bob")
        e.record("alice", "grep hits " + "token " * 150, layer=Layer.L0, source=Source.TOOL_LOG)
        e.configure("alice", strategy="layered")
        kinds.append(e.build("alice").kind)
        e.record(
            "alice", "transcript " + "words " * 300, layer=Layer.L4, source=Source.CONVERSATION
        )
        e.configure("alice", strategy="summary")
        kinds.append(e.build("alice").kind)
        e.record("alice", "more output " + "x " * 100, layer=Layer.L0, source=Source.TOOL_LOG)
        kinds.append(e.build("alice", strategy="full_history").kind)
        e.configure("alice", strategy="variable")
        e.record("alice", "huge dump " + "y " * 900, layer=Layer.L0, source=Source.TOOL_LOG)
        kinds.append(e.build("alice").kind)
        e.record(
            "bob", "bob found the loader ignores TZ", layer=Layer.L2, source=Source.WORKER_FINDING
        )
        e.build("bob", strategy="variable")
        kinds.append(e.rebuild("alice").kind)
        # a context-limit error refreshes and learns the window the provider stated (200000:
        # our 465-token prompt is not what it counted, so no tokenizer scaling)
        outcome = e.on_turn_error("alice", ANTHROPIC_TOO_LONG)
        assert outcome.result is not None
        kinds.append(outcome.result.kind)
        e.record("alice", "after the refresh", layer=Layer.L0, source=Source.TOOL_LOG)
        kinds.append(e.build("alice", budget=5000).kind)  # far below the learned window
    finally:
        e.close()
    return kinds


@pytest.fixture(scope="module")
def original(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, list[str]]:
    path = tmp_path_factory.mktemp("rederive") / "original.db"
    url = f"sqlite:///{path}"
    return url, _scenario(url)


@pytest.fixture(scope="module")
def records(original: tuple[str, list[str]]) -> list[Recorded]:
    with open_ledger(original[0], must_exist=True) as ledger:
        return list(ledger.read_all())


def keep(rec: Recorded) -> ev.Event:
    return rec.event


def copy_log(records: list[Recorded], url: str, tamper: Tamper = keep) -> Ledger:
    """A fresh ledger at *url* holding the same events in the same order, one tampered with."""
    ledger = open_ledger(url)
    for rec in records:
        ledger.append(rec.stream_id, [tamper(rec)], expected_version=rec.version - 1)
    return ledger


def builds_of(records: list[Recorded], agent_id: str) -> list[Recorded]:
    return [
        r
        for r in records
        if isinstance(r.event, ev.ContextPackBuilt) and r.event.agent_id == agent_id
    ]


def starts_of(records: list[Recorded], agent_id: str) -> list[Recorded]:
    return [
        r
        for r in records
        if isinstance(r.event, ev.ContextBuildingStarted) and r.event.agent_id == agent_id
    ]


# --- the untampered log ---------------------------------------------------------------------------


def test_every_build_of_a_real_engine_re_derives(
    original: tuple[str, list[str]], records: list[Recorded]
) -> None:
    _, kinds = original
    assert kinds == [
        "initial",
        "append",
        "append",
        "append",
        "rebuild",
        "rebuild",
        "initial",
        "append",
    ]
    strategies = [
        r.event.strategy
        for r in builds_of(records, "alice")
        if isinstance(r.event, ev.ContextPackBuilt)
    ]
    assert isinstance(records[0].event, ev.AgentRegistered)
    assert strategies == [
        "variable",
        "layered",
        "summary",
        "full_history",
        *["variable"] * 4,
    ]
    overrides = [
        r.event.overrides
        for r in starts_of(records, "alice")
        if isinstance(r.event, ev.ContextBuildingStarted)
    ]
    assert overrides == [(), (), (), ("strategy",), (), (), (), ("budget",)]
    last = starts_of(records, "alice")[-1].event
    assert isinstance(last, ev.ContextBuildingStarted)
    assert last.request is not None
    assert (last.generation, last.request.budget) == (4, 5000)  # the 200k window does not cap it
    report = rederive(records)
    assert (report.builds, report.rederived) == (10, 10)  # alice 8, bob 2
    assert (report.mismatches, report.not_rederivable) == (0, 0)
    assert report.mismatch_details == ()
    assert report.not_rederivable_reasons == {}


def test_an_untampered_copy_re_derives_and_the_cli_agrees(
    records: list[Recorded], tmp_path: Path
) -> None:
    copy_log(records, f"sqlite:///{tmp_path / 'copy.db'}").close()
    out = run("audit", "--store", "sqlite:///copy.db", "--rederive", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert (report["builds"], report["rederived"], report["mismatches"]) == (10, 10, 0)
    assert (report["not_rederivable"], report["clean"]) == (0, True)


# --- a tampered selection hash --------------------------------------------------------------------


def test_a_tampered_selection_hash_is_one_mismatch_naming_the_build(
    records: list[Recorded], tmp_path: Path
) -> None:
    target = builds_of(records, "alice")[2]  # the summary append
    assert isinstance(target.event, ev.ContextPackBuilt)
    victim = target.event

    def tamper(rec: Recorded) -> ev.Event:
        if rec is target:
            return msgspec.structs.replace(victim, selection_hash="0" * 64)
        return rec.event

    url = f"sqlite:///{tmp_path / 'tampered.db'}"
    with copy_log(records, url, tamper) as ledger:
        report = rederive(ledger.read_all())
    assert (report.builds, report.rederived, report.mismatches) == (10, 10, 1)
    assert report.not_rederivable == 0
    (m,) = report.mismatch_details
    assert (m.agent_id, m.generation, m.pack_id) == ("alice", 1, victim.pack_id)
    assert m.position == target.position  # copied in order: same positions
    # only the hash was changed: the decisions folded from the log equal the re-derived ones
    assert m.first_difference == "the selection hash differs with equal decisions"

    out = run("audit", "--store", "sqlite:///tampered.db", "--rederive", "--json", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.startswith("ctxledger: error:")
    report_json = json.loads(out.stdout)
    assert (report_json["mismatches"], report_json["clean"]) == (1, False)
    assert report_json["mismatch_details"][0]["agent_id"] == "alice"
    assert report_json["mismatch_details"][0]["pack_id"] == victim.pack_id
    # the auditor also sees a delta that no longer rebuilds its hash
    assert [(v["rule"], v["agent_id"]) for v in report_json["violations"]] == [
        ("selection_hash", "alice")
    ]


def test_a_tampered_decision_names_the_first_differing_item(
    records: list[Recorded], tmp_path: Path
) -> None:
    """The manual rebuild's pack records every decision of the new generation: mark its two
    smallest unpinned included ids dropped and make the hash agree, so only re-deriving can
    tell."""
    target = builds_of(records, "alice")[5]
    assert isinstance(records[records.index(target) - 1].event, ev.GenerationRefreshed)
    victim = target.event
    assert isinstance(victim, ev.ContextPackBuilt)
    pinned = {
        r.event.item.id
        for r in records
        if isinstance(r.event, ev.ItemRecorded) and (r.event.item.pinned or r.event.item.mandatory)
    }
    original = {d.item_id: d for d in victim.decisions}
    assert selection_hash(original) == victim.selection_hash  # a rebuild's delta is complete
    kept = sorted(k for k, d in original.items() if d.action != "dropped" and k not in pinned)
    gone = sorted(k for k, d in original.items() if d.action == "dropped")
    assert kept
    assert gone
    # one item in the prompt marked dropped, one dropped item marked in: two differences
    flips = {
        kept[0]: ("dropped", "tampered"),
        gone[0]: ("included", "tampered"),
    }
    first, second = sorted(flips)
    tampered = {
        k: (msgspec.structs.replace(d, action=flips[k][0], reason=flips[k][1]) if k in flips else d)
        for k, d in original.items()
    }
    forged = msgspec.structs.replace(
        victim, decisions=tuple(tampered.values()), selection_hash=selection_hash(tampered)
    )

    def tamper(rec: Recorded) -> ev.Event:
        return forged if rec is target else rec.event

    with copy_log(records, "memory://", tamper) as ledger:
        copied = list(ledger.read_all())
    assert audit([(r.position, r.event) for r in copied]) == []  # consistent on its face
    report = rederive(copied)
    assert (report.builds, report.rederived, report.mismatches) == (10, 10, 1)
    (m,) = report.mismatch_details
    assert (m.agent_id, m.generation, m.pack_id) == ("alice", victim.generation, victim.pack_id)
    assert victim.generation == 3  # 1 → 2 by the budget rebuild, 2 → 3 by the manual one
    was = original[first]
    assert m.first_difference == (
        f"item {first}: recorded {flips[first][0]}/tampered, re-derived {was.action}/{was.reason}"
    )
    assert second not in m.first_difference

    copy_log(records, f"sqlite:///{tmp_path / 'forged.db'}", tamper).close()
    out = run("audit", "--store", "sqlite:///forged.db", "--rederive", cwd=tmp_path)
    assert out.returncode == 1
    assert (
        f"1 builds re-derive differently; first: agent alice generation 3 ({victim.pack_id}): "
        f"item {first}: recorded {flips[first][0]}/tampered"
    ) in out.stderr


# --- builds that cannot be re-derived -------------------------------------------------------------


def test_another_planner_version_is_not_rederivable_never_equal(records: list[Recorded]) -> None:
    target = starts_of(records, "bob")[0]
    started = target.event
    assert isinstance(started, ev.ContextBuildingStarted)
    assert started.planner_version == PLANNER_VERSION == 4

    def tamper(rec: Recorded) -> ev.Event:
        if rec is target:
            return msgspec.structs.replace(started, planner_version=999)
        return rec.event

    with copy_log(records, "memory://", tamper) as ledger:
        report = rederive(ledger.read_all())
    assert (report.builds, report.rederived) == (10, 9)
    assert (report.mismatches, report.not_rederivable) == (0, 1)
    assert report.not_rederivable_reasons == {"planner version 999 (this is 4)": 1}


def test_a_build_without_a_recorded_request_is_not_rederivable(records: list[Recorded]) -> None:
    targets = {r.position for r in starts_of(records, "alice")[:2]}

    def tamper(rec: Recorded) -> ev.Event:
        if rec.position in targets:
            assert isinstance(rec.event, ev.ContextBuildingStarted)
            return msgspec.structs.replace(rec.event, request=None)
        return rec.event

    with copy_log(records, "memory://", tamper) as ledger:
        report = rederive(ledger.read_all())
    assert (report.builds, report.rederived) == (10, 8)
    assert (report.mismatches, report.not_rederivable) == (0, 2)
    assert report.not_rederivable_reasons == {"no recorded request": 2}


def test_an_unknown_tokenizer_is_not_rederivable(records: list[Recorded]) -> None:
    target = starts_of(records, "bob")[-1]

    def tamper(rec: Recorded) -> ev.Event:
        if rec is target:
            assert isinstance(rec.event, ev.ContextBuildingStarted)
            return msgspec.structs.replace(rec.event, counter="my-own-counter")
        return rec.event

    with copy_log(records, "memory://", tamper) as ledger:
        report = rederive(ledger.read_all())
    assert (report.builds, report.rederived, report.mismatches) == (10, 9, 0)
    assert report.not_rederivable_reasons == {"tokenizer 'my-own-counter' not available": 1}


def test_a_pack_without_its_started_is_not_rederivable(records: list[Recorded]) -> None:
    """A log cut so that alice's first outcome follows no Started (an older ledger)."""
    first_start = starts_of(records, "alice")[0]
    build = builds_of(records, "alice")[0]
    lone = [*records[: records.index(first_start)], build]
    assert not any(isinstance(r.event, ev.ContextBuildingStarted) for r in lone)
    report = rederive(lone)
    assert (report.builds, report.rederived, report.mismatches, report.not_rederivable) == (
        1,
        0,
        0,
        1,
    )
    assert report.not_rederivable_reasons == {"no recorded request": 1}


# --- first_difference -----------------------------------------------------------------------------


def _d(item_id: str, action: str, reason: str = "") -> Decision:
    return msgspec.convert({"item_id": item_id, "action": action, "reason": reason}, type=Decision)


def test_first_difference_names_the_smallest_differing_id() -> None:
    recorded = {
        "c": _d("c", "included"),
        "b": _d("b", "dropped", "over_budget"),
        "a": _d("a", "included"),
    }
    rederived = {
        "a": _d("a", "included"),
        "b": _d("b", "included"),
        "c": _d("c", "dropped", "low_score"),
    }
    assert first_difference(recorded, rederived) == (
        "item b: recorded dropped/over_budget, re-derived included/"
    )


def test_first_difference_says_absent_for_a_missing_side() -> None:
    assert first_difference({"a": _d("a", "included")}, {}) == (
        "item a: recorded included/, re-derived absent"
    )
    assert first_difference({}, {"z": _d("z", "clipped", "scope_clip")}) == (
        "item z: recorded absent, re-derived clipped/scope_clip"
    )


def test_first_difference_of_equal_selections_blames_the_hash() -> None:
    same = {"a": _d("a", "included")}
    assert first_difference(same, dict(same)) == "the selection hash differs with equal decisions"


def test_first_difference_cuts_a_long_id_at_80_characters() -> None:
    long_id = "x" * 200
    text = first_difference({long_id: _d(long_id, "included")}, {})
    assert text == f"item {'x' * 80}: recorded included/, re-derived absent"
