"""Proof of forgetting: crypto-shredding on real SQLite files and a real PostgreSQL server.

Known secret strings (the 40+ kinds of ``tests/secret_corpus.py``, recorded under the
``allow`` policy so the scanner leaves them in) go into an encrypted ledger as item content,
steering notes, the sent text of clipped items, verification evidence and a provider's error
message. Then:

* before any erase, no byte of the database files (main, WAL, SHM) — or of a ``pg_dump`` —
  holds any of them, in the clear, JSON-escaped or hex-encoded (a control run on a plain
  ledger finds them all, so the scan can fail);
* after ``erase`` none of them, none of the agent's data keys and none of its wrapped keys
  is found either, while replay, ``replay --verify``, ``audit --rederive`` and ``inspect``
  still work, every event is still there, token counts and decisions are unchanged, and the
  erased text reads ``[erased: reason, at]``.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.freshness import GitWorktreeProbe
from ctxledger.adapters.key_table import KeyRow
from ctxledger.adapters.memory_catalog import MemoryCatalog
from ctxledger.adapters.project_memory import ProjectMemory
from ctxledger.domain import events as ev
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import AgentIdentity, Layer, Source
from ctxledger.domain.request import Scope
from ctxledger.domain.settings import AgentSettings
from tests.pg_server import find_pg_bin
from tests.reliability._support import record, rerun
from tests.secret_corpus import SECRET_CASES

MASTER = bytes(range(100, 132))
NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
AGENT = "worker-1"
OTHER = "worker-2"
SCRIPT = Path(sys.executable).parent / "ctxledger"
"""The console script pip installed: what users run."""


def _needles() -> list[str]:
    return [n for case in SECRET_CASES for n in case.needles]


def _literal_needles() -> list[str]:
    """The needles that occur verbatim in the recorded text (a few cases hold theirs only
    split or encoded): what a plain ledger must be seen to hold."""
    return [n for case in SECRET_CASES for n in case.needles if n in case.text]


def _forms(text: str) -> list[bytes]:
    """How *text* could sit in a database or a dump: as UTF-8, JSON-escaped, and each of
    those hex-encoded (a bytea column in ``pg_dump``)."""
    raw = text.encode()
    escaped = msgspec.json.encode(text)[1:-1]
    return [raw, escaped, raw.hex().encode(), escaped.hex().encode()]


def _found(blob: bytes, texts: list[str]) -> list[str]:
    return [t for t in texts if any(form in blob for form in _forms(t))]


def _engine(url: str, *, encrypt: bool = True) -> ContextEngine:
    return open_engine(
        url,
        clock=SteppingClock(NOW, timedelta(seconds=1)),
        master_key=MASTER if encrypt else None,
        encrypt=encrypt,
    )


def _record_secrets(engine: ContextEngine) -> None:
    """Every kind of free text an agent's events carry, each holding secrets."""
    engine.register_agent(
        AgentIdentity(agent_id=AGENT, role="worker", task="deploy", budget=4000),
        AgentSettings(secrets="allow", scope=Scope(clip_above_tokens=300)),
    )
    engine.register_agent(AgentIdentity(agent_id=OTHER, role="worker", task="other"))
    engine.record(OTHER, "a neighbour's ordinary observation about parser.py")
    for n, case in enumerate(SECRET_CASES):
        text = f"step {n}: {case.kind}\n{case.text}"
        if n % 4 == 3:
            engine.add_steering_note(AGENT, text)
        else:
            engine.record(AGENT, text, source=Source.TOOL_LOG, tool_signature=f"run {n}")
        if n % 8 == 0:
            engine.build(AGENT)
    # one long log with secrets all through it: sent clipped, its sent text in the decision
    long_log = "\n".join(f"line {k}: {c.text}" for k, c in enumerate(SECRET_CASES * 3))
    big = engine.record(AGENT, long_log, source=Source.TOOL_LOG, layer=Layer.L0)
    finding = engine.record(
        AGENT, f"finding: {SECRET_CASES[0].text}", source=Source.WORKER_FINDING, layer=Layer.L2
    )
    engine.verify_finding(AGENT, finding.id, evidence=f"ran with {SECRET_CASES[1].text}")
    engine.build(AGENT)
    engine.on_turn_error(AGENT, {"error": {"message": f"bad key {SECRET_CASES[2].text}"}})
    engine.build(AGENT)
    builds = [r.event for r in engine.ledger.read_all() if isinstance(r.event, ev.ContextPackBuilt)]
    sent = [d for b in builds for d in b.decisions if d.content and d.item_id == big.id]
    assert sent, "the long log was expected to be sent clipped or compressed"
    engine.checkpoint()


def _decisions(engine: ContextEngine) -> list[Any]:
    """Every recorded decision without its sent text, in log order."""
    return [
        [
            (d.item_id, d.action, d.reason, d.tokens_before, d.tokens_after)
            for d in r.event.decisions
        ]
        for r in engine.ledger.read_all()
        if isinstance(r.event, ev.ContextPackBuilt)
    ]


