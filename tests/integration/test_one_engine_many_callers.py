"""One engine, many callers: 16 threads and 64 asyncio tasks share ONE ``ContextEngine``
(the tasks through an ``AsyncContextEngine`` over it), on SQLite and on PostgreSQL.

Each caller registers its own agent, then for ``ROUNDS`` turns records two items, builds,
and reports usage, and ends with a turn error. Afterwards the read models the engine saved
at close must count exactly what was done (builds, packs, items, usage calls, turn errors —
not one more: before the engine lock a fold that two threads ran at once counted events
twice: 246 builds saved where the log had 240, items seen twice), the installed console
script's ``replay --verify`` and ``audit --rederive`` must be clean, and the event loop must
have kept ticking throughout.

Also here: every public method of the engine holds its lock (but the pure ``render``), a call
waits for a lock another thread holds, a call stuck on another writer's stream delays the
engine's other callers only until its timeout, and ``AsyncContextEngine`` offers every public
method and never blocks its loop, not even while the engine lock is held elsewhere."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import subprocess
import threading
import time
from pathlib import Path

import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import ContextEngine, EngineSettings
from ctxledger.adapters.engine.core import SERIALIZED
from ctxledger.adapters.integrations.async_engine import AsyncContextEngine
from ctxledger.adapters.ledger import open_ledger, stream_id_for
from ctxledger.adapters.ledger.projection_runner import ProjectionRunner
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain import events as ev
from ctxledger.domain.errors import ConflictError, InvalidInputError
from ctxledger.domain.model import AgentIdentity

ROOT = Path(__file__).resolve().parents[2]
CLI = str(ROOT / ".venv" / "bin" / "ctxledger")

THREADS = 16
TASKS = 64
ROUNDS = 3
ITEMS_PER_ROUND = 2
USAGE = {"input_tokens": 120, "output_tokens": 8}
ERROR = "upstream overloaded (HTTP 529), try again later"


def _identity(agent_id: str) -> AgentIdentity:
    return AgentIdentity(agent_id=agent_id, role="worker", task="fix auth", budget=4_000)


def _item(agent_id: str, turn: int, k: int) -> str:
    return f"{agent_id} turn {turn} output {k}: pytest tests/test_auth.py — 1 failed ({k})"


def _thread_caller(engine: ContextEngine, agent_id: str, errors: list[BaseException]) -> None:
    try:
        engine.register_agent(_identity(agent_id))
        for turn in range(ROUNDS):
            for k in range(ITEMS_PER_ROUND):
                engine.record(agent_id, _item(agent_id, turn, k))
            engine.build(agent_id, keywords=["auth"])
            engine.report_usage(agent_id, USAGE)
            assert engine.pool(agent_id).recorded == (turn + 1) * ITEMS_PER_ROUND
        outcome = engine.on_turn_error(agent_id, RuntimeError(ERROR))
        assert not outcome.refreshed
    except BaseException as exc:  # collected: the test reports every caller's failure
        errors.append(exc)


async def _task_caller(engine: AsyncContextEngine, agent_id: str) -> None:
    await engine.register_agent(_identity(agent_id))
    for turn in range(ROUNDS):
        for k in range(ITEMS_PER_ROUND):
            await engine.record(agent_id, _item(agent_id, turn, k))
        result = await engine.build(agent_id, keywords=["auth"])
        assert engine.render(result, "anthropic", "claude-sonnet-4-5")["system"]
        await engine.report_usage(agent_id, USAGE)
    outcome = await engine.on_turn_error(agent_id, RuntimeError(ERROR))
    assert not outcome.refreshed


class Heartbeat:
    """A task that ticks every ``period`` seconds while it runs, noting the longest gap."""

    def __init__(self, period: float = 0.005) -> None:
        self.period = period
        self.ticks = 0
        self.longest = 0.0

    async def run(self, stop: asyncio.Event) -> None:
        last = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(self.period)
            now = time.monotonic()
            self.ticks += 1
            self.longest = max(self.longest, now - last)
            last = now


async def _drive(engine: ContextEngine) -> tuple[list[BaseException], Heartbeat, float]:
    """Run the threads and the tasks at once on *engine* and close it: every caller's error,
    the loop's heartbeat, and the seconds the callers took."""
    errors: list[BaseException] = []
    threads = [
        threading.Thread(target=_thread_caller, args=(engine, f"thread-{n}", errors))
        for n in range(THREADS)
    ]
    heart, stop = Heartbeat(), asyncio.Event()
    beating = asyncio.create_task(heart.run(stop))
    started = time.monotonic()
    async with AsyncContextEngine(engine) as aengine:
        for t in threads:
            t.start()
        results = await asyncio.gather(
            *(_task_caller(aengine, f"task-{n}") for n in range(TASKS)), return_exceptions=True
        )
        for t in threads:
            await asyncio.to_thread(t.join, 120)
        assert not any(t.is_alive() for t in threads), "a caller thread did not finish"
    elapsed = time.monotonic() - started
    stop.set()
    await beating
    errors.extend(r for r in results if isinstance(r, BaseException))
    return errors, heart, elapsed


