"""Ledger bytes per turn over a long session: the ContextPackBuilt delta keeps it O(new items)."""

from __future__ import annotations

import statistics
import time
from typing import Any

import msgspec

from bench.build_latency import TickClock
from bench.pools import START, make_pool
from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import EngineSettings
from ctxledger.adapters.ledger import open_ledger
from ctxledger.domain.codec import encode_event
from ctxledger.domain.events import ContextPackBuilt, ItemRecorded
from ctxledger.domain.model import AgentIdentity

__all__ = ["run_growth"]

_ENC = msgspec.json.Encoder()


def run_growth(turns: int, *, budget: int = 32_000, window: int = 50) -> dict[str, Any]:
    """One agent, *turns* turns of (record a tool call and its output, build). Bytes per turn
    of the build events (Started, Built, Refreshed) and of the recorded items, for the first
    and the last *window* turns, beside what a full decision snapshot per build would take."""
    bodies = [i for i in make_pool(2 * turns + 8, seed=5) if not (i.pinned or i.mandatory)]
    engine = open_engine(
        open_ledger("memory://"),
        clock=TickClock(START),
        settings=EngineSettings(session_id="bench", save_every=10**9),
    )
    agent = "bench-session"
    engine.register_agent(
        AgentIdentity(agent_id=agent, role="worker", task="bench-task", budget=budget)
    )
    engine.record(agent, "Objective: make the failing test pass.", pinned=True, mandatory=True)
    build_bytes: list[int] = []
    item_bytes: list[int] = []
    snapshot_bytes: list[int] = []
    kinds: list[str] = []
    began = time.perf_counter()
    for turn in range(turns):
        call, out = bodies[(2 * turn) % len(bodies)], bodies[(2 * turn + 1) % len(bodies)]
        group = f"step-{turn:04d}"
        before = engine.ledger.max_position()
        engine.record_many(
            agent,
            [
                msgspec.structs.replace(call, id=f"c{turn}", group=group, agent=agent),
                msgspec.structs.replace(out, id=f"o{turn}", group=group, agent=agent),
            ],
        )
        result = engine.build(agent, budget=budget)
        items = builds = 0
        for rec in engine.ledger.read_all(after=before):
            size = len(encode_event(rec.event)[1])
            if isinstance(rec.event, ItemRecorded):
                items += size
            else:
                builds += size
            if isinstance(rec.event, ContextPackBuilt):
                snapshot_bytes.append(
                    size
                    - len(_ENC.encode(rec.event.decisions))
                    + len(_ENC.encode(result.pack.decisions))
                )
        item_bytes.append(items)
        build_bytes.append(builds)
        kinds.append(result.kind)
    took = time.perf_counter() - began
    w = min(window, turns)

    def mean(xs: list[int]) -> float:
        return round(statistics.fmean(xs), 1) if xs else 0.0

    worst = max(range(turns), key=build_bytes.__getitem__) if turns else 0
    return {
        "turns": turns,
        "budget": budget,
        "first_window": f"1–{w}",
        "last_window": f"{turns - w + 1}–{turns}",
        "build_bytes_first": mean(build_bytes[:w]),
        "build_bytes_last": mean(build_bytes[-w:]),
        "build_bytes_median_first": statistics.median(build_bytes[:w]) if w else 0,
        "build_bytes_median_last": statistics.median(build_bytes[-w:]) if w else 0,
        "item_bytes_first": mean(item_bytes[:w]),
        "item_bytes_last": mean(item_bytes[-w:]),
        "snapshot_bytes_first": mean(snapshot_bytes[:w]),
        "snapshot_bytes_last": mean(snapshot_bytes[-w:]),
        "rebuilds": kinds.count("rebuild"),
        "max_build_bytes": build_bytes[worst] if turns else 0,
        "max_build_turn": worst + 1,
        "max_build_kind": kinds[worst] if turns else "",
        "total_mb": round((sum(build_bytes) + sum(item_bytes)) / 2**20, 2),
        "snapshot_total_mb": round((sum(snapshot_bytes) + sum(item_bytes)) / 2**20, 2),
        "seconds": round(took, 1),
    }
