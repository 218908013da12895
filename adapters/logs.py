"""The ``ctxledger`` loggers (stdlib logging) and the command line's stderr handler.

The engine logs under ``ctxledger.engine``: every build at DEBUG; rebuilds, refreshes,
conflict retries and context-limit turn errors at INFO; other turn errors and failed builds at
WARNING. Each record carries ``agent_id`` and ``generation`` (and, where they apply,
``pack_id``, ``kind``, ``stream``, ``attempt``, ``error_class``, ``provider``) as attributes, so
a JSON or OpenTelemetry handler sees them as structured fields. The library installs only a
``logging.NullHandler`` on ``ctxledger`` (in ``ctxledger.adapters``' ``__init__``: an
application that configures no logging sees none of its records, not even warnings through
Python's last-resort handler); the CLI's ``--log-level`` installs one on stderr.

When ``opentelemetry-api`` is importable, every build is also a span ``ctxledger.build``
(tracer ``ctxledger``) with the agent, generation, pack and token counts as attributes; without
it, nothing is imported and nothing is traced."""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final, TextIO

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

__all__ = [
    "LOGGER",
    "STRUCTURED_FIELDS",
    "LogLevel",
    "StructuredFormatter",
    "build_span",
    "configure_logging",
]

LOGGER: Final = "ctxledger"
"""The root of every ctxledger logger (``ctxledger.engine``, ``ctxledger.render``, …)."""

STRUCTURED_FIELDS: Final = (
    "agent_id",
    "generation",
    "pack_id",
    "kind",
    "stream",
    "attempt",
    "error_class",
    "provider",
)
"""The ``extra`` attributes ctxledger's records may carry, in the order the formatter shows them."""


class LogLevel(enum.StrEnum):
    """The levels ``--log-level`` accepts."""

    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class StructuredFormatter(logging.Formatter):
    """``ctxledger: LEVEL logger: message [agent_id=… generation=…]`` on one line."""

    def __init__(self) -> None:
        super().__init__("ctxledger: %(levelname)s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        line = " ".join(super().format(record).split("\n"))
        fields = [
            f"{name}={getattr(record, name)}"
            for name in STRUCTURED_FIELDS
            if getattr(record, name, None) is not None
        ]
        return f"{line} [{' '.join(fields)}]" if fields else line


class _CtxledgerHandler(logging.StreamHandler[TextIO]):
    """The handler ``configure_logging`` installs (found again to be replaced, never doubled).
    Without a stream of its own it writes to whatever ``sys.stderr`` is at each record, so a
    CLI run inside another program (or a test) never leaves it bound to a closed stream."""

    def __init__(self, stream: TextIO | None = None) -> None:
        super().__init__(stream if stream is not None else sys.stderr)
        self._follow_stderr = stream is None

    def emit(self, record: logging.LogRecord) -> None:
        if self._follow_stderr:
            self.stream = sys.stderr
        super().emit(record)


def configure_logging(level: LogLevel | str, stream: TextIO | None = None) -> logging.Handler:
    """Send the ``ctxledger`` loggers' records at *level* and above to *stream* (stderr) in one
    line each; a second call replaces the first handler instead of adding another."""
    logger = logging.getLogger(LOGGER)
    for old in [h for h in logger.handlers if isinstance(h, _CtxledgerHandler)]:
        logger.removeHandler(old)
    handler = _CtxledgerHandler(stream)
    handler.setFormatter(StructuredFormatter())
    logger.addHandler(handler)
    logger.setLevel(LogLevel(level).upper())
    return handler


@functools.cache
def _tracer() -> Tracer | None:
    """OpenTelemetry's tracer for ctxledger, or None without ``opentelemetry-api`` (a proxy
    tracer: a provider configured later is still used)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    return trace.get_tracer(LOGGER)


@contextlib.contextmanager
def build_span(agent_id: str) -> Iterator[Span | None]:
    """A ``ctxledger.build`` span around one build (None without OpenTelemetry); an exception
    is recorded on it and re-raised."""
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span("ctxledger.build", attributes={"agent_id": agent_id}) as span:
        yield span
