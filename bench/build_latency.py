"""Build latency over pools of 1k–100k items at a 100k-token budget, beside the limit pipeline.

Two paths are timed: the pure selection (``plan_build`` = retrieve + strategy select, then
``compose``) and the engine (a full build through ``ContextEngine`` that appends its events to
SQLite, and a turn: record one item, then build). Each is interleaved with its floor — the
limit pipeline, plus for the engine a raw sqlite3 insert of the same event bytes in one
transaction — so every ratio compares samples taken under the same machine noise.
"""

from __future__ import annotations

import itertools
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bench.limit import limit_pipeline, raw_insert
from bench.pools import BUDGET, START, make_pool, make_request, pool_tokens
from bench.timing import fit_exponent, interleaved, nlogn_exponent, stats, timed
from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import EngineSettings
from ctxledger.adapters.ledger import open_ledger, stream_id_for
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain.codec import encode_event
from ctxledger.domain.generation_policy import plan_build
from ctxledger.domain.model import AgentIdentity
from ctxledger.domain.prompt import compose
from ctxledger.domain.strategies import strategy_names

__all__ = ["TickClock", "run_build_latency"]


class TickClock:
    """A timezone-aware clock that moves one second per reading (deterministic events)."""

    def __init__(self, start: datetime) -> None:
        self._now = start

    def now(self) -> datetime:
        self._now += timedelta(seconds=1)
        return self._now


def _ratio(a: dict[str, float], b: dict[str, float], key: str = "p50") -> float:
    return round(a[key] / b[key], 2) if b[key] else float("nan")


def _selection(
    n: int, repeat: int, max_seconds: float, *, strategy: str = "variable"
) -> dict[str, Any]:
    pool = make_pool(n)
    request = make_request(pool, strategy=strategy)
    counter = default_counter()

    def select() -> str:
        plan = plan_build(request, pool, None, counter)
        return compose(plan.result.items, emitted_order=plan.emitted_order).prefix_hash

    cold, _ = timed(select)  # first build: per-item terms are computed and memoised
    plan = plan_build(request, pool, None, counter)
    limit = limit_pipeline(pool, request)
    samples = interleaved(
        {"selection": select, "limit": limit}, repeat=repeat, warmup=1, max_seconds=max_seconds
    )
    sel, lim = stats(samples["selection"]), stats(samples["limit"])
    return {
        "items": n,
        "strategy": strategy,
        "pool_tokens": pool_tokens(pool),
        "included": sum(d.action != "dropped" for d in plan.result.decisions.values()),
        "used_tokens": plan.result.used,
        "cold_ms": round(cold * 1e3, 1),
        "selection": sel,
        "limit": lim,
        "ratio_p50": _ratio(sel, lim),
    }


def _engine(n: int, repeat: int, max_seconds: float) -> dict[str, Any]:
    pool = make_pool(n)
    request = make_request(pool)
    with tempfile.TemporaryDirectory(prefix="ctxledger-bench-") as tmp:
        engine = open_engine(
            open_ledger(f"sqlite:///{Path(tmp) / 'ledger.db'}"),
            counter=default_counter(),
            clock=TickClock(request.now),
            settings=EngineSettings(session_id="bench", save_every=10**9),
        )
        agent = "bench"
        engine.register_agent(
            AgentIdentity(agent_id=agent, role="worker", task=request.task, budget=BUDGET)
        )
        ingest, _ = timed(lambda: engine.record_many(agent, pool))
        hints: dict[str, Any] = {
            "files": request.files,
            "symbols": request.symbols,
            "keywords": request.keywords,
            "failures": request.failures,
        }
        first, _ = timed(lambda: engine.build(agent, budget=BUDGET, **hints))
        fresh = itertools.count()

        def full_build() -> None:
            engine.rebuild(agent)

        def turn() -> None:
            engine.record(agent, f"new observation {next(fresh)} of the bench turn")
            engine.build(agent, **hints)

        def capture(*steps: Callable[[], object]) -> list[list[tuple[str, bytes]]]:
            """The event rows each step appends (one transaction each), read back."""
            txns = []
            for step in steps:
                before = engine.ledger.max_position()
                step()
                txns.append([encode_event(r.event) for r in engine.ledger.read_all(after=before)])
            return txns

        full_rows = capture(full_build)
        turn_rows = capture(
            lambda: engine.record(agent, "an observation captured for the floor"),
            lambda: engine.build(agent, **hints),
        )
        limit = limit_pipeline(pool, request)
        insert = raw_insert(str(Path(tmp) / "raw.db"))

        def floor_full() -> None:
            limit()
            insert(full_rows[0])

        def floor_turn() -> None:
            for rows in turn_rows:
                insert(rows)

        samples = interleaved(
            {
                "full_build": full_build,
                "turn": turn,
                "floor_full": floor_full,
                "floor_turn": floor_turn,
            },
            repeat=repeat,
            warmup=1,
            max_seconds=max_seconds,
        )
        stream = stream_id_for("bench", agent)
        events = engine.ledger.stream_version(stream)
        engine.close()
    full, one = stats(samples["full_build"]), stats(samples["turn"])
    f_full, f_turn = stats(samples["floor_full"]), stats(samples["floor_turn"])
    return {
        "items": n,
        "ingest_s": round(ingest, 2),
        "first_build_ms": round(first * 1e3, 1),
        "full_build_event_bytes": sum(len(p) for _, p in full_rows[0]),
        "turn_event_bytes": sum(len(p) for rows in turn_rows for _, p in rows),
        "full_build": full,
        "turn": one,
        "floor_full": f_full,
        "floor_turn": f_turn,
        "full_ratio_p50": _ratio(full, f_full),
        "turn_ratio_p50": _ratio(one, f_turn),
        "stream_events": events,
    }


def run_build_latency(
    sizes: tuple[int, ...], engine_sizes: tuple[int, ...], *, repeat: int, max_seconds: float
) -> dict[str, Any]:
    """Selection and engine latency per pool size, ratios to the floor, fitted growth."""
    began = time.perf_counter()
    selection = [_selection(n, repeat, max_seconds) for n in sizes]
    # Every strategy at the 10k pool (the size; the largest size up to it in a quick run)
    at = max((n for n in sizes if n <= 10_000), default=min(sizes))
    strategies = [
        _selection(at, repeat, max_seconds, strategy=s) for s in strategy_names() if s != "variable"
    ]
    engine = [_engine(n, repeat, max_seconds) for n in engine_sizes]
    p50s = [r["selection"]["p50"] for r in selection]
    return {
        "budget": BUDGET,
        "start": START.isoformat(),
        "selection": selection,
        "strategies": [r for r in selection if r["items"] == at] + strategies,
        "engine": engine,
        "growth_exponent": fit_exponent(sizes, p50s) if len(sizes) > 1 else None,
        "limit_growth_exponent": (
            fit_exponent(sizes, [r["limit"]["p50"] for r in selection]) if len(sizes) > 1 else None
        ),
        "nlogn_exponent": nlogn_exponent(sizes) if len(sizes) > 1 else None,
        "seconds": round(time.perf_counter() - began, 1),
    }
