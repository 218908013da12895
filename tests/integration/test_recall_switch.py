"""Recall on/off is a recorded setting (issue 39): ``set_recall`` appends ``RecallSwitched``,
and every process that opens the ledger folds it, so a second process — here a subprocess and
then an engine opened afresh on the same SQLite file, each with a catalog whose own default is
recall on — builds without recalled memory; replay, audit and ``audit --rederive`` agree."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.engine.rederive import rederive
from ctxledger.adapters.ledger.projection_runner import encode_state, replay_states
from ctxledger.adapters.memory.catalog import MemoryCatalog
from ctxledger.adapters.memory.freshness import GitWorktreeProbe
from ctxledger.adapters.memory.project import ProjectMemory
from ctxledger.domain import events as ev
from ctxledger.domain.model import AgentIdentity, Layer, Source
from ctxledger.domain.recall import RECALL_HEADER, RecallSettings
from ctxledger.projections.audit import audit
from ctxledger.projections.catalog import read_models
from tests.e2e._cli import run

START = datetime(2026, 3, 1, tzinfo=UTC)


def _engine(tmp: Path, *, start: datetime = START) -> ContextEngine:
    """An engine over the ledger with a catalog whose in-process default is recall ON."""
    memory = ProjectMemory(
        MemoryCatalog.open(tmp / "catalog.db"),
        settings=RecallSettings(enabled=True),
        probe_for=lambda a: GitWorktreeProbe(a.workspace),
    )
    return open_engine(
        f"sqlite:///{tmp / 'ledger.db'}",
        clock=SteppingClock(start, timedelta(seconds=1)),
        memory=memory,
    )


_SWITCH_OFF = """
import sys
from pathlib import Path
from datetime import UTC, datetime
sys.path.insert(0, {root!r})
from tests.integration.test_recall_switch import _engine
engine = _engine(Path({tmp!r}), start=datetime(2026, 3, 2, tzinfo=UTC))
assert engine.recall_enabled
engine.set_recall(False, by="operator")
engine.close()
"""


def test_recall_off_in_one_process_stays_off_in_the_next(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "Makefile").write_text("test:\n\tpytest\n", encoding="utf-8")
    engine = _engine(tmp_path)
    try:
        engine.register_agent(
            AgentIdentity(agent_id="p", role="primary", task="t", workspace=str(ws), budget=4000)
        )
        fact = engine.record("p", "Convention: run make test before pushing", layer=Layer.L3,
                             source=Source.VERIFIED_FACT, verified=True)  # fmt: skip
        memory_id = engine.promote("p", fact.id)
        engine.verify_memory(memory_id)
        assert engine.recall_enabled  # nothing recorded: the catalog's default
        on = engine.build("p")
        assert RECALL_HEADER in on.prompt.dynamic
        assert memory_id in on.prompt.dynamic
    finally:
        engine.close()

    # another process turns recall off for the ledger
    root = str(Path(__file__).resolve().parents[2])
    code = textwrap.dedent(_SWITCH_OFF.format(root=root, tmp=str(tmp_path)))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr

    reopened = _engine(tmp_path, start=datetime(2026, 3, 3, tzinfo=UTC))
    try:
        assert reopened.memory is not None
        assert reopened.memory.settings.enabled  # its own default says on…
        assert reopened.recall_enabled is False  # …the recorded switch says off
        off = reopened.build("p")
        assert RECALL_HEADER not in off.prompt.text
        assert memory_id not in off.prompt.text
        # switching to what is already in force records nothing
        before = reopened.ledger.max_position()
        reopened.set_recall(False)
        assert reopened.ledger.max_position() == before
        records = list(reopened.ledger.read_all())
        switches = [(r.stream_id, r.event) for r in records
                    if isinstance(r.event, ev.RecallSwitched)]  # fmt: skip
        assert [(stream, e.enabled, e.by) for stream, e in switches] == [
            ("settings/recall", False, "operator")
        ]
        groups = [r.event for r in records if isinstance(r.event, ev.RecallRendered)]
        assert [bool(g.memory_ids) for g in groups] == [True, False]  # the group was removed
        # replay rebuilds the setting; audit and rederive are clean
        states, _, _ = replay_states(reopened.ledger)
        assert read_models(states).inspector.recall_enabled is False
        assert encode_state(read_models(states)) == encode_state(reopened.states)
        assert audit([(r.position, r.event) for r in records]) == []
        report = rederive(records)
        assert (report.builds, report.rederived, report.mismatches) == (2, 2, 0)
    finally:
        reopened.close()

    # and once more, in a third engine: on again, recall is back
    third = _engine(tmp_path, start=datetime(2026, 3, 4, tzinfo=UTC))
    try:
        assert third.recall_enabled is False
        third.set_recall(True)
        assert memory_id in third.build("p").prompt.dynamic
    finally:
        third.close()
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    verify = run("replay", "--store", store, "--verify", "--json", cwd=tmp_path)
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["equal"] is True
    audited = run("audit", "--store", store, "--rederive", "--json", cwd=tmp_path)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert json.loads(audited.stdout)["mismatches"] == 0


def test_audit_flags_recall_rendered_while_switched_off() -> None:
    at = START
    log: list[ev.Event] = [
        ev.AgentRegistered(at=at, agent=AgentIdentity(agent_id="p", role="primary")),
        ev.RecallSwitched(at=at, enabled=False),
        ev.RecallRendered(at=at, agent_id="p", memory_ids=("m1",)),
        ev.RecallRendered(at=at, agent_id="p"),  # removing the group is what "off" records
        ev.RecallSwitched(at=at, enabled=True),
        ev.RecallRendered(at=at, agent_id="p", memory_ids=("m1",)),
    ]
    found = audit(enumerate(log, 1))
    assert [(v.position, v.rule) for v in found] == [(3, "recall_while_off")]
