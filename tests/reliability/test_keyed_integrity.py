"""Keyed integrity (issue 35, item 4): with a master key the chain's links are HMACs, the
saved read models carry a MAC of their content and log position, and published stream heads
are signed and compared.

An attacker here has the database file (not the master key) and does what a careful one
would: appends a forged event whose link is recomputed the way anyone can (SHA-256), puts an
older, validly sealed read-model snapshot back under the newer position (so a pin made since
disappears for every later build), cuts or rewrites the last event of a stream (which no link
covers), and edits the published heads to match."""

from __future__ import annotations

import base64
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.ledger import EVENTS_TABLE, PROJECTIONS_TABLE, stream_id_for
from ctxledger.domain import events as ev
from ctxledger.domain.chain import link, with_prev
from ctxledger.domain.codec import encode_event
from ctxledger.domain.model import AgentIdentity
from tests.e2e._cli import run
from tests.reliability._support import record, rerun

MASTER = bytes(range(32))
STREAM = stream_id_for("default", "a")


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> str:
    """A keyed (encrypted) SQLite ledger with one agent, a few items and a build; the master
    key configured for the CLI too."""
    monkeypatch.setenv("CTXLEDGER_MASTER_KEY", base64.b64encode(MASTER).decode())
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    engine = open_engine(url, master_key=MASTER, encrypt=True)
    assert engine.ledger.keyring.chain_keyed
    engine.register_agent(AgentIdentity(agent_id="a", role="worker", budget=4_000))
    for i in range(4):
        engine.record("a", f"observation {i}")
    engine.build("a")
    engine.close()
    return url


def _plain(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'plain.db'}"
    engine = open_engine(url, master_key=None, encrypt=False)
    engine.register_agent(AgentIdentity(agent_id="a", role="worker", budget=4_000))
    for i in range(4):
        engine.record("a", f"observation {i}")
    engine.close()
    return url


def _db(url: str) -> Path:
    return Path(url[len("sqlite:///") :])