def _check_saved_models(url: str, agents: list[str]) -> int:
    """The read models as persisted at close count exactly what the callers did; returns the
    number of events in the log."""
    with open_ledger(url) as ledger:
        runner = ProjectionRunner(ledger)
        assert runner.position == ledger.max_position(), "the models were not saved at close"
        events = [r.event for r in ledger.read_all()]
        models = runner.models
    built = sum(isinstance(e, ev.ContextPackBuilt) for e in events)
    assert built == len(agents) * ROUNDS, f"{built} packs in the log"
    saved_builds = sum(
        g.builds for a in models.generations.by_agent.values() for g in a.generations
    )
    assert saved_builds == built, f"{saved_builds} builds saved where the log has {built}"
    assert models.cache_stats.overall.calls == len(agents) * ROUNDS
    assert models.cache_stats.overall.builds == built
    assert sorted(models.generations.by_agent) == sorted(agents)
    for agent_id in agents:
        pool = models.pool.by_agent[agent_id]
        assert pool.recorded == ROUNDS * ITEMS_PER_ROUND, (agent_id, pool.recorded)
        assert len(pool.items) == ROUNDS * ITEMS_PER_ROUND, agent_id
        assert set(pool.seen.values()) == {1}, (agent_id, pool.seen)
        state = models.context_state.by_agent[agent_id]
        assert len(state.built_pack_ids) == ROUNDS, (agent_id, state.built_pack_ids)
        assert not state.building_in_progress, agent_id
        totals = models.cache_stats.agent(agent_id)
        assert (totals.calls, totals.builds) == (ROUNDS, ROUNDS), (agent_id, totals)
        assert ERROR in models.inspector.by_agent[agent_id].last_turn_error, agent_id
    failed = [e for e in events if isinstance(e, ev.TurnFailed)]
    assert sorted(e.agent_id for e in failed) == sorted(agents)
    return len(events)


