"""The installed `ctxledger` command: demo, replay --verify, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e._cli import run


def test_demo_then_replay_verify_is_equal(tmp_path: Path) -> None:
    demo = run("demo", "--path", ".ctxledger/demo.db", cwd=tmp_path)
    assert demo.returncode == 0, demo.stderr
    assert "Context refreshed · Generation" in demo.stdout
    assert "audit: clean" in demo.stdout
    out = run(
        "replay", "--store", "sqlite:///.ctxledger/demo.db", "--verify", "--json", cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["equal"] is True
    assert result["events"] >= 10
    assert set(result["projections"]) >= {"context_state", "generations"}
    audit = run(
        "audit", "--store", "sqlite:///.ctxledger/demo.db", "--rederive", "--json", cwd=tmp_path
    )
    assert audit.returncode == 0, audit.stdout + audit.stderr
    report = json.loads(audit.stdout)
    assert report["builds"] == report["rederived"] > 0
    assert (report["mismatches"], report["not_rederivable"]) == (0, 0)


def test_replay_verify_detects_a_tampered_read_model(tmp_path: Path) -> None:
    import sqlite3

    assert run("demo", "--path", "d.db", cwd=tmp_path).returncode == 0
    con = sqlite3.connect(tmp_path / "d.db")
    con.execute(
        "UPDATE ctxledger_projections SET state=? WHERE name='context_state'",
        (b'{"by_agent":{}}',),
    )
    con.commit()
    con.close()
    out = run("replay", "--store", "sqlite:///d.db", "--verify", "--json", cwd=tmp_path)
    assert out.returncode == 1
    assert json.loads(out.stdout)["projections"]["context_state"]["equal"] is False
    assert out.stderr.count("\n") == 1
    assert "context_state" in out.stderr


def test_bad_store_url_is_one_line_and_exit_1(tmp_path: Path) -> None:
    out = run("replay", "--store", "ftp://x", "--verify", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.startswith("ctxledger: error: ftp://x")
    assert out.stderr.count("\n") == 1
    assert "Traceback" not in out.stderr
