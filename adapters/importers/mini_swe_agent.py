"""mini-swe-agent ``.traj.json`` files: ``messages`` (OpenAI chat format), ``info``.

The system message is role text; the first user message is the instance message, split into
the task and the instance template's instructions (``info.config.agent.instance_template``,
or the ``<pr_description>`` element). Every assistant message is one step: its text is the
thought, its commands come from OpenAI tool calls (``{"command": …}`` arguments), from
``extra.actions``, or — in the text-only 1.x format — from its fenced ``bash`` blocks. The
``tool`` (or, in 1.x, ``user``) messages that follow are the step's observation; the exit code
is read from ``<returncode>`` or ``extra.returncode``; the call's usage from
``extra.response.usage``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ctxledger.adapters.importers.classify import (
    classify_step,
    extract_files,
    extract_symbols,
    normalize_command,
)
from ctxledger.adapters.importers.common import (
    as_int,
    as_mapping,
    as_text,
    format_error,
    parse_time,
    read_json,
    recorded_usage,
    split_task,
)
from ctxledger.adapters.importers.model import RecordedUsage, Step, Trajectory

__all__ = ["EXPECTED", "load_mini_swe_agent", "looks_like_mini_swe_agent", "parse_mini_swe_agent"]

EXPECTED = "a mini-swe-agent .traj.json (a JSON object with a 'messages' list of chat messages)"

_FENCED = re.compile(r"```(?:bash|sh|shell)?[ \t]*\n(.*?)\n```", re.DOTALL)
_RETURNCODE = re.compile(r"<returncode>\s*(-?\d+)\s*</returncode>")


def looks_like_mini_swe_agent(data: Any) -> bool:
    """A JSON object with a ``messages`` list of role/content messages."""
    if not isinstance(data, Mapping):
        return False
    msgs = data.get("messages")
    return (
        isinstance(msgs, list) and bool(msgs) and isinstance(msgs[0], Mapping) and "role" in msgs[0]
    )


def _commands(msg: Mapping[str, Any]) -> tuple[list[str], str]:
    """(commands, tool name) of one assistant message."""
    commands: list[str] = []
    tool = ""
    calls = msg.get("tool_calls")
    if isinstance(calls, list):
        for call in calls:
            fn = as_mapping(as_mapping(call).get("function"))
            fname = fn.get("name")
            tool = tool or (fname if isinstance(fname, str) else "")
            args: Any = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args)
                except ValueError:
                    commands.append(args)
                    continue
            args = as_mapping(args)
            cmd = args.get("command")
            commands.append(cmd if isinstance(cmd, str) else json.dumps(args, sort_keys=True))
    if not commands:
        actions = as_mapping(msg.get("extra")).get("actions")
        if isinstance(actions, list):
            for a in actions:
                cmd = as_mapping(a).get("command")
                if isinstance(cmd, str):
                    commands.append(cmd)
    if not commands:
        commands = [m.group(1) for m in _FENCED.finditer(as_text(msg.get("content")))]
    return commands, tool or ("bash" if commands else "")


def _step_from_draft(n: int, d: Mapping[str, Any], roots: tuple[str, ...]) -> Step:
    """Turn one drafted assistant turn (with its observations) into a Step."""
    cmds: list[str] = d["commands"]
    observation = "\n\n".join(d["observations"])
    command_text = "\n".join(cmds)
    codes: list[int] = d["exit_codes"]
    exit_code = next((c for c in codes if c != 0), codes[0] if codes else None)
    flags = classify_step(command_text, observation, exit_code=exit_code)
    thought: str = d["thought"]
    action = "\n\n".join(
        [thought, *(f"```bash\n{c}\n```" for c in cmds if f"```bash\n{c}\n```" not in thought)]
    ).strip()
    usage: RecordedUsage | None = d["usage"]
    return Step(
        index=n,
        thought=thought,
        action=action,
        observation=observation,
        tool=d["tool"],
        command=normalize_command(command_text),
        exit_code=exit_code,
        failure=flags.failure,
        test_failure=flags.test_failure,
        test_run=flags.test_run,
        file_view=flags.file_view,
        truncated=flags.truncated,
        files=extract_files(command_text, observation, roots=roots),
        symbols=extract_symbols(thought, observation),
        usage=usage,
        at=d["at"],
    )


def parse_mini_swe_agent(data: Any, path: Path) -> Trajectory:
    """Normalise a parsed mini-swe-agent trajectory; TrajectoryFormatError names the problem."""
    if not isinstance(data, Mapping):
        raise format_error(path, EXPECTED, f"the top level is a JSON {type(data).__name__}")
    messages = data.get("messages")
    if not isinstance(messages, list):
        raise format_error(path, EXPECTED, "there is no 'messages' list")
    for n, msg in enumerate(messages):
        if not isinstance(msg, Mapping) or not isinstance(msg.get("role"), str):
            raise format_error(path, EXPECTED, f"messages[{n}] is not an object with a role")
    info = as_mapping(data.get("info"))
    config = as_mapping(info.get("config"))
    template = as_mapping(config.get("agent")).get("instance_template")
    cwd = as_mapping(config.get("environment")).get("cwd")
    roots = (cwd,) if isinstance(cwd, str) and cwd.startswith("/") else ()

    role_texts: list[str] = []
    task = ""
    drafts: list[dict[str, Any]] = []
    for msg in messages:
        role = msg["role"]
        content = as_text(msg.get("content"))
        if role == "system":
            if content.strip():
                role_texts.append(content.strip())
        elif role == "user" and not task and not drafts:
            task, instructions = split_task(content, template if isinstance(template, str) else "")
            if instructions:
                role_texts.append(instructions)
        elif role == "assistant":
            commands, tool = _commands(msg)
            extra = as_mapping(msg.get("extra"))
            drafts.append(
                {
                    "thought": content.strip(),
                    "commands": commands,
                    "tool": tool,
                    "observations": [],
                    "exit_codes": [],
                    "usage": recorded_usage(as_mapping(extra.get("response")).get("usage")),
                    "at": parse_time(extra.get("timestamp")),
                }
            )
        elif role in ("tool", "user") and drafts:
            extra = as_mapping(msg.get("extra"))
            drafts[-1]["observations"].append(content)
            m = _RETURNCODE.search(content)
            code = as_int(m.group(1)) if m else as_int(extra.get("returncode"))
            if code is not None:
                drafts[-1]["exit_codes"].append(code)
    if not task:
        raise format_error(path, EXPECTED, "no task statement (no user message before the steps)")
    if not drafts:
        raise format_error(path, EXPECTED, "the trajectory has no steps (no assistant message)")

    steps = [_step_from_draft(n, d, roots) for n, d in enumerate(drafts)]
    stats = as_mapping(info.get("model_stats"))
    recorded = {
        k: float(v)
        for k, v in stats.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    model = as_mapping(config.get("model")).get("model_name")
    instance = data.get("instance_id")
    return Trajectory(
        format="mini-swe-agent",
        path=str(path),
        task=task,
        steps=tuple(steps),
        role_texts=tuple(role_texts),
        model=model if isinstance(model, str) else "",
        instance_id=instance if isinstance(instance, str) else path.name.split(".")[0],
        recorded=recorded,
        started_at=next((s.at for s in steps if s.at is not None), None),
    )


def load_mini_swe_agent(path: Path) -> Trajectory:
    """Read and normalise a mini-swe-agent ``.traj.json`` file."""
    return parse_mini_swe_agent(read_json(path, EXPECTED), path)
