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
(tracer ``ctxledger``) with the agent, generation, pack and token counts as attributes, and
every ``report_usage`` a span ``ctxledger.report_usage``; both carry the OpenTelemetry GenAI
semantic conventions' ``gen_ai.*`` attributes the engine knows there (:data:`GEN_AI`). Without
it, nothing is imported and nothing is traced."""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import sys
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Final, TextIO

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.util.types import AttributeValue

    from ctxledger.domain.events import CacheUsageRecorded

__all__ = [
    "GEN_AI",
    "LOGGER",
    "STRUCTURED_FIELDS",
    "LogLevel",
    "StructuredFormatter",
    "build_span",
    "configure_logging",
    "usage_attributes",
    "usage_span",
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


GEN_AI: Final = {
    "operation": "gen_ai.operation.name",
    "provider": "gen_ai.provider.name",
    "system": "gen_ai.system",
    "model": "gen_ai.request.model",
    "agent": "gen_ai.agent.id",
    "conversation": "gen_ai.conversation.id",
    "input_tokens": "gen_ai.usage.input_tokens",
    "output_tokens": "gen_ai.usage.output_tokens",
    "cache_read": "gen_ai.usage.cache_read.input_tokens",
    "cache_write": "gen_ai.usage.cache_creation.input_tokens",
}
"""The OpenTelemetry GenAI semantic conventions' attribute names ctxledger sets (as the
``opentelemetry-semantic-conventions`` package spells them; ``gen_ai.system`` is the older
name of ``gen_ai.provider.name``, set too for backends that read only it)."""


def _gen_ai_context(agent_id: str, conversation_id: str, model: str) -> dict[str, AttributeValue]:
    attributes: dict[str, AttributeValue] = {
        GEN_AI["agent"]: agent_id,
        GEN_AI["conversation"]: conversation_id,
    }
    if model:
        attributes[GEN_AI["model"]] = model
    return attributes


def usage_attributes(
    event: CacheUsageRecorded, *, conversation_id: str, model: str = ""
) -> dict[str, AttributeValue]:
    """The span attributes of one booked usage: the call's provider, model (the agent's, when
    its identity names one) and token counts. ``gen_ai.usage.input_tokens`` is the whole prompt,
    cached tokens included, as the conventions ask (the event keeps the uncached part alone:
    Anthropic's split); the cache reads and writes are its parts."""
    attributes: dict[str, AttributeValue] = {
        "agent_id": event.agent_id,
        "generation": event.generation,
        "expected_cached_tokens": event.expected_cached_tokens,
        GEN_AI["operation"]: "chat",
        **_gen_ai_context(event.agent_id, conversation_id, model),
        GEN_AI["input_tokens"]: (
            event.input_tokens + event.cache_read_tokens + event.cache_write_tokens
        ),
        GEN_AI["output_tokens"]: event.output_tokens,
        GEN_AI["cache_read"]: event.cache_read_tokens,
        GEN_AI["cache_write"]: event.cache_write_tokens,
    }
    if event.provider:
        attributes[GEN_AI["provider"]] = attributes[GEN_AI["system"]] = event.provider
    return attributes


@contextlib.contextmanager
def _span(name: str, attributes: Mapping[str, AttributeValue]) -> Iterator[Span | None]:
    tracer = _tracer()
    if tracer is None:
        yield None
        return
    with tracer.start_as_current_span(name, attributes=attributes) as span:
        yield span


@contextlib.contextmanager
def build_span(agent_id: str, *, conversation_id: str = "") -> Iterator[Span | None]:
    """A ``ctxledger.build`` span around one build (None without OpenTelemetry); an exception
    is recorded on it and re-raised. ``gen_ai.operation.name`` is ``retrieval``: a build
    gathers the context of the agent's next model call (the conventions' predefined value
    closest to it; the model call is the caller's own span)."""
    attributes: dict[str, AttributeValue] = {"agent_id": agent_id, GEN_AI["operation"]: "retrieval"}
    attributes |= _gen_ai_context(agent_id, conversation_id, "")
    with _span("ctxledger.build", attributes) as span:
        yield span


@contextlib.contextmanager
def usage_span(agent_id: str, *, conversation_id: str = "") -> Iterator[Span | None]:
    """A ``ctxledger.report_usage`` span around booking one call's usage (None without
    OpenTelemetry); the caller sets :func:`usage_attributes` on it once the usage is read."""
    attributes: dict[str, AttributeValue] = {"agent_id": agent_id, GEN_AI["operation"]: "chat"}
    attributes |= _gen_ai_context(agent_id, conversation_id, "")
    with _span("ctxledger.report_usage", attributes) as span:
        yield span
