"""`ctxledger api` driven with curl, as the docs' "Any language" example does: a whole turn loop
over HTTP with a bearer token, a retried POST with one Idempotency-Key, then the ledger audits
clean with `--rederive`."""

from __future__ import annotations

import json
import os
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


def _docs_curl_block() -> str:
    text = (Path(__file__).parents[2] / "docs" / "integrations.md").read_text(encoding="utf-8")
    section = text[text.index("## Any language: `ctxledger api`") :]
    after = section[section.index("A turn with curl") :]
    return after[after.index("```sh\n") + 6 : after.index("```", after.index("```sh\n") + 6)]


def test_the_docs_curl_example_runs(tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl not found")
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with running_api(url, "--token", TOKEN) as s:
        env = {**os.environ, "API": s.base, "CTXLEDGER_API_TOKEN": TOKEN, "NO_PROXY": "*"}
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", _docs_curl_block()],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env=env,
        )
    assert done.returncode == 0, done.stderr
    answers, decoder, at = [], json.JSONDecoder(), 0  # curl prints no newline between bodies
    while at < len(done.stdout):
        answer, at = decoder.raw_decode(done.stdout, at)
        answers.append(answer)
    assert len(answers) == 5
    assert answers[2]["request"]["model"] == "claude-sonnet-4-5"
    assert answers[3]["provider"] == "anthropic"
    assert answers[4]["agent"]["agent_id"] == "coder"
    assert [i["id"] for i in answers[4]["included"]] == [answers[1]["items"][0]["id"]]
