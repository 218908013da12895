"""The imported trajectory: format, task, role text and steps with flags and recorded usage."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from ctxledger.domain.usage import Usage

__all__ = ["FORMATS", "Format", "RecordedUsage", "Step", "Trajectory"]

Format = Literal["swe-agent", "mini-swe-agent", "openhands"]
FORMATS: tuple[Format, ...] = ("swe-agent", "mini-swe-agent", "openhands")


RecordedUsage = Usage
"""Provider usage recorded by the original run for one model call: the engine's own
normalised :class:`~ctxledger.domain.usage.Usage` (``input_tokens`` is the uncached input)."""


class Step(msgspec.Struct, frozen=True, kw_only=True):
    """One model call of the recorded run: what the agent thought and did, what it observed.

    ``command`` is the normalised command (the items' ``tool_signature``); ``failure`` is set
    for tracebacks, tool errors, failed tests and non-zero exits; ``user_input`` is a user
    message that arrived after this step (multi-turn runs)."""

    index: int
    thought: str = ""
    action: str = ""
    observation: str = ""
    tool: str = ""
    command: str = ""
    exit_code: int | None = None
    failure: bool = False
    test_failure: bool = False
    test_run: bool = False
    file_view: bool = False
    truncated: bool = False
    files: tuple[str, ...] = ()
    symbols: tuple[str, ...] = ()
    usage: RecordedUsage | None = None
    at: datetime | None = None
    user_input: str = ""


class Trajectory(msgspec.Struct, frozen=True, kw_only=True):
    """A recorded agent run, normalised across formats.

    ``role_texts`` are the scaffold's instructions (system prompt, demonstrations, the
    instance template without the task); ``task`` is the task statement; ``recorded`` holds
    the run's own aggregate figures (e.g. ``tokens_sent``, ``api_calls``) when the file has
    them."""

    format: Format
    path: str
    task: str
    steps: tuple[Step, ...]
    role_texts: tuple[str, ...] = ()
    model: str = ""
    instance_id: str = ""
    recorded: dict[str, float] = {}
    started_at: datetime | None = None
