"""Files that are not the store a command asked for: one line, exit 1, and not a byte written.

A reader told to open a text file, a memory catalog as a ledger or a ledger as a catalog says
what the file is; the file (and its directory) are exactly as before. Also: `replay --verify`
on a store whose persisted read models lag the log catches up, says so, and compares."""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.domain.model import Layer, Source
from tests.e2e.test_cli_errors import ctxledger


@pytest.fixture(scope="module")
def demo_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("bad-stores")
    out = ctxledger("demo", "--path", "d.db", "--json", cwd=where)
    assert out.returncode == 0, out.stderr
    return where


def _snapshot(directory: Path) -> dict[str, str]:
    """Every file in *directory* by name, with the SHA-256 of its bytes."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.iterdir())
        if p.is_file()
    }


@pytest.fixture
def files(demo_files: Path, tmp_path: Path) -> Path:
    """A fresh directory with: ledger.db (a ledger), catalog.db (a memory catalog), notes.txt,
    truncated.db (the first 1,500 bytes of the ledger), other.db (SQLite, another schema)."""
    shutil.copy(demo_files / "d.db", tmp_path / "ledger.db")
    shutil.copy(demo_files / "catalog.db", tmp_path / "catalog.db")
    (tmp_path / "notes.txt").write_text("meeting notes: ship on friday\n" * 20)
    (tmp_path / "truncated.db").write_bytes((demo_files / "d.db").read_bytes()[:1500])
    con = sqlite3.connect(tmp_path / "other.db")
    con.execute("CREATE TABLE people (name TEXT)")
    con.commit()
    con.close()
    return tmp_path


LEDGER_READERS = [
    ("audit",),
    ("inspect",),
    ("replay", "--verify"),
    ("replay",),
    ("generations", "--agent", "primary-1"),
    ("diff", "--agent", "primary-1", "1", "2"),
    ("control", "pin", "it_x", "--agent", "primary-1"),
    ("configure", "--agent", "primary-1", "--budget", "100"),
]


@pytest.mark.parametrize("command", LEDGER_READERS, ids=lambda c: " ".join(c[:2]))
@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("notes.txt", "notes.txt is not a SQLite database"),
        ("catalog.db", "catalog.db is a memory catalog, not a ledger"),
        ("other.db", "other.db is not a ledger (no ctxledger_events table)"),
        ("truncated.db", "truncated.db is not a readable SQLite database"),
    ],
)
def test_a_ledger_command_on_a_file_that_is_no_ledger(
    files: Path, command: tuple[str, ...], name: str, said: str
) -> None:
    before = _snapshot(files)
    out = ctxledger(*command, "--store", f"sqlite:///{name}", cwd=files)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("ctxledger: error: ")
    assert said in out.stderr
    assert _snapshot(files) == before  # no byte changed, no -wal/-shm or other file created


@pytest.mark.parametrize(
    "command",
    [
        ("memory", "list"),
        ("memory", "show", "mem_0123456789ab"),
        ("memory", "verify", "mem_0123456789ab"),
        ("memory", "retire", "mem_0123456789ab"),
        ("memory", "delete", "mem_0123456789ab"),
    ],
    ids=" ".join,
)
@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("notes.txt", "notes.txt is not a SQLite database"),
        ("ledger.db", "ledger.db is a ledger, not a memory catalog"),
        ("other.db", "other.db is not a memory catalog (no memory table)"),
        ("truncated.db", "truncated.db is not a readable SQLite database"),
    ],
)
def test_a_memory_command_on_a_file_that_is_no_catalog(
    files: Path, command: tuple[str, ...], name: str, said: str
) -> None:
    before = _snapshot(files)
    out = ctxledger(*command, "--catalog", name, cwd=files)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert said in out.stderr
    assert _snapshot(files) == before


def test_promote_and_serve_refuse_a_ledger_as_catalog(files: Path) -> None:
    before = _snapshot(files)
    out = ctxledger(
        "control", "promote", "it_x", "--store", "sqlite:///ledger.db", "--agent", "primary-1",
        "--catalog", "ledger.db", cwd=files,
    )  # fmt: skip
    assert out.returncode == 1
    assert out.stderr == "ctxledger: error: ledger.db is a ledger, not a memory catalog\n"
    serve = ctxledger(
        "serve", "--store", "sqlite:///ledger.db", "--catalog", "ledger.db", "--port", "0",
        cwd=files,
    )  # fmt: skip
    assert serve.returncode == 1
    assert serve.stderr == "ctxledger: error: ledger.db is a ledger, not a memory catalog\n"
    served = ctxledger("serve", "--store", "sqlite:///catalog.db", "--port", "0", cwd=files)
    assert served.returncode == 1
    assert served.stderr == "ctxledger: error: catalog.db is a memory catalog, not a ledger\n"
    assert _snapshot(files) == before


def test_a_writer_refuses_a_catalog_or_a_text_file_as_its_ledger(files: Path) -> None:
    with pytest.raises(Exception, match="is a memory catalog, not a ledger"):
        open_engine(f"sqlite:///{files / 'catalog.db'}")
    with pytest.raises(Exception, match="is not a SQLite database"):
        open_engine(f"sqlite:///{files / 'notes.txt'}")


def test_readers_on_the_right_files_work_and_write_nothing(files: Path) -> None:
    before = _snapshot(files)
    for args in (
        ("audit", "--store", "sqlite:///ledger.db", "--json"),
        ("inspect", "--store", "sqlite:///ledger.db", "--json"),
        ("generations", "--store", "sqlite:///ledger.db", "--agent", "primary-1", "--json"),
        ("replay", "--store", "sqlite:///ledger.db", "--verify", "--json"),
        ("diff", "--store", "sqlite:///ledger.db", "--agent", "primary-1", "1", "2", "--json"),
    ):
        out = ctxledger(*args, cwd=files)
        assert out.returncode == 0, out.stderr
        json.loads(out.stdout)
    listing = ctxledger("memory", "list", "--catalog", "catalog.db", "--json", cwd=files)
    assert listing.returncode == 0, listing.stderr
    entries = json.loads(listing.stdout)["entries"]
    assert entries
    shown = ctxledger("memory", "show", "--catalog", "catalog.db", entries[0]["id"], cwd=files)
    assert shown.returncode == 0, shown.stderr
    assert entries[0]["id"] in shown.stdout
    assert _snapshot(files) == before


def _lagging_ledger(path: Path) -> int:
    """Append events to the ledger at *path*, then put its persisted read models back to what
    they were before, as a writer killed before saving leaves them; returns how many events
    the models lag."""
    url = f"sqlite:///{path}"
    con = sqlite3.connect(path)
    saved = con.execute("SELECT name, position, state FROM ctxledger_projections").fetchall()
    con.close()
    engine = open_engine(url)
    try:
        before = engine.ledger.max_position()
        for n in range(3):
            engine.record(
                "primary-1", f"late observation {n}", layer=Layer.L1, source=Source.TOOL_LOG
            )
        after = engine.ledger.max_position()
    finally:
        engine.close()
    con = sqlite3.connect(path)
    con.execute("DELETE FROM ctxledger_projections")
    con.executemany(
        "INSERT INTO ctxledger_projections (name, position, state) VALUES (?,?,?)", saved
    )
    con.commit()
    con.close()
    assert after - before == 3
    return after - int(saved[0][1])


def test_replay_verify_catches_up_a_lagging_store_and_says_by_how_much(files: Path) -> None:
    lag = _lagging_ledger(files / "ledger.db")
    assert lag >= 3
    out = ctxledger("replay", "--store", "sqlite:///ledger.db", "--verify", "--json", cwd=files)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["equal"] is True
    assert (result["behind"], result["caught_up"]) == (lag, lag)
    human = ctxledger("replay", "--store", "sqlite:///ledger.db", "--verify", cwd=files)
    assert human.returncode == 0, human.stderr
    assert f"caught up {lag} events" in " ".join(human.stdout.split())


def test_replay_verify_on_a_lagging_store_still_finds_a_tampered_model(files: Path) -> None:
    lag = _lagging_ledger(files / "ledger.db")
    con = sqlite3.connect(files / "ledger.db")
    con.execute(
        "UPDATE ctxledger_projections SET state=? WHERE name='context_state'",
        (b'{"by_agent":{}}',),
    )
    con.commit()
    con.close()
    out = ctxledger("replay", "--store", "sqlite:///ledger.db", "--verify", "--json", cwd=files)
    assert out.returncode == 1
    result = json.loads(out.stdout)
    assert result["projections"]["context_state"]["equal"] is False
    assert result["caught_up"] == lag
    assert out.stderr.count("\n") == 1
    assert "context_state" in out.stderr


@pytest.mark.parametrize(
    "command",
    [
        ("audit",),
        ("inspect", "--agent", "a"),
        ("replay", "--verify"),
        ("doctor",),
        ("generations", "--agent", "a"),
    ],
    ids=lambda c: c[0],
)
def test_readers_never_create_tables_in_an_empty_postgres_database(
    pg_url: str, tmp_path: Path, command: tuple[str, ...]
) -> None:
    """A reader pointed at a PostgreSQL database that holds no ledger says so in one line and
    leaves the database as it was: no table created (writers still create theirs)."""
    import psycopg

    def tables() -> list[str]:
        with psycopg.connect(pg_url) as conn:
            rows = conn.execute(
                "SELECT table_name FROM information_schema.tables "
                "WHERE table_schema NOT IN ('pg_catalog', 'information_schema')"
            ).fetchall()
        return sorted(str(r[0]) for r in rows)

    assert tables() == []
    out = ctxledger(command[0], "--store", pg_url, *command[1:], cwd=tmp_path)
    assert out.returncode != 0
    assert "Traceback" not in out.stderr
    lines = [line for line in out.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, out.stderr
    assert "no ledger in this database" in lines[0]
    assert tables() == []
    # a writer on the same database creates the ledger as before
    open_engine(pg_url).close()
    assert "ctxledger_events" in tables()
