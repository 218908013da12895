"""The scale-out path: two `ctxledger api` processes over one PostgreSQL database (and one
shared Idempotency-Key file) under concurrent clients. Every client records through one
process and retries the same request, same key, through the other (a lost answer, a fail-over);
the agents are shared, so the two processes write the same streams. In the end: 0 items lost,
0 duplicated, every build accounted for, `audit --rederive` clean."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx

from ctxledger.adapters.ledger import open_ledger
from ctxledger.domain import events as ev
from tests.api_server import ApiServer, audit_rederive, running_api

AGENTS = 3
CLIENTS = 6
STEPS = 8


def _post(base: str, path: str, body: object, key: str) -> httpx.Response:
    """POST until the answer is not a transient 409 (a conflict, or the key still running)."""
    for _ in range(200):
        r = httpx.post(base + path, json=body, headers={"Idempotency-Key": key}, timeout=60)
        if r.status_code != 409 or r.json()["error"]["type"] == "idempotency_mismatch":
            return r
        time.sleep(0.02)
    raise AssertionError(f"{path}: still 409 after 200 tries")


def _client(n: int, servers: tuple[ApiServer, ApiServer], failures: list[str]) -> None:
    agent = f"agent-{n % AGENTS}"
    try:
        for step in range(STEPS):
            first, second = servers if (n + step) % 2 else servers[::-1]
            body = {"item": {"content": f"client {n} step {step}: output", "id": f"c{n}-s{step}"}}
            key = f"c{n}-s{step}"
            a = _post(first.base, f"/v1/agents/{agent}/items", body, key)
            b = _post(second.base, f"/v1/agents/{agent}/items", body, key)
            if a.status_code != 200 or a.content != b.content:
                failures.append(f"{key}: {a.status_code} {a.text[:200]} / {b.text[:200]}")
            built = _post(first.base, f"/v1/agents/{agent}/build", {}, f"{key}-build")
            if built.status_code != 200:
                failures.append(f"{key} build: {built.status_code} {built.text[:200]}")
    except Exception as exc:  # reported by the test, not lost in a thread
        failures.append(f"client {n}: {type(exc).__name__}: {exc}")


def test_two_api_processes_over_one_postgres_lose_and_duplicate_nothing(
    pg_url: str, tmp_path: Path
) -> None:
    keys = str(tmp_path / "keys.db")
    with (
        running_api(pg_url, "--idempotency-db", keys) as one,
        running_api(pg_url, "--idempotency-db", keys) as two,
    ):
        for i in range(AGENTS):
            agent = {"agent_id": f"agent-{i}", "role": "coder", "budget": 4000}
            assert _post(one.base, "/v1/agents", agent, f"reg-{i}").status_code == 200
        failures: list[str] = []
        threads = [
            threading.Thread(target=_client, args=(n, (one, two), failures)) for n in range(CLIENTS)
        ]
        for th in threads:
            th.start()
        for th in threads:
            th.join(timeout=240)
        assert not failures, failures[:5]
        views = [
            httpx.get(f"{two.base}/v1/agents/agent-{i}", timeout=30).json() for i in range(AGENTS)
        ]
    with open_ledger(pg_url, must_exist=True, read_only=True) as ledger:
        events = [r.event for r in ledger.read_all()]
    recorded = [e.item.id for e in events if isinstance(e, ev.ItemRecorded)]
    expected = {f"c{n}-s{s}" for n in range(CLIENTS) for s in range(STEPS)}
    assert len(recorded) == len(expected)  # nothing duplicated
    assert set(recorded) == expected  # nothing lost
    assert sum(isinstance(e, ev.ContextPackBuilt) for e in events) == CLIENTS * STEPS
    assert sum(v["builds"] for v in views) == CLIENTS * STEPS
    audited = audit_rederive(pg_url)
    assert audited.returncode == 0, audited.stdout + audited.stderr
    assert "audit clean" in audited.stdout
    assert " 0 mismatches" in audited.stdout
