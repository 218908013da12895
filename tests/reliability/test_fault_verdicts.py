"""Loss is always reported, in the same words, by all three checks (issue 35, item 1).

Each fault is made to a real SQLite ledger written by the installed engine with its default
settings; then ``audit``, ``doctor`` and ``replay --verify`` run as the console script does.
For a loss all three exit 1 with the same line (the head record's verdict, which says how
many events are missing and names the likely cause: an older copy restored, an emptied file,
a lost WAL…), a writer is refused with that line before it could bury the evidence, and
``doctor --accept-loss`` records the loss so that writers go on and the checks are clean
again. A fault that loses nothing (the head file removed) is clean everywhere and the next
write records the head again.

The faults: a writer SIGKILLed and its ``-wal`` deleted (every acknowledged record after the
last checkpoint is gone), the file emptied to 0 bytes, the log cut at its end, an older copy
restored over the file, another ledger copied over it, the head file deleted."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.ledger import EVENTS_TABLE, LossError, head_file, read_head_record
from ctxledger.domain.model import AgentIdentity
from tests.e2e._cli import run
from tests.reliability._support import ROOT, pick, record, rerun

WRITER = textwrap.dedent(
    """
    import sys
    from ctxledger.adapters.bootstrap import open_engine
    from ctxledger.domain.model import AgentIdentity
    engine = open_engine(sys.argv[1])
    engine.register_agent(AgentIdentity(agent_id="a", role="worker"))
    k = 0
    while True:
        engine.record("a", f"observation {k} of the killed writer")
        print(k, flush=True)  # the ack: record() returned
        k += 1
    """
)


def _write(url: str, first: int, count: int) -> None:
    engine = open_engine(url)
    engine.register_agent(AgentIdentity(agent_id="a", role="worker"))  # once: again is a no-op
    for k in range(first, first + count):
        engine.record("a", f"observation {k}")
    engine.close()


LOSS_LINE = re.compile(r"the (log ends at position|event at position) .*?(another copy|\)$)")


def _loss_line(text: str) -> str:
    found = LOSS_LINE.search(text.split("; `ctxledger doctor", maxsplit=1)[0].strip())
    return found.group(0) if found else ""


def _checks(url: str, cwd: Path) -> dict[str, tuple[int, str]]:
    """Each command's exit code and the loss line it reported ("" none): from its JSON, or
    from its one-line error when it could not open the store at all (an emptied file)."""
    found: dict[str, tuple[int, str]] = {}
    for name, args in {
        "audit": ("audit",),
        "doctor": ("doctor",),
        "replay --verify": ("replay", "--verify"),
    }.items():
        out = run(*args, "--store", url, "--json", cwd=cwd)
        assert "Traceback" not in out.stderr, out.stderr
        if not out.stdout.strip():
            assert out.stderr.count("\n") == 1, out.stderr  # one line
            found[name] = (out.returncode, _loss_line(out.stderr))
            continue
        doc = json.loads(out.stdout.splitlines()[0])
        if name == "audit":
            line = next((v["detail"] for v in doc["violations"] if v["rule"] == "loss"), "")
        else:
            line = doc.get("loss", "")
        found[name] = (out.returncode, line)
    return found


def _killed_writer_loses_its_wal(db: Path) -> int:
    """A writer recording until SIGKILL, then its ``-wal`` (and ``-shm``) deleted; returns
    the acknowledged records that are gone."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, f"sqlite:///{db}"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    acked = 0
    for _ in range(pick(40, 200)):
        line = proc.stdout.readline()
        assert line, "the writer died before it was killed"
        acked = int(line) + 1
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    with sqlite3.connect(db) as conn:
        try:
            kept = conn.execute(
                f"SELECT count(*) FROM {EVENTS_TABLE} WHERE topic LIKE 'ItemRecorded%'"
            ).fetchone()[0]
        except sqlite3.OperationalError:  # the table itself was only in the WAL
            kept = 0
    conn.close()
    return acked - int(kept)


def _emptied(db: Path, tmp: Path) -> int:
    _write(f"sqlite:///{db}", 0, 8)
    end = _end(db)
    db.write_bytes(b"")
    return end


def _cut(db: Path, tmp: Path) -> int:
    _write(f"sqlite:///{db}", 0, 12)
    end = _end(db)
    with sqlite3.connect(db) as conn:
        conn.execute(f"DELETE FROM {EVENTS_TABLE} WHERE rowid > ?", (end - 4,))
    conn.close()
    return end - _end(db)


