"""ctxledger is POSIX-only, and says so: the classifiers name POSIX, the SQLite ledger's
writer locks need ``fcntl`` and ``os.pread``/``os.pwrite``, and where they are missing (Windows)
the first write is one line naming them, not an ImportError from inside a commit. On Linux the
locks are the real ones: a second process holding a stream keeps this one out."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.ledger.locks import FileStreamLocks, missing_posix_calls
from ctxledger.domain.errors import ConflictError, LedgerUnavailableError

ROOT = Path(__file__).resolve().parents[2]


def test_the_classifiers_claim_posix_not_every_os() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    systems = [c for c in project["classifiers"] if c.startswith("Operating System ::")]
    assert systems == ["Operating System :: POSIX", "Operating System :: POSIX :: Linux"]


def test_this_platform_has_the_posix_calls() -> None:
    assert sys.platform.startswith("linux")  # the platform the suite runs on
    assert missing_posix_calls() == ()


def test_without_pread_the_file_locks_refuse_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delattr(os, "pread")
    monkeypatch.delattr(os, "pwrite")
    assert missing_posix_calls() == ("os.pread", "os.pwrite")
    with pytest.raises(LedgerUnavailableError) as caught:
        FileStreamLocks(str(tmp_path / "l.db"))
    message = str(caught.value)
    assert "\n" not in message
    assert message.endswith("lacks os.pread, os.pwrite: ctxledger runs on POSIX systems")
    assert not (tmp_path / "l.db-locks").exists()


WITHOUT_FCNTL = textwrap.dedent(
    """
    import sys
    sys.modules["fcntl"] = None  # how Python marks a module as unavailable: Windows has none
    from datetime import UTC, datetime
    from ctxledger.adapters.ledger import open_ledger
    from ctxledger.adapters.ledger.locks import missing_posix_calls
    from ctxledger.domain import events as ev
    from ctxledger.domain.errors import LedgerUnavailableError
    print(missing_posix_calls())
    ledger = open_ledger(sys.argv[1])
    print(ledger.stream_version("s"))  # reading takes no lock
    try:
        event = ev.TurnSucceeded(at=datetime(2026, 1, 1, tzinfo=UTC), agent_id="a")
        ledger.append("s", [event], expected_version=0)
    except LedgerUnavailableError as exc:
        print("refused:", exc)
    """
)


def test_without_fcntl_a_write_is_refused_and_a_read_still_works(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    out = subprocess.run(
        [sys.executable, "-c", WITHOUT_FCNTL, url],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    missing, version, refused = out.stdout.splitlines()
    assert missing == "('fcntl',)"
    assert version == "0"
    assert refused == (
        "refused: writing to a SQLite ledger needs POSIX file locks, and this platform "
        f"({sys.platform}) lacks fcntl: ctxledger runs on POSIX systems"
    )
    assert not (tmp_path / "l.db-locks").exists()


HOLDER = textwrap.dedent(
    """
    import sys, time
    from ctxledger.adapters.ledger import open_ledger
    ledger = open_ledger(sys.argv[1])
    with ledger.stream_lock("agent-stream"):
        print("held", flush=True)
        time.sleep(600)
    """
)


def test_on_linux_a_second_process_holding_the_stream_keeps_this_one_out(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    open_ledger(url).close()  # the file exists before both open it
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "held"
        ledger = open_ledger(url)
        try:
            with (
                pytest.raises(ConflictError, match="another writer held the stream"),
                ledger.stream_lock("agent-stream", timeout=0.3),
            ):
                pass
            with ledger.stream_lock("another-stream", timeout=5):
                pass  # other streams are free
            holder.kill()
            holder.wait(timeout=30)
            with ledger.stream_lock("agent-stream", timeout=10):
                pass  # the OS dropped the dead holder's locks
        finally:
            ledger.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(timeout=30)
        if holder.stdout is not None:
            holder.stdout.close()
