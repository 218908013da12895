"""SWE-agent ``.traj`` files: ``history`` (role/content messages), ``trajectory`` (steps), ``info``.

Steps come from ``trajectory`` (``action``, ``observation``, ``thought``, ``response``); when
it is absent or empty they are paired from ``history`` (each non-demonstration assistant
message with the messages that follow it). The system message and the demonstrations are
role text; the first non-demonstration user message holds the task (SWE-agent 0.x
``ISSUE: … INSTRUCTIONS:``, or an ``<issue>``/``<pr_description>`` element in 1.x).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ctxledger.adapters.importers.classify import (
    classify_step,
    extract_files,
    extract_symbols,
    normalize_command,
)
from ctxledger.adapters.importers.common import (
    as_mapping,
    as_text,
    format_error,
    read_json,
    split_task,
)
from ctxledger.adapters.importers.model import Step, Trajectory

__all__ = ["EXPECTED", "looks_like_swe_agent", "parse_swe_agent", "load_swe_agent"]

EXPECTED = "a SWE-agent .traj (a JSON object with a 'trajectory' list of steps and a 'history')"


def _is_step(entry: Any) -> bool:
    return isinstance(entry, Mapping) and "action" in entry and "observation" in entry


def _is_message(entry: Any) -> bool:
    return isinstance(entry, Mapping) and "role" in entry and "content" in entry


def looks_like_swe_agent(data: Any) -> bool:
    """A JSON object whose ``trajectory`` holds action/observation steps, or whose
    ``history`` holds role/content messages and has no ``messages`` list."""
    if not isinstance(data, Mapping):
        return False
    traj = data.get("trajectory")
    if isinstance(traj, list) and traj and _is_step(traj[0]):
        return True
    hist = data.get("history")
    return (
        isinstance(traj, list)
        and isinstance(hist, list)
        and (not hist or _is_message(hist[0]))
        and "messages" not in data
    )


def _is_demo(msg: Mapping[str, Any]) -> bool:
    return bool(msg.get("is_demo")) or msg.get("message_type") == "demonstration"


def _state(entry: Any) -> Mapping[str, Any]:
    """The ``state`` of a step (a JSON string in SWE-agent 0.x, an object in 1.x)."""
    state = entry.get("state") if isinstance(entry, Mapping) else None
    if isinstance(state, str):
        try:
            state = json.loads(state)
        except ValueError:
            state = None
    return as_mapping(state)


def _workdir(traj: Sequence[Any]) -> tuple[str, ...]:
    for entry in traj[:3]:
        wd = _state(entry).get("working_dir")
        if isinstance(wd, str) and wd.startswith("/"):
            return (wd,)
    return ()


def _open_file(entry: Any) -> str:
    path = _state(entry).get("open_file")
    return path if isinstance(path, str) and path not in ("", "n/a") else ""


def _model(data: Mapping[str, Any]) -> str:
    cfg: Any = data.get("replay_config")
    if isinstance(cfg, str):
        try:
            cfg = json.loads(cfg)
        except ValueError:
            cfg = None
    name = as_mapping(as_mapping(as_mapping(cfg).get("agent")).get("model")).get("name")
    return name if isinstance(name, str) else ""


def _steps_from_history(history: Sequence[Mapping[str, Any]], start: int) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    for msg in history[start:]:
        if _is_demo(msg):
            continue
        role = msg.get("role")
        content = as_text(msg.get("content"))
        if role == "assistant":
            action = msg.get("action")
            thought = msg.get("thought")
            steps.append(
                {
                    "action": action if isinstance(action, str) else content,
                    "thought": thought if isinstance(thought, str) else "",
                    "response": content,
                    "observation": "",
                }
            )
        elif steps and role in ("user", "tool"):
            sep = "\n" if steps[-1]["observation"] else ""
            steps[-1]["observation"] += sep + content
    return steps


def _read_preamble(history: Sequence[Mapping[str, Any]]) -> tuple[list[str], str, int]:
    """Role texts, the task and the index after the instance message, from ``history``."""
    role_texts: list[str] = []
    task = ""
    instance_at = len(history)
    for i, msg in enumerate(history):
        role = msg.get("role")
        content = as_text(msg.get("content")).strip()
        if not content:
            continue
        if role == "system" or (role == "user" and _is_demo(msg)):
            role_texts.append(content)
        elif role == "user":
            task, instructions = split_task(content)
            if instructions:
                role_texts.append(instructions)
            instance_at = i + 1
            break
    return role_texts, task, instance_at


def _step(n: int, entry: Mapping[str, Any], roots: tuple[str, ...]) -> Step:
    """Normalise one recorded step of the trajectory into a Step."""
    action = as_text(entry.get("action"))
    observation = as_text(entry.get("observation"))
    thought = as_text(entry.get("thought"))
    response = as_text(entry.get("response"))
    command = normalize_command(action)
    flags = classify_step(action, observation)
    text = response or (f"{thought}\n\n{action}" if thought else action)
    return Step(
        index=n,
        thought=thought,
        action=text.strip(),
        observation=observation,
        tool=command.split(" ", 1)[0] if command else "",
        command=command,
        failure=flags.failure,
        test_failure=flags.test_failure,
        test_run=flags.test_run,
        file_view=flags.file_view,
        truncated=flags.truncated,
        files=extract_files(action, _open_file(entry), observation, roots=roots),
        symbols=extract_symbols(thought, observation),
    )


def parse_swe_agent(data: Any, path: Path) -> Trajectory:
    """Normalise a parsed SWE-agent ``.traj``; TrajectoryFormatError names what is wrong."""
    if not isinstance(data, Mapping):
        raise format_error(path, EXPECTED, f"the top level is a JSON {type(data).__name__}")
    history = data.get("history", [])
    traj = data.get("trajectory", [])
    if not isinstance(history, list) or not all(isinstance(m, Mapping) for m in history):
        raise format_error(path, EXPECTED, "'history' is not a list of message objects")
    if not isinstance(traj, list):
        raise format_error(path, EXPECTED, "'trajectory' is not a list")
    info = as_mapping(data.get("info"))

    role_texts, task, instance_at = _read_preamble(history)
    if not task:
        statement = info.get("problem_statement") or data.get("problem_statement")
        if isinstance(statement, str) and statement.strip():
            task = statement.strip()
    if not task:
        raise format_error(path, EXPECTED, "no task statement (no user message in 'history')")

    raw_steps: Sequence[Mapping[str, Any]]
    if traj:
        for n, entry in enumerate(traj):
            if not _is_step(entry):
                raise format_error(
                    path, EXPECTED, f"trajectory[{n}] is not an object with action and observation"
                )
        raw_steps = traj
    else:
        raw_steps = _steps_from_history(history, instance_at)
    if not raw_steps:
        raise format_error(path, EXPECTED, "the trajectory has no steps")

    roots = _workdir(traj)
    steps = [_step(n, entry, roots) for n, entry in enumerate(raw_steps)]
    stats = as_mapping(info.get("model_stats"))
    recorded = {
        k: float(v)
        for k, v in stats.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }
    instance = info.get("instance_id") or data.get("instance_id")
    return Trajectory(
        format="swe-agent",
        path=str(path),
        task=task,
        steps=tuple(steps),
        role_texts=tuple(role_texts),
        model=_model(data),
        instance_id=instance if isinstance(instance, str) else path.name.split(".")[0],
        recorded=recorded,
    )


def load_swe_agent(path: Path) -> Trajectory:
    """Read and normalise a SWE-agent ``.traj`` file."""
    return parse_swe_agent(read_json(path, EXPECTED), path)
