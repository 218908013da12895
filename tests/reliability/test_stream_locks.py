"""Per-stream writer locks: another process holding a stream makes a writer wait (then a
ConflictError past the timeout), a killed holder releases it, other streams are not blocked,
a thread may re-enter its own lock, and a reader never creates the lock file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ctxledger.adapters.ledger import open_ledger
from ctxledger.domain.errors import ConflictError

HOLDER = textwrap.dedent(
    """
    import sys, time
    from ctxledger.adapters.ledger import open_ledger
    ledger = open_ledger(sys.argv[1])
    with ledger.stream_lock(sys.argv[2]):
        print("held", flush=True)
        time.sleep(600)
    """
)


@contextmanager
def held_elsewhere(url: str, stream: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, url, stream], stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=30)
        if proc.stdout is not None:
            proc.stdout.close()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        u = f"sqlite:///{tmp_path / 'ledger.db'}"
        open_ledger(u).close()
        return u
    return str(request.getfixturevalue("pg_url"))


def test_a_held_stream_times_out_and_a_killed_holder_releases_it(url: str) -> None:
    with open_ledger(url) as ledger, held_elsewhere(url, "ctx/s/a") as holder:
        started = time.monotonic()
        with (
            pytest.raises(ConflictError, match="another writer held the stream"),
            ledger.stream_lock("ctx/s/a", timeout=0.3),
        ):
            pass
        assert time.monotonic() - started >= 0.3
        with ledger.stream_lock("ctx/s/b", timeout=0.3):  # other streams are free
            pass
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        with ledger.stream_lock("ctx/s/a", timeout=10):  # the OS / server released it
            pass


def test_a_thread_reenters_its_own_lock(url: str) -> None:
    with open_ledger(url) as ledger:
        with ledger.stream_lock("ctx/s/a", timeout=1), ledger.stream_lock("ctx/s/a", timeout=1):
            pass
        with ledger.stream_lock("ctx/s/a", timeout=1):  # released after the outer block
            pass


def test_readers_do_not_create_the_lock_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    open_ledger(url).close()
    with open_ledger(url, must_exist=True) as ledger:
        list(ledger.read_all())
    assert not (tmp_path / "ledger.db-locks").exists()
