"""`ctxledger api` over HTTP, started as the installed console script, driven with httpx: a
whole turn loop (register, record, build + render, usage, a context-limit turn error that
refreshes, inspect, generations, diff) leaving a ledger `audit --rederive` passes; bearer-token
auth; `Idempotency-Key` retries (also across a restart); the error bodies; the OpenAPI
document generated from the body types."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgspec
import pytest

from ctxledger.adapters.api import types as t
from ctxledger.adapters.ledger import open_ledger
from ctxledger.domain import events as ev
from tests.api_server import CTXLEDGER, ApiServer, audit_rederive, running_api

TOKEN = "s3cret-token-for-tests-0123456789"
CONTEXT_LIMIT = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 210000 tokens > 200000 maximum",
    },
}


@pytest.fixture(scope="module")
def ledger_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('api') / 'ledger.db'}"


@pytest.fixture(scope="module")
def server(ledger_url: str) -> Iterator[ApiServer]:
    with running_api(ledger_url, env={"CTXLEDGER_API_TOKEN": TOKEN}) as s:
        yield s


@pytest.fixture
def client(server: ApiServer) -> Iterator[httpx.Client]:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=server.base, headers=headers, timeout=30) as c:
        yield c


def _ok(response: httpx.Response) -> Any:
    assert response.status_code == 200, response.text
    return response.json()


def _items_recorded(url: str, agent: str) -> int:
    with open_ledger(url, must_exist=True, read_only=True) as ledger:
        return sum(
            1
            for r in ledger.read_all()
            if isinstance(r.event, ev.ItemRecorded) and r.event.agent_id == agent
        )


def test_a_whole_turn_loop_over_http(client: httpx.Client, ledger_url: str) -> None:
    agent = _ok(
        client.post("/v1/agents", json={"agent_id": "loop", "role": "coder", "budget": 3000})
    )
    assert agent == {
        "agent_id": "loop",
        "session_id": "default",
        "generation": 1,
        "strategy": "variable",
        "budget": 3000,
    }
    one = _ok(
        client.post(
            "/v1/agents/loop/items",
            json={"item": {"content": "fix foo.py", "source": "user_requirement", "layer": 1}},
        )
    )
    assert len(one["items"]) == 1
    assert one["items"][0]["token_count"] > 0
    batch = [{"content": f"tool output {i}: " + "x " * 40} for i in range(3)]
    assert len(_ok(client.post("/v1/agents/loop/items", json={"items": batch}))["items"]) == 3
    built = _ok(
        client.post(
            "/v1/agents/loop/build",
            json={"task": "fix foo", "provider": "anthropic", "model": "claude-sonnet-4-5"},
        )
    )
    assert built["generation"] == 1
    assert built["kind"] == "initial"
    assert "fix foo.py" in built["static_prefix"]
    assert "tool output 2" in built["dynamic_tail"]
    assert built["decisions"]["included"] == 4
    assert built["request"]["model"] == "claude-sonnet-4-5"
    assert built["request"]["system"][0]["text"] == built["static_prefix"]
    wrong = client.post(
        "/v1/agents/loop/build",
        json={"provider": "openai", "model": "gpt-4.1", "cache_ttl": "1h"},
    )
    assert wrong.status_code == 422
    assert wrong.json()["error"]["field"] == "cache_ttl"
    plain = _ok(client.post("/v1/agents/loop/build", json={}))
    assert plain["request"] is None
    assert plain["pack_id"] != built["pack_id"]
    usage = _ok(
        client.post(
            "/v1/agents/loop/usage",
            json={
                "usage": {"input_tokens": 90, "output_tokens": 10, "cache_read_input_tokens": 40}
            },
        )
    )
    assert (usage["provider"], usage["input_tokens"], usage["cache_read_tokens"]) == (
        "anthropic",
        90,
        40,
    )
    outcome = _ok(
        client.post(
            "/v1/agents/loop/turn-errors", json={"error": CONTEXT_LIMIT, "provider": "anthropic"}
        )
    )
    assert outcome["refreshed"] is True
    assert outcome["error"]["error_class"] == "context_limit"
    assert outcome["build"]["generation"] == 2
    view = _ok(client.get("/v1/agents/loop"))
    assert view["generation"] == 2
    assert view["kind"] == "refresh"
    first = _ok(client.get("/v1/agents/loop", params={"generation": 1}))
    assert first["generation"] == 1
    assert len(first["included"]) == 4
    gens = _ok(client.get("/v1/agents/loop/generations"))["generations"]
    assert [g["kind"] for g in gens] == ["initial", "refresh"]
    diff = _ok(client.get("/v1/agents/loop/diff", params={"from": 1, "to": 2}))
    assert diff["from_generation"] == 1
    assert diff["to_generation"] == 2
    assert diff["reasons"]
    item = one["items"][0]["id"]
    assert _ok(client.post("/v1/agents/loop/controls", json={"action": "pin", "item_id": item}))
    view = _ok(client.get("/v1/agents/loop"))
    assert [c["kind"] for c in view["controls"]][-1] == "pin"
    audited = audit_rederive(ledger_url)
    assert audited.returncode == 0, audited.stdout
    assert "audit clean" in audited.stdout


def test_a_non_context_error_is_recorded_without_a_refresh(client: httpx.Client) -> None:
    _ok(client.post("/v1/agents", json={"agent_id": "other-err", "role": "coder"}))
    out = _ok(client.post("/v1/agents/other-err/turn-errors", json={"message": "rate limited"}))
    assert out["refreshed"] is False
    assert out["build"] is None
    assert out["error"]["error_class"] == "other"


def test_a_request_without_the_token_is_refused(server: ApiServer) -> None:
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"}):
        r = httpx.post(
            f"{server.base}/v1/agents", json={"agent_id": "x", "role": "r"}, headers=headers
        )
        assert r.status_code == 401
        assert r.json()["error"]["type"] == "unauthorized"
        assert r.headers["www-authenticate"] == "Bearer"


def test_an_off_loopback_bind_without_a_token_refuses_to_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [CTXLEDGER, "api", "--store", f"sqlite:///{tmp_path / 'l.db'}", "--host", "0.0.0.0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "needs a bearer token" in done.stderr
    assert not (tmp_path / "l.db").exists()


def test_a_retry_with_the_same_key_returns_the_first_answer_and_appends_once(
    client: httpx.Client, ledger_url: str
) -> None:
    _ok(client.post("/v1/agents", json={"agent_id": "idem", "role": "coder"}))
    body = {"item": {"content": "once only"}}
    key = {"Idempotency-Key": "rec-1"}
    first = client.post("/v1/agents/idem/items", json=body, headers=key)
    again = client.post("/v1/agents/idem/items", json=body, headers=key)
    assert first.status_code == again.status_code == 200
    assert first.content == again.content
    assert _items_recorded(ledger_url, "idem") == 1
    other = client.post("/v1/agents/idem/items", json={"item": {"content": "else"}}, headers=key)
    assert other.status_code == 409
    assert other.json()["error"] == {
        "type": "idempotency_mismatch",
        "message": "this Idempotency-Key was used with another request (method, path or body)",
        "field": "Idempotency-Key",
    }
    unkeyed = client.post("/v1/agents/idem/items", json=body)
    assert unkeyed.status_code == 200
    assert _items_recorded(ledger_url, "idem") == 2


def test_a_keyed_answer_survives_a_restart(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    key = {"Idempotency-Key": "build-7"}
    with running_api(url) as s, httpx.Client(base_url=s.base, timeout=30) as c:
        _ok(c.post("/v1/agents", json={"agent_id": "r", "role": "coder", "budget": 2000}))
        _ok(c.post("/v1/agents/r/items", json={"item": {"content": "a fact"}}))
        first = _ok(c.post("/v1/agents/r/build", json={}, headers=key))
    assert (tmp_path / "l.db.api-keys.db").is_file()
    with running_api(url) as s, httpx.Client(base_url=s.base, timeout=30) as c:
        assert _ok(c.post("/v1/agents/r/build", json={}, headers=key)) == first
        gens = _ok(c.get("/v1/agents/r/generations"))["generations"]
    assert gens[0]["builds"] == 1


@pytest.mark.parametrize(
    "case",
    [
        ("POST", "/v1/agents", b"{not json", 422, "invalid_body", None),
        ("POST", "/v1/agents", b'{"agent_id": "a"}', 422, "invalid_body", "role"),
        (
            "POST",
            "/v1/agents",
            b'{"agent_id": "a", "role": "r", "rol": 1}',
            422,
            "invalid_body",
            "rol",
        ),
        (
            "POST",
            "/v1/agents/nobody/items",
            b'{"item": {"content": "x"}}',
            404,
            "unknown_agent",
            "agent_id",
        ),
        (
            "POST",
            "/v1/agents/errs/items",
            b'{"items": [{"content": 3}]}',
            422,
            "invalid_body",
            "items[0].content",
        ),
        ("POST", "/v1/agents/errs/items", b"{}", 422, "invalid_body", "item"),
        (
            "POST",
            "/v1/agents/errs/items",
            b'{"item": {"content": "x", "layer": 9}}',
            422,
            "invalid_input",
            None,
        ),
        (
            "POST",
            "/v1/agents/errs/build",
            b'{"provider": "anthropic"}',
            422,
            "invalid_body",
            "model",
        ),
        (
            "POST",
            "/v1/agents/errs/controls",
            b'{"action": "pin", "item_id": "none"}',
            422,
            "invalid_input",
            None,
        ),
        ("GET", "/v1/agents/nobody", b"", 404, "unknown_agent", "agent_id"),
        ("GET", "/v1/agents/errs/diff", b"", 422, "invalid_query", "from"),
        ("GET", "/v1/agents/errs", b"", 200, "", None),
        ("GET", "/v2/agents", b"", 404, "not_found", None),
        ("DELETE", "/v1/agents/errs", b"", 405, "method_not_allowed", None),
    ],
)
def test_caller_mistakes_are_4xx_error_bodies(
    client: httpx.Client, case: tuple[str, str, bytes, int, str, str | None]
) -> None:
    method, path, body, status, kind, field = case
    client.post("/v1/agents", json={"agent_id": "errs", "role": "coder"})
    r = client.request(method, path, content=body, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    if status != 200:
        error = r.json()["error"]
        assert set(error) == {"type", "message", "field"}
        assert (error["type"], error["field"]) == (kind, field)
        assert error["message"]
        assert "\n" not in error["message"]


def test_the_openapi_document_is_generated_from_the_body_types(client: httpx.Client) -> None:
    doc = _ok(client.get("/v1/openapi.json"))
    assert doc["openapi"] == "3.1.0"
    assert sorted(doc["paths"]) == [
        "/v1/agents",
        "/v1/agents/{agent_id}",
        "/v1/agents/{agent_id}/build",
        "/v1/agents/{agent_id}/controls",
        "/v1/agents/{agent_id}/diff",
        "/v1/agents/{agent_id}/generations",
        "/v1/agents/{agent_id}/items",
        "/v1/agents/{agent_id}/turn-errors",
        "/v1/agents/{agent_id}/usage",
    ]
    _, components = msgspec.json.schema_components(
        [t.AgentIn, t.BuildOut, t.ErrorBody], ref_template="#/components/schemas/{name}"
    )
    for name, schema in components.items():
        assert doc["components"]["schemas"][name] == schema
    build = doc["paths"]["/v1/agents/{agent_id}/build"]["post"]
    assert build["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/BuildIn"
    }
    assert set(build["responses"]) >= {"200", "401", "404", "409", "422"}


def test_a_browser_page_cannot_drive_the_api(client: httpx.Client, tmp_path: Path) -> None:
    """A cross-site form or fetch sends no application/json without a preflight (415), and a
    rebound DNS name reaches a token-less loopback server under a foreign Host (421)."""
    r = client.post(
        "/v1/agents",
        content=b'{"agent_id": "csrf", "role": "r"}',
        headers={"content-type": "text/plain"},
    )
    assert r.status_code == 415
    assert r.json()["error"]["field"] == "Content-Type"
    assert client.get("/v1/agents/csrf").status_code == 404
    with running_api(f"sqlite:///{tmp_path / 'l.db'}") as s:
        foreign = httpx.get(f"{s.base}/v1/openapi.json", headers={"Host": "evil.example:80"})
        assert foreign.status_code == 421
        assert foreign.json()["error"]["type"] == "misdirected"
        assert httpx.get(f"{s.base}/v1/openapi.json").status_code == 200
        local = httpx.get(f"{s.base}/v1/openapi.json", headers={"Host": "localhost:1"})
        assert local.status_code == 200


def test_an_off_loopback_bind_with_a_token_serves_whoever_has_it(tmp_path: Path) -> None:
    with running_api(f"sqlite:///{tmp_path / 'l.db'}", "--host", "0.0.0.0", "--token", TOKEN) as s:
        base = s.base.replace("0.0.0.0", "127.0.0.1")
        assert httpx.get(f"{base}/v1/openapi.json").status_code == 401
        auth = {"Authorization": f"Bearer {TOKEN}", "Host": "ci-runner.internal:8766"}
        assert httpx.get(f"{base}/v1/openapi.json", headers=auth).status_code == 200
