"""The cost of one turn as an orchestrator pays it: record one observation, build, render.

Measured in CPU time of the measuring thread (``time.thread_time``), on SQLite with durable
commits (the engine's defaults), at several history sizes and over one long session:

- ``history``: an agent with *n* recorded items (tiktoken counts, a 100k-token budget), built
  once; then turns — record 1 item + build + ``render`` — interleaved with their floor (a raw
  sqlite3 insert of the same event rows in the same transactions) so both see the same noise;
- ``session``: one agent over *turns* turns from an empty pool (1 item per turn; rebuilds
  happen when the budget fills), the median turn of the first and of the last 100;
- ``trim_messages``: LangChain's ``trim_messages`` (strategy ``last``) with a memoised tiktoken
  counter over the same 10k-item history, one new message per call — what the turn replaces.
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from bench.build_latency import TickClock
from bench.limit import raw_insert
from bench.pools import BUDGET, make_pool, make_request
from bench.timing import interleaved, stats
from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import ContextEngine, EngineSettings
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain.codec import encode_event
from ctxledger.domain.model import AgentIdentity, Item

__all__ = ["run_turns"]

AGENT = "bench"


def _engine(path: Path, start: Any) -> ContextEngine:
    return open_engine(
        open_ledger(f"sqlite:///{path}"),
        counter=default_counter(),
        clock=TickClock(start),
        settings=EngineSettings(session_id="bench", save_every=10**9),
    )


def _history(n: int, repeat: int, max_seconds: float, log: Callable[[str], None]) -> dict[str, Any]:
    counter = default_counter()
    pool = make_pool(n, count=counter.count)
    request = make_request(pool)
    hints: dict[str, Any] = {
        "files": request.files,
        "symbols": request.symbols,
        "keywords": request.keywords,
        "failures": request.failures,
    }
    with tempfile.TemporaryDirectory(prefix="ctxledger-bench-") as tmp:
        engine = _engine(Path(tmp) / "ledger.db", request.now)
        engine.register_agent(
            AgentIdentity(agent_id=AGENT, role="worker", task=request.task, budget=BUDGET)
        )
        engine.record_many(AGENT, pool)
        engine.build(AGENT, budget=BUDGET, **hints)
        fresh = itertools.count()

        def turn() -> None:
            engine.record(AGENT, f"new observation {next(fresh)} of the bench turn")
            engine.render(engine.build(AGENT, **hints), provider="anthropic", model="m")

        def capture(step: Callable[[], object]) -> list[tuple[str, bytes]]:
            before = engine.ledger.max_position()
            step()
            return [encode_event(r.event) for r in engine.ledger.read_all(after=before)]

        # The floor writes the rows of one steady turn: the first turn after the initial
        # pack rebuilds (the pack filled the budget), so it is taken before the capture.
        turn()
        kinds: list[str] = []
        rows = [
            capture(lambda: engine.record(AGENT, "an observation captured for the floor")),
            capture(lambda: kinds.append(engine.build(AGENT, **hints).kind)),
        ]
        insert = raw_insert(str(Path(tmp) / "raw.db"))

        def floor() -> None:
            for r in rows:
                insert(r)

        samples = interleaved(
            {"turn": turn, "floor": floor},
            repeat=repeat,
            warmup=3,
            max_seconds=max_seconds,
            clock=time.thread_time,
        )
        builds = engine.agent(AGENT).current.builds
        engine.close()
    turn_stats, floor_stats = stats(samples["turn"]), stats(samples["floor"])
    out = {
        "items": n,
        "turn": turn_stats,
        "floor": floor_stats,
        "builds_in_generation": builds,
        "floor_build": kinds[0],
        "floor_bytes": sum(len(b) for r in rows for _t, b in r),
    }
    log(f"turn at {n} items: {turn_stats['p50']} ms CPU (floor {floor_stats['p50']})")
    return out


def _session(turns: int, log: Callable[[str], None]) -> dict[str, Any]:
    counter = default_counter()
    bodies: list[Item] = [
        i for i in make_pool(turns + 8, seed=11, count=counter.count) if not i.pinned
    ]
    request = make_request(bodies)
    seconds: list[float] = []
    kinds: list[str] = []
    with tempfile.TemporaryDirectory(prefix="ctxledger-bench-") as tmp:
        engine = _engine(Path(tmp) / "session.db", request.now)
        engine.register_agent(
            AgentIdentity(agent_id=AGENT, role="worker", task=request.task, budget=BUDGET)
        )
        for n in range(turns):
            item = msgspec.structs.replace(bodies[n % len(bodies)], id=f"turn{n:06d}")
            start = time.thread_time()
            engine.record(AGENT, item)
            result = engine.build(AGENT, keywords=request.keywords)
            engine.render(result, provider="anthropic", model="m")
            seconds.append(time.thread_time() - start)
            kinds.append(result.kind)
            if (n + 1) % 500 == 0:
                log(f"session: {n + 1}/{turns} turns")
        engine.close()
    window = min(100, turns // 2) or 1

    def med(xs: list[float]) -> float:
        return round(statistics.median(xs) * 1e3, 3)

    first, last = seconds[:window], seconds[-window:]
    return {
        "turns": turns,
        "window": window,
        "first_p50_ms": med(first),
        "last_p50_ms": med(last),
        "first_mean_ms": round(statistics.fmean(first) * 1e3, 3),
        "last_mean_ms": round(statistics.fmean(last) * 1e3, 3),
        "ratio_p50": round(med(last) / med(first), 2) if med(first) else None,
        "rebuilds": kinds.count("rebuild"),
        "appends": kinds.count("append"),
    }


def _trim_messages(n: int, repeat: int, max_seconds: float) -> dict[str, Any]:
    try:
        from langchain_core import messages as lc
    except ImportError:
        return {"missing": "langchain-core not installed"}
    counter = default_counter()
    pool = make_pool(n, count=counter.count)
    memo: dict[str, int] = {}

    def count(msgs: Any) -> int:
        total = 0
        for m in msgs:
            text = str(m.content)
            c = memo.get(text)
            if c is None:
                c = memo[text] = counter.count(text)
            total += c
        return total

    history: list[Any] = [lc.SystemMessage(content=pool[0].content)]
    history += [
        (lc.HumanMessage if k % 2 else lc.AIMessage)(content=i.content)
        for k, i in enumerate(pool[1:])
    ]
    fresh = itertools.count()

    def call() -> None:
        history.append(lc.HumanMessage(content=f"new observation {next(fresh)}"))
        lc.trim_messages(
            history,
            max_tokens=BUDGET,
            token_counter=count,
            strategy="last",
            include_system=True,
            allow_partial=False,
        )

    samples = interleaved({"trim": call}, repeat=repeat, warmup=3, clock=time.thread_time,
                          max_seconds=max_seconds)  # fmt: skip
    return {"items": n, "trim": stats(samples["trim"])}


def run_turns(
    sizes: tuple[int, ...],
    *,
    session_turns: int,
    repeat: int,
    max_seconds: float,
    log: Callable[[str], None] = lambda _m: None,
) -> dict[str, Any]:
    """Turn CPU per history size, over one session, and ``trim_messages`` at 10k (or the
    largest size below it)."""
    history = [_history(n, repeat, max_seconds, log) for n in sizes]
    by_size = {r["items"]: r["turn"]["p50"] for r in history}
    small, large = min(sizes), max(s for s in sizes if s <= 20_000)
    session = _session(session_turns, log)
    log(f"session: {session}")
    peer_size = 10_000 if 10_000 in sizes else max(s for s in sizes if s <= 10_000)
    trim = _trim_messages(peer_size, repeat, max_seconds)
    return {
        "budget": BUDGET,
        "history": history,
        "growth_ratio": round(by_size[large] / by_size[small], 2) if by_size[small] else None,
        "growth_sizes": [small, large],
        "session": session,
        "trim_messages": trim,
        "vs_trim_at": peer_size,
        "vs_trim_ratio": (
            round(by_size[peer_size] / trim["trim"]["p50"], 2) if "trim" in trim else None
        ),
    }
