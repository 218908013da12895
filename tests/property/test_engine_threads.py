"""One engine, several threads: whatever the calls and however the threads interleave, the
engine's live read models equal a replay of the log it wrote, and the log holds exactly the
calls made (one ``ItemRecorded`` per record, one pack per build, one usage event per report).

Threads get scripts of records, builds, usage reports and turn errors, on an agent of their
own or on one agent they all share, and start together at a barrier. Before the engine lock
the live models counted events that two threads folded at once twice."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.ledger.projection_runner import encode_state, replay_states
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain import events as ev
from ctxledger.domain.model import AgentIdentity

COUNTER = default_counter()
SHARED = "shared"
OPS = st.sampled_from(["record", "build", "usage", "error"])
SCRIPT = st.tuples(st.booleans(), st.lists(OPS, min_size=1, max_size=10))
"""(on the shared agent?, the calls)."""


def _identity(agent_id: str) -> AgentIdentity:
    return AgentIdentity(agent_id=agent_id, role="worker", task="fix auth", budget=4_000)


def _run(engine: ContextEngine, agent_id: str, ops: list[str], n: int) -> None:
    for k, op in enumerate(ops):
        if op == "record":
            engine.record(agent_id, f"thread {n} call {k}: pytest 1 failed in auth")
        elif op == "build":
            engine.build(agent_id, keywords=["auth"])
        elif op == "usage":
            engine.report_usage(agent_id, {"input_tokens": 100 + k, "output_tokens": 3})
        else:
            engine.on_turn_error(agent_id, RuntimeError("HTTP 529 overloaded"))


@settings(max_examples=25)
@given(scripts=st.lists(SCRIPT, min_size=2, max_size=6))
def test_live_models_equal_the_replay_under_threads(scripts: list[tuple[bool, list[str]]]) -> None:
    folder = tempfile.mkdtemp(prefix="ctxledger-threads-")
    try:
        _check(f"sqlite:///{folder}/ledger.db", scripts)
    finally:
        shutil.rmtree(folder)


def _check(url: str, scripts: list[tuple[bool, list[str]]]) -> None:
    engine = open_engine(url, counter=COUNTER)
    engine.register_agent(_identity(SHARED))
    agents = [SHARED if shared else f"own-{n}" for n, (shared, _ops) in enumerate(scripts)]
    for agent_id in set(agents) - {SHARED}:
        engine.register_agent(_identity(agent_id))
    start = threading.Barrier(len(scripts))
    errors: list[BaseException] = []

    def caller(n: int) -> None:
        try:
            start.wait(10)
            _run(engine, agents[n], scripts[n][1], n)
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=caller, args=(n,)) for n in range(len(scripts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    live = engine.runner.states
    replayed, count, last = replay_states(engine.ledger)
    assert last == engine.runner.position == engine.ledger.max_position()
    for name, state in replayed.items():
        assert encode_state(live[name]) == encode_state(state), f"{name} differs from replay"
    made = Counter(op for _shared, ops in scripts for op in ops)
    kinds = Counter(type(r.event).__name__ for r in engine.ledger.read_all())
    assert kinds["ItemRecorded"] == made["record"]
    assert kinds[ev.ContextPackBuilt.__name__] == made["build"]
    assert kinds["CacheUsageRecorded"] == made["usage"]
    assert kinds["TurnFailed"] == made["error"]
    assert count == sum(kinds.values())
    engine.close()
