"""The engine process the killed-builds test SIGKILLs: records an observation and builds, in a
loop, with a tokenizer slowed down so that most of its time is spent inside builds (between a
build's Started and its outcome)."""

from __future__ import annotations

import time
from typing import Any

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import EngineSettings
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain.model import AgentIdentity, Layer, Source
from ctxledger.domain.ports import TokenCounter

__all__ = ["AGENT", "SESSION", "SlowCounter", "build_writer"]

AGENT = "killed-builder"
SESSION = "kill"


class SlowCounter:
    """The real offline tokenizer (same name, same counts), 3 ms slower per call."""

    def __init__(self, inner: TokenCounter) -> None:
        self._inner = inner

    @property
    def name(self) -> str:
        return self._inner.name

    def count(self, text: str) -> int:
        time.sleep(0.003)
        return self._inner.count(text)


def build_writer(url: str, run: int, ready: Any) -> None:
    """Record and build until killed."""
    engine = open_engine(
        open_ledger(url),
        counter=SlowCounter(default_counter()),
        settings=EngineSettings(session_id=SESSION),
    )
    engine.register_agent(AgentIdentity(agent_id=AGENT, role="primary", task="fix", budget=900))
    ready.set()
    i = 0
    while True:
        engine.record(
            AGENT,
            f"run {run} step {i}: " + "tool output line\n" * (5 + i % 40),
            layer=Layer.L0,
            source=Source.TOOL_LOG,
        )
        engine.build(AGENT, files=("auth/session.py",))
        i += 1
