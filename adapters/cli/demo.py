"""`make demo`: a scripted orchestrator session with a Primary and a Worker, written to
``./.ctxledger/demo.db`` through the real engine, ending with the inspector view."""

from __future__ import annotations

import json
import shutil
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.markup import escape

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import ContextEngine, EngineSettings, TurnErrorOutcome
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.memory.catalog import MemoryCatalog
from ctxledger.adapters.memory.freshness import GitWorktreeProbe
from ctxledger.adapters.memory.project import ProjectMemory
from ctxledger.domain.errors import OverwriteRefusedError
from ctxledger.domain.model import AgentIdentity, Durability, Item, Layer, Source
from ctxledger.domain.recall import RecallSettings
from ctxledger.projections.audit import audit

__all__ = ["run_demo"]

START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)

SESSION_PY = '''"""Login sessions."""
from datetime import datetime, timedelta


class Session:
    def __init__(self, user: str, ttl: timedelta) -> None:
        self.user = user
        self.expires = datetime.utcnow() + ttl  # naive: compared with aware times below

    def refresh(self, now: datetime) -> bool:
        return now < self.expires
'''

PYTEST_FAILURE = """============================= test session starts ==============================
collected 14 items

tests/test_session.py ....F.........                                     [100%]

=================================== FAILURES ===================================
__________________________ test_refresh_expired_session ___________________________

    def test_refresh_expired_session():
        s = Session("ada", ttl=timedelta(seconds=-1))
>       assert s.refresh(datetime.now(timezone.utc)) is False

tests/test_session.py:41:
_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _
auth/session.py:11: in refresh
    return now < self.expires
E   TypeError: can't compare offset-naive and offset-aware datetimes

auth/session.py:11: TypeError
=========================== short test summary info ============================
FAILED tests/test_session.py::test_refresh_expired_session - TypeError: can't compare offset-naive and offset-aware datetimes
========================= 1 failed, 13 passed in 0.31s ========================="""


def _grep_dump(n: int) -> str:
    return "\n".join(
        f"auth/module_{i % 17}.py:{10 + i}:    timeout = settings.get('timeout_{i}', {30 + i})"
        for i in range(n)
    )


MARKER = ".ctxledger-demo"
"""The file beside the demo's files naming the ledgers ``ctxledger demo`` wrote there, one a
line: only what it names (with the catalog and workspace beside it) is replaced by a re-run."""
_SIDE_FILES = ("", "-wal", "-shm", "-locks", ".head")
"""A SQLite store's file and the files SQLite and ctxledger keep beside it."""


def _refuse_foreign(root: Path, ledger_path: Path, force: bool) -> None:
    """Refuse to replace what the demo did not create: a ledger the marker does not name, or
    a catalog or workspace without a marker (``--force`` replaces them)."""
    marker = root / MARKER
    made = set(marker.read_text(encoding="utf-8").splitlines()) if marker.is_file() else set()
    theirs = [
        p
        for p in (ledger_path, root / "catalog.db", root / "demo-workspace")
        if (p.exists() or p.is_symlink())
        and not force
        and (p.name not in made if p == ledger_path else not made)
    ]
    if theirs:
        raise OverwriteRefusedError(
            f"{theirs[0]} exists and was not written by `ctxledger demo`; the demo replaces "
            "only its own files (pass --force to replace it, or choose another --path)"
        )


def _remove_store(path: Path) -> None:
    for suffix in _SIDE_FILES:
        Path(f"{path}{suffix}").unlink(missing_ok=True)


def _prepare(root: Path, ledger_path: Path, *, force: bool) -> tuple[Path, Path]:
    root.mkdir(parents=True, exist_ok=True)
    _refuse_foreign(root, ledger_path, force)
    catalog_path = root / "catalog.db"
    for p in (ledger_path, catalog_path):
        _remove_store(p)
    marker = root / MARKER
    made = set(marker.read_text(encoding="utf-8").splitlines()) if marker.is_file() else set()
    marker.write_text("".join(f"{n}\n" for n in sorted({*made, ledger_path.name})), "utf-8")
    workspace = root / "demo-workspace"
    shutil.rmtree(workspace, ignore_errors=True)
    (workspace / "auth").mkdir(parents=True)
    (workspace / "auth" / "session.py").write_text(SESSION_PY, encoding="utf-8")
    return catalog_path, workspace.resolve()


