"""Every guard is checked under the agent's stream lock (issue 35, item 5).

``remove`` refuses a pinned or mandatory item and ``verify_finding`` refuses recalled
memory. A check made on state read *before* the stream lock can be undone by another writer
that takes the lock first: engine A reads "not pinned", engine B pins the item, A's removal
lands — a pinned item gone, which the audit names ``pinned_removed``. Each case here holds the
lock in engine B, starts A's call in a thread (it waits on the lock), changes the state in B
while A waits, releases, and checks that A's call was refused on the state it met under the
lock, on SQLite and PostgreSQL (two engines, two connections, one ledger)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.ledger import open_ledger
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import AgentIdentity, Source
from ctxledger.projections.audit import audit
from tests.reliability._support import record, rerun


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


def _interleave(
    holder: ContextEngine,
    agent_id: str,
    waiter_call: Callable[[], object],
    change: Callable[[], object],
) -> BaseException | None:
    """Hold *agent_id*'s stream in *holder*; run *waiter_call* in a thread (it reaches the
    lock and waits); *change* the state under the held lock; release; return what the
    waiter raised (None: it succeeded)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            waiter_call()
        except BaseException as exc:
            outcome.append(exc)
        else:
            outcome.append(None)

    stream = holder._stream(agent_id)
    with holder.ledger.stream_lock(stream):
        waiter = threading.Thread(target=run)
        waiter.start()
        time.sleep(0.4)  # the waiter has read its state and is blocked on the lock
        assert waiter.is_alive(), "the waiter did not wait for the stream lock"
        change()
    waiter.join(timeout=30)
    assert not waiter.is_alive()
    return outcome[0]


@contextmanager
def _two_engines(url: str) -> Iterator[tuple[ContextEngine, ContextEngine]]:
    """Two engines on one ledger, agent ``w`` registered; both closed after, and the audit of
    the ledger then clean."""
    a = open_engine(url)
    b = open_engine(url)
    try:
        a.register_agent(AgentIdentity(agent_id="w", role="worker"))
        yield a, b
    finally:
        a.close()
        b.close()
    assert _violations(url) == []


def _violations(url: str) -> list[str]:
    with open_ledger(url, must_exist=True) as ledger:
        return [v.rule for v in audit((r.position, r.event) for r in ledger.read_all())]


def test_a_pin_taken_while_a_removal_waits_refuses_the_removal(shared_url: str) -> None:
    with _two_engines(shared_url) as (a, b):
        item = a.record("w", "the failing test is test_parse")
        b.catch_up()
        refused = _interleave(
            b,
            "w",
            lambda: a.remove("w", item.id, reason="stale"),
            lambda: b.pin("w", item.id, by="reviewer"),
        )
        assert isinstance(refused, InvalidInputError)
        assert "pinned" in str(refused)
        a.catch_up()
        assert item.id not in a.pool("w").removed
        assert a.pool("w").current(item.id).pinned
    record(
        f"guards under the stream lock · {shared_url.split(':', maxsplit=1)[0]} · pin vs remove",
        scale="2 engines on one ledger; a removal waits on the lock while the other pins",
        result="removal refused on the state met under the lock; item pinned, in the pool; "
        "audit clean",
        rerun_cmd=rerun("test_guards_under_lock.py"),
    )


def test_a_verification_checks_the_item_it_meets_under_the_lock(shared_url: str) -> None:
    """The item a verification checks is the one in the pool under the lock: engine A
    verifies a finding id it has not seen yet while B records that very finding — A must
    meet B's item under the lock and verify exactly it, not refuse it as unknown on the
    state it read before (the check that read state before the lock did)."""
    with _two_engines(shared_url) as (a, b):
        b.catch_up()
        item = b.make_item("w", "cache keys are per tenant", source=Source.WORKER_FINDING)
        refused = _interleave(
            b,
            "w",
            lambda: a.verify_finding("w", item.id, by="ci", evidence="test run 41"),
            lambda: b.record("w", item),
        )
        assert refused is None
        a.catch_up()
        assert item.id in a.pool("w").verified


def test_an_unpin_while_a_removal_waits_lets_the_removal_land(shared_url: str) -> None:
    """The other direction: the guard reads the state under the lock, so a removal refused
    beforehand (pinned) lands once the item was unpinned while it waited."""
    with _two_engines(shared_url) as (a, b):
        item = a.record("w", "old plan: rewrite the parser", pinned=True)
        b.catch_up()
        refused = _interleave(
            b,
            "w",
            lambda: a.remove("w", item.id, reason="plan changed"),
            lambda: b.unpin("w", item.id, by="reviewer"),
        )
        assert refused is None
        a.catch_up()
        assert item.id in a.pool("w").removed
