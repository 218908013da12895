"""`make demo`: a scripted lifecycle written to a fresh SQLite ledger, then shown by replay."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ctxledger.adapters.ledger import open_ledger, stream_id_for
from ctxledger.adapters.projection_runner import ProjectionRunner, replay_states
from ctxledger.domain import events as ev
from ctxledger.domain.model import (
    AgentIdentity,
    Decision,
    Durability,
    Item,
    Layer,
    Source,
    content_hash,
    item_id_for,
)
from ctxledger.projections.context_state import ContextStates
from ctxledger.projections.generations import Generations

__all__ = ["run_demo", "scripted_session"]

SESSION = "demo-session"
START = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)


def _item(layer: Layer, source: Source, content: str, **kw: Any) -> Item:
    return Item(
        id=item_id_for(layer, source, content), layer=layer, source=source, content=content, **kw
    )


def scripted_session() -> list[ev.Event]:
    """The demo's events for one Primary agent, in order (timestamps fixed for determinism)."""
    t = iter(START + timedelta(seconds=i) for i in range(10_000))
    agent = AgentIdentity(
        agent_id="primary-1",
        role="primary",
        task="fix-auth-timeout",
        model="claude-sonnet",
        workspace="ws_demo",
        budget=8000,
        session_id=SESSION,
    )
    objective = _item(
        Layer.L1,
        Source.USER_REQUIREMENT,
        "Fix the login timeout in auth/session.py; keep the public API unchanged.",
        pinned=True,
        mandatory=True,
        durability=Durability.DURABLE,
    )
    grep = _item(
        Layer.L0,
        Source.TOOL_LOG,
        "grep -rn timeout auth/ → 14 hits",
        durability=Durability.EPHEMERAL,
    )
    failure = _item(
        Layer.L1,
        Source.TEST_RESULT,
        "FAILED tests/test_session.py::test_refresh_expired - AssertionError",
        failure=True,
        files=("tests/test_session.py",),
    )
    finding = _item(
        Layer.L2,
        Source.WORKER_FINDING,
        "Root cause: auth/session.py:88 compares naive and aware datetimes.",
        files=("auth/session.py",),
        symbols=("Session.refresh",),
    )
    decided = {
        objective.id: Decision(item_id=objective.id, action="included", tokens_after=18),
        grep.id: Decision(item_id=grep.id, action="included", tokens_after=9),
        failure.id: Decision(item_id=failure.id, action="included", tokens_after=16),
    }
    out: list[ev.Event] = [
        ev.AgentRegistered(at=next(t), agent=agent),
        ev.ItemRecorded(at=next(t), agent_id=agent.agent_id, item=objective),
        ev.ItemRecorded(at=next(t), agent_id=agent.agent_id, item=grep),
        ev.ItemRecorded(at=next(t), agent_id=agent.agent_id, item=failure),
        ev.ContextBuildingStarted(
            at=next(t), agent_id=agent.agent_id, pack_id="pack-1", session_id=SESSION
        ),
        ev.ContextPackBuilt(
            at=next(t),
            agent_id=agent.agent_id,
            pack_id="pack-1",
            budget_limit=8000,
            budget_used=43,
            decisions=tuple(decided.values()),
            included_count=3,
        ),
        ev.ContextBuildingStarted(
            at=next(t), agent_id=agent.agent_id, pack_id="pack-2", session_id=SESSION
        ),
        ev.ContextBuildingFailed(
            at=next(t), agent_id=agent.agent_id, pack_id="pack-2", reason="tokenizer unavailable"
        ),
        ev.ContextBuildingStarted(
            at=next(t), agent_id=agent.agent_id, pack_id="pack-3", session_id=SESSION
        ),
        ev.ContextBuildingInterrupted(
            at=next(t),
            agent_id=agent.agent_id,
            pack_id="pack-3",
            reason="orchestrator cancelled the turn",
        ),
        ev.ItemRecorded(at=next(t), agent_id=agent.agent_id, item=finding),
        ev.TurnFailed(
            at=next(t),
            agent_id=agent.agent_id,
            error_class="context_limit",
            provider="anthropic",
            code="invalid_request_error",
            message="prompt is too long: 210000 tokens > 200000 maximum",
        ),
        ev.GenerationRefreshed(
            at=next(t),
            agent_id=agent.agent_id,
            kind="refresh",
            from_generation=1,
            to_generation=2,
            reason="context-limit error from anthropic",
            trigger="context_limit",
            budget=8000,
            carried=(objective.id, failure.id, finding.id),
            dropped=(grep.id,),
        ),
        ev.ContextBuildingStarted(
            at=next(t), agent_id=agent.agent_id, pack_id="pack-4", session_id=SESSION, generation=2
        ),
        ev.ContextPackBuilt(
            at=next(t),
            agent_id=agent.agent_id,
            pack_id="pack-4",
            generation=2,
            budget_limit=8000,
            budget_used=52,
            decisions=(
                decided[objective.id],
                decided[failure.id],
                Decision(item_id=finding.id, action="included", tokens_after=18),
            ),
            included_count=3,
        ),
        ev.MemoryPromoted(
            at=next(t),
            memory_id="mem_" + content_hash(finding.content)[:16],
            item_id=finding.id,
            agent_id=agent.agent_id,
            body_hash=content_hash(finding.content),
            partition="ws_demo",
        ),
    ]
    return out


