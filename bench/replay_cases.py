"""Two replay shapes the template ledger does not have:

- ``cold_open``: opening an engine on a log whose read models were never saved (the runner
  folds the whole log, saving as it goes) beside a plain ``replay_states`` of the same log;
- ``one_agent``: one agent recording *total* items one ``record`` at a time (the cost of the
  first and of the last tenth), then the replay of the first quarter, half and all of that log.
"""

from __future__ import annotations

import sqlite3
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.build_latency import TickClock
from bench.pools import START, make_pool
from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import EngineSettings
from ctxledger.adapters.ledger import PROJECTIONS_TABLE, open_ledger
from ctxledger.adapters.ledger.projection_runner import replay_states
from ctxledger.domain.model import AgentIdentity

__all__ = ["cold_open", "one_agent"]


def _forget_read_models(path: Path) -> None:
    with sqlite3.connect(path) as db:
        exists = db.execute(
            "SELECT 1 FROM sqlite_master WHERE type='table' AND name=?", (PROJECTIONS_TABLE,)
        ).fetchone()
        if exists:
            db.execute(f"DELETE FROM {PROJECTIONS_TABLE}")
    sqlite3.connect(path).close()


def _replay_s(url: str, upto: int | None = None) -> float:
    with open_ledger(url) as ledger:
        start = time.perf_counter()
        replay_states(ledger, upto=upto)
        return time.perf_counter() - start


def cold_open(path: Path, *, rounds: int = 2) -> dict[str, Any]:
    """Seconds to open an engine (read models folded from the start, then saved) on *path*
    with its saved read models deleted, beside a plain replay; best of *rounds* each."""
    url = f"sqlite:///{path}"
    opens, replays = [], []
    for _ in range(rounds):
        _forget_read_models(path)
        start = time.perf_counter()
        engine = open_engine(url)
        engine.states  # noqa: B018 - the read models, caught up: what opening pays for
        opens.append(time.perf_counter() - start)
        engine.close()
        replays.append(_replay_s(url))
    _forget_read_models(path)
    best_open, best_replay = min(opens), min(replays)
    return {
        "open_s": round(best_open, 2),
        "replay_s": round(best_replay, 2),
        "ratio": round(best_open / best_replay, 2),
    }


def one_agent(total: int, log: Callable[[str], None] = lambda _m: None) -> dict[str, Any]:
    """One agent recording *total* items one by one (CPU of each tenth), then replays of the
    first quarter, half and whole of its log (wall seconds, best of two)."""
    items = make_pool(total, seed=5)
    tenth = max(1, total // 10)
    blocks: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ctxledger-bench-") as tmp:
        path = Path(tmp) / "one-agent.db"
        url = f"sqlite:///{path}"
        engine = open_engine(
            open_ledger(url),
            clock=TickClock(START),
            settings=EngineSettings(session_id="bench", save_every=10**9),
        )
        engine.register_agent(AgentIdentity(agent_id="solo", role="worker", budget=100_000))
        first = engine.ledger.max_position()
        for k in range(0, total, tenth):
            start = time.thread_time()
            for item in items[k : k + tenth]:
                engine.record("solo", item)
            blocks.append(time.thread_time() - start)
            log(f"one agent: {min(k + tenth, total)}/{total} recorded")
        engine.close()
        replays = {}
        for label, share in (("quarter", 4), ("half", 2), ("whole", 1)):
            upto = first + total // share
            replays[label] = round(min(_replay_s(url, upto) for _ in range(2)), 3)
    return {
        "items": total,
        "block": tenth,
        "first_block_s": round(blocks[0], 3),
        "last_block_s": round(blocks[-1], 3),
        "record_ratio": round(blocks[-1] / blocks[0], 2),
        "replay_s": replays,
        "replay_ratio": round(replays["whole"] / replays["quarter"], 2),
    }