def _keys_of(rows: list[KeyRow], agent: str) -> tuple[list[bytes], list[bytes]]:
    """The agent's wrapped keys and, unwrapped with the master key, its data keys."""
    wrapped = [r.wrapped for r in rows if r.agent_id == agent and r.wrapped is not None]
    master = AESGCM(MASTER)
    data = [
        master.decrypt(w[:12], w[12:], f"{agent}\x00{r.item_id}".encode())
        for r, w in zip(
            [r for r in rows if r.agent_id == agent and r.wrapped], wrapped, strict=True
        )
    ]
    return wrapped, data


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CTXLEDGER_MASTER_KEY": base64.b64encode(MASTER).decode()}
    return subprocess.run(
        [str(SCRIPT), *args], check=False, capture_output=True, text=True, env=env, timeout=300
    )


def _forget_and_check(url: str, scan: Any, *, where: str, test: str) -> None:
    """The whole proof on one store; *scan* returns every byte the store holds now
    (*where* names it in the figure)."""
    with _engine(url) as engine:
        _record_secrets(engine)
        assert engine.ledger.keyring.encrypted
        tokens = {i: it.token_count for i, it in engine.pool(AGENT).items.items()}
        decisions = _decisions(engine)
        events = engine.ledger.max_position()
        rows = engine.ledger.keyring.table.rows()
    wrapped, data_keys = _keys_of(rows, AGENT)
    assert len(data_keys) > len(SECRET_CASES)

    assert _found(scan(), _needles()) == [], "content is stored in the clear"

    with _engine(url) as engine:
        assert engine.pool(AGENT).items[next(iter(tokens))].content.startswith("step 0")
        erased = engine.erase(AGENT, reason="leaked credentials")
        assert set(erased.items) == set(tokens)
        assert engine.pool(OTHER).candidates()[0].content.startswith("a neighbour")

    blob = scan()
    assert _found(blob, _needles()) == []
    leaked = [k for k in [*data_keys, *wrapped] if k in blob or k.hex().encode() in blob]
    assert leaked == [], f"{len(leaked)} data or wrapped keys survive the erase"

    with _engine(url) as engine:
        pool = engine.pool(AGENT)
        assert {i: it.token_count for i, it in pool.items.items()} == tokens
        assert all(
            it.content.startswith("[erased: leaked credentials, ") for it in pool.items.values()
        )
        assert set(pool.removed) == set(tokens)
        assert _decisions(engine) == decisions
        assert engine.ledger.max_position() == events + len(tokens) + 1
        assert "leaked" not in engine.build(AGENT).prompt.text
        with pytest.raises(InvalidInputError, match="new item id"):
            engine.record(AGENT, "again", item_id=next(iter(tokens)))

    verify = _cli("replay", "--store", url, "--verify", "--json")
    assert verify.returncode == 0, verify.stderr
    audit = _cli("audit", "--store", url, "--rederive", "--json")
    assert audit.returncode == 0, audit.stderr
    report = json.loads(audit.stdout)
    assert report["violations"] == []
    assert report["tampered"] == []
    assert report["mismatches"] == 0
    assert report["not_rederivable_reasons"].get("content erased", 0) > 0
    inspect = _cli("inspect", "--store", url, "--agent", AGENT)
    assert inspect.returncode == 0, inspect.stderr
    assert "erase\t(every item)\tleaked credentials" in inspect.stdout  # the control shown
    backend = url.split(":", 1)[0]
    record(
        f"crypto-shredding · {backend}",
        scale=(
            f"{len(SECRET_CASES)} secret shapes in items, steering notes, a clipped log, "
            f"evidence; {len(tokens)} items, {len(data_keys)} data keys; scan of {where}"
        ),
        result=(
            f"before erase: 0 of {len(_needles())} needles in the clear; after: 0 needles, "
            f"0 of {len(data_keys) + len(wrapped)} data/wrapped keys; token counts and "
            f"the decisions of {len(decisions)} builds unchanged; replay --verify, audit --rederive "
            f"({report['not_rederivable_reasons']['content erased']} builds on erased text) "
            "and inspect clean"
        ),
        rerun_cmd=rerun(f"test_forgetting.py::{test}"),
        needles=len(_needles()),
        items=len(tokens),
        keys=len(data_keys),
    )


def _sqlite_bytes(path: Path) -> bytes:
    files = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    return b"".join(f.read_bytes() for f in files if f.exists())


