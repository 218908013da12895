"""``adapters.api.idempotency`` on a real SQLite file shared by two stores (two processes'
view): one run per key, the same answer to every retry, a mismatch and an in-flight retry
answered 409, a failure of ours or a conflict released for the retry, a reservation left by
a dead process taken over once stale."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from ctxledger.adapters.api.idempotency import STALE_AFTER_S, IdempotencyStore, fingerprint


def _error_type(answer: tuple[int, bytes]) -> str:
    return str(json.loads(answer[1])["error"]["type"])


def test_one_run_per_key_across_two_stores_on_one_file(tmp_path: Path) -> None:
    path = str(tmp_path / "keys.db")
    one, two = IdempotencyStore(path), IdempotencyStore(path)
    runs: list[int] = []

    def run() -> tuple[int, bytes]:
        runs.append(1)
        return 200, b'{"n": %d}' % len(runs)

    p = fingerprint("POST", "/v1/agents/a/items", b"{}")
    assert one.once("k", p, run) == (200, b'{"n": 1}')
    assert two.once("k", p, run) == (200, b'{"n": 1}')
    assert len(runs) == 1
    other = fingerprint("POST", "/v1/agents/a/items", b'{"x": 1}')
    assert two.once("k", other, run)[0] == 409
    assert _error_type(two.once("k", other, run)) == "idempotency_mismatch"
    assert _error_type(one.once("bad\nkey", p, run)) == "invalid_header"
    one.close()
    two.close()


def test_an_in_flight_key_is_409_and_a_failure_or_conflict_is_released(tmp_path: Path) -> None:
    path = str(tmp_path / "keys.db")
    one, two = IdempotencyStore(path), IdempotencyStore(path)
    p = fingerprint("POST", "/v1/agents/a/build", b"{}")
    inner: list[tuple[int, bytes]] = []

    def failing() -> tuple[int, bytes]:  # a retry arrives while this runs, then it fails
        inner.append(two.once("k", p, lambda: (200, b"{}")))
        return 503, b"{}"

    assert one.once("k", p, failing)[0] == 503
    assert _error_type(inner[0]) == "in_progress"
    assert one.once("k", p, lambda: (409, b"{}"))[0] == 409  # released after the 503
    assert two.once("k", p, lambda: (200, b'{"ok": 1}')) == (200, b'{"ok": 1}')  # and the 409
    one.close()
    two.close()


def test_a_stale_reservation_is_taken_over(tmp_path: Path) -> None:
    path = str(tmp_path / "keys.db")
    p = fingerprint("POST", "/v1/agents/a/usage", b"{}")
    with sqlite3.connect(path) as db:  # what a process that died mid-request leaves
        IdempotencyStore(path).close()
        db.execute(
            "INSERT INTO api_idempotency (key, fingerprint, created) VALUES (?, ?, ?)",
            ("dead", p, time.time() - STALE_AFTER_S - 1),
        )
        db.execute(
            "INSERT INTO api_idempotency (key, fingerprint, created) VALUES (?, ?, ?)",
            ("busy", p, time.time()),
        )
    store = IdempotencyStore(path)
    assert store.once("dead", p, lambda: (200, b"{}")) == (200, b"{}")
    assert _error_type(store.once("busy", p, lambda: (200, b"{}"))) == "in_progress"
    store.close()