def run_demo(
    path: Path,
    *,
    console: Console,
    as_json: bool = False,
    encrypt: bool | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Run the scripted session into *path* (its folder also holds the catalog and a tiny
    demo workspace). What an earlier demo wrote there is replaced (with its ``.head``);
    anything else refuses with OverwriteRefusedError unless *force*. *encrypt*: as
    ``open_ledger``."""
    ledger_path = path
    catalog_path, workspace = _prepare(path.parent, ledger_path, force=force)
    url = f"sqlite:///{ledger_path}"
    say = (lambda *_: None) if as_json else console.print
    catalog = MemoryCatalog.open(catalog_path)
    memory = ProjectMemory(
        catalog,
        settings=RecallSettings(enabled=True),
        probe_for=lambda agent: GitWorktreeProbe(agent.workspace),
    )
    engine = open_engine(
        url,
        clock=SteppingClock(START, timedelta(seconds=7)),
        settings=EngineSettings(session_id="demo"),
        memory=memory,
        encrypt=encrypt,
    )
    try:
        summary = _script(engine, workspace, say)
        summary["encrypted"] = engine.ledger.keyring.encrypted
        engine.checkpoint()
        records = [(r.position, r.event) for r in engine.ledger.read_all()]
    finally:
        engine.close()
        catalog.close()
    violations = audit(records)
    summary.update(
        {
            "store": url,
            "catalog": str(catalog_path),
            "events": len(records),
            "audit_violations": len(violations),
        }
    )
    if as_json:
        sys.stdout.write(json.dumps(summary, sort_keys=True) + "\n")
        return summary
    from ctxledger.adapters.cli.inspect import print_view, read_states
    from ctxledger.projections.inspector import inspect_agent

    with open_ledger(url) as ledger:
        states = read_states(ledger)
    console.rule("inspector · primary-1 (current generation)")
    print_view(inspect_agent(states, "primary-1"))
    console.rule("next")
    console.print(f"{len(records)} events in {url} · audit: {violations or 'clean'}", markup=False)
    for cmd in (
        f"ctxledger inspect --store {url} --agent primary-1 --generation 1",
        f"ctxledger generations --store {url} --agent primary-1",
        f"ctxledger diff --store {url} --agent primary-1 1 2",
        f"ctxledger replay --store {url} --verify --json",
        f"ctxledger audit --store {url}",
        f"ctxledger memory list --catalog {catalog_path}",
    ):
        console.print(f"  .venv/bin/{cmd}", markup=False)
    return summary


def _register(engine: ContextEngine, workspace: Path) -> None:
    """The Primary and its Worker, each with its role instruction."""
    primary = AgentIdentity(
        agent_id="primary-1",
        role="primary",
        task="fix-auth-timeout",
        model="claude-sonnet",
        workspace=str(workspace),
        budget=3000,
    )
    worker = AgentIdentity(
        agent_id="worker-1",
        role="worker",
        parent="primary-1",
        task="investigate-session-refresh",
        model="claude-haiku",
        workspace=str(workspace),
        budget=2500,
    )
    engine.register_agent(primary)
    engine.register_agent(worker)
    role_text = "You are the Primary coding agent. Plan, delegate to workers, and verify every claim with a command."
    for agent in (primary, worker):
        engine.record(
            agent.agent_id,
            role_text
            if agent is primary
            else "You are a Worker. Investigate and report findings with exact paths and commands.",
            layer=Layer.L1,
            source=Source.ROLE_INSTRUCTION,
            durability=Durability.DURABLE,
        )


def _primary_starts(engine: ContextEngine, say: Any) -> Item:
    """Step 1: the objective, a steering constraint, a grep dump and the first pack."""
    objective = engine.record(
        "primary-1",
        "Objective: users are logged out early; fix the session refresh in auth/session.py. Acceptance: tests/test_session.py passes.",
        layer=Layer.L1,
        source=Source.USER_REQUIREMENT,
        pinned=True,
        mandatory=True,
        durability=Durability.DURABLE,
        files=("auth/session.py",),
    )
    engine.add_steering_note(
        "primary-1", "Constraint: do not change the public API of auth.Session."
    )
    say("[bold]1.[/bold] Primary records its objective, a pinned constraint and a grep dump")
    engine.record(
        "primary-1",
        _grep_dump(120),
        layer=Layer.L0,
        source=Source.TOOL_LOG,
        tool_signature="grep -rn timeout auth/",
    )
    first = engine.build("primary-1")
    say(
        f"   pack 1: {first.pack.budget_used}/{first.pack.budget_limit} tokens, generation {first.generation}"
    )
    engine.report_usage(
        "primary-1",
        {
            "input_tokens": first.pack.budget_used,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 0,
            "output_tokens": 120,
        },
    )
    return objective


def _worker_investigates(engine: ContextEngine, say: Any) -> Item:
    """Step 2: a file view, a failing test and a finding, built into the worker's pack."""
    say("[bold]2.[/bold] Worker investigates: a file view, a failing test, a finding")
    engine.record(
        "worker-1",
        "Task from primary-1: find why sessions expire early.",
        layer=Layer.L1,
        source=Source.USER_REQUIREMENT,
        pinned=True,
        mandatory=True,
    )
    engine.record(
        "worker-1",
        SESSION_PY,
        layer=Layer.L0,
        source=Source.REPOSITORY_SOURCE,
        files=("auth/session.py",),
        symbols=("Session.refresh",),
        group="view-session",
    )
    engine.build("worker-1")
    engine.record(
        "worker-1",
        "$ pytest tests/test_session.py -q\n" + PYTEST_FAILURE,
        layer=Layer.L1,
        source=Source.TEST_RESULT,
        failure=True,
        files=("tests/test_session.py", "auth/session.py"),
        tool_signature="pytest tests/test_session.py",
        group="run-tests",
    )
    finding = engine.record(
        "worker-1",
        "Root cause: auth/session.py:8 stores a naive datetime (datetime.utcnow()) and Session.refresh compares it with an aware one. Fix: datetime.now(timezone.utc). Verify: pytest tests/test_session.py -q",
        layer=Layer.L2,
        source=Source.WORKER_FINDING,
        files=("auth/session.py",),
        symbols=("Session.refresh",),
    )
    worker_pack = engine.build("worker-1")
    say(
        f"   worker pack: {worker_pack.pack.budget_used} tokens; decisions {len(worker_pack.pack.decisions)}"
    )
    return finding


def _worker_reports(engine: ContextEngine, say: Any) -> None:
    """Step 3: the worker's transcript as a parent report in the Primary's next pack."""
    say(
        "[bold]3.[/bold] The worker's transcript is compressed into a parent report for the Primary"
    )
    report = engine.report_to_parent("worker-1")
    say(f"   parent report: {report.token_count} tokens")
    second = engine.build("primary-1")
    engine.report_usage(
        "primary-1",
        {
            "input_tokens": 40,
            "cache_read_input_tokens": max(0, second.pack.budget_used - 40),
            "cache_creation_input_tokens": 0,
            "output_tokens": 80,
        },
    )


def _context_limit(engine: ContextEngine, say: Any) -> TurnErrorOutcome:
    """Step 4: more tool output, then a context-limit error refreshes the Primary."""
    say("[bold]4.[/bold] More tool output, then the model rejects the prompt: context-limit error")
    for i in range(3):
        engine.record(
            "primary-1",
            f"$ cat auth/module_{i}.py\n" + _grep_dump(40),
            layer=Layer.L0,
            source=Source.REPOSITORY_SOURCE,
            files=(f"auth/module_{i}.py",),
            tool_signature=f"cat auth/module_{i}.py",
        )
        engine.build("primary-1")
    outcome = engine.on_turn_error(
        "primary-1",
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 210431 tokens > 200000 maximum",
            },
        },
    )
    say(f"   [green]{escape(outcome.message or '')}[/green]")
    return outcome


