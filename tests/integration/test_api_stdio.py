"""`ctxledger api --stdio` as an orchestrator spawns it: JSON-line requests on stdin, one
answer line each on stdout in order, the same bodies as over HTTP; a line that is no request
is answered 400 and the process goes on."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.api_server import CTXLEDGER, audit_rederive


def _converse(url: str, lines: list[Any]) -> list[dict[str, Any]]:
    text = "".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines)
    done = subprocess.run(
        [CTXLEDGER, "api", "--stdio", "--store", url],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_turn_loop_over_stdio(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    agent = {"agent_id": "sub", "role": "coder", "budget": 3000}
    limit = {"error": {"code": "context_length_exceeded", "message": "maximum context length"}}
    answers = _converse(
        url,
        [
            {"id": 1, "method": "POST", "path": "/v1/agents", "body": agent},
            {
                "id": 2,
                "method": "POST",
                "path": "/v1/agents/sub/items",
                "body": {"items": [{"content": "task: fix bar"}, {"content": "ls: 3 files"}]},
                "idempotency_key": "k1",
            },
            {
                "id": 3,
                "method": "POST",
                "path": "/v1/agents/sub/items",
                "body": {"items": [{"content": "task: fix bar"}, {"content": "ls: 3 files"}]},
                "idempotency_key": "k1",
            },
            {
                "id": "b",
                "method": "POST",
                "path": "/v1/agents/sub/build",
                "body": {"provider": "openai", "model": "gpt-4.1"},
            },
            {
                "id": 5,
                "method": "POST",
                "path": "/v1/agents/sub/usage",
                "body": {"usage": {"prompt_tokens": 50, "completion_tokens": 5}},
            },
            {
                "id": 6,
                "method": "POST",
                "path": "/v1/agents/sub/turn-errors",
                "body": limit | {"provider": "openai"},
            },
            "this is not json",
            {"id": 8, "method": "GET", "path": "/v1/agents/sub/generations"},
            {"id": 9, "method": "GET", "path": "/v1/agents/ghost"},
            {"id": 10, "method": "GET", "path": "/v1/openapi.json"},
        ],
    )
    assert [a["id"] for a in answers] == [1, 2, 3, "b", 5, 6, None, 8, 9, 10]
    assert [a["status"] for a in answers] == [200, 200, 200, 200, 200, 200, 400, 200, 404, 200]
    assert answers[1]["body"] == answers[2]["body"]
    request = answers[3]["body"]["request"]
    assert request["model"] == "gpt-4.1"
    assert request["messages"][-1]["content"].startswith(answers[3]["body"]["dynamic_tail"])
    assert answers[4]["body"]["provider"] == "openai"
    assert answers[5]["body"]["refreshed"] is True
    assert answers[6]["body"]["error"]["type"] == "invalid_request"
    assert [g["kind"] for g in answers[7]["body"]["generations"]] == ["initial", "refresh"]
    assert answers[8]["body"]["error"]["type"] == "unknown_agent"
    assert "/v1/agents/{agent_id}/build" in answers[9]["body"]["paths"]
    inspect = _converse(url, [{"id": 1, "method": "GET", "path": "/v1/agents/sub"}])
    assert inspect[0]["body"]["generation"] == 2
    assert inspect[0]["body"]["kind"] == "refresh"
    assert inspect[0]["body"]["builds"] == 1
    audited = audit_rederive(url)
    assert audited.returncode == 0, audited.stdout
    assert "audit clean" in audited.stdout
