"""The load run: N agents × T turns through one ContextEngine on the embedded SQLite store.

Run as ``python -m tests.reliability._load_run DB AGENTS TURNS``; prints one JSON line of
figures (duration, peak RSS, counts). Deterministic: seeded, with a stepping clock."""

from __future__ import annotations

import json
import random
import resource
import sys
import time
from datetime import UTC, datetime, timedelta

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.ledger import open_ledger
from ctxledger.domain.model import AgentIdentity, Durability, Layer, Source

__all__ = ["run"]

_WORDS = (
    "parse",
    "config",
    "retry",
    "timeout",
    "session",
    "token",
    "cache",
    "index",
    "schema",
    "client",
    "server",
    "handler",
    "queue",
    "worker",
    "payload",
    "request",
    "response",
    "migrate",
    "deploy",
    "assert",
    "fixture",
    "module",
)
CONTEXT_LIMIT = "prompt is too long: 210000 tokens > 200000 maximum"


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words))


def _turn(engine: ContextEngine, rng: random.Random, agent_id: str, turn: int) -> dict[str, int]:
    counts = {"items": 0, "refreshes": 0, "rebuilds": 0, "controls": 0}
    module = f"src/{rng.choice(_WORDS)}.py"
    items = []
    for _ in range(rng.randint(1, 3)):
        kind = rng.random()
        if kind < 0.6:
            content = f"$ grep -n {rng.choice(_WORDS)} {module}\n" + _text(
                rng, rng.randint(20, 300)
            )
            items.append(engine.make_item(agent_id, content, files=(module,)))
        elif kind < 0.8:
            content = f"FAILED tests/test_{turn}.py::test_{rng.choice(_WORDS)}\n" + _text(rng, 60)
            items.append(
                engine.make_item(
                    agent_id, content, layer=Layer.L1, source=Source.TEST_RESULT, failure=True
                )
            )
        else:
            content = f"Finding {turn}: {module} " + _text(rng, rng.randint(10, 80))
            items.append(
                engine.make_item(
                    agent_id,
                    content,
                    layer=Layer.L2,
                    source=Source.WORKER_FINDING,
                    files=(module,),
                    durability=Durability.DURABLE,
                )
            )
    engine.record_many(agent_id, items)
    counts["items"] += len(items)
    roll = rng.random()
    if roll < 0.03:
        engine.pin(agent_id, items[0].id, by="load")
        counts["controls"] += 1
    elif roll < 0.05:
        finding = [i for i in items if i.source == Source.WORKER_FINDING]
        if finding:
            engine.verify_finding(agent_id, finding[0].id, by="load", evidence="pytest -q")
            counts["controls"] += 1
    elif roll < 0.06:
        engine.add_steering_note(agent_id, f"Keep {module} backwards compatible.")
        counts["controls"] += 1
    result = engine.build(
        agent_id, keywords=(rng.choice(_WORDS),), files=(module,), latest_user_input=f"turn {turn}"
    )
    counts["rebuilds"] += result.kind == "rebuild"
    if rng.random() < 0.02:
        outcome = engine.on_turn_error(agent_id, CONTEXT_LIMIT, provider="anthropic")
        counts["refreshes"] += outcome.refreshed
    engine.render(result, provider="anthropic", model="claude-test")
    tokens = result.pack.budget_used
    cached = int(tokens * rng.uniform(0.3, 0.9))
    engine.report_usage(
        agent_id,
        {
            "input_tokens": max(1, tokens - cached),
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
            "output_tokens": rng.randint(50, 800),
        },
    )
    return counts


def run(db: str, agents: int, turns: int) -> dict[str, float | int]:
    rng = random.Random(4242)
    clock = SteppingClock(datetime(2026, 1, 5, 9, 0, tzinfo=UTC), timedelta(milliseconds=250))
    started = time.perf_counter()
    totals = {"items": 0, "refreshes": 0, "rebuilds": 0, "controls": 0}
    with open_engine(open_ledger(f"sqlite:///{db}"), clock=clock) as engine:
        ids = [f"agent-{a:03d}" for a in range(agents)]
        for a, agent_id in enumerate(ids):
            engine.register_agent(
                AgentIdentity(
                    agent_id=agent_id,
                    role="primary" if a == 0 else "worker",
                    task=f"T-{a}",
                    parent="" if a == 0 else ids[0],
                    budget=rng.choice((2_000, 4_000, 8_000)),
                )
            )
        for turn in range(turns):
            for agent_id in ids:
                for key, value in _turn(engine, rng, agent_id, turn).items():
                    totals[key] += value
    seconds = time.perf_counter() - started
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {"seconds": round(seconds, 2), "peak_rss_mb": round(peak_kb / 1024, 1), **totals}


if __name__ == "__main__":
    figures = run(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    print(json.dumps(figures))
