"""The ``ctxledger`` loggers (stdlib logging) and the command line's stderr handler.

The engine logs under ``ctxledger.engine``: every build at DEBUG; rebuilds, refreshes,
conflict retries and context-limit turn errors at INFO; other turn errors and failed builds at
WARNING. Each record carries ``agent_id`` and ``generation`` (and, where they apply,
``pack_id``, ``kind``, ``stream``, ``attempt``, ``error_class``, ``provider``) as attributes, so
a JSON or OpenTelemetry handler sees them as structured fields. The library installs no
handler; the CLI's ``--log-level`` installs one on stderr."""

from __future__ import annotations

import enum
import logging
import sys
from typing import Final, TextIO

__all__ = ["LOGGER", "STRUCTURED_FIELDS", "LogLevel", "StructuredFormatter", "configure_logging"]

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
    """The handler ``configure_logging`` installs (found again to be replaced, never doubled)."""


def configure_logging(level: LogLevel | str, stream: TextIO | None = None) -> logging.Handler:
    """Send the ``ctxledger`` loggers' records at *level* and above to *stream* (stderr) in one
    line each; a second call replaces the first handler instead of adding another."""
    logger = logging.getLogger(LOGGER)
    for old in [h for h in logger.handlers if isinstance(h, _CtxledgerHandler)]:
        logger.removeHandler(old)
    handler = _CtxledgerHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(StructuredFormatter())
    logger.addHandler(handler)
    logger.setLevel(LogLevel(level).upper())
    return handler