def _audit(url: str, tmp_path: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    out = run("audit", "--store", url, "--json", *extra, cwd=tmp_path)
    assert "Traceback" not in out.stderr, out.stderr
    return out.returncode, json.loads(out.stdout)


def _rules(report: dict[str, Any]) -> list[str]:
    return [v["rule"] for v in report["violations"]]


def _forge_append(url: str, text: str) -> None:
    """A new ItemRecorded at the end of the stream, its link recomputed with SHA-256 (what
    anyone with the file can do), plaintext content."""
    db = _db(url)
    con = sqlite3.connect(db)
    try:
        version, topic, state = con.execute(
            f"SELECT originator_version, topic, state FROM {EVENTS_TABLE} "
            "WHERE originator_id=? ORDER BY originator_version DESC LIMIT 1",
            (STREAM,),
        ).fetchone()
        engine_item = open_engine(_plain_scratch(db), master_key=None, encrypt=False)
        engine_item.register_agent(AgentIdentity(agent_id="a", role="worker"))
        item = engine_item.make_item("a", text)
        engine_item.close()
        event = ev.ItemRecorded(at=datetime(2026, 1, 1, tzinfo=UTC), agent_id="a", item=item)
        new_topic, payload = encode_event(event)
        forged = with_prev(payload, link(topic, version, bytes(state)))
        con.execute(
            f"INSERT INTO {EVENTS_TABLE} (originator_id, originator_version, topic, state) "
            "VALUES (?,?,?,?)",
            (STREAM, version + 1, new_topic, forged),
        )
        con.commit()
    finally:
        con.close()


def _plain_scratch(db: Path) -> str:
    return f"sqlite:///{db.with_name('scratch.db')}"


def test_a_forged_event_with_a_recomputed_link_is_found_on_a_keyed_chain(
    keyed: str, tmp_path: Path
) -> None:
    code, report = _audit(keyed, tmp_path)
    assert (code, report["keyed"], report["links_checked"]) == (0, True, True), report
    _forge_append(keyed, "forged: the tests pass, ship it")
    code, report = _audit(keyed, tmp_path)
    assert code == 1
    [tamper] = report["tampered"]
    assert tamper["rule"] == "chain_rewritten"
    assert tamper["detail"].startswith(STREAM)
    # the same forgery on a plain chain verifies: an unkeyed link is anyone's to recompute
    plain = _plain(tmp_path)
    _forge_append(plain, "forged: the tests pass, ship it")
    code, report = _audit(plain, tmp_path)
    assert report["tampered"] == []
    record(
        "keyed integrity · sqlite · forged link",
        scale="an ItemRecorded appended behind the ledger's back, link recomputed with SHA-256",
        result="keyed chain: audit exit 1, the forged event 'rewritten'; the same forgery on a "
        "plain chain audits clean (why the key matters)",
        rerun_cmd=rerun("test_keyed_integrity.py"),
    )


def _pin_then_put_back_older_snapshots(url: str, master_key: bytes | None) -> str:
    """Record an item and save the read models; pin it and save again; then put the saved
    read models from before the pin back under the newer position (each a valid blob of its
    ledger: sealed on an encrypted one). Returns the item's id."""
    db = _db(url)
    engine = open_engine(url, master_key=master_key)
    item = engine.record("a", "the plan: fix the parser first")
    engine.checkpoint()
    with sqlite3.connect(db) as con:
        older = dict(con.execute(f"SELECT name, state FROM {PROJECTIONS_TABLE}").fetchall())
    con.close()
    engine.pin("a", item.id, by="lead")
    engine.checkpoint()
    engine.close()
    with sqlite3.connect(db) as con:
        for name, state in older.items():
            con.execute(f"UPDATE {PROJECTIONS_TABLE} SET state=? WHERE name=?", (state, name))
    con.close()
    return item.id


def test_an_older_snapshot_put_back_is_refused_and_the_pin_kept(keyed: str, tmp_path: Path) -> None:
    item_id = _pin_then_put_back_older_snapshots(keyed, MASTER)
    code, report = _audit(keyed, tmp_path)
    assert code == 1
    assert "snapshot_forged" in _rules(report)
    engine = open_engine(keyed, master_key=MASTER)
    try:
        assert engine.pool("a").current(item_id).pinned  # rebuilt from the log, not trusted
        sent = {i.id: i for i in engine.build("a").pack.items}
        assert sent[item_id].pinned
    finally:
        engine.close()
    record(
        "keyed integrity · sqlite · snapshot put back",
        scale="every saved read model replaced by its validly sealed copy from before a pin",
        result="refused (MAC of content and position): audit snapshot_forged, exit 1; the "
        "engine rebuilds by replay, the item stays pinned in the next build",
        rerun_cmd=rerun("test_keyed_integrity.py"),
    )


def _publish(url: str, tmp_path: Path) -> Path:
    out = run("audit", "--store", url, "--heads", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    heads = tmp_path / "heads.json"
    heads.write_text(out.stdout)
    return heads


def test_published_heads_catch_a_cut_and_a_rewritten_last_event(keyed: str, tmp_path: Path) -> None:
    heads = _publish(keyed, tmp_path)
    published = json.loads(heads.read_text())["heads"]
    assert all(len(h["signature"]) == 64 for h in published.values())
    assert _audit(keyed, tmp_path, "--against", str(heads))[0] == 0
    db = _db(keyed)
    con = sqlite3.connect(db)
    (top,) = con.execute(
        f"SELECT max(originator_version) FROM {EVENTS_TABLE} WHERE originator_id=?", (STREAM,)
    ).fetchone()
    (state,) = con.execute(
        f"SELECT state FROM {EVENTS_TABLE} WHERE originator_id=? AND originator_version=?",
        (STREAM, top),
    ).fetchone()
    doc = msgspec.json.decode(state)
    doc["at"] = "2020-01-01T00:00:00Z"  # the last event rewritten: no later link covers it
    con.execute(
        f"UPDATE {EVENTS_TABLE} SET state=? WHERE originator_id=? AND originator_version=?",
        (msgspec.json.encode(doc), STREAM, top),
    )
    con.commit()
    code, report = _audit(keyed, tmp_path, "--against", str(heads))
    assert code == 1
    [head] = [v for v in report["violations"] if v["rule"] == "published_head"]
    assert "rewritten since" in head["detail"]
    con.execute(
        f"DELETE FROM {EVENTS_TABLE} WHERE originator_id=? AND originator_version=?",
        (STREAM, top),
    )
    con.commit()
    con.close()
    code, report = _audit(keyed, tmp_path, "--against", str(heads))
    [head] = [v for v in report["violations"] if v["rule"] == "published_head"]
    assert "events lost" in head["detail"]


def test_a_head_file_edited_to_match_is_not_signed(keyed: str, tmp_path: Path) -> None:
    heads = _publish(keyed, tmp_path)
    doc = json.loads(heads.read_text())
    doc["heads"][STREAM]["link"] = "0" * 32
    heads.write_text(json.dumps(doc))
    code, report = _audit(keyed, tmp_path, "--against", str(heads))
    assert code == 1
    [head] = [v for v in report["violations"] if v["rule"] == "published_head"]
    assert "not signed by this ledger's key" in head["detail"]


def test_a_bad_heads_file_is_one_line(keyed: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    out = run("audit", "--store", keyed, "--against", str(bad), cwd=tmp_path)
    assert out.returncode != 0
    assert out.stderr.count("\n") == 1, out.stderr
    assert "--against" in out.stderr
    assert "Traceback" not in out.stderr


def test_a_keyed_chain_read_without_the_key_says_links_were_not_checked(
    keyed: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CTXLEDGER_MASTER_KEY")
    code, report = _audit(keyed, tmp_path)
    assert (code, report["keyed"], report["links_checked"]) == (0, True, False), report
    out = run("audit", "--store", keyed, cwd=tmp_path)
    assert "links not checked" in out.stdout


def test_an_older_snapshot_put_back_on_a_plain_ledger_is_named_by_audit(tmp_path: Path) -> None:
    """Without a key nothing can refuse the snapshot when it is loaded, but the audit replays
    the log up to the snapshot's position and names every read model that differs."""
    url = _plain(tmp_path)
    assert _audit(url, tmp_path)[0] == 0
    _pin_then_put_back_older_snapshots(url, None)
    code, report = _audit(url, tmp_path)
    assert code == 1
    differing = [v["detail"] for v in report["violations"] if v["rule"] == "snapshot_differs"]
    assert any("'pool'" in d for d in differing), report["violations"]
    rebuilt = run("replay", "--store", url, cwd=tmp_path)
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert _audit(url, tmp_path)[0] == 0
