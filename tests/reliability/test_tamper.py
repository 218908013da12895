"""Tamper evidence: every stream's events are hash-chained over their stored bytes, so an
edited ledger no longer audits clean, and the audit says where. Each case edits the real
database behind the ledger's back (SQLite file, PostgreSQL table) and runs the installed
`ctxledger audit` as a subprocess."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.ledger import EVENTS_TABLE, head_file, open_ledger, stream_id_for
from ctxledger.domain import events as ev
from ctxledger.domain.chain import chain_start, link, with_prev
from ctxledger.domain.codec import encode_event
from ctxledger.domain.model import AgentIdentity
from tests.e2e._cli import run
from tests.reliability._raw_store import STORE_KINDS, raw_store

STREAM_A = stream_id_for("default", "a")


@dataclass
class Raw:
    """The events table, edited directly (what an attacker with file access does)."""

    kind: str
    con: Any

    def _q(self, sql: str) -> str:
        sql = sql.replace("{t}", EVENTS_TABLE)
        if self.kind == "sqlite":
            return sql.replace("{pos}", "rowid")
        return sql.replace("{pos}", "notification_id").replace("?", "%s")

    def get(self, stream: str, version: int) -> tuple[int, str, bytes]:
        row = self.con.execute(
            self._q(
                "SELECT {pos}, topic, state FROM {t} WHERE originator_id=? AND originator_version=?"
            ),
            (stream, version),
        ).fetchone()
        return int(row[0]), str(row[1]), bytes(row[2])

    def set_state(self, stream: str, version: int, state: bytes) -> None:
        self.con.execute(
            self._q("UPDATE {t} SET state=? WHERE originator_id=? AND originator_version=?"),
            (state, stream, version),
        )
        self.con.commit()

    def delete(self, stream: str, version: int) -> None:
        self.con.execute(
            self._q("DELETE FROM {t} WHERE originator_id=? AND originator_version=?"),
            (stream, version),
        )
        self.con.commit()

    def insert(self, stream: str, version: int, topic: str, state: bytes) -> None:
        self.con.execute(
            self._q(
                "INSERT INTO {t} (originator_id, originator_version, topic, state) VALUES (?,?,?,?)"
            ),
            (stream, version, topic, state),
        )
        self.con.commit()

    def max_version(self, stream: str) -> int:
        row = self.con.execute(
            self._q("SELECT max(originator_version) FROM {t} WHERE originator_id=?"), (stream,)
        ).fetchone()
        return int(row[0])


def _history(url: str) -> None:
    engine = open_engine(url)
    for agent in ("a", "b"):
        engine.register_agent(AgentIdentity(agent_id=agent, role="worker", budget=4_000))
        for i in range(4):
            engine.record(agent, f"{agent} observation {i}")
        engine.build(agent)
    engine.close()


@pytest.fixture(params=STORE_KINDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Raw]]:
    with raw_store(request, tmp_path, _history) as (kind, url, con):
        yield url, Raw(kind, con)


def _audit(url: str, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    out = run("audit", "--store", url, "--json", *extra, cwd=tmp_path)
    assert "Traceback" not in out.stderr, out.stderr
    return out.returncode, json.loads(out.stdout)


def _rules(report: dict[str, Any]) -> set[tuple[int, str]]:
    return {(v["position"], v["rule"]) for v in report["violations"]}


def test_untouched_ledger_audits_clean(store: tuple[str, Raw], tmp_path: Path) -> None:
    url, _ = store
    code, report = _audit(url, tmp_path)
    assert code == 0, report
    assert report["clean"]
    assert report["tampered"] == []
    assert report["chains"] == 2
    assert report["legacy_events"] == 0


def test_rewritten_content_is_found_at_the_next_event(
    store: tuple[str, Raw], tmp_path: Path
) -> None:
    url, raw = store
    _, _topic, state = raw.get(STREAM_A, 3)
    assert b"a observation 0" in state
    raw.set_state(STREAM_A, 3, state.replace(b"a observation 0", b"a observation X"))
    next_pos = raw.get(STREAM_A, 4)[0]
    code, report = _audit(url, tmp_path)
    assert code == 1
    assert (next_pos, "chain_rewritten") in _rules(report)


def test_deleted_rows_show_as_a_version_gap(store: tuple[str, Raw], tmp_path: Path) -> None:
    url, raw = store
    raw.delete(STREAM_A, 4)
    after = raw.get(STREAM_A, 5)[0]
    code, report = _audit(url, tmp_path)
    assert code == 1
    assert (after, "chain_version_gap") in _rules(report)


def test_inserted_row_with_a_gap_is_found(store: tuple[str, Raw], tmp_path: Path) -> None:
    url, raw = store
    _, topic, state = raw.get(STREAM_A, 3)
    raw.insert(STREAM_A, 999, topic, state)
    code, report = _audit(url, tmp_path)
    assert code == 1
    assert any(rule == "chain_version_gap" for _, rule in _rules(report))


def test_reordered_events_are_found(store: tuple[str, Raw], tmp_path: Path) -> None:
    url, raw = store
    _, _, three = raw.get(STREAM_A, 3)
    _, _, four = raw.get(STREAM_A, 4)
    raw.set_state(STREAM_A, 3, four)
    raw.set_state(STREAM_A, 4, three)
    code, report = _audit(url, tmp_path)
    assert code == 1
    assert any(rule == "chain_rewritten" for _, rule in _rules(report))


def _forged(raw: Raw, event: ev.Event) -> tuple[str, bytes, int]:
    """*event* as the next row of stream a, with a correct link: only its content is wrong."""
    head = raw.max_version(STREAM_A)
    _, topic, state = raw.get(STREAM_A, head)
    t, payload = encode_event(event)
    return t, with_prev(payload, link(topic, head, state)), head + 1


def test_event_of_another_agent_in_a_stream_is_found(
    store: tuple[str, Raw], tmp_path: Path
) -> None:
    url, raw = store
    with open_ledger(url) as ledger:
        at = next(iter(ledger.read_all())).event.at
    t, payload, version = _forged(raw, ev.TurnSucceeded(at=at, agent_id="b"))
    raw.insert(STREAM_A, version, t, payload)
    code, report = _audit(url, tmp_path)
    assert code == 1
    assert [r for _, r in _rules(report)] == ["agent_mismatch"]


def test_reference_to_an_unknown_item_is_found(store: tuple[str, Raw], tmp_path: Path) -> None:
    url, raw = store
    with open_ledger(url) as ledger:
        at = next(iter(ledger.read_all())).event.at
    t, payload, version = _forged(raw, ev.ItemPinned(at=at, agent_id="a", item_id="no-such-item"))
    raw.insert(STREAM_A, version, t, payload)
    code, report = _audit(url, tmp_path)
    assert code == 1
    assert [r for _, r in _rules(report)] == ["unknown_item"]


def test_a_rewritten_stream_head_changes_the_published_head(
    store: tuple[str, Raw], tmp_path: Path
) -> None:
    url, raw = store
    _, before = _audit(url, tmp_path, "--heads")
    head = raw.max_version(STREAM_A)
    _, _, state = raw.get(STREAM_A, head)
    raw.set_state(STREAM_A, head, state.replace(b'"at":"', b'"at": "', 1))
    _, after = _audit(url, tmp_path, "--heads")
    assert before["heads"][STREAM_A]["version"] == after["heads"][STREAM_A]["version"]
    assert before["heads"][STREAM_A]["link"] != after["heads"][STREAM_A]["link"]
    assert (
        before["heads"][stream_id_for("default", "b")]
        == after["heads"][stream_id_for("default", "b")]
    )


def test_a_ledger_from_before_the_chain_audits_clean_and_chains_from_then_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    url = f"sqlite:///{path}"
    _history(url)
    con = sqlite3.connect(path)
    rows = con.execute(f"SELECT rowid, state FROM {EVENTS_TABLE}").fetchall()
    for rowid, state in rows:  # as written before events carried a link
        doc = msgspec.json.decode(state)
        doc.pop("prev", None)
        con.execute(
            f"UPDATE {EVENTS_TABLE} SET state=? WHERE rowid=?", (msgspec.json.encode(doc), rowid)
        )
    con.commit()
    con.close()
    # and its head file as such a version wrote it: a position, no link
    head_file(path).write_text(json.dumps({"position": len(rows), "at": "2026-01-01"}) + "\n")
    code, report = _audit(url, tmp_path)
    assert code == 0, report
    assert report["legacy_events"] == len(rows)
    engine = open_engine(url)
    engine.record("a", "recorded after the upgrade")
    engine.close()
    code, report = _audit(url, tmp_path)
    assert code == 0, report
    assert report["legacy_events"] == len(rows)  # the new event is linked to the last legacy one
    with sqlite3.connect(path) as con:
        last = con.execute(
            f"SELECT state FROM {EVENTS_TABLE} ORDER BY rowid DESC LIMIT 1"
        ).fetchone()[0]
    assert b'"prev":"' in last
    assert chain_start(STREAM_A) not in last.decode()


def test_links_exist_for_damaged_heads() -> None:
    """A damaged stored row (a lone surrogate in its topic or stream id) still has one link,
    so appending after it or auditing it never fails with an untyped error."""
    damaged = link("\ud800.v1", 4, b'{"at":"2026-01-01T00:00:00Z"}')
    assert len(damaged) == 32
    assert damaged == link("\ud800.v1", 4, b'{"at":"2026-01-01T00:00:00Z"}')
    assert damaged != link("\ud801.v1", 4, b'{"at":"2026-01-01T00:00:00Z"}')
    assert len(chain_start("ctx/s/\udc00")) == 32
