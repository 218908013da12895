"""Importers of recorded agent runs: SWE-agent, mini-swe-agent and OpenHands trajectories."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ctxledger.adapters.importers.common import format_error, read_json
from ctxledger.adapters.importers.mini_swe_agent import EXPECTED as MINI_EXPECTED
from ctxledger.adapters.importers.mini_swe_agent import (
    looks_like_mini_swe_agent,
    parse_mini_swe_agent,
)
from ctxledger.adapters.importers.model import FORMATS, Format, RecordedUsage, Step, Trajectory
from ctxledger.adapters.importers.openhands import EXPECTED as OPENHANDS_EXPECTED
from ctxledger.adapters.importers.openhands import looks_like_openhands, parse_openhands
from ctxledger.adapters.importers.swe_agent import EXPECTED as SWE_AGENT_EXPECTED
from ctxledger.adapters.importers.swe_agent import looks_like_swe_agent, parse_swe_agent
from ctxledger.domain.errors import TrajectoryFormatError

__all__ = [
    "ANY_FORMAT",
    "FORMATS",
    "Format",
    "RecordedUsage",
    "Step",
    "Trajectory",
    "TrajectoryFormatError",
    "detect_format",
    "load_trajectory",
    "parse_trajectory",
]

ANY_FORMAT = "a SWE-agent .traj, a mini-swe-agent .traj.json or an OpenHands event list"

_PARSERS: dict[Format, Callable[[Any, Path], Trajectory]] = {
    "swe-agent": parse_swe_agent,
    "mini-swe-agent": parse_mini_swe_agent,
    "openhands": parse_openhands,
}
_EXPECTED: dict[Format, str] = {
    "swe-agent": SWE_AGENT_EXPECTED,
    "mini-swe-agent": MINI_EXPECTED,
    "openhands": OPENHANDS_EXPECTED,
}
_DETECTORS: tuple[tuple[Format, Callable[[Any], bool]], ...] = (
    ("mini-swe-agent", looks_like_mini_swe_agent),
    ("swe-agent", looks_like_swe_agent),
    ("openhands", looks_like_openhands),
)


def detect_format(data: Any) -> Format | None:
    """The format of parsed trajectory JSON, by shape (never by file name), or ``None``.

    mini-swe-agent: an object with a ``messages`` list; SWE-agent: an object whose
    ``trajectory`` holds action/observation steps (or with ``trajectory`` and a message
    ``history``); OpenHands: a list of events with ``source`` and ``action``/``observation``
    (or an object holding one as ``history``/``events``)."""
    for name, looks in _DETECTORS:
        if looks(data):
            return name
    return None


def _shape(data: Any) -> str:
    if isinstance(data, Mapping):
        keys = ", ".join(sorted(str(k)[:30] for k in data)[:8])
        return f"a JSON object with keys {keys}" if keys else "an empty JSON object"
    if isinstance(data, list):
        return "an empty JSON list" if not data else "a JSON list of unrecognised entries"
    return f"a JSON {type(data).__name__}"


def _checked(format: str) -> Format | None:
    """The named format (``None`` for ``auto``); an unknown name is a TrajectoryFormatError."""
    if format == "auto":
        return None
    for name in FORMATS:
        if name == format:
            return name
    raise TrajectoryFormatError(
        f"unknown trajectory format {format[:40]!r}; use auto, {', '.join(FORMATS)}"
    )


def parse_trajectory(data: Any, path: Path, format: str = "auto") -> Trajectory:
    """Normalise parsed JSON of *path* in *format* (``auto`` detects it)."""
    name = _checked(format) or detect_format(data)
    if name is None:
        raise format_error(path, ANY_FORMAT, f"found {_shape(data)}")
    return _PARSERS[name](data, path)


def load_trajectory(path: str | Path, format: str = "auto") -> Trajectory:
    """Read a trajectory file and normalise it.

    *format* is ``auto`` (detect by shape), ``swe-agent``, ``mini-swe-agent`` or
    ``openhands``. An unreadable, malformed, empty or unknown file raises
    :class:`~ctxledger.domain.errors.TrajectoryFormatError` naming the file and what was
    expected; a file with no task or no steps is refused too (never a silent empty import).
    """
    p = Path(path)
    name = _checked(format)
    expected = ANY_FORMAT if name is None else _EXPECTED[name]
    if not p.exists():
        raise format_error(p, expected, "no such file")
    return parse_trajectory(read_json(p, expected), p, format)
