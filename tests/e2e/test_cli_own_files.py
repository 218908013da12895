"""Files ctxledger must not touch: the demo replaces only what it wrote, readers create no
file or table, a writer refuses another application's SQLite database (issue 35, item 8)."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat
from pathlib import Path

import pytest

from tests.e2e.test_cli_errors import ctxledger


def _snapshot(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def test_the_demo_refuses_files_it_did_not_write_and_force_replaces_them(
    tmp_path: Path,
) -> None:
    (tmp_path / "mine.db").write_text("someone's notes\n")
    out = ctxledger("demo", "--path", "mine.db", "--json", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1
    assert "mine.db exists and was not written by `ctxledger demo`" in out.stderr
    assert "--force" in out.stderr
    assert (tmp_path / "mine.db").read_text() == "someone's notes\n"
    other = tmp_path / "other"
    other.mkdir()
    (other / "catalog.db").write_text("theirs")
    (other / "demo-workspace").mkdir()
    (other / "demo-workspace" / "keep.txt").write_text("theirs")
    out = ctxledger("demo", "--path", "d.db", "--json", cwd=other)
    assert out.returncode == 1
    assert "catalog.db exists and was not written" in out.stderr
    assert _snapshot(other) == {
        "catalog.db": hashlib.sha256(b"theirs").hexdigest(),
        "demo-workspace/keep.txt": hashlib.sha256(b"theirs").hexdigest(),
    }
    out = ctxledger("demo", "--path", "mine.db", "--json", "--force", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert ctxledger("audit", "--store", "sqlite:///mine.db", cwd=tmp_path).returncode == 0


def test_a_demo_run_again_replaces_its_own_ledger_and_head(tmp_path: Path) -> None:
    first = ctxledger("demo", "--path", "d.db", "--json", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert (tmp_path / "d.db.head").is_file()
    again = ctxledger("demo", "--path", "d.db", "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    audit = ctxledger("audit", "--store", "sqlite:///d.db", "--json", cwd=tmp_path)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    assert json.loads(audit.stdout)["clean"] is True
    verify = ctxledger("replay", "--store", "sqlite:///d.db", "--verify", cwd=tmp_path)
    assert verify.returncode == 0, verify.stderr


@pytest.fixture(scope="module")
def demo_ledger(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("own-files")
    out = ctxledger("demo", "--path", "d.db", "--json", cwd=where)
    assert out.returncode == 0, out.stderr
    return where / "d.db"


READERS = (
    ("inspect",),
    ("generations", "--agent", "primary-1"),
    ("diff", "--agent", "primary-1", "1", "2"),
    ("audit",),
    ("replay", "--verify"),
    ("doctor",),
)


@pytest.mark.parametrize("read_only_file", [False, True], ids=["writable", "read-only"])
def test_readers_create_no_file_beside_the_ledger(
    demo_ledger: Path, tmp_path: Path, read_only_file: bool
) -> None:
    ledger = tmp_path / "l.db"
    ledger.write_bytes(demo_ledger.read_bytes())
    if read_only_file:
        ledger.chmod(stat.S_IRUSR | stat.S_IRGRP)
    before = _snapshot(tmp_path)
    try:
        for args in READERS:
            out = ctxledger(args[0], "--store", "sqlite:///l.db", *args[1:], cwd=tmp_path)
            assert out.returncode == 0, (args, out.stderr)
            assert sorted(os.listdir(tmp_path)) == ["l.db"], args
        assert _snapshot(tmp_path) == before
    finally:
        ledger.chmod(stat.S_IRUSR | stat.S_IWUSR)


def test_a_writer_refuses_another_applications_sqlite_database(tmp_path: Path) -> None:
    app_db = tmp_path / "app.db"
    con = sqlite3.connect(app_db)
    con.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, total REAL)")
    con.execute("INSERT INTO orders (total) VALUES (9.5)")
    con.commit()
    con.close()
    traj = Path(__file__).parents[1] / "fixtures" / "trajectories" / "swe_agent_small.traj"
    before = _snapshot(tmp_path)
    out = ctxledger("simulate", str(traj), "--store", "sqlite:///app.db", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1
    assert "another application's SQLite database" in out.stderr
    assert "--allow-foreign-db" in out.stderr
    assert _snapshot(tmp_path) == before
    tables = sqlite3.connect(app_db).execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("orders",)]
    asked = ctxledger(
        "simulate", str(traj), "--store", "sqlite:///app.db", "--allow-foreign-db", cwd=tmp_path
    )
    assert asked.returncode == 0, asked.stderr
