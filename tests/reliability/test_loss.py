"""Loss is never "clean" (issue 18, item 5): a log that ends before the furthest position its
store recorded holding is reported by `audit` and `doctor` as loss, with how many events are
missing — on SQLite through the head file beside the database (written after every commit,
so it survives a deleted WAL, a truncated file or an older copy restored),
and on every store through persisted read models claiming a position past the end."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.ledger import EVENTS_TABLE, LossError, head_file, open_ledger
from ctxledger.adapters.ledger.projection_runner import encode_state
from ctxledger.domain.model import AgentIdentity
from tests.e2e._cli import run


def _write(url: str, first: int, count: int) -> None:
    engine = open_engine(url)
    if first == 0:
        engine.register_agent(AgentIdentity(agent_id="a", role="worker"))
    for k in range(first, first + count):
        engine.record("a", f"observation {k}")
    engine.close()  # saves the read models, and the head file beside a SQLite ledger


def _audit(url: str, cwd: Path) -> tuple[int, dict[str, Any]]:
    out = run("audit", "--store", url, "--json", cwd=cwd)
    assert "Traceback" not in out.stderr
    return out.returncode, json.loads(out.stdout)


def _doctor(url: str, cwd: Path) -> tuple[int, dict[str, Any], str]:
    out = run("doctor", "--store", url, "--json", cwd=cwd)
    assert "Traceback" not in out.stderr
    return out.returncode, json.loads(out.stdout), out.stderr


def test_an_older_copy_restored_over_the_ledger_is_loss(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}"
    _write(url, 0, 10)
    backup = tmp_path / "backup.db"
    with sqlite3.connect(db) as src, sqlite3.connect(backup) as dst:
        src.backup(dst)  # what a deleted WAL leaves: the file as of an earlier checkpoint
    _write(url, 10, 20)
    code, report = _audit(url, tmp_path)
    assert (code, report["clean"]) == (0, True)
    with open_ledger(url) as ledger:
        end = ledger.max_position()
    with open_ledger(f"sqlite:///{backup}") as ledger:
        older = ledger.max_position()
    shutil.copyfile(backup, db)  # the older file comes back, its head file stays
    code, report = _audit(url, tmp_path)
    assert code == 1
    [loss] = [v for v in report["violations"] if v["rule"] == "loss"]
    assert loss["position"] == older + 1
    assert f"{end - older} events lost" in loss["detail"]
    code, doc, err = _doctor(url, tmp_path)
    assert code == 1
    assert doc["clean"] is False
    assert f"{end - older} events lost" in str(doc["loss"])
    assert "events lost" in err
    # a writer may not carry on and bury the evidence under new events
    with pytest.raises(LossError, match=r"refusing to write: .* events lost"):
        _write(url, 30, 1)
    assert _audit(url, tmp_path)[0] == 1


def test_rows_deleted_at_the_end_of_the_log_are_loss(tmp_path: Path) -> None:
    """The hash chain cannot see a log cut at its end (the rest still chains); the head can."""
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}"
    _write(url, 0, 12)
    with sqlite3.connect(db) as conn:
        top = conn.execute(f"SELECT max(rowid) FROM {EVENTS_TABLE}").fetchone()[0]
        conn.execute(f"DELETE FROM {EVENTS_TABLE} WHERE rowid > ?", (top - 4,))
    code, report = _audit(url, tmp_path)
    assert code == 1
    rules = [v["rule"] for v in report["violations"]]
    assert rules == ["loss"]
    assert "4 events lost" in report["violations"][0]["detail"]


def test_read_models_past_the_end_are_loss_on_every_store(store_url: str, tmp_path: Path) -> None:
    if store_url.startswith("memory:"):
        return  # nothing outlives the process: no loss to report
    _write(store_url, 0, 5)
    engine = open_engine(store_url)
    engine.checkpoint()
    states = {n: encode_state(s) for n, s in engine.runner.states.items()}
    end = engine.ledger.max_position()
    engine.close()
    with open_ledger(store_url) as ledger:
        ledger.save_projections(states, end + 7)
    code, report = _audit(store_url, tmp_path)
    assert code == 1
    [loss] = [v for v in report["violations"] if v["rule"] == "loss"]
    assert "7 events lost" in loss["detail"]


def test_a_clean_ledger_and_a_quarantine_are_not_loss(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}"
    _write(url, 0, 6)
    assert head_file(db).is_file()
    code, report = _audit(url, tmp_path)
    assert (code, report["clean"]) == (0, True)
    code, doc, _ = _doctor(url, tmp_path)
    assert (code, doc["loss"], doc["clean"]) == (0, "", True)
    # damage the newest row and quarantine it: rows left on purpose are not loss
    with sqlite3.connect(db) as conn:
        top = conn.execute(f"SELECT max(rowid) FROM {EVENTS_TABLE}").fetchone()[0]
        conn.execute(f"UPDATE {EVENTS_TABLE} SET state = x'7b' WHERE rowid = ?", (top,))
    moved = run("doctor", "--store", url, "--quarantine", "--json", cwd=tmp_path)
    assert moved.returncode == 0, moved.stderr
    assert json.loads(moved.stdout)["loss"] == ""
    rules = {v["rule"] for v in _audit(url, tmp_path)[1]["violations"]}
    assert "loss" not in rules
