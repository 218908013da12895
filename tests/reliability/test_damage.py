"""Damage contained and reported: every kind of damaged row, written straight into the real
database behind the ledger's back, is one line naming its position in every reader (the
installed `ctxledger` as a subprocess, and the web inspector), never a traceback; `ctxledger
doctor` lists every damaged row in one pass; `doctor --quarantine` moves them aside, after
which the rest replays, `audit` reports exactly the quarantined rows (and the chain breaks
they explain), undamaged streams stay writable and damaged ones refuse appends."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.ledger import EVENTS_TABLE, QUARANTINE_TABLE, stream_id_for
from ctxledger.adapters.web.app import create_app
from ctxledger.domain.errors import DamagedStreamError, DecodeError
from ctxledger.domain.model import AgentIdentity
from tests.e2e._cli import run
from tests.reliability._raw_store import STORE_KINDS, raw_store

AGENTS = ("a", "b", "c")


@dataclass
class Raw:
    """The events table of the real database, edited directly."""

    kind: str
    con: Any

    def _q(self, sql: str) -> str:
        sql = sql.replace("{t}", EVENTS_TABLE).replace("{q}", QUARANTINE_TABLE)
        if self.kind == "sqlite":
            return sql.replace("{pos}", "rowid")
        return sql.replace("{pos}", "notification_id").replace("?", "%s")

    def execute(self, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        cur = self.con.execute(self._q(sql), params)
        rows = cur.fetchall() if cur.description else []
        self.con.commit()
        return [tuple(r) for r in rows]

    def row(self, agent: str, version: int) -> tuple[int, str, bytes]:
        ((pos, topic, state),) = self.execute(
            "SELECT {pos}, topic, state FROM {t} WHERE originator_id=? AND originator_version=?",
            (stream_id_for("default", agent), version),
        )
        return int(pos), str(topic), bytes(state)

    def set(self, agent: str, version: int, column: str, value: Any) -> None:
        self.execute(
            f"UPDATE {{t}} SET {column}=? WHERE originator_id=? AND originator_version=?",
            (value, stream_id_for("default", agent), version),
        )

    def count(self, table: str = "{t}") -> int:
        ((n,),) = self.execute(f"SELECT count(*) FROM {table}")
        return int(n)


def _unknown_topic(raw: Raw, agent: str, version: int) -> None:
    raw.set(agent, version, "topic", "NoSuchEvent.v1")


def _future_version(raw: Raw, agent: str, version: int) -> None:
    raw.set(agent, version, "topic", "ItemRecorded.v99")


def _malformed_json(raw: Raw, agent: str, version: int) -> None:
    raw.set(agent, version, "state", raw.row(agent, version)[2][:40])


def _wrong_type_tag(raw: Raw, agent: str, version: int) -> None:
    state = raw.row(agent, version)[2]
    assert b'"type":"ItemRecorded"' in state
    raw.set(agent, version, "state", state.replace(b'"ItemRecorded"', b'"ItemPinned"'))


def _null_payload(raw: Raw, agent: str, version: int) -> None:
    raw.set(agent, version, "state", None)


def _text_payload(raw: Raw, agent: str, version: int) -> None:
    raw.execute(
        "UPDATE {t} SET state=CAST(state AS TEXT) WHERE originator_id=? AND originator_version=?",
        (stream_id_for("default", agent), version),
    )
    ((kind,),) = raw.execute(
        "SELECT typeof(state) FROM {t} WHERE originator_id=? AND originator_version=?",
        (stream_id_for("default", agent), version),
    )
    assert kind == "text"


def _null_topic(raw: Raw, agent: str, version: int) -> None:
    raw.set(agent, version, "topic", None)


Damage = Callable[[Raw, str, int], None]
DAMAGES: dict[str, tuple[Damage, str]] = {
    # name: (how to write it, the kind `doctor` must name)
    "unknown topic": (_unknown_topic, "unknown_topic"),
    "future version": (_future_version, "future_schema"),
    "malformed JSON": (_malformed_json, "malformed_json"),
    "wrong type tag": (_wrong_type_tag, "wrong_type"),
    "NULL payload": (_null_payload, "null_payload"),
    "TEXT payload": (_text_payload, "text_payload"),
    "NULL topic": (_null_topic, "null_topic"),
}
SQLITE_ONLY = {"TEXT payload"}  # a PostgreSQL bytea column cannot hold text


def _history(url: str) -> None:
    """Per agent: registered and configured (v1–2), 4 items (v3–6), a build (v7–8), 4 later
    items (v9–12) — the later items are what the tests damage (nothing refers to them)."""
    engine = open_engine(url)
    for agent in AGENTS:
        engine.register_agent(AgentIdentity(agent_id=agent, role="worker", budget=4_000))
        for i in range(4):
            engine.record(agent, f"{agent} observation {i}")
        engine.build(agent)
        for i in range(4):
            engine.record(agent, f"{agent} later observation {i}")
    engine.close()


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Raw]]:
    with raw_store(request, tmp_path, _history) as (kind, url, con):
        yield url, Raw(kind, con)


def _record_once(url: str, agent: str, text: str) -> None:
    engine = open_engine(url)
    try:
        engine.record(agent, text)
    finally:
        engine.close()


def _one_line_error(out: Any, position: int) -> str:
    assert out.returncode == 1, (out.returncode, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr + out.stdout, out.stderr
    assert "unexpected" not in out.stderr, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert f"position {position}" in lines[0], lines[0]
    return str(lines[0])


READERS = [
    ("replay",),
    ("replay", "--verify"),
    ("audit",),
    ("inspect",),
    ("generations", "--agent", "a"),
]


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_every_reader_names_the_damaged_position_in_one_line(
    store: tuple[str, Raw], tmp_path: Path, damage: str
) -> None:
    url, raw = store
    if raw.kind == "postgres" and damage in SQLITE_ONLY:
        # Not a case to skip: PostgreSQL refuses the damage itself (a bytea column holds
        # bytes only), so no reader can ever meet it there.
        import psycopg

        with pytest.raises(psycopg.Error):
            raw.execute(
                "UPDATE {t} SET state='not bytes'::text WHERE originator_id=? "
                "AND originator_version=?",
                (stream_id_for("default", "a"), 10),
            )
        raw.con.rollback()
        return
    position = raw.row("a", 10)[0]
    DAMAGES[damage][0](raw, "a", 10)
    # the engine saved its read models past the damage when it closed; readers would show
    # them without reading the row again. Damage written before a save (or a writer killed
    # before saving) is what they meet: fold from the log.
    raw.execute("DELETE FROM ctxledger_projections")
    for command in READERS:
        line = _one_line_error(run(*command, "--store", url, cwd=tmp_path), position)
        assert "ctxledger doctor" in line, line
    # the web inspector: a clean error page naming the position (TestClient re-raises any
    # exception that reached the server's 500 handler, so a traceback fails here)
    with TestClient(create_app(url)) as client:
        for path in ("/", "/agents/a", "/agents/c"):
            page = client.get(path)
            assert page.status_code == 500, (path, page.status_code)
            assert f"event at position {position}" in page.text, page.text[:2000]
            assert "Traceback" not in page.text
    # the engine refuses the store the same way (typed, with the position)
    with pytest.raises(DecodeError, match=f"position {position}"):
        _record_once(url, "c", "after the damage")


def _damage_everything(raw: Raw) -> dict[int, tuple[str, str, int]]:
    """Every kind of damage at once, in streams a and b (c stays whole): position → (kind,
    stream, version)."""
    slots = [("a", 9), ("a", 10), ("a", 11), ("a", 12), ("b", 9), ("b", 10), ("b", 12)]
    names = [n for n in DAMAGES if raw.kind == "sqlite" or n not in SQLITE_ONLY]
    expected = {}
    for (agent, version), name in zip(slots, names, strict=False):
        expected[raw.row(agent, version)[0]] = (
            DAMAGES[name][1],
            stream_id_for("default", agent),
            version,
        )
        DAMAGES[name][0](raw, agent, version)
    return expected


def test_doctor_lists_every_damaged_row_in_one_pass_then_quarantines_them(
    store: tuple[str, Raw], tmp_path: Path
) -> None:
    url, raw = store
    clean = run("doctor", "--store", url, "--json", cwd=tmp_path)
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["damaged"] == []
    rows_before = raw.count()
    expected = _damage_everything(raw)
    snapshot = {
        pos: raw.execute("SELECT topic, state FROM {t} WHERE {pos}=?", (pos,))[0]
        for pos in expected
    }

    out = run("doctor", "--store", url, "--json", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    report = json.loads(out.stdout)
    found = {d["position"]: (d["kind"], d["stream_id"], d["version"]) for d in report["damaged"]}
    assert found == expected
    assert report["rows"] == rows_before
    assert all(d["reason"] and "\n" not in d["reason"] for d in report["damaged"])
    table = run("doctor", "--store", url, cwd=tmp_path)  # the readable form, same verdict
    assert table.returncode == 1
    assert f"{len(expected)} damaged rows" in table.stderr

    moved = run("doctor", "--store", url, "--quarantine", "--json", cwd=tmp_path)
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["quarantined_now"] == len(expected)
    # kept, never deleted: every row is in one of the two tables, byte for byte
    assert raw.count() == rows_before - len(expected)
    kept = raw.execute("SELECT position, topic, state, kind, reason FROM {q} ORDER BY position")
    assert [k[0] for k in kept] == sorted(expected)
    for pos, topic, state, kind, reason in kept:
        assert (topic, state) == snapshot[pos]
        assert kind == expected[pos][0]
        assert reason

    again = run("doctor", "--store", url, "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["quarantined"] == len(expected)

    for command in (("replay",), ("inspect", "--agent", "a"), ("generations", "--agent", "b")):
        ok = run(*command, "--store", url, cwd=tmp_path)
        assert ok.returncode == 0, (command, ok.stderr)

    audited = run("audit", "--store", url, "--json", cwd=tmp_path)
    assert audited.returncode == 1, audited.stderr
    assert "Traceback" not in audited.stderr
    audit = json.loads(audited.stdout)
    assert audit["quarantined"] == sorted(expected)
    assert audit["tampered"] == []
    quarantined = {v["position"] for v in audit["violations"] if v["rule"] == "quarantined"}
    assert quarantined == set(expected)
    gaps = [v for v in audit["violations"] if v["rule"] == "quarantine_gap"]
    assert gaps, "a quarantined row in the middle of a stream leaves a chain break"
    assert all("explained by quarantine" in v["detail"] for v in gaps)
    assert {v["rule"] for v in audit["violations"]} == {"quarantined", "quarantine_gap"}

    engine = open_engine(url)
    try:
        before = raw.count()
        engine.record("c", "c after the quarantine")  # an undamaged stream stays writable
        assert raw.count() == before + 1
        for agent in ("a", "b"):
            with pytest.raises(DamagedStreamError, match="refuses appends"):
                engine.record(agent, f"{agent} after the quarantine")
        assert raw.count() == before + 1
    finally:
        engine.close()
    line = run("control", "refresh", "--agent", "a", "--store", url, cwd=tmp_path)
    assert line.returncode == 1
    assert "is damaged" in line.stderr
    assert len(line.stderr.strip().splitlines()) == 1


def test_a_quarantine_gap_does_not_hide_a_deletion_beside_it(
    store: tuple[str, Raw], tmp_path: Path
) -> None:
    """A row deleted next to a quarantined one is still reported as a version gap."""
    url, raw = store
    pos = raw.row("a", 10)[0]
    _null_payload(raw, "a", 10)
    assert run("doctor", "--store", url, "--quarantine", cwd=tmp_path).returncode == 0
    after = raw.row("a", 12)[0]
    raw.execute(
        "DELETE FROM {t} WHERE originator_id=? AND originator_version=?",
        (stream_id_for("default", "a"), 11),
    )
    audit = json.loads(run("audit", "--store", url, "--json", cwd=tmp_path).stdout)
    rules = {(v["position"], v["rule"]) for v in audit["violations"]}
    assert (pos, "quarantined") in rules
    assert (after, "chain_version_gap") in rules
