"""Proof of forgetting: crypto-shredding on real SQLite files and a real PostgreSQL server.

Known secret strings (the 40+ kinds of ``tests/secret_corpus.py``, recorded under the
``allow`` policy so the scanner leaves them in) go into an encrypted ledger as item content,
steering notes, the sent text of clipped items, and then into every other free-text field of
every event type, field by field (``FREE_TEXT``; a structural check classifies every string
field of ``domain/events.py`` as free text or not, with the reason). Then:

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
import functools
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
from ctxledger.adapters.ledger import stream_id_for
from ctxledger.adapters.memory.catalog import MemoryCatalog
from ctxledger.adapters.memory.freshness import GitWorktreeProbe
from ctxledger.adapters.memory.project import ProjectMemory
from ctxledger.adapters.security.key_table import KeyRow
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


def _secret(n: int) -> str:
    return SECRET_CASES[n % len(SECRET_CASES)].text


def _every_field(engine: ContextEngine) -> None:
    """A secret in each free-text field of every event type the agent's stream can hold
    (``FREE_TEXT`` lists them): item provenance, controls' ``by`` and reasons, evidence, the
    settings' author, a build's request, rebuild and refresh reasons, failure reasons and a
    provider error's message and code."""
    item = engine.record(
        AGENT,
        "an observation with provenance",
        task=_secret(3),
        stage=_secret(4),
        phase=_secret(5),
        files=(_secret(6),),
        symbols=(_secret(7),),
        tool_signature=_secret(8),
    )
    engine.add_steering_note(AGENT, "keep the api stable", stage=_secret(9))
    engine.pin(AGENT, item.id, by=_secret(10))
    engine.unpin(AGENT, item.id, by=_secret(11))
    gone = engine.record(AGENT, "a stale observation to remove")
    engine.remove(AGENT, gone.id, reason=_secret(12))
    engine.configure(AGENT, budget=4001, by=_secret(13))
    engine.build(
        AGENT,
        task=_secret(14),
        phase=_secret(15),
        files=(_secret(16),),
        symbols=(_secret(17),),
        keywords=(_secret(18),),
        failures=(_secret(19),),
    )
    engine.rebuild(AGENT, reason=_secret(20))
    engine.refresh(AGENT, reason=_secret(21))
    engine.on_turn_error(AGENT, {"error": {"type": _secret(22), "message": _secret(23)}})
    # a build that fails and one that is interrupted, their reasons as the engine writes them
    stream = stream_id_for("default", AGENT)
    outcomes: tuple[type[ev.ContextBuildingFailed | ev.ContextBuildingInterrupted], ...] = (
        ev.ContextBuildingFailed,
        ev.ContextBuildingInterrupted,
    )
    for n, outcome in enumerate(outcomes):
        pack = f"{AGENT}/failing-{n}"
        closed: list[ev.Event] = [
            ev.ContextBuildingStarted(at=NOW, agent_id=AGENT, pack_id=pack),
            outcome(at=NOW, agent_id=AGENT, pack_id=pack, reason=_secret(24 + n)),
        ]
        engine.decide_and_append(stream, functools.partial(_given, closed))


def _given(events: list[ev.Event], _version: int) -> list[ev.Event]:
    return events


FREE_TEXT = {
    "AgentRegistered.agent.task",
    "AgentConfigured.by",
    *(
        f"{kind}.item.{field}"
        for kind in ("ItemRecorded", "SteeringNoteAdded")
        for field in ("content", "task", "stage", "phase", "files[]", "symbols[]", "tool_signature")
    ),
    "ItemPinned.by",
    "ItemUnpinned.by",
    "ItemRemoved.reason",
    "FindingVerified.by",
    "FindingVerified.evidence",
    "FindingPromoted.by",
    *(
        f"ContextBuildingStarted.request.{field}"
        for field in ("task", "phase", "files[]", "symbols[]", "keywords[]", "failures[]")
    ),
    "ContextBuildingStarted.force_rebuild",
    "ContextPackBuilt.decisions[].content",
    "ContextBuildingFailed.reason",
    "ContextBuildingInterrupted.reason",
    "GenerationRefreshed.reason",
    "GenerationRefreshed.phase",
    "TurnFailed.message",
    "TurnFailed.code",
}
"""Every free-text field of the events of an agent's stream: each gets a secret above, and
each is sealed under the item's or the agent's key (``domain.free_text``)."""