def _script(engine: ContextEngine, workspace: Path, say: Any) -> dict[str, Any]:
    _register(engine, workspace)
    objective = _primary_starts(engine, say)
    finding = _worker_investigates(engine, say)
    _worker_reports(engine, say)
    outcome = _context_limit(engine, say)
    say("[bold]5.[/bold] The finding is promoted to project memory, verified, and recalled")
    memory_id = engine.promote("worker-1", finding.id)
    engine.verify_memory(memory_id, by="primary-1")
    recalled = engine.build("primary-1", latest_user_input="Apply the fix and run the tests.")
    say(
        f"   recalled into the next prompt: {memory_id}"
        if memory_id in recalled.prompt.text
        else "   (recall group empty)"
    )
    engine.report_usage(
        "primary-1",
        {
            "input_tokens": 60,
            "cache_read_input_tokens": max(0, recalled.pack.budget_used - 60),
            "cache_creation_input_tokens": 0,
            "output_tokens": 90,
        },
    )
    return {
        "objective_id": objective.id,
        "refresh_message": outcome.message,
        "memory_id": memory_id,
        "recalled": memory_id in recalled.prompt.text,
        "generations": {a: engine.agent(a).current.number for a in ("primary-1", "worker-1")},
        "final_pack": msgspec.to_builtins(
            {"tokens": recalled.pack.budget_used, "budget": recalled.pack.budget_limit}
        ),
    }
