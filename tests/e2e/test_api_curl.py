"""`ctxledger api` driven with curl, as the docs' "Any language" example does: a whole turn loop
over HTTP with a bearer token, a retried POST with one Idempotency-Key, then the ledger audits
clean with `--rederive`."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.api_server import ApiServer, audit_rederive, running_api

TOKEN = "curl-token-0123456789abcdef"


def _curl(
    server: ApiServer, method: str, path: str, body: Any = None, key: str = ""
) -> tuple[int, Any]:
    args = ["curl", "-sS", "--noproxy", "*", "-X", method, "-H", f"Authorization: Bearer {TOKEN}"]
    if body is not None:
        args += ["-H", "Content-Type: application/json", "--data-binary", json.dumps(body)]
    if key:
        args += ["-H", f"Idempotency-Key: {key}"]
    args += ["-w", "\n%{http_code}", server.base + path]
    done = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True)
    text, _, code = done.stdout.rpartition("\n")
    return int(code), json.loads(text)


def test_a_turn_loop_with_curl(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl not found")
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with running_api(url, "--token", TOKEN) as s:
        assert (
            _curl(s, "POST", "/v1/agents", {"agent_id": "c", "role": "coder", "budget": 2000})[0]
            == 200
        )
        item = {
            "item": {"content": "the build fails on main", "source": "user_requirement", "layer": 1}
        }
        first = _curl(s, "POST", "/v1/agents/c/items", item, key="curl-1")
        assert first[0] == 200
        assert first == _curl(s, "POST", "/v1/agents/c/items", item, key="curl-1")
        status, built = _curl(
            s, "POST", "/v1/agents/c/build", {"provider": "anthropic", "model": "claude-sonnet-4-5"}
        )
        assert status == 200
        assert "the build fails on main" in built["static_prefix"]
        usage = {"usage": {"input_tokens": 10, "output_tokens": 3}}
        assert _curl(s, "POST", "/v1/agents/c/usage", usage)[0] == 200
        error = {
            "message": "prompt is too long: 9000 tokens > 8000 maximum",
            "provider": "anthropic",
        }
        status, outcome = _curl(s, "POST", "/v1/agents/c/turn-errors", error)
        assert status == 200
        assert outcome["refreshed"]
        assert outcome["build"]["generation"] == 2
        status, view = _curl(s, "GET", "/v1/agents/c")
        assert status == 200
        assert view["generation"] == 2
        assert len(view["included"]) == 1
        status, denied = _curl(s, "GET", "/v1/openapi.json".replace("openapi", "agents/zz"))
        assert status == 404
        assert denied["error"]["type"] == "unknown_agent"
    audited = audit_rederive(url)
    assert audited.returncode == 0, audited.stdout
    assert "audit clean" in audited.stdout