def _older_copy(db: Path, tmp: Path) -> int:
    url = f"sqlite:///{db}"
    _write(url, 0, 6)
    backup = tmp / "backup.db"
    shutil.copyfile(db, backup)  # the writer closed: the file holds everything
    _write(url, 6, 9)
    end = _end(db)
    shutil.copyfile(backup, db)
    return end - _end(db)


def _another_ledger(db: Path, tmp: Path) -> int:
    url = f"sqlite:///{db}"
    _write(url, 0, 6)
    other = tmp / "other.db"
    engine = open_engine(f"sqlite:///{other}")
    engine.register_agent(AgentIdentity(agent_id="b", role="planner"))
    for k in range(9):
        engine.record("b", f"the other ledger's observation {k}")
    engine.close()
    shutil.copyfile(other, db)
    return 0  # nothing missing at the end: the events there are another ledger's


def _killed(db: Path, tmp: Path) -> int:
    return _killed_writer_loses_its_wal(db)


FAULTS: dict[str, tuple[Callable[[Path, Path], int], str]] = {
    "kill + WAL deleted": (_killed, "deleted"),
    "emptied to 0 bytes": (_emptied, "the file is empty"),
    "log cut at its end": (_cut, "rows deleted at its end"),
    "older copy restored": (_older_copy, "an older copy restored over it"),
    "another ledger copied over": (_another_ledger, "replaced by another ledger"),
}


@pytest.mark.parametrize("fault", list(FAULTS))
def test_every_check_reports_the_loss_and_writers_are_refused(fault: str, tmp_path: Path) -> None:
    make, cause = FAULTS[fault]
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}"
    lost = make(db, tmp_path)
    if fault.startswith("kill"):
        assert lost > 0, "the killed writer's WAL held no acknowledged record"
    verdicts = _checks(url, tmp_path)
    lines = {line for _, line in verdicts.values()}
    assert [code for code, _ in verdicts.values()] == [1, 1, 1], verdicts
    assert len(lines) == 1, verdicts  # the same words everywhere
    [line] = lines
    assert cause in line
    if lost and not fault.startswith("kill"):
        assert f"{lost} events lost" in line
    # a writer may not bury the evidence under new events
    with pytest.raises(LossError, match=r"refusing to write|events lost"):
        open_engine(url)
    # an operator accepts the loss; writers go on, the checks are clean, the line is kept
    accepted = run("doctor", "--store", url, "--accept-loss", "--json", cwd=tmp_path)
    assert accepted.returncode == 0, accepted.stderr
    head = read_head_record(db)
    assert head is not None
    assert any(line in a for a in head.accepted)
    if fault.startswith("emptied"):
        db.unlink()  # the empty file is gone for good: a new ledger starts
    _write(url, 100, 3)
    after = _checks(url, tmp_path)
    assert [code for code, _ in after.values()] == [0, 0, 0], after
    record(
        f"loss verdicts · sqlite · {fault}",
        scale="default settings; audit, doctor, replay --verify as the console script",
        result=f"{lost} events lost; all three exit 1 with the same line; a writer refused "
        "(LossError); after doctor --accept-loss writers go on and all three exit 0",
        rerun_cmd=rerun("test_fault_verdicts.py"),
        lost=lost,
    )


def test_a_missing_head_file_loses_nothing_and_is_written_again(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}"
    _write(url, 0, 5)
    head_file(db).unlink()
    verdicts = _checks(url, tmp_path)
    assert verdicts == dict.fromkeys(verdicts, (0, "")), verdicts
    _write(url, 5, 1)
    head = read_head_record(db)
    assert head is not None
    assert head.position == _end(db)
    assert head.link  # the link of the last event: a file swapped later is caught


def test_the_head_advances_with_every_commit(tmp_path: Path) -> None:
    """Not only at save points: each append records its position before it returns."""
    db = tmp_path / "ledger.db"
    engine = open_engine(f"sqlite:///{db}")
    try:
        engine.register_agent(AgentIdentity(agent_id="a", role="worker"))
        seen: list[Any] = []
        for k in range(5):
            engine.record("a", f"observation {k}")
            head = read_head_record(db)
            assert head is not None
            seen.append(head.position)
            assert head.position == _end(db)
        assert seen == sorted(set(seen))
    finally:
        engine.close()


def _end(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        end = int(conn.execute(f"SELECT max(rowid) FROM {EVENTS_TABLE}").fetchone()[0])
    conn.close()
    return end
