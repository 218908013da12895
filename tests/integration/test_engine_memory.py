"""Engine + project memory: promotion keeps verified=false, only an explicit verify makes an
entry recallable, recall is fresh per view, and turning recall off removes the group."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import ContextEngine, EngineSettings
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.memory.catalog import MemoryCatalog
from ctxledger.adapters.memory.freshness import GitWorktreeProbe
from ctxledger.adapters.memory.project import ProjectMemory
from ctxledger.domain import events as ev
from ctxledger.domain.errors import InvalidInputError, MemoryIntakeError
from ctxledger.domain.model import AgentIdentity, Layer, Source
from ctxledger.domain.recall import RECALL_HEADER, RecallSettings
from ctxledger.projections.audit import audit


@pytest.fixture
def setup(tmp_path: Path) -> tuple[ContextEngine, MemoryCatalog, Path]:
    ws = tmp_path / "ws"
    (ws / "auth").mkdir(parents=True)
    (ws / "auth" / "session.py").write_text("def refresh(): ...\n", encoding="utf-8")
    catalog = MemoryCatalog.open(tmp_path / "catalog.db")
    memory = ProjectMemory(
        catalog,
        settings=RecallSettings(enabled=True),
        probe_for=lambda a: GitWorktreeProbe(a.workspace),
    )
    engine = open_engine(
        open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}"),
        clock=SteppingClock(datetime(2026, 3, 1, tzinfo=UTC), timedelta(seconds=1)),
        settings=EngineSettings(session_id="s"),
        memory=memory,
    )
    for agent_id, role in (("p", "primary"), ("probe", "probe")):
        engine.register_agent(
            AgentIdentity(agent_id=agent_id, role=role, task="t", workspace=str(ws), budget=4000)
        )
        engine.record(
            agent_id,
            "Objective: fix refresh",
            layer=Layer.L1,
            source=Source.USER_REQUIREMENT,
            pinned=True,
        )
    return engine, catalog, ws


def test_promote_verify_recall_flow(setup: tuple[ContextEngine, MemoryCatalog, Path]) -> None:
    engine, catalog, ws = setup
    finding = engine.record(
        "p",
        "Root cause: auth/session.py refresh uses naive datetimes",
        layer=Layer.L2,
        source=Source.WORKER_FINDING,
        files=("auth/session.py",),
    )
    memory_id = engine.promote("p", finding.id)
    assert catalog.get(memory_id).verified is False
    unverified = engine.build("p")
    assert memory_id not in unverified.prompt.text  # candidates are never recalled
    engine.verify_memory(memory_id, by="reviewer")
    assert catalog.get(memory_id).state == "verified"
    recalled = engine.build("p")
    assert RECALL_HEADER in recalled.prompt.dynamic
    assert memory_id in recalled.prompt.dynamic
    assert memory_id not in recalled.prompt.static  # recall lives in VOLATILE only
    assert memory_id not in engine.build("probe").prompt.text  # probes never recall
    # edit the cited file: the entry is stale for this view and dropped
    (ws / "auth" / "session.py").write_text("def refresh(): return 1\n", encoding="utf-8")
    stale = engine.build("p")
    assert memory_id not in stale.prompt.text
    events = [r.event for r in engine.ledger.read_all()]
    rendered = [e for e in events if isinstance(e, ev.RecallRendered) and e.agent_id == "p"]
    assert [memory_id in e.memory_ids for e in rendered] == [False, True, False]
    promoted = next(e for e in events if isinstance(e, ev.MemoryPromoted))
    assert promoted.verified is False
    assert all(
        "naive datetimes" not in str(e)
        for e in events
        if isinstance(e, (ev.MemoryPromoted, ev.MemoryVerified))
    )
    assert audit([(r.position, r.event) for r in engine.ledger.read_all()]) == []
    engine.close()


def test_recall_off_removes_the_previous_group(
    setup: tuple[ContextEngine, MemoryCatalog, Path],
) -> None:
    engine, _, _ = setup
    finding = engine.record(
        "p",
        "Convention: run make test before pushing",
        layer=Layer.L3,
        source=Source.VERIFIED_FACT,
        verified=True,
    )
    memory_id = engine.promote("p", finding.id)
    engine.verify_memory(memory_id)
    assert memory_id in engine.build("p").prompt.text
    engine.set_recall(False, by="operator")  # recorded: RecallSwitched
    assert engine.recall_enabled is False
    off = engine.build("p")
    assert memory_id not in off.prompt.text
    last = [r.event for r in engine.ledger.read_all() if isinstance(r.event, ev.RecallRendered)][-1]
    assert last.memory_ids == ()
    engine.close()


def test_promotion_refuses_secrets_and_writes_nothing(
    setup: tuple[ContextEngine, MemoryCatalog, Path],
) -> None:
    engine, catalog, _ = setup
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    engine.configure("p", secrets="allow")  # the ledger keeps it; the catalog must not
    item = engine.record(
        "p", f"deploy with token {token}", layer=Layer.L2, source=Source.WORKER_FINDING
    )
    before = engine.ledger.max_position()
    with pytest.raises(MemoryIntakeError) as info:
        engine.promote("p", item.id)
    assert token not in str(info.value)
    assert engine.ledger.max_position() == before
    assert catalog.list() == []
    engine.close()


def test_engine_without_catalog_refuses_promotion(tmp_path: Path) -> None:
    engine = open_engine(open_ledger("memory://"), clock=SteppingClock())
    engine.register_agent(AgentIdentity(agent_id="a", role="primary", budget=100))
    item = engine.record("a", "x", layer=Layer.L2, source=Source.WORKER_FINDING)
    with pytest.raises(InvalidInputError, match="no project-memory catalog"):
        engine.promote("a", item.id)


def _git(ws: Path, *args: str) -> str:
    import subprocess

    done = subprocess.run(
        ["git", "-C", str(ws), "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
        capture_output=True,
        check=True,
        text=True,
    )
    return done.stdout.strip()


def test_promotion_captures_the_command_and_the_commit_so_old_evidence_goes_stale(
    tmp_path: Path,
) -> None:
    """Seed 000's 30-day rule reaches memory promoted through the engine: the item's command
    (``tool_signature``) is its command evidence, run when the item was observed, and the
    worktree's HEAD is its commit; 31 days later the entry is stale for every view."""
    ws = tmp_path / "ws"
    (ws / "auth").mkdir(parents=True)
    (ws / "auth" / "session.py").write_text("def refresh(): ...\n", encoding="utf-8")
    _git(ws, "init", "-q")
    _git(ws, "add", ".")
    _git(ws, "commit", "-q", "-m", "start")
    head = _git(ws, "rev-parse", "HEAD")
    catalog = MemoryCatalog.open(tmp_path / "catalog.db")
    memory = ProjectMemory(
        catalog,
        settings=RecallSettings(enabled=True),
        probe_for=lambda a: GitWorktreeProbe(a.workspace),
    )
    start = datetime(2026, 3, 1, tzinfo=UTC)
    clock = SteppingClock(start, timedelta(seconds=1))
    engine = open_engine(
        open_ledger(f"sqlite:///{tmp_path / 'ledger.db'}"),
        clock=clock,
        settings=EngineSettings(session_id="s"),
        memory=memory,
    )
    engine.register_agent(
        AgentIdentity(agent_id="p", role="primary", task="t", workspace=str(ws), budget=4000)
    )
    finding = engine.record(
        "p",
        "pytest auth: 3 passed once refresh used aware datetimes",
        layer=Layer.L2,
        source=Source.WORKER_FINDING,
        files=("auth/session.py",),
        tool_signature="pytest -q tests/test_auth.py",
    )
    memory_id = engine.promote("p", finding.id)
    evidence = catalog.get(memory_id).evidence
    assert evidence.commit == head
    [command] = evidence.commands
    assert (command.cmd, command.exit_code) == ("pytest -q tests/test_auth.py", 0)
    assert command.ran_at == finding.observed_at
    engine.verify_memory(memory_id, by="reviewer")
    assert memory_id in engine.build("p").prompt.dynamic  # fresh: recalled
    clock.set(start + timedelta(days=31))
    assert memory_id not in engine.build("p").prompt.text
    assert catalog.get(memory_id).state == "stale"
    marked = [
        r.event for r in engine.ledger.read_all() if isinstance(r.event, ev.MemoryMarkedStale)
    ]
    assert [e.memory_id for e in marked] == [memory_id]
    engine.close()
    catalog.close()
