"""OpenHands event JSON: a list of events (or an object holding it as ``history``/``events``,
also as older ``[action, observation]`` pairs).

Each event has an ``id``, a ``source`` (``user``, ``agent``, ``environment``) and either an
``action`` (with ``args``) or an ``observation`` (with ``content``, ``extras`` and the
``cause`` id of its action). The first user ``message`` is the task; a ``system`` action is
role text; every other agent action except bookkeeping (state changes, recalls, condensation)
is one step, its observations are the events whose ``cause`` is the action's id. Exit codes
come from ``extras.metadata.exit_code``, usage from ``tool_call_metadata.model_response``
(counted once per model response), times from ``timestamp``. Later user messages are kept as
the ``user_input`` of the step they follow.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
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
)
from ctxledger.adapters.importers.model import RecordedUsage, Step, Trajectory

__all__ = ["EXPECTED", "events_of", "load_openhands", "looks_like_openhands", "parse_openhands"]

EXPECTED = "an OpenHands event list (JSON events with id, source and action or observation)"

_BOOKKEEPING = frozenset(
    {"change_agent_state", "recall", "condensation", "condensation_request", "null", "system"}
)
_SKIP_OBSERVATIONS = frozenset({"null", "agent_state_changed", "recall", "condensation"})
_BULKY_ARGS = frozenset({"thought", "translated_ipython_code", "image_urls", "impl_source"})
_VIEW_ACTIONS = frozenset({"read"})


def _is_event(e: Any) -> bool:
    return isinstance(e, Mapping) and "source" in e and ("action" in e or "observation" in e)


def _is_pair(e: Any) -> bool:
    return isinstance(e, list) and len(e) == 2 and all(isinstance(x, Mapping) for x in e)


def _flatten_pairs(pairs: list[Any]) -> list[Any]:
    """Older OpenHands histories hold ``[action, observation]`` pairs; the observation's
    ``cause`` is the action's id when it does not say."""
    out: list[Any] = []
    for action, observation in pairs:
        out.append(action)
        if "cause" not in observation and "id" in action:
            observation = {**observation, "cause": action["id"]}
        out.append(observation)
    return out


def events_of(data: Any) -> list[Any] | None:
    """The event list of a parsed file: the top-level list, or the ``history``/``events``
    list of an object whose entries are events (or ``[action, observation]`` pairs);
    ``None`` if there is none."""
    candidates: list[list[Any]] = []
    if isinstance(data, list):
        candidates.append(data)
    elif isinstance(data, Mapping):
        for key in ("history", "events"):
            value = data.get(key)
            if isinstance(value, list) and value:
                candidates.append(value)
    for value in candidates:
        if value and all(_is_pair(e) for e in value):
            return _flatten_pairs(value)
        if not value or _is_event(value[0]) or isinstance(data, list):
            return value
    return None


def looks_like_openhands(data: Any) -> bool:
    """A list (or ``history``/``events`` list) whose first entries are OpenHands events."""
    events = events_of(data)
    return bool(events) and events is not None and all(_is_event(e) for e in events[:3])