def run_demo(path: Path, *, console: Console, as_json: bool = False) -> dict[str, Any]:
    """Write the scripted session to *path* (replacing an older demo ledger) and show it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    url = f"sqlite:///{path}"
    events = scripted_session()
    with open_ledger(url) as ledger:
        runner = ProjectionRunner(ledger)
        stream = stream_id_for(SESSION, "primary-1")
        version = 0
        for event in events:
            for rec in ledger.append(stream, [event], expected_version=version):
                runner.apply(rec.position, rec.event)
                version = rec.version
            runner.save()
        states, count, _ = replay_states(ledger)
    ctx: ContextStates = states["context_state"]
    gens: Generations = states["generations"]
    summary = {
        "store": url,
        "events": count,
        "context_state": {
            a: {
                "built_pack_ids": list(s.built_pack_ids),
                "building_in_progress": s.building_in_progress,
                "interrupted": s.interrupted,
            }
            for a, s in ctx.by_agent.items()
        },
        "generations": {
            a: [
                {
                    "number": g.number,
                    "kind": g.kind,
                    "reason": g.reason,
                    "builds": g.builds,
                    "tokens_used": g.tokens_used,
                    "budget": g.budget,
                    "included": len(g.included),
                }
                for g in ag.generations
            ]
            for a, ag in gens.by_agent.items()
        },
    }
    if as_json:
        sys.stdout.write(json.dumps(summary, sort_keys=True) + "\n")
        return summary
    console.print(f"[bold]ctxledger demo[/bold] · {count} events written to {url}")
    table = Table(title="ContextState (rebuilt by replay)")
    for col in ("agent", "built packs", "building", "interrupted"):
        table.add_column(col)
    for a, s in ctx.by_agent.items():
        table.add_row(
            a, ", ".join(s.built_pack_ids), str(s.building_in_progress), str(s.interrupted)
        )
    console.print(table)
    gtable = Table(title="Generations (rebuilt by replay)")
    for col in ("agent", "gen", "kind", "reason", "builds", "tokens/budget", "included"):
        gtable.add_column(col)
    for a, ag in gens.by_agent.items():
        for g in ag.generations:
            gtable.add_row(
                a,
                str(g.number),
                g.kind,
                g.reason or "—",
                str(g.builds),
                f"{g.tokens_used}/{g.budget}",
                str(len(g.included)),
            )
    console.print(gtable)
    console.print(f"next: ctxledger replay --store {url} --verify --json")
    return summary