UNFILLABLE = {
    f"SteeringNoteAdded.item.{field}"
    for field in ("task", "phase", "files[]", "symbols[]", "tool_signature")
}
"""Fields no engine method fills (a steering note has text and a stage only); sealed by the
same item rule as ItemRecorded's (tests/property/test_content_seal.py)."""

NOT_FREE_TEXT = {
    # identifiers (screened when recorded, needed readable for streams and keys)
    *(f"{k}.agent_id" for k in ev.EVENT_TYPES),
    *(f"{k}.item_id" for k in ev.EVENT_TYPES),
    *(f"{k}.pack_id" for k in ev.EVENT_TYPES),
    *(f"{k}.memory_id" for k in ev.EVENT_TYPES),
    *(
        f"{k}.item.{f}"
        for k in ("ItemRecorded", "SteeringNoteAdded")
        for f in ("id", "agent", "source_id", "group")
    ),
    "AgentRegistered.agent.agent_id",
    "AgentRegistered.agent.parent",
    "AgentRegistered.agent.session_id",
    "AgentRegistered.agent.scope[]",
    "AgentConfigured.settings.scope.dependency_task_ids[]",
    "ContextBuildingStarted.session_id",
    "ContextBuildingStarted.stage_id",
    "ContextBuildingStarted.request.agent_id",
    "ContextBuildingStarted.request.session_id",
    "ContextBuildingStarted.request.stage_id",
    "ContextBuildingStarted.request.scope.dependency_task_ids[]",
    "ContextBuildingStarted.request.keep_ids[]",
    "ContextBuildingStarted.request.recent[]",
    "ContextPackBuilt.decisions[].item_id",
    "ContextPackBuilt.retired[]",
    "ContextPackBuilt.order_appended[]",
    "GenerationRefreshed.carried[]",
    "GenerationRefreshed.dropped[]",
    "RecallRendered.memory_ids[]",
    "ContentErased.items[]",
    "MemoryPromoted.partition",
    "FindingPromoted.from_agent",
    "FindingPromoted.from_item",
    # names the engine or a fixed vocabulary chose: role, model and workspace name where and
    # as what an agent runs; strategies, counters, reason codes, methods, segments, providers
    "AgentRegistered.agent.role",
    "AgentRegistered.agent.model",
    "AgentRegistered.agent.workspace",
    "AgentConfigured.settings.strategy",
    "ItemRecorded.item.redacted[]",
    "SteeringNoteAdded.item.redacted[]",
    "ContextBuildingStarted.request.role",
    "ContextBuildingStarted.request.strategy",
    "ContextBuildingStarted.request.purpose",
    "ContextBuildingStarted.counter",
    "ContextBuildingStarted.overrides[]",
    "ContextPackBuilt.strategy",
    "ContextPackBuilt.counter",
    "ContextPackBuilt.decisions[].reason",
    "ContextPackBuilt.decisions[].method",
    "ContextPackBuilt.compression.strategies_applied[]",
    "ContextPackBuilt.changed_segment",
    "ContextPackBuilt.purpose",
    "GenerationRefreshed.strategy",
    "TurnFailed.provider",
    "CacheUsageRecorded.provider",
    "RecallRendered.skipped{k}",
    "RecallRendered.skipped{}",
    # hashes
    "ContextPackBuilt.selection_hash",
    "ContextPackBuilt.prefix_hash",
    "MemoryPromoted.body_hash",
    "MemoryVerified.body_hash",
    # project-level text with no agent key, redacted and kept in the clear (docs/memory.md):
    # memory controls, the catalog's erasure report, the reason of an erase
    "MemoryVerified.by",
    "RecallSwitched.by",
    "MemoryMarkedStale.reason",
    "MemoryRetired.reason",
    "MemoryDeleted.erasure",
    "ContentErased.reason",
}
"""Every other string field of every event type, and why it is not sealed."""