def _tool_call(event: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(function name, parsed arguments) of the model's tool call behind an action."""
    meta = as_mapping(event.get("tool_call_metadata"))
    given = meta.get("function_name")
    name: str = given if isinstance(given, str) else ""
    call_id = meta.get("tool_call_id")
    response = as_mapping(meta.get("model_response"))
    for choice in response.get("choices") or ():
        for call in as_mapping(as_mapping(choice).get("message")).get("tool_calls") or ():
            call = as_mapping(call)
            if call_id is not None and call.get("id") != call_id:
                continue
            fn = as_mapping(call.get("function"))
            raw: Any = fn.get("arguments")
            if isinstance(raw, str):
                try:
                    raw = json.loads(raw)
                except ValueError:
                    raw = {"arguments": raw}
            fname = fn.get("name")
            return (fname if isinstance(fname, str) else name), dict(as_mapping(raw))
    return name, {}


def _describe(
    action: str, args: Mapping[str, Any], call: tuple[str, dict[str, Any]]
) -> tuple[str, str]:
    """(action text, command for the tool signature) of one agent action."""
    fname, fargs = call
    if action == "run" and isinstance(args.get("command"), str):
        return f"$ {args['command']}", args["command"]
    if action == "run_ipython" and isinstance(args.get("code"), str):
        return f"```python\n{args['code']}\n```", f"ipython {args['code']}"
    if action == "message":
        return as_text(args.get("content")), ""
    if action == "finish":
        text = as_text(args.get("final_thought")) or as_text(args.get("message"))
        return text or "finish", "finish"
    if fargs:
        sub = fargs.get("command") if isinstance(fargs.get("command"), str) else ""
        target = fargs.get("path") or fargs.get("url") or ""
        body = json.dumps(fargs, ensure_ascii=False, sort_keys=True)
        return f"{fname or action} {body}", f"{fname or action} {sub} {target}".strip()
    rest = {k: v for k, v in args.items() if k not in _BULKY_ARGS}
    target = args.get("path") or args.get("url") or ""
    body = json.dumps(rest, ensure_ascii=False, sort_keys=True, default=str)
    return f"{action} {body}", f"{action} {target}".strip()


def _observation_text(event: Mapping[str, Any]) -> str:
    content = as_text(event.get("content"))
    if content:
        return content
    extras = as_mapping(event.get("extras"))
    out = extras.get("formatted_output_and_error")
    if isinstance(out, str) and out:
        return out
    return as_text(event.get("message"))


def _observations_by_cause(events: list[Any], path: Path) -> dict[Any, list[Mapping[str, Any]]]:
    """Every observation event under the id of the action that caused it (and a format
    error naming the first event that is neither)."""
    for n, e in enumerate(events):
        if not _is_event(e):
            raise format_error(
                path, EXPECTED, f"event {n} has no 'source' with an 'action' or 'observation'"
            )
    by_cause: dict[Any, list[Mapping[str, Any]]] = {}
    for e in events:
        if "observation" in e and e.get("cause") is not None:
            by_cause.setdefault(e.get("cause"), []).append(e)
    return by_cause


def _observations_of(
    caused: Iterable[Mapping[str, Any]], roots: list[str]
) -> tuple[list[str], int | None]:
    """An action's observation texts and exit code (the first failing one); the working
    directories they name are added to *roots*."""
    observations: list[str] = []
    exit_code: int | None = None
    for obs in caused:
        if obs.get("observation") in _SKIP_OBSERVATIONS:
            continue
        observations.append(_observation_text(obs))
        metadata = as_mapping(as_mapping(obs.get("extras")).get("metadata"))
        code = as_int(metadata.get("exit_code"))
        if code is not None and (exit_code is None or exit_code == 0):
            exit_code = code
        wd = metadata.get("working_dir")
        if isinstance(wd, str) and wd.startswith("/") and wd not in roots:
            roots.append(wd)
    return observations, exit_code


def _usage_once(response: Mapping[str, Any], seen: set[str]) -> RecordedUsage | None:
    """The usage of a model response the first time its id is met (several actions of one
    response share it: counted once)."""
    rid = response.get("id")
    if isinstance(rid, str) and rid not in seen:
        seen.add(rid)
        return recorded_usage(response.get("usage"))
    return None


def parse_openhands(data: Any, path: Path) -> Trajectory:
    """Normalise parsed OpenHands events; TrajectoryFormatError names what is wrong."""
    events = events_of(data)
    if events is None:
        raise format_error(path, EXPECTED, f"the top level is a JSON {type(data).__name__}")
    by_cause = _observations_by_cause(events, path)

    role_texts: list[str] = []
    task = ""
    drafts: list[dict[str, Any]] = []
    seen_responses: set[str] = set()
    model = ""
    roots: list[str] = []
    for e in events:
        action = e.get("action")
        if not isinstance(action, str):
            continue
        source = e.get("source")
        args = as_mapping(e.get("args"))
        if action == "system":
            text = as_text(args.get("content")) or as_text(e.get("message"))
            if text.strip():
                role_texts.append(text.strip())
            continue
        if source == "user" and action == "message":
            text = (as_text(args.get("content")) or as_text(e.get("message"))).strip()
            if not text:
                continue
            if not task and not drafts:
                task = text
            elif drafts:
                sep = "\n\n" if drafts[-1]["user_input"] else ""
                drafts[-1]["user_input"] += sep + text
            else:
                task += "\n\n" + text
            continue
        if source != "agent" or action in _BOOKKEEPING:
            continue
        call = _tool_call(e)
        text, command = _describe(action, args, call)
        thought = as_text(args.get("thought")).strip()
        response = as_mapping(as_mapping(e.get("tool_call_metadata")).get("model_response"))
        usage = _usage_once(response, seen_responses)
        if not model and isinstance(response.get("model"), str):
            model = response["model"]
        observations, exit_code = _observations_of(by_cause.get(e.get("id"), ()), roots)
        view = action in _VIEW_ACTIONS or call[1].get("command") == "view"
        drafts.append(
            {
                "thought": thought,
                "action": text if not thought or action == "message" else f"{thought}\n\n{text}",
                "command": command,
                "tool": call[0] or action,
                "observation": "\n\n".join(o for o in observations if o),
                "exit_code": exit_code,
                "view": view,
                "usage": usage,
                "at": parse_time(e.get("timestamp")),
                "user_input": "",
            }
        )
    if not task:
        raise format_error(path, EXPECTED, "no task statement (no user message event)")
    if not drafts:
        raise format_error(path, EXPECTED, "the trajectory has no steps (no agent action event)")
    steps = _steps(drafts, (*roots, "/workspace"))
    name = path.name.split(".")[0]
    return Trajectory(
        format="openhands",
        path=str(path),
        task=task,
        steps=steps,
        role_texts=tuple(role_texts),
        model=model,
        instance_id=name,
        started_at=next((s.at for s in steps if s.at is not None), None),
    )


def _steps(drafts: Sequence[Mapping[str, Any]], roots: Sequence[str]) -> tuple[Step, ...]:
    steps = []
    for n, d in enumerate(drafts):
        observation: str = d["observation"]
        flags = classify_step(
            d["command"], observation, exit_code=d["exit_code"], view=d["view"] or None
        )
        steps.append(
            Step(
                index=n,
                thought=d["thought"],
                action=d["action"],
                observation=observation,
                tool=d["tool"],
                command=normalize_command(d["command"]),
                exit_code=d["exit_code"],
                failure=flags.failure,
                test_failure=flags.test_failure,
                test_run=flags.test_run,
                file_view=flags.file_view,
                truncated=flags.truncated,
                files=extract_files(d["command"], d["action"], observation, roots=roots),
                symbols=extract_symbols(d["thought"], observation),
                usage=d["usage"],
                at=d["at"],
                user_input=d["user_input"],
            )
        )
    return tuple(steps)


def load_openhands(path: Path) -> Trajectory:
    """Read and normalise an OpenHands event file."""
    return parse_openhands(read_json(path, EXPECTED), path)
