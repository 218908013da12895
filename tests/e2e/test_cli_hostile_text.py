"""The installed ``ctxledger`` script shows hostile agent text as data (see
tests/property/test_cli_hostile_text.py for the in-process property test)."""

from __future__ import annotations

import time
from pathlib import Path

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.cli.tables import visible
from ctxledger.domain.model import AgentIdentity
from tests.e2e.test_cli_errors import ctxledger

AGENT = "llama[/INST]\x1b[31m-1"
ROLE = "[red]worker[/red]\x1b]0;pwned\x07"
TASK = "fix :smile: [bold"
ERROR = "[/INST] \x1b[2J context overflow \x9b"
LONG_REASON = "[/INST]" * 20_000  # 140 kB: rich's highlighter took minutes on it


def test_the_console_script_shows_markup_ansi_and_long_text_as_data(tmp_path: Path) -> None:
    engine = open_engine(f"sqlite:///{tmp_path / 'l.db'}")
    try:
        engine.register_agent(AgentIdentity(agent_id=AGENT, role=ROLE, task=TASK, budget=4000))
        engine.record(AGENT, f"observed {ERROR}")
        engine.build(AGENT)
        engine.rebuild(AGENT, reason=LONG_REASON)
        engine.on_turn_error(AGENT, RuntimeError(ERROR), provider="llama")
    finally:
        engine.close()
    store = "sqlite:///l.db"
    for args in (
        ("inspect", "--store", store, "--agent", AGENT),
        ("generations", "--store", store, "--agent", AGENT),
        ("diff", "--store", store, "--agent", AGENT, "1", "2"),
        ("audit", "--store", store),
    ):
        started = time.monotonic()
        out = ctxledger(*args, cwd=tmp_path)
        elapsed = time.monotonic() - started
        assert out.returncode == 0, out.stderr
        assert "MarkupError" not in out.stderr
        assert "Traceback" not in out.stderr
        assert "\x1b" not in out.stdout
        assert "\x1b" not in out.stderr
        assert elapsed < 30, f"{args[0]} took {elapsed:.1f} s"
        if args[0] != "audit":
            assert visible(AGENT) in out.stdout
    shown = ctxledger("inspect", "--store", store, "--agent", AGENT, cwd=tmp_path).stdout
    assert visible(ROLE) in shown
    assert visible(TASK) in shown
    assert visible(ERROR) in shown  # the provider's error, as recorded
    listing = ctxledger("generations", "--store", store, "--agent", AGENT, cwd=tmp_path).stdout
    assert "… [+" in listing
    assert "[/INST][/INST]" in listing