def _str_fields(t: Any, path: str, seen: frozenset[type] = frozenset()) -> list[str]:
    """Every string field under the msgspec type *t*, as ``Type.field.sub[]`` paths."""
    import msgspec.inspect as mi

    if isinstance(t, mi.StrType):
        return [path]
    if isinstance(t, mi.StructType):
        if t.cls in seen:
            return []
        return [
            p for f in t.fields for p in _str_fields(f.type, f"{path}.{f.name}", seen | {t.cls})
        ]
    if isinstance(t, mi.VarTupleType | mi.ListType | mi.SetType | mi.FrozenSetType):
        return _str_fields(t.item_type, path + "[]", seen)
    if isinstance(t, mi.DictType):
        return _str_fields(t.key_type, path + "{k}", seen) + _str_fields(
            t.value_type, path + "{}", seen
        )
    if isinstance(t, mi.UnionType):
        return [p for u in t.types for p in _str_fields(u, path, seen)]
    return []


def _str_values(value: Any, path: str) -> list[tuple[str, str]]:
    """(path, text) of every string in the event *value*, paths as ``_str_fields`` names them."""
    if isinstance(value, str):
        return [(path, value)]
    if isinstance(value, msgspec.Struct):
        return [
            pv
            for f in value.__struct_fields__
            for pv in _str_values(getattr(value, f), f"{path}.{f}")
        ]
    if isinstance(value, tuple | list):
        return [pv for v in value for pv in _str_values(v, path + "[]")]
    if isinstance(value, dict):
        return [
            pv
            for k, v in value.items()
            for pv in _str_values(k, path + "{k}") + _str_values(v, path + "{}")
        ]
    return []


def test_every_string_field_of_every_event_is_classified() -> None:
    """A new string field fails here until it is sealed (``domain.free_text``, FREE_TEXT) or
    named as an id, a name, a hash or plain project text (NOT_FREE_TEXT)."""
    import msgspec.inspect as mi

    every = {
        p for name, cls in ev.EVENT_TYPES.items() for p in _str_fields(mi.type_info(cls), name)
    }
    assert every - FREE_TEXT - NOT_FREE_TEXT == set()
    assert every >= FREE_TEXT
    assert set() == FREE_TEXT & NOT_FREE_TEXT


def _record_secrets(engine: ContextEngine) -> list[str]:
    """Every kind of free text an agent's events carry, each holding secrets; returns the
    free-text fields (``FREE_TEXT`` paths) that were seen holding a secret."""
    engine.register_agent(
        AgentIdentity(agent_id=AGENT, role="worker", task=f"deploy {_secret(2)}", budget=4000),
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
    engine.verify_finding(
        AGENT, finding.id, by=_secret(26), evidence=f"ran with {SECRET_CASES[1].text}"
    )
    engine.promote_finding(AGENT, finding.id, by=_secret(27))
    engine.build(AGENT)
    engine.on_turn_error(AGENT, {"error": {"message": f"bad key {SECRET_CASES[2].text}"}})
    engine.build(AGENT)
    builds = [r.event for r in engine.ledger.read_all() if isinstance(r.event, ev.ContextPackBuilt)]
    sent = [d for b in builds for d in b.decisions if d.content and d.item_id == big.id]
    assert sent, "the long log was expected to be sent clipped or compressed"
    _every_field(engine)
    engine.build(AGENT)
    engine.checkpoint()
    needles = _needles()
    held = {
        path
        for r in engine.ledger.read_all()
        if ev.event_agent(r.event) == AGENT
        for path, text in _str_values(r.event, type(r.event).__name__)
        if any(n in text for n in needles)
    }
    missing = FREE_TEXT - UNFILLABLE - held
    assert missing == set(), f"free-text fields the recording left without a secret: {missing}"
    return sorted(held & FREE_TEXT)


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
        fields = _record_secrets(engine)
        assert engine.ledger.keyring.encrypted
        tokens = {i: it.token_count for i, it in engine.pool(AGENT).items.items()}
        decisions = _decisions(engine)
        removed_before = len(engine.pool(AGENT).removed)
        events = engine.ledger.max_position()
        rows = engine.ledger.keyring.table.rows()
    wrapped, data_keys = _keys_of(rows, AGENT)
    assert len(data_keys) > len(SECRET_CASES)

    assert _found(scan(), _needles()) == [], "free text is stored in the clear"

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
        assert engine.ledger.max_position() == events + len(tokens) - removed_before + 1
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
            f"{len(SECRET_CASES)} secret shapes in items, steering notes, a clipped log and "
            f"every other free-text field ({len(fields)} fields of "
            f"{len({f.split('.')[0] for f in fields})} event types); {len(tokens)} items, "
            f"{len(data_keys)} data keys; scan of {where}"
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
        fields=len(fields),
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
