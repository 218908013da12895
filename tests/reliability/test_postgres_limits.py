"""PostgreSQL at the edges (issue 35, item 2): appends of any size, databases that are not
UTF-8, and two ledgers in one database (``?schema=``) kept wholly apart.

- One ``record_many`` of 10,000 items never returned (one INSERT of 10,000 rows in psycopg's
  pipeline); the ledger now inserts a large append in chunks inside one transaction. The test
  appends 50,000 items in one call: all stored once, in order, contiguous, audit clean.
- A ``SQL_ASCII`` database took every append's bytes and then failed every call; it is
  refused at open with one line, for writers and readers, before anything is written.
- Two ledgers in one database, ``?schema=a`` and ``?schema=b``, written by engines as a user
  would: ``doctor``, ``replay --verify`` and ``audit`` are clean on each, each sees only its
  own events and saved read models, and a stream lock held in one does not hold the same
  stream of the other."""

from __future__ import annotations

import json
import time
from pathlib import Path

import psycopg
import pytest
from eventsourcing.persistence import IntegrityError, StoredEvent

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.ledger import open_ledger, stream_id_for
from ctxledger.domain.errors import StoreKindError
from ctxledger.domain.events import ItemRecorded
from ctxledger.domain.model import AgentIdentity
from tests.e2e._cli import run
from tests.reliability._support import pick, record, rerun

pytestmark = pytest.mark.postgres


def test_one_append_of_50000_items_is_stored_whole(pg_url: str, tmp_path: Path) -> None:
    count = pick(50_000, 100_000)
    engine = open_engine(pg_url)
    try:
        engine.register_agent(AgentIdentity(agent_id="a", role="worker"))
        items = [
            engine.make_item("a", f"observation {k} of a long tool loop") for k in range(count)
        ]
        started = time.perf_counter()
        stored = engine.record_many("a", items)
        took = time.perf_counter() - started
        assert len(stored) == count
        end = engine.ledger.max_position()
    finally:
        engine.close()
    with open_ledger(pg_url, must_exist=True) as ledger:
        rows = list(ledger.read_stream(stream_id_for("default", "a")))
    versions = [r.version for r in rows]
    assert versions == list(range(1, len(rows) + 1))  # contiguous, no gap, nothing twice
    recorded = [r.event.item.id for r in rows if isinstance(r.event, ItemRecorded)]
    assert recorded == [i.id for i in stored]
    out = run("audit", "--store", pg_url, "--json", cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr
    record(
        "postgres · one append of 50,000 items" if count == 50_000 else "postgres · one append",
        scale=f"record_many of {count} items in one call (chunks of 1,000 rows, one transaction)",
        result=f"all {count} stored once, in order, versions contiguous; audit clean; "
        f"{took:.1f} s ({end} events)",
        rerun_cmd=rerun("test_postgres_limits.py -k 50000"),
        seconds=round(took, 2),
    )


def test_a_large_append_failing_in_its_last_chunk_leaves_nothing(pg_url: str) -> None:
    """All or nothing: 2,500 rows whose last chunk hits a (stream, version) already taken
    store none of the 2,000 before it."""
    with open_ledger(pg_url) as ledger:
        recorder = ledger._recorder
        recorder.insert_events([StoredEvent("s", 2_400, "X.v1", b"{}")])
        rows = [StoredEvent("s", v, "X.v1", b"{}") for v in range(1, 2_501)]
        with pytest.raises(IntegrityError):
            recorder.insert_events(rows)
        assert ledger.max_position() == 1
        assert [r.originator_version for r in recorder.select_events("s")] == [2_400]


def test_a_database_that_is_not_utf8_is_refused(pg_url: str, tmp_path: Path) -> None:
    base = pg_url.rsplit("/", 1)[0]
    name = pg_url.rsplit("/", 1)[1] + "_ascii"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(
            f"CREATE DATABASE \"{name}\" ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' "
            "TEMPLATE template0"
        )
    url = f"{base}/{name}"
    with pytest.raises(StoreKindError, match="SQL_ASCII, not UTF8"):
        open_engine(url)
    for args in (("audit",), ("doctor",), ("inspect", "--agent", "a")):
        out = run(*args, "--store", url, cwd=tmp_path)
        assert out.returncode == 1, out.stderr
        assert out.stderr.count("\n") == 1, out.stderr
        assert "not UTF8" in out.stderr
    with psycopg.connect(url, autocommit=True) as conn:  # nothing was created there
        tables = conn.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name LIKE 'ctxledger%'"
        ).fetchone()
    assert tables == (0,)


def _write(url: str, agent: str, count: int) -> None:
    engine = open_engine(url)
    try:
        engine.register_agent(AgentIdentity(agent_id=agent, role="worker", budget=4_000))
        for k in range(count):
            engine.record(agent, f"{agent} observation {k}")
        engine.build(agent)
        engine.checkpoint()
    finally:
        engine.close()


def test_two_ledgers_in_one_database_are_kept_apart(pg_url: str, tmp_path: Path) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA a")  # b: made by its first writer
    a, b = f"{pg_url}?schema=a", f"{pg_url}?schema=b"
    _write(a, "alpha", 7)
    _write(b, "beta", 3)
    _write(a, "alpha", 2)  # a writes on after b saved its read models
    for url, agent, other in ((a, "alpha", "beta"), (b, "beta", "alpha")):
        for args in (("audit",), ("doctor",), ("replay", "--verify")):
            out = run(*args, "--store", url, "--json", cwd=tmp_path)
            assert out.returncode == 0, (args, url, out.stdout, out.stderr)
            doc = json.loads(out.stdout.splitlines()[0])
            assert doc.get("loss", "") == "", doc
        seen = run("inspect", "--store", url, "--agent", agent, "--json", cwd=tmp_path)
        assert seen.returncode == 0, seen.stderr
        missing = run("inspect", "--store", url, "--agent", other, cwd=tmp_path)
        assert missing.returncode == 1  # the other ledger's agent is not here
    with open_ledger(a, must_exist=True) as la, open_ledger(b, must_exist=True) as lb:
        agents_a = {r.stream_id for r in la.read_all()}
        agents_b = {r.stream_id for r in lb.read_all()}
        assert agents_a == {stream_id_for("default", "alpha")}
        assert agents_b == {stream_id_for("default", "beta")}
        # a stream held in one ledger does not hold the same stream name in the other
        stream = stream_id_for("default", "gamma")
        with la.stream_lock(stream), lb.stream_lock(stream, timeout=1.0):
            pass
    record(
        "postgres · two ledgers in one database (?schema=)",
        scale="engines writing ?schema=a and ?schema=b of one database, in turns",
        result="audit, doctor, replay --verify clean on each; each sees only its own events, "
        "agents and saved read models; stream locks apart",
        rerun_cmd=rerun("test_postgres_limits.py -k two_ledgers"),
    )
