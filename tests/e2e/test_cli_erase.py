"""`ctxledger erase`, `--key-file` and `--encrypt` through the installed console script."""

from __future__ import annotations

import base64
import json
import sqlite3
from pathlib import Path

import pytest

from tests.e2e.test_cli_errors import ctxledger

KEY = bytes(range(7, 39))


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "master.key"
    path.write_text(base64.b64encode(KEY).decode() + "\n", encoding="utf-8")
    return path


def _demo(tmp_path: Path, *args: str) -> str:
    path = tmp_path / "d" / "ledger.db"
    path.parent.mkdir()
    out = ctxledger(*args, "demo", "--path", str(path), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    return f"sqlite:///{path}"


def _first_line(out: str) -> str:
    return out.strip().splitlines()[0]


def test_demo_with_a_key_file_encrypts_and_erase_forgets(tmp_path: Path, key_file: Path) -> None:
    url = _demo(tmp_path, "--key-file", str(key_file))
    with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
        (rows,) = conn.execute("SELECT count(*) FROM ctxledger_keys").fetchone()
    assert rows > 10
    listed = ctxledger(
        "--key-file", str(key_file), "inspect", "--store", url, "--json", cwd=tmp_path
    )
    assert listed.returncode == 0, listed.stderr
    view = json.loads(listed.stdout)
    item = view["included"][0]["id"]
    assert view["included"][0]["preview"]
    # without the key, text reads as sealed; the ledger is still readable
    locked = ctxledger("inspect", "--store", url, "--json", cwd=tmp_path)
    assert locked.returncode == 0, locked.stderr
    assert "[sealed: no master key configured]" in locked.stdout
    # erase one item (no master key is needed to destroy keys)
    out = ctxledger(
        "erase", "--store", url, "--agent", "primary-1", "--item", item, "--reason", "leak",
        "--json", cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["items"] == [item]
    assert report["reason"] == "leak"
    after = ctxledger(
        "--key-file", str(key_file), "inspect", "--store", url, "--agent", "primary-1",
        "--generation", "1", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert after.returncode == 0, after.stderr
    assert "[erased: leak, " in after.stdout
    audit = ctxledger("--key-file", str(key_file), "audit", "--store", url, cwd=tmp_path)
    assert audit.returncode == 0, audit.stdout + audit.stderr


def test_erase_on_a_plain_ledger_is_one_line_and_exit_1(tmp_path: Path) -> None:
    url = _demo(tmp_path)
    out = ctxledger("erase", "--store", url, "--agent", "primary-1", "--reason", "x", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1, out.stderr
    assert "does not encrypt content" in out.stderr


def test_erase_needs_a_reason(tmp_path: Path) -> None:
    out = ctxledger("erase", "--store", "sqlite:///x.db", "--agent", "a", cwd=tmp_path)
    assert out.returncode == 2
    assert "Missing option '--reason'" in out.stderr


def test_a_wrong_master_key_is_one_line(tmp_path: Path, key_file: Path) -> None:
    url = _demo(tmp_path, "--key-file", str(key_file))
    wrong = base64.b64encode(bytes(32)).decode()
    out = ctxledger("inspect", "--store", url, cwd=tmp_path, env={"CTXLEDGER_MASTER_KEY": wrong})
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1, out.stderr
    assert "does not open this ledger's keys" in out.stderr


@pytest.mark.parametrize(
    ("content", "fragment"),
    [(b"", "0 bytes"), (b"not base64 at all!!", "not base64"), (None, "No such file")],
)
def test_a_bad_key_file_is_one_line(tmp_path: Path, content: bytes | None, fragment: str) -> None:
    path = tmp_path / "bad.key"
    if content is not None:
        path.write_bytes(content)
    out = ctxledger("--key-file", str(path), "inspect", "--store", "memory://", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert fragment in out.stderr


def test_no_encrypt_keeps_a_new_ledger_plain(tmp_path: Path, key_file: Path) -> None:
    path = tmp_path / "plain.db"
    out = ctxledger(
        "--key-file", str(key_file), "demo", "--path", str(path), "--no-encrypt", "--json",
        cwd=tmp_path,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["encrypted"] is False
    with sqlite3.connect(path) as conn:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    assert "ctxledger_keys" not in tables


def test_encrypt_without_a_key_is_refused(tmp_path: Path) -> None:
    out = ctxledger("demo", "--path", str(tmp_path / "e.db"), "--encrypt", cwd=tmp_path)
    assert out.returncode == 1
    assert "needs a master key" in out.stderr
