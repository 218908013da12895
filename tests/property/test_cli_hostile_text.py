"""Agent text is data in every CLI view: markup, ANSI escapes, control characters and lone
surrogates in an agent id, role, task, reason, provider error or item are shown (made
visible, long text cut), never parsed as markup, never written raw to the terminal."""

from __future__ import annotations

import contextlib
import io
import json
import tempfile
from pathlib import Path
from typing import Final

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.cli.main import main
from ctxledger.adapters.cli.tables import DISPLAY_LIMIT, visible
from ctxledger.domain.model import AgentIdentity

HOSTILE: Final = (
    "[/INST]",
    "[red]alarm[/red]",
    "[bold",
    "\x1b[31mred\x1b[0m",
    "\x1b]0;title\x07",
    "\x9b2J",
    "\r\n\t\x00\x7f",
    "\u202eevil",
    ":smile:",
    "[link=https://x]y[/link]",
)
"""Pieces every generated text may be built from, beside arbitrary characters."""

_PIECE = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=12))
# a lone surrogate cannot be stored (UTF-8 has no bytes for it): stored text is without
# them; the views' own arguments and error lines get them (see the surrogate test below)
_STORABLE = st.lists(
    st.one_of(
        st.sampled_from(HOSTILE), st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
    ),
    min_size=1,
    max_size=6,
).map("".join)


def _agent_ids() -> st.SearchStrategy[str]:
    return _STORABLE.filter(lambda s: 0 < len(s) <= 200)


def _cli(*args: str) -> tuple[int, str, str]:
    """``ctxledger ARGS…`` through the console entry point, in this process."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return code, out.getvalue(), err.getvalue()


def _clean(code: int, out: str, err: str) -> None:
    assert code == 0, err
    for stream in (out, err):
        assert "\x1b" not in stream
        assert "\x9b" not in stream
        assert "MarkupError" not in stream
        assert "Traceback" not in stream


def _write(path: Path, agent: str, *, role: str, task: str, reason: str, error: str) -> None:
    engine = open_engine(f"sqlite:///{path}")
    try:
        engine.register_agent(AgentIdentity(agent_id=agent, role=role, task=task, budget=4000))
        engine.record(agent, f"item {error}")
        engine.build(agent)
        engine.rebuild(agent, reason=reason)
        engine.on_turn_error(agent, RuntimeError(error), provider="llama")
    finally:
        engine.close()


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    agent=_agent_ids(),
    role=_STORABLE,
    task=_STORABLE,
    reason=st.one_of(_STORABLE, st.just("[/INST]" * 2000)),
    error=_STORABLE,
)
def test_every_view_shows_agent_text_as_data(
    agent: str, role: str, task: str, reason: str, error: str
) -> None:
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "ledger.db"
        _write(path, agent, role=role, task=task, reason=reason, error=error)
        store = f"sqlite:///{path}"
        code, out, err = _cli("inspect", "--store", store, "--agent", agent)
        _clean(code, out, err)
        assert visible(agent) in out
        assert visible(role) in out
        assert visible(task) in out
        # --json stays the exact data
        code, out, err = _cli("generations", "--store", store, "--agent", agent, "--json")
        assert code == 0, err
        data = json.loads(out)
        assert data["agent"] == agent
        stored = data["generations"][-1]["reason"]  # "manual: " + the reason given
        assert stored.endswith(reason)
        code, out, err = _cli("generations", "--store", store, "--agent", agent)
        _clean(code, out, err)
        assert visible(agent) in out
        assert visible(stored) in out
        if len(stored) > DISPLAY_LIMIT:
            assert f"[+{len(stored) - DISPLAY_LIMIT} chars]" in out
        code, out, err = _cli("diff", "--store", store, "--agent", agent, "1", "2")
        _clean(code, out, err)
        assert visible(agent) in out
        for view in (("audit",), ("replay", "--verify"), ("doctor",)):
            _clean(*_cli(*view, "--store", store))


@settings(max_examples=40, deadline=None)
@given(text=st.lists(_PIECE, min_size=1, max_size=6).map("".join))
def test_an_unknown_agent_any_text_is_one_visible_error_line(text: str) -> None:
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "ledger.db"
        _write(path, "a", role="worker", task="t", reason="r", error="e")
        for view in ("generations", "diff"):
            extra = ("1", "2") if view == "diff" else ()
            code, out, err = _cli(view, "--store", f"sqlite:///{path}", "--agent", text, *extra)
            assert code == 1
            assert err.startswith("ctxledger: error: ")
            assert err.count("\n") == 1
            for stream in (out, err):
                assert "\x1b" not in stream
                assert "\x9b" not in stream
                assert "Traceback" not in stream
            err.encode("utf-8")  # no lone surrogate reaches the terminal


@given(text=st.lists(_PIECE, min_size=1, max_size=8).map("".join))
def test_visible_text_has_no_character_a_terminal_acts_on(text: str) -> None:
    shown = visible(text, None)
    shown.encode("utf-8")
    assert not any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in shown)
    if all(c.isprintable() and ord(c) < 0x2000 for c in text):
        assert shown == text  # printable text is shown as it is
