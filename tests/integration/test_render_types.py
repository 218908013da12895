"""``engine.render``'s requests type-check against the real SDKs under ``mypy --strict``.

A user writes ``client.messages.create(**engine.render(result, "anthropic", …))`` or
``client.chat.completions.create(**engine.render(result, "openai", …))`` and runs
``mypy --strict`` on it: the request TypedDicts (``domain/render.py``) must be accepted by the
installed anthropic and openai SDKs' own parameter types. The scripts below are written to a
temporary directory and checked by mypy in a subprocess (outside the project's mypy config):
the two users' scripts must pass (exit 0). A third script misuses the requests (an OpenAI body
to Anthropic, a wrong key read), checked in a second run with the first's cache: mypy must
reject exactly those lines, which shows the requests reach the SDKs as real types and not as
``Any``. Needs anthropic >= 0.64 (pyproject's dev extra says why)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

_PRELUDE = """\
from __future__ import annotations

from typing import assert_type

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import BuildResult, ContextEngine
from ctxledger.adapters.integrations.async_engine import AsyncContextEngine
from ctxledger.adapters.ledger import open_ledger
from ctxledger.domain.model import AgentIdentity
from ctxledger.domain.render import AnthropicRequest, OpenAIChatRequest, OpenAIResponsesRequest


def built() -> tuple[ContextEngine, BuildResult]:
    engine = open_engine(open_ledger("sqlite:///:memory:"))
    engine.register_agent(AgentIdentity(agent_id="a", role="worker", task="t", budget=8000))
    return engine, engine.build("a")
"""

ANTHROPIC_USER = (
    _PRELUDE
    + """
import anthropic


def turn(client: anthropic.Anthropic) -> int:
    engine, result = built()
    req = engine.render(
        result,
        "anthropic",
        "claude-sonnet-4-5",
        messages=[{"role": "user", "content": "Fix the failing test."}],
        cache_ttl="1h",
    )
    assert_type(req, AnthropicRequest)
    message = client.messages.create(**req)
    engine.report_usage("a", message.usage)
    again = client.messages.create(**engine.render(result, "anthropic", "claude-sonnet-4-5"))
    return message.usage.input_tokens + again.usage.output_tokens


async def async_turn(client: anthropic.AsyncAnthropic) -> int:
    engine, result = built()
    async with AsyncContextEngine(engine) as aengine:
        req = aengine.render(result, "anthropic", "claude-sonnet-4-5")  # pure: no await
        assert_type(req, AnthropicRequest)
        message = await client.messages.create(**req)
        await aengine.report_usage("a", message.usage)
        return message.usage.output_tokens
"""
)

OPENAI_USER = (
    _PRELUDE
    + """
import openai


def turn(client: openai.OpenAI) -> int:
    engine, result = built()
    req = engine.render(result, "openai", "gpt-4.1", prompt_cache_key="worker")
    assert_type(req, OpenAIChatRequest)
    completion = client.chat.completions.create(**req)
    if completion.usage is not None:
        engine.report_usage("a", completion.usage)
    resp = engine.render(result, "openai-responses", "gpt-4.1")
    assert_type(resp, OpenAIResponsesRequest)
    response = client.responses.create(**resp)
    return 0 if response.usage is None else response.usage.input_tokens
"""
)

MISUSE = (
    _PRELUDE
    + """
import anthropic


def turn(client: anthropic.Anthropic) -> None:
    engine, result = built()
    chat = engine.render(result, "openai", "gpt-4.1")
    client.messages.create(**chat)  # BAD: an OpenAI body to Anthropic
    req = engine.render(result, "anthropic", "claude-sonnet-4-5")
    print(req["instructions"])  # BAD: not a key of an Anthropic request
"""
)


def _errors(output: str, name: str) -> list[int]:
    """The line numbers of mypy's errors in *name*."""
    found = re.finditer(rf"^{re.escape(name)}:(\d+): error:", output, re.MULTILINE)
    return sorted({int(m.group(1)) for m in found})


def _bad_lines(source: str) -> list[int]:
    return [n for n, line in enumerate(source.splitlines(), 1) if "# BAD" in line]


def _mypy_strict(where: Path, *scripts: str) -> subprocess.CompletedProcess[str]:
    """``mypy --strict`` on *scripts* in *where* (not the project's directory, so its
    ``[tool.mypy]`` config does not apply), with a cache the runs share."""
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(where / ".cache"), *scripts],
        cwd=where,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


@pytest.mark.slow
def test_mypy_strict_accepts_render_into_the_real_sdks(tmp_path: Path) -> None:
    scripts = {"anthropic_user.py": ANTHROPIC_USER, "openai_user.py": OPENAI_USER}
    scripts["misuse.py"] = MISUSE
    for name, source in scripts.items():
        (tmp_path / name).write_text(source, encoding="utf-8")

    run = _mypy_strict(tmp_path, "anthropic_user.py", "openai_user.py")
    out = run.stdout + run.stderr
    assert _errors(out, "anthropic_user.py") == [], out
    assert _errors(out, "openai_user.py") == [], out
    assert run.returncode == 0, out

    # the misuse script fails exactly on its two bad lines: the requests are typed, not Any
    bad = _mypy_strict(tmp_path, "misuse.py")
    out = bad.stdout + bad.stderr
    assert bad.returncode == 1, out
    assert _errors(out, "misuse.py") == _bad_lines(MISUSE), out