def _cli(*args: str) -> dict[str, object]:
    done = subprocess.run([CLI, *args, "--json"], capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"ctxledger {' '.join(args)}: {done.stdout}{done.stderr}"
    report: dict[str, object] = json.loads(done.stdout)
    return report


def _stress(url: str) -> None:
    engine = open_engine(
        url, counter=default_counter(), settings=EngineSettings(session_id="stress")
    )
    errors, heart, elapsed = asyncio.run(_drive(engine))
    assert not errors, f"{len(errors)} callers failed, the first: {errors[0]!r}"
    agents = [f"thread-{n}" for n in range(THREADS)] + [f"task-{n}" for n in range(TASKS)]
    events = _check_saved_models(url, agents)
    replay = _cli("replay", "--verify", "--store", url)
    assert (replay["equal"], replay["events"], replay["caught_up"]) == (True, events, 0), replay
    audit = _cli("audit", "--rederive", "--store", url)
    assert audit["clean"] is True, audit
    assert (audit["violations"], audit["mismatches"], audit["not_rederivable"]) == ([], 0, 0)
    assert audit["rederived"] == audit["builds"] == len(agents) * ROUNDS, audit
    # the loop went on ticking while 64 tasks and 16 threads used the engine
    assert heart.ticks >= 10, f"the loop ticked {heart.ticks} times in {elapsed:.1f}s"
    assert heart.longest < 1.0, f"the loop stood still for {heart.longest:.2f}s"
    print(
        f"{THREADS} threads + {TASKS} tasks × {ROUNDS} turns on one engine: {elapsed:.1f}s, "
        f"{events} events; heartbeat {heart.ticks} ticks, longest gap {heart.longest:.3f}s"
    )


def test_threads_and_tasks_on_one_engine_sqlite(tmp_path: Path) -> None:
    _stress(f"sqlite:///{tmp_path / 'ledger.db'}")


@pytest.mark.postgres
def test_threads_and_tasks_on_one_engine_postgres(pg_url: str) -> None:
    _stress(pg_url)


# --- the lock, and the loop that never blocks ---------------------------------------------------

PURE = {"render", "input_limits"}
"""Public members of the engine that take no lock: ``render`` is a pure function of its
arguments, ``input_limits`` frozen settings."""
INTERNAL = {"runner", "scanner"}
"""Locked properties of the engine's machinery that ``AsyncContextEngine`` does not offer."""


def _public(cls: type) -> dict[str, object]:
    return {
        name: inspect.getattr_static(cls, name) for name in dir(cls) if not name.startswith("_")
    }


def test_every_public_method_holds_the_engine_lock() -> None:
    members = _public(ContextEngine)
    assert {"build", "record", "states", "close", "decide_and_append"} <= set(members)
    unlocked = []
    for name, member in members.items():
        fn = member.fget if isinstance(member, property) else member
        if name not in PURE and not getattr(fn, SERIALIZED, False):
            unlocked.append(name)
    assert unlocked == [], f"public engine members without the engine lock: {unlocked}"
    for name in PURE:
        assert not getattr(members[name], SERIALIZED, False)


def _engine(path: Path) -> ContextEngine:
    engine = open_engine(f"sqlite:///{path}", counter=default_counter())
    engine.register_agent(_identity("w"))
    return engine


def test_a_call_waits_while_another_thread_holds_the_lock(tmp_path: Path) -> None:
    with _engine(tmp_path / "ledger.db") as engine:
        held, release, done = threading.Event(), threading.Event(), threading.Event()

        def hold() -> None:
            with engine.lock:
                held.set()
                release.wait(10)

        def call() -> None:
            engine.record("w", "pytest: 1 failed")
            done.set()

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(10)
        caller = threading.Thread(target=call)
        caller.start()
        assert not done.wait(0.3), "record ran while another thread held the engine lock"
        assert engine.lock.acquire(blocking=False) is False
        release.set()
        holder.join(10)
        caller.join(10)
        assert done.is_set()
        assert engine.pool("w").recorded == 1
        # re-entrant: a method called under the lock the caller holds goes through
        with engine.lock:
            engine.record("w", "pytest: 2 failed")
            assert engine.pool("w").recorded == 2


def test_async_engine_offers_every_public_method() -> None:
    offered = _public(AsyncContextEngine)
    missing = sorted(set(_public(ContextEngine)) - INTERNAL - set(offered))
    assert missing == [], f"AsyncContextEngine lacks {missing}"
    for name in set(_public(ContextEngine)) - INTERNAL - PURE:
        assert inspect.iscoroutinefunction(offered[name]), f"{name} is not awaitable"
    assert not inspect.iscoroutinefunction(offered["render"])


def test_the_loop_keeps_ticking_while_a_call_waits_for_the_lock(tmp_path: Path) -> None:
    engine = _engine(tmp_path / "ledger.db")
    held, release = threading.Event(), threading.Event()
    where = contextvars.ContextVar("where", default="")

    def hold() -> None:
        with engine.lock:
            held.set()
            release.wait(10)

    async def main() -> None:
        async with AsyncContextEngine(engine) as aengine:
            holder = threading.Thread(target=hold)
            holder.start()
            assert await asyncio.to_thread(held.wait, 10)
            heart, stop = Heartbeat(), asyncio.Event()
            beating = asyncio.create_task(heart.run(stop))
            recording = asyncio.create_task(aengine.record("w", "pytest: 1 failed"))
            await asyncio.sleep(0.5)
            assert not recording.done(), "record went through under another thread's lock"
            ticks_while_held = heart.ticks
            release.set()
            item = await recording
            stop.set()
            await beating
            await asyncio.to_thread(holder.join, 10)
            # the loop ran its other task all along: about 100 ticks in the 0.5 s
            assert ticks_while_held >= 20, f"{ticks_while_held} ticks in 0.5 s"
            assert (await aengine.pool("w")).current(item.id).content == "pytest: 1 failed"
            # calls run on the worker thread, with the caller's context variables
            where.set("caller's context")
            seen: list[tuple[str, str]] = []

            def decide(_version: int) -> list[ev.Event]:
                seen.append((threading.current_thread().name, where.get()))
                return []

            assert await aengine.decide_and_append("s-1", decide) == []
            ((thread, context),) = seen
            assert thread.startswith("ctxledger")
            assert thread != threading.current_thread().name
            assert context == "caller's context"
        with pytest.raises(InvalidInputError, match="closed"):
            await aengine.pool("w")

    asyncio.run(main())


def test_a_call_stuck_on_another_writer_delays_the_others_but_not_forever(tmp_path: Path) -> None:
    """Another engine over the same store holds agent ``w``'s stream; a call for ``w`` waits
    for it under the engine lock, so a call for ``x`` from another thread waits too — until
    the first gives up at ``lock_timeout_s`` (ConflictError); then ``x`` goes through."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = open_engine(url, counter=default_counter(), settings=EngineSettings(lock_timeout_s=1))
    engine.register_agent(_identity("w"))
    engine.register_agent(_identity("x"))
    other = open_ledger(url)
    held, release = threading.Event(), threading.Event()
    outcomes: dict[str, tuple[str, float]] = {}

    def hold() -> None:
        with other.stream_lock(stream_id_for("default", "w"), timeout=5):
            held.set()
            release.wait(30)

    def call(agent_id: str) -> None:
        started = time.monotonic()
        try:
            engine.record(agent_id, f"{agent_id}: pytest 1 failed")
            outcomes[agent_id] = ("recorded", time.monotonic() - started)
        except ConflictError:
            outcomes[agent_id] = ("conflict", time.monotonic() - started)

    holder = threading.Thread(target=hold)
    holder.start()
    assert held.wait(10)
    stuck = threading.Thread(target=call, args=("w",))
    stuck.start()
    time.sleep(0.2)  # ``w`` is waiting for the stream, holding the engine lock
    behind = threading.Thread(target=call, args=("x",))
    behind.start()
    stuck.join(20)
    behind.join(20)
    release.set()
    holder.join(10)
    other.close()
    assert outcomes["w"][0] == "conflict"
    assert 0.9 <= outcomes["w"][1] < 5, outcomes
    assert outcomes["x"][0] == "recorded"
    assert 0.5 <= outcomes["x"][1] < 5, outcomes  # waited for ``w``'s call, then went through
    assert engine.pool("x").recorded == 1
    assert engine.pool("w").recorded == 0
    engine.close()
