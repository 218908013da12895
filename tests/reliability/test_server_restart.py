"""PostgreSQL killed mid-run: an engine records and builds while the server is killed
(``pg_ctl stop -m immediate``, as a crash does) and restarted, many times. Every call the
caller saw succeed is stored exactly once, no call is stored twice (a kill between COMMIT and
its acknowledgement is recognised by the append's ``op`` key, not re-decided), every failure
is the typed ``LedgerUnavailableError`` and comes within the stated bound, the engine carries
on after each restart, and the log audits clean. A server that stays down is a
``LedgerUnavailableError`` within the same bound.

The cluster is a private one with durable commits (``synchronous_commit=on``): the shared
test cluster acknowledges commits before writing them, and a killed server may lose those.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.ledger import (
    UNAVAILABLE_AFTER_S,
    Ledger,
    LedgerUnavailableError,
    open_ledger,
)
from ctxledger.domain import events as ev
from ctxledger.domain.errors import ConflictError
from ctxledger.domain.model import AgentIdentity, Source
from ctxledger.projections.audit import audit
from tests.pg_server import PgServer, find_pg_bin, start_pg_server
from tests.reliability._support import pick, record, rerun

pytestmark = pytest.mark.postgres

AGENT = "restarted"
KILLS = pick(20, 100)
START = datetime(2026, 12, 5, tzinfo=UTC)
SLACK_S = 5.0
"""A call may also wait for the server's crash recovery and its own retries' sleeps."""


@pytest.fixture
def private_pg() -> Iterator[PgServer]:
    bindir = find_pg_bin()
    if bindir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL server binaries not found and CI=true (install postgresql)")
        pytest.skip("PostgreSQL server binaries (pg_ctl) not found")
    with start_pg_server(bindir, durable_commits=True) as server:
        yield server


class Outcome:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str, float]] = []  # (text, outcome, seconds)
        self.unavailable: list[str] = []


def _drive(url: str, stop: threading.Event, out: Outcome) -> None:
    """The orchestrator: one record per turn, a build every 5th; an error moves on to the next
    turn (no retry, so an unacknowledged call may be stored at most once)."""
    engine = open_engine(url, clock=SteppingClock(START, timedelta(milliseconds=10)))
    try:
        engine.register_agent(AgentIdentity(agent_id=AGENT, role="worker", budget=4000))
        n = 0
        while not stop.is_set():
            text = f"call {n}: pytest tests/test_parser.py -q failed at line {n % 97}"
            started = time.monotonic()
            try:
                engine.record(AGENT, text, source=Source.TOOL_LOG)
                if n % 5 == 4:
                    engine.build(AGENT)
                outcome = "ok"
            except LedgerUnavailableError as exc:
                outcome = "unavailable"
                out.unavailable.append(str(exc))  # shown when a check fails
            except ConflictError:
                outcome = "conflict"
            except Exception as exc:  # the figure says what escaped untyped
                outcome = f"untyped {type(exc).__name__}: {exc}"
            with out.lock:
                out.calls.append((text, outcome, time.monotonic() - started))
            n += 1
    finally:
        engine.close()


def _stored_texts(url: str) -> tuple[Counter[str], int, list[str]]:
    with open_ledger(url) as ledger:
        records = [(r.position, r.event) for r in ledger.read_all()]
    texts = Counter(
        e.item.content for _, e in records if isinstance(e, ev.ItemRecorded) and e.agent_id == AGENT
    )
    return texts, len(records), [str(v) for v in audit(records)]


def test_acknowledged_calls_survive_server_kills_exactly_once(
    private_pg: PgServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = private_pg.url()
    landed: list[bool] = []  # a spy on the real check: how often an append's outcome was unknown
    real_landed = Ledger._landed

    def spy(self: Ledger, *args: Any) -> bool:
        found = real_landed(self, *args)
        landed.append(found)
        return found

    monkeypatch.setattr(Ledger, "_landed", spy)
    rng = random.Random(1205)
    out = Outcome()
    stop = threading.Event()
    writer = threading.Thread(target=_drive, args=(url, stop, out), daemon=True)
    started = time.monotonic()
    writer.start()
    down_s: list[float] = []
    resumed: list[float] = []
    try:
        time.sleep(0.5)
        for _ in range(KILLS):
            time.sleep(rng.uniform(0.05, 0.6))  # anywhere in a call: before, in, after COMMIT
            before = len(out.calls)
            t = time.monotonic()
            private_pg.kill()
            time.sleep(rng.uniform(0.0, 0.4))
            private_pg.start()
            down_s.append(time.monotonic() - t)
            deadline = time.monotonic() + UNAVAILABLE_AFTER_S + SLACK_S
            while time.monotonic() < deadline:  # the engine carries on after the restart
                with out.lock:
                    oks = [c for c in out.calls[before:] if c[1] == "ok"]
                if oks:
                    break
                time.sleep(0.02)
            else:
                pytest.fail(f"no call succeeded within {deadline - t:.0f} s of a restart")
            resumed.append(time.monotonic() - t)
        time.sleep(0.3)
    finally:
        stop.set()
        writer.join(timeout=UNAVAILABLE_AFTER_S + SLACK_S + 30)
    assert not writer.is_alive(), "the engine hung"
    elapsed = time.monotonic() - started

    calls = list(out.calls)
    outcomes = Counter(c[1] if not c[1].startswith("untyped") else "untyped" for c in calls)
    untyped = [c[1] for c in calls if c[1].startswith("untyped")]
    assert untyped == [], untyped[:5]
    acked = [c[0] for c in calls if c[1] == "ok"]
    stored, events, violations = _stored_texts(url)
    assert violations == []
    lost = [t for t in acked if stored[t] == 0]
    assert lost == [], f"{len(lost)} acknowledged calls not stored: {lost[:3]}"
    twice = {t: k for t, k in stored.items() if k > 1}
    assert twice == {}, f"{len(twice)} calls stored more than once"
    unacked_stored = sum(1 for c in calls if c[1] != "ok" and stored[c[0]] == 1)
    slowest = max(c[2] for c in calls)
    assert slowest <= UNAVAILABLE_AFTER_S + SLACK_S, f"a call took {slowest:.1f} s"
    assert len(acked) > KILLS, out.unavailable[:3]

    record(
        "server killed · postgres · one engine",
        scale=(
            f"{KILLS} kills (pg_ctl stop -m immediate, restart) under one engine recording "
            f"(a build every 5th call); {len(calls)} calls, durable commits"
        ),
        result=(
            f"{len(acked)} acknowledged calls all stored exactly once; 0 stored twice; "
            f"{outcomes['unavailable']} LedgerUnavailableError, {outcomes['conflict']} "
            f"ConflictError, 0 untyped; {sum(landed)} appends whose connection was lost after "
            f"their COMMIT found committed and acknowledged once ({len(landed) - sum(landed)} "
            f"found not committed and inserted again); {unacked_stored} failed calls had "
            f"landed anyway (stored once); slowest call {slowest:.1f} s (bound {UNAVAILABLE_AFTER_S:.0f} s); back "
            f"within {max(resumed):.1f} s of a kill (server down {min(down_s):.1f}–"
            f"{max(down_s):.1f} s); audit clean ({events} events); {elapsed:.1f}s"
        ),
        rerun_cmd=rerun("test_server_restart.py"),
        kills=KILLS,
        calls=len(calls),
        acknowledged=len(acked),
        unavailable=outcomes["unavailable"],
        slowest_s=round(slowest, 2),
        found_committed=sum(landed),
    )


def test_a_server_that_stays_down_is_unavailable_within_the_bound(private_pg: PgServer) -> None:
    url = private_pg.url()
    with open_engine(url, clock=SteppingClock(START, timedelta(seconds=1))) as engine:
        engine.register_agent(AgentIdentity(agent_id=AGENT, role="worker", budget=4000))
        engine.record(AGENT, "before the outage", source=Source.TOOL_LOG)
        private_pg.kill()
        try:
            timings: list[float] = []
            calls: list[Callable[[], object]] = [
                lambda: engine.record(AGENT, "during the outage", source=Source.TOOL_LOG)
            ]
            long_calls: list[Callable[[], object]] = [lambda: engine.build(AGENT)]
            calls += pick([], long_calls)  # each waits the whole bound
            for call in calls:
                t = time.monotonic()
                with pytest.raises(LedgerUnavailableError):
                    call()
                timings.append(time.monotonic() - t)
        finally:
            private_pg.start()
        assert max(timings) <= UNAVAILABLE_AFTER_S + SLACK_S, timings
        engine.record(AGENT, "after the outage", source=Source.TOOL_LOG)
    stored, _, violations = _stored_texts(url)
    assert violations == []
    assert stored == Counter({"before the outage": 1, "after the outage": 1})
    record(
        "server down · postgres",
        scale=pick("record", "record, then build") + " on an engine whose server stopped for good",
        result=(
            f"LedgerUnavailableError after {' and '.join(f'{t:.1f}' for t in timings)} s (bound "
            f"{UNAVAILABLE_AFTER_S:.0f} s); nothing written; the engine works again once the "
            "server is back"
        ),
        rerun_cmd=rerun("test_server_restart.py") + " -k stays_down",
        seconds=[round(x, 2) for x in timings],
    )