def test_sqlite_content_is_sealed_and_an_erase_leaves_no_byte(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    _forget_and_check(
        f"sqlite:///{path}",
        lambda: _sqlite_bytes(path),
        where="ledger.db + -wal + -shm",
        test="test_sqlite_content_is_sealed_and_an_erase_leaves_no_byte",
    )


def test_the_scan_finds_secrets_in_a_plain_ledger(tmp_path: Path) -> None:
    """The control: the same recording without encryption is found by the same scan."""
    path = tmp_path / "plain.db"
    with _engine(f"sqlite:///{path}", encrypt=False) as engine:
        _record_secrets(engine)
        assert not engine.ledger.keyring.encrypted
        with pytest.raises(InvalidInputError, match="does not encrypt"):
            engine.erase(AGENT, reason="leak")
    literal = _literal_needles()
    assert len(literal) > len(SECRET_CASES)
    assert set(_found(_sqlite_bytes(path), literal)) == set(literal)


@pytest.fixture
def pg_dump_bin() -> str:
    found = shutil.which("pg_dump")
    bindir = find_pg_bin()
    if bindir and Path(bindir, "pg_dump").exists():
        found = str(Path(bindir, "pg_dump"))
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail("pg_dump not found and CI=true (install postgresql)")
        pytest.skip("pg_dump not found")
    return found


def _pg_dump(pg_dump: str, url: str) -> bytes:
    done = subprocess.run([pg_dump, "--dbname", url], capture_output=True, timeout=120, check=True)
    return done.stdout


def test_postgres_content_is_sealed_and_an_erase_leaves_nothing_in_a_dump(
    pg_url: str, pg_dump_bin: str
) -> None:
    _forget_and_check(
        pg_url,
        lambda: _pg_dump(pg_dump_bin, pg_url),
        where="a pg_dump of the database",
        test="test_postgres_content_is_sealed_and_an_erase_leaves_nothing_in_a_dump",
    )


def test_the_dump_scan_finds_secrets_in_a_plain_postgres_ledger(
    pg_url: str, pg_dump_bin: str
) -> None:
    with _engine(pg_url, encrypt=False) as engine:
        _record_secrets(engine)
    literal = _literal_needles()
    assert set(_found(_pg_dump(pg_dump_bin, pg_url), literal)) == set(literal)


def test_an_item_erase_keeps_the_rest_readable(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with _engine(url) as engine:
        engine.register_agent(AgentIdentity(agent_id=AGENT, role="worker", budget=4000))
        gone = engine.record(AGENT, "token ABCDEFGH12345678 in the log")
        kept = engine.record(AGENT, "the parser fails on empty input")
        engine.build(AGENT)
        engine.erase(AGENT, gone.id, reason="token")
        text = engine.build(AGENT).prompt.text
        assert "ABCDEFGH12345678" not in text
        assert "the parser fails" in text
    assert b"ABCDEFGH12345678" not in _sqlite_bytes(tmp_path / "ledger.db")
    with _engine(url) as engine:
        assert engine.pool(AGENT).items[kept.id].content == kept.content
        assert engine.pool(AGENT).items[gone.id].content.startswith("[erased: token, ")


def test_the_key_table_is_apart_from_the_events(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with _engine(f"sqlite:///{path}") as engine:
        engine.register_agent(AgentIdentity(agent_id=AGENT, role="worker"))
        engine.record(AGENT, "some text")
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "ctxledger_keys" in tables


def _with_memory(url: str, tmp_path: Path, *, encrypt: bool) -> ContextEngine:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    memory = ProjectMemory(
        MemoryCatalog.open(tmp_path / "catalog.db"),
        probe_for=lambda a: GitWorktreeProbe(a.workspace),
    )
    engine = open_engine(
        url,
        clock=SteppingClock(NOW, timedelta(seconds=1)),
        master_key=MASTER if encrypt else None,
        encrypt=encrypt,
        memory=memory,
    )
    engine.register_agent(
        AgentIdentity(agent_id=AGENT, role="worker", workspace=str(ws), budget=4000)
    )
    return engine


BODY = "Root cause: the session refresh compares naive and aware datetimes (QWERTY-7731)"


def test_deleting_a_memory_erases_the_item_it_came_from(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    engine = _with_memory(f"sqlite:///{path}", tmp_path, encrypt=True)
    item = engine.record(AGENT, BODY, layer=Layer.L2, source=Source.WORKER_FINDING)
    memory_id = engine.promote(AGENT, item.id)
    deleted = engine.delete_memory(memory_id)
    report = json.loads(deleted.erasure)
    assert report["ledger"] == {"erased": [{"agent": AGENT, "item": item.id}]}
    assert engine.pool(AGENT).items[item.id].content.startswith(f"[erased: memory {memory_id}")
    engine.close()
    assert engine.memory is not None
    engine.memory.catalog.close()
    assert b"QWERTY-7731" not in _sqlite_bytes(path)
    assert b"QWERTY-7731" not in _sqlite_bytes(tmp_path / "catalog.db")


def test_deleting_a_memory_from_a_plain_ledger_says_where_the_text_remains(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    engine = _with_memory(f"sqlite:///{path}", tmp_path, encrypt=False)
    item = engine.record(AGENT, BODY, layer=Layer.L2, source=Source.WORKER_FINDING)
    memory_id = engine.promote(AGENT, item.id)
    report = json.loads(engine.delete_memory(memory_id).erasure)
    assert report["ledger"]["copies"] == [{"agent": AGENT, "item": item.id}]
    assert "does not encrypt content" in report["ledger"]["note"]
    engine.close()
    assert engine.memory is not None
    engine.memory.catalog.close()
    assert b"QWERTY-7731" in _sqlite_bytes(path)  # exactly what the report says
