"""A ledger written by the real engine for the web inspector's tests: appends, a budget
rebuild, a context-limit refresh (Anthropic "prompt is too long"), usage reports."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, replace
from pathlib import Path

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import EngineSettings
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.memory.catalog import MemoryCatalog
from ctxledger.domain.model import AgentIdentity, Layer, Source
from ctxledger.domain.prompt import PromptParts

__all__ = ["AGENT", "PROMPT_TOO_LONG", "EngineStore", "build_engine_store"]

AGENT = "primary-1"
PROMPT_TOO_LONG = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 210000 tokens > 200000 maximum",
    },
}


@dataclass(frozen=True)
class EngineStore:
    """Where the store is and the ids the tests act on."""

    url: str
    path: Path
    catalog: Path
    objective: str
    finding: str
    hypothesis: str
    prompts: tuple[tuple[str, PromptParts], ...] = ()
    """(pack id, prompt) of every build, as the engine's BuildResult had it."""


def build_engine_store(path: Path) -> EngineStore:
    """Write the scripted session to a fresh SQLite ledger at *path*; its folder also gets
    an empty project-memory catalog (``catalog.db``) and the agent's workspace."""
    url = f"sqlite:///{path}"
    workspace = path.parent / "workspace"
    (workspace / "auth").mkdir(parents=True, exist_ok=True)
    (workspace / "auth" / "session.py").write_text("def refresh(): ...\n", encoding="utf-8")
    catalog = path.parent / "catalog.db"
    MemoryCatalog.open(catalog).close()
    engine = open_engine(
        open_ledger(url), clock=SteppingClock(), settings=EngineSettings(session_id="web")
    )
    try:
        engine.register_agent(
            AgentIdentity(
                agent_id=AGENT,
                role="primary",
                task="fix-auth-timeout",
                model="claude-sonnet",
                workspace=str(workspace.resolve()),
                budget=400,
            )
        )
        objective = engine.record(
            AGENT,
            "Objective: fix the login timeout in auth/session.py; keep the API unchanged.",
            layer=Layer.L1,
            source=Source.USER_REQUIREMENT,
            pinned=True,
            mandatory=True,
        )
        for i in range(5):
            engine.record(
                AGENT,
                f"grep {i}: " + "auth/session.py:88 timeout " * 10,
                layer=Layer.L0,
                source=Source.TOOL_LOG,
            )
        finding = engine.record(
            AGENT,
            "Root cause: Session.refresh compares naive and aware datetimes.",
            layer=Layer.L2,
            source=Source.WORKER_FINDING,
            files=("auth/session.py",),
            symbols=("Session.refresh",),
        )
        hypothesis = engine.record(
            AGENT,
            "Maybe the token TTL is read in minutes instead of seconds.",
            layer=Layer.L2,
            source=Source.UNVERIFIED_HYPOTHESIS,
        )
        results = [engine.build(AGENT, budget=400)]
        engine.report_usage(
            AGENT,
            {
                "input_tokens": 300,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 200,
                "output_tokens": 20,
            },
        )
        engine.record(AGENT, "pytest -q → 1 failed", layer=Layer.L0, source=Source.TEST_RESULT)
        results.append(engine.build(AGENT))  # appends within generation 1
        engine.report_usage(
            AGENT,
            {
                "input_tokens": 40,
                "cache_read_input_tokens": 260,
                "cache_creation_input_tokens": 10,
                "output_tokens": 20,
            },
        )
        for i in range(5):
            engine.record(
                AGENT,
                f"test log {i}: " + "FAILED test_refresh_expired AssertionError " * 8,
                layer=Layer.L0,
                source=Source.TEST_RESULT,
                failure=True,
            )
        results.append(engine.build(AGENT))  # over budget: a rebuild into generation 2
        engine.report_usage(
            AGENT,
            {
                "input_tokens": 100,
                "cache_read_input_tokens": 150,
                "cache_creation_input_tokens": 50,
                "output_tokens": 20,
            },
        )
        outcome = engine.on_turn_error(AGENT, PROMPT_TOO_LONG)  # refresh into generation 3
        assert outcome.result is not None
        results.append(outcome.result)
        engine.report_usage(
            AGENT,
            {
                "input_tokens": 60,
                "cache_read_input_tokens": 0,
                "cache_creation_input_tokens": 40,
                "output_tokens": 20,
            },
        )
    finally:
        engine.close()
    return EngineStore(
        url=url,
        path=path,
        catalog=catalog,
        objective=objective.id,
        finding=finding.id,
        hypothesis=hypothesis.id,
        prompts=tuple((r.pack.id, r.prompt) for r in results),
    )


def copy_engine_store(template: EngineStore, folder: Path) -> EngineStore:
    """A private copy of *template* (ledger and catalog, with their -wal/-shm) in *folder*."""
    target = folder / "ledger.db"
    catalog = folder / "catalog.db"
    for source, copy in ((template.path, target), (template.catalog, catalog)):
        for suffix in ("", "-wal", "-shm"):
            src = Path(f"{source}{suffix}")
            if src.exists():
                shutil.copyfile(src, f"{copy}{suffix}")
    return replace(template, url=f"sqlite:///{target}", path=target, catalog=catalog)
