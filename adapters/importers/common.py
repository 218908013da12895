"""Shared reading helpers of the importers: bounded JSON loading, text, numbers, timestamps."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ctxledger.adapters.importers.model import RecordedUsage
from ctxledger.domain.errors import InvalidInputError, TrajectoryFormatError
from ctxledger.domain.usage import normalize_usage

__all__ = [
    "MAX_FILE_BYTES",
    "TASK_PLACEHOLDER",
    "as_int",
    "as_mapping",
    "as_text",
    "format_error",
    "parse_time",
    "read_json",
    "recorded_usage",
    "split_task",
]

MAX_FILE_BYTES = 512 * 1024 * 1024
"""Trajectory files larger than this are refused (the whole file is parsed in memory)."""


def format_error(path: str | Path, expected: str, problem: str) -> TrajectoryFormatError:
    """``<file>: expected <expected>: <problem>`` on one line, bounded."""
    one_line = " ".join(problem.split())[:300]
    return TrajectoryFormatError(f"{str(path)[:300]}: expected {expected}: {one_line}")


def read_json(path: Path, expected: str) -> Any:
    """The parsed JSON of *path*; every read or parse problem is a TrajectoryFormatError."""
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise format_error(path, expected, f"file is {size} bytes (limit {MAX_FILE_BYTES})")
        raw = path.read_bytes()
    except TrajectoryFormatError:
        raise
    except IsADirectoryError:
        raise format_error(path, expected, "it is a directory") from None
    except OSError as exc:
        raise format_error(path, expected, f"cannot read the file ({exc.strerror})") from None
    if not raw.strip():
        raise format_error(path, expected, "the file is empty")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise format_error(path, expected, "the file is not UTF-8 text") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise format_error(
            path, expected, f"malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise format_error(path, expected, "JSON nested too deeply") from None


def as_text(value: Any) -> str:
    """Message content as text: a string, or the text parts of a list of content blocks
    (``{"type": "text", "text": …}``); anything else is ``""``."""
    if isinstance(value, str):
        return value
    if isinstance(value, Sequence) and not isinstance(value, bytes | bytearray):
        parts = []
        for part in value:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return ""


def as_mapping(value: Any) -> Mapping[str, Any]:
    """*value* if it is a mapping, else an empty one."""
    return value if isinstance(value, Mapping) else {}


def as_int(value: Any) -> int | None:
    """An integer (not a bool), or an integral string, else ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def parse_time(value: Any) -> datetime | None:
    """A timezone-aware UTC datetime from a Unix timestamp or an ISO-8601 string (naive
    strings are read as UTC), else ``None``."""
    try:
        if isinstance(value, bool):
            return None
        if isinstance(value, int | float):
            if not 0 < value < 32_503_680_000:  # before year 3000
                return None
            return datetime.fromtimestamp(float(value), tz=UTC)
        if isinstance(value, str) and value:
            dt = datetime.fromisoformat(value.replace("Z", "+00:00"))
            return dt.replace(tzinfo=UTC) if dt.tzinfo is None else dt.astimezone(UTC)
    except (ValueError, OverflowError, OSError):
        return None
    return None


def recorded_usage(raw: Any) -> RecordedUsage | None:
    """The provider usage of one call (any shape :func:`ctxledger.domain.usage.normalize_usage`
    reads, LiteLLM-wrapped Anthropic included), or ``None`` when absent or unreadable."""
    usage = as_mapping(raw)
    if not usage:
        return None
    try:
        return normalize_usage(usage)
    except InvalidInputError:
        return None


_PLACEHOLDERS = re.compile(
    r"\{\{\s*(?:task|problem_statement|issue)\s*\}\}|\{(?:problem_statement|issue)\}"
)
_TEMPLATE_TAG = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}|\{[A-Za-z_]\w*\}", re.DOTALL)
_TAGGED = (
    re.compile(r"<pr_description>\s*(.*?)\s*</pr_description>", re.DOTALL),
    re.compile(r"<issue>\s*(.*?)\s*</issue>", re.DOTALL),
    re.compile(r"<problem_statement>\s*(.*?)\s*</problem_statement>", re.DOTALL),
    re.compile(r"<task>\s*(.*?)\s*</task>", re.DOTALL),
    re.compile(r"(?:^|\n)ISSUE:\n(.*?)\n\s*\nINSTRUCTIONS:\n", re.DOTALL),
)
_ANCHOR_MAX = 200
TASK_PLACEHOLDER = "{{task}}"


def _anchors(template: str) -> tuple[str, str] | None:
    m = _PLACEHOLDERS.search(template)
    if m is None:
        return None
    before = _TEMPLATE_TAG.split(template[: m.start()])[-1][-_ANCHOR_MAX:]
    after = _TEMPLATE_TAG.split(template[m.end() :])[0][:_ANCHOR_MAX]
    return before, after


def split_task(message: str, template: str = "") -> tuple[str, str]:
    """``(task, instructions)`` of an instance message.

    With the scaffold's *template* (a ``{{task}}``/``{{problem_statement}}``/``{issue}``
    placeholder), the task is the text between the literal template text right before and
    right after the placeholder; otherwise the first ``<pr_description>``, ``<issue>``,
    ``<problem_statement>`` or ``<task>`` element, or SWE-agent's ``ISSUE: … INSTRUCTIONS:``
    section. The instructions are the message with the task replaced by ``{{task}}``; when
    nothing matches the whole message is the task and the instructions are empty."""
    spans: list[tuple[int, int]] = []
    anchors = _anchors(template) if template else None
    if anchors is not None:
        before, after = anchors
        start = message.find(before) if before else 0
        if start >= 0:
            start += len(before)
            end = message.find(after, start) if after else len(message)
            if end >= 0:
                spans.append((start, end))
    for rx in _TAGGED:
        m = rx.search(message)
        if m is not None:
            spans.append((m.start(1), m.end(1)))
    for start, end in spans:
        task = message[start:end].strip()
        if task:
            return task, message[:start] + TASK_PLACEHOLDER + message[end:]
    return message.strip(), ""
