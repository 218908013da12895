"""Log records of the ``ctxledger`` loggers: builds, rebuilds, refreshes, conflict retries and
turn errors, each with the agent id and generation as structured attributes; and the CLI's
``--log-level`` handler."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.logs import LOGGER, StructuredFormatter, configure_logging
from ctxledger.domain import events as ev
from ctxledger.domain.model import AgentIdentity, Layer, Source
from ctxledger.domain.tokens import EstimatingCounter

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

AGENT = "primary-1"
ENGINE_LOGGER = "ctxledger.engine"
CONTEXT_LIMIT = {
    "type": "error",
    "error": {
        "type": "invalid_request_error",
        "message": "prompt is too long: 210000 tokens > 200000 maximum",
    },
}


@pytest.fixture
def engine() -> Iterator[ContextEngine]:
    with open_engine("memory://") as e:
        e.register_agent(AgentIdentity(agent_id=AGENT, role="primary", task="t", budget=4000))
        e.record(AGENT, "Fix the login timeout", layer=Layer.L1, source=Source.USER_REQUIREMENT)
        e.record(
            AGENT, "FAILED test_refresh - TypeError", layer=Layer.L1, source=Source.TEST_RESULT
        )
        yield e


def _records(caplog: pytest.LogCaptureFixture, level: int) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == ENGINE_LOGGER and r.levelno == level]


def test_a_build_logs_at_debug_with_agent_and_generation(
    engine: ContextEngine, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER):
        result = engine.build(AGENT)
    (record,) = _records(caplog, logging.DEBUG)
    assert record.getMessage().startswith(f"build {result.pack.id}: ")
    assert f"{result.pack.budget_used} of {result.pack.budget_limit} tokens" in record.getMessage()
    assert record.__dict__["agent_id"] == AGENT
    assert record.__dict__["generation"] == result.generation == 1
    assert record.__dict__["kind"] == result.kind


def test_builds_are_silent_at_info(engine: ContextEngine, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        engine.build(AGENT)
    assert [r for r in caplog.records if r.name == ENGINE_LOGGER] == []


def test_a_context_limit_error_logs_the_turn_error_and_the_refresh(
    engine: ContextEngine, caplog: pytest.LogCaptureFixture
) -> None:
    engine.build(AGENT)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        outcome = engine.on_turn_error(AGENT, CONTEXT_LIMIT)
    assert outcome.refreshed
    assert outcome.result is not None
    turn, refreshed = _records(caplog, logging.INFO)
    assert turn.getMessage().startswith("turn error (context_limit from anthropic): prompt is")
    assert (turn.__dict__["agent_id"], turn.__dict__["generation"]) == (AGENT, 1)
    assert turn.__dict__["error_class"] == "context_limit"
    assert refreshed.getMessage() == outcome.message
    assert refreshed.__dict__["agent_id"] == AGENT
    assert refreshed.__dict__["generation"] == outcome.result.generation == 2
    assert refreshed.__dict__["kind"] == "context_limit"


def test_another_turn_error_is_a_warning(
    engine: ContextEngine, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        outcome = engine.on_turn_error(AGENT, RuntimeError("upstream 503: overloaded"))
    assert not outcome.refreshed
    (record,) = _records(caplog, logging.WARNING)
    assert "upstream 503: overloaded" in record.getMessage()
    assert record.__dict__["generation"] == 1
    assert record.__dict__["error_class"] == "other"
    assert _records(caplog, logging.INFO) == []


def test_a_rebuild_logs_at_info(engine: ContextEngine, caplog: pytest.LogCaptureFixture) -> None:
    engine.build(AGENT)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        result = engine.rebuild(AGENT, reason="too big")
    (record,) = _records(caplog, logging.INFO)
    assert record.getMessage().startswith("rebuild ")
    assert "(manual: too big)" in record.getMessage()
    assert record.__dict__["kind"] == "rebuild"
    assert record.__dict__["generation"] == result.generation == 2


def test_a_conflict_retry_logs_the_stream_and_attempt(
    engine: ContextEngine, caplog: pytest.LogCaptureFixture
) -> None:
    stream = f"ctx/{engine.settings.session_id}/{AGENT}"
    assert engine.ledger.stream_version(stream) > 0
    now = datetime(2026, 1, 1, tzinfo=UTC)
    calls: list[int] = []

    def decide(version: int) -> list[ev.Event]:
        calls.append(version)
        if len(calls) == 1:  # another writer lands first, past the lock (a real conflict)
            other = ev.TurnSucceeded(at=now, agent_id=AGENT)
            engine.ledger.append(stream, [other], expected_version=version)
        return [ev.TurnSucceeded(at=now, agent_id=AGENT)]

    with caplog.at_level(logging.INFO, logger=LOGGER):
        engine.decide_and_append(stream, decide)
    assert calls == [calls[0], calls[0] + 1]  # decided again on the moved stream
    (record,) = _records(caplog, logging.INFO)
    assert record.getMessage().startswith(f"conflict appending to {stream}")
    assert record.__dict__["stream"] == stream
    assert record.__dict__["attempt"] == 1


def test_configure_logging_writes_one_line_with_the_fields_and_never_doubles() -> None:
    first, second = io.StringIO(), io.StringIO()
    logger = logging.getLogger(LOGGER)
    before = list(logger.handlers), logger.level
    try:
        configure_logging("info", first)
        handler = configure_logging("info", second)
        # one ctxledger handler, whatever an earlier caller in this process installed
        others = [h for h in before[0] if not isinstance(h, type(handler))]
        assert logger.handlers == [*others, handler]
        logging.getLogger(ENGINE_LOGGER).info(
            "two\nlines", extra={"agent_id": "a", "generation": 3}
        )
        logging.getLogger(ENGINE_LOGGER).debug("below the level")
    finally:
        for h in list(logger.handlers):
            logger.removeHandler(h)
        for h in before[0]:
            logger.addHandler(h)
        logger.setLevel(before[1])
    assert first.getvalue() == ""
    assert second.getvalue() == (
        "ctxledger: INFO ctxledger.engine: two lines [agent_id=a generation=3]\n"
    )


def test_the_formatter_leaves_records_without_fields_plain() -> None:
    record = logging.LogRecord("ctxledger.x", logging.WARNING, __file__, 1, "plain", None, None)
    assert StructuredFormatter().format(record) == "ctxledger: WARNING ctxledger.x: plain"


def _demo(tmp_path: Path, *level: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CTXLEDGER_")}
    return subprocess.run(
        [str(Path(sys.executable).parent / "ctxledger"), *level, "demo", "--path", "d.db"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_cli_log_level_sends_the_engine_records_to_stderr(tmp_path: Path) -> None:
    out = _demo(tmp_path, "--log-level", "debug")
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert lines
    assert all(line.startswith("ctxledger: ") for line in lines), lines
    assert any(
        line.startswith("ctxledger: DEBUG ctxledger.engine: build primary-1/g1/")
        and "[agent_id=primary-1 generation=1 " in line
        for line in lines
    )
    assert any(
        line.startswith("ctxledger: INFO ctxledger.engine: Context refreshed · Generation")
        for line in lines
    )


def test_cli_default_level_keeps_stderr_quiet(tmp_path: Path) -> None:
    out = _demo(tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""


def test_a_build_is_an_opentelemetry_span_with_the_agent_and_generation(
    engine: ContextEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ctxledger.adapters import logs

    assert logs._tracer() is not None  # opentelemetry-api is installed (dev extra)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    # the SDK's real tracer, from a provider of this test's own (the global one is set once)
    monkeypatch.setattr(logs, "_tracer", lambda: provider.get_tracer(LOGGER))
    first = engine.build(AGENT)
    refreshed = engine.refresh(AGENT, reason="test")
    spans = exporter.get_finished_spans()
    assert [s.name for s in spans] == ["ctxledger.build", "ctxledger.build"]
    attrs = [dict(s.attributes or {}) for s in spans]
    assert attrs[0]["agent_id"] == AGENT
    assert (attrs[0]["generation"], attrs[0]["pack_id"]) == (1, first.pack.id)
    assert attrs[0]["budget_used"] == first.pack.budget_used
    assert (attrs[1]["generation"], attrs[1]["kind"]) == (2, refreshed.kind)


class _CounterThatBreaks:
    """A real token counter (the byte estimate) that fails once ``broken`` is set, as a
    caller's own counter might (a tokenizer service going away)."""

    def __init__(self) -> None:
        self._inner = EstimatingCounter()
        self.broken = False

    @property
    def name(self) -> str:
        return self._inner.name

    def count(self, text: str) -> int:
        if self.broken:
            raise RuntimeError("tokenizer went away")
        return self._inner.count(text)


def test_a_failed_build_is_a_warning_and_an_error_span(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import StatusCode

    from ctxledger.adapters import logs

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(logs, "_tracer", lambda: provider.get_tracer(LOGGER))
    counter = _CounterThatBreaks()
    with open_engine("memory://", counter=counter) as e:
        e.register_agent(AgentIdentity(agent_id=AGENT, role="primary", task="t", budget=4000))
        e.record(AGENT, "Fix the login timeout", layer=Layer.L1, source=Source.USER_REQUIREMENT)
        counter.broken = True
        with caplog.at_level(logging.WARNING, logger=LOGGER), pytest.raises(RuntimeError):
            e.build(AGENT)
        counter.broken = False
    (record,) = _records(caplog, logging.WARNING)
    assert record.getMessage().endswith("failed: RuntimeError: tokenizer went away")
    assert (record.__dict__["agent_id"], record.__dict__["generation"]) == (AGENT, 1)
    (span,) = exporter.get_finished_spans()
    assert span.status.status_code is StatusCode.ERROR
    assert [event.name for event in span.events] == ["exception"]


def test_builds_run_without_opentelemetry() -> None:
    code = (
        "import sys\n"
        "sys.modules['opentelemetry'] = None\n"
        "from ctxledger.adapters import logs\n"
        "from ctxledger.adapters import open_engine\n"
        "from ctxledger.domain.model import AgentIdentity\n"
        "e = open_engine('memory://')\n"
        "e.register_agent(AgentIdentity(agent_id='a', role='primary', task='t', budget=500))\n"
        "print(logs._tracer(), e.build('a').generation)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == "None 1\n"


_WARN_WITHOUT_LOGGING = (
    "import logging, sys\n"
    "from ctxledger.adapters import open_engine\n"
    "from ctxledger.domain.model import AgentIdentity\n"
    "{setup}"
    "e = open_engine('memory://')\n"
    "e.register_agent(AgentIdentity(agent_id='a', role='primary', task='t', budget=500))\n"
    "e.on_turn_error('a', RuntimeError('upstream 503: overloaded'))\n"  # a WARNING record
    "handlers = logging.getLogger('ctxledger').handlers\n"
    "print(','.join(type(h).__name__ for h in handlers))\n"
)


def _warn_in_subprocess(setup: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _WARN_WITHOUT_LOGGING.format(setup=setup)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_library_logger_has_a_null_handler_so_an_unconfigured_app_sees_nothing() -> None:
    out = _warn_in_subprocess()
    assert out.returncode == 0, out.stderr
    assert out.stdout == "NullHandler\n"  # one, and only it
    # without it, Python's last-resort handler would print the warning here
    assert out.stderr == ""


def test_the_null_handler_keeps_records_flowing_to_the_apps_handlers() -> None:
    out = _warn_in_subprocess("logging.basicConfig(level=logging.WARNING, format='%(message)s')\n")
    assert out.returncode == 0, out.stderr
    assert "upstream 503: overloaded" in out.stderr


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """The spans ctxledger finishes, through the real OpenTelemetry SDK (a provider of this
    test's own: the global one is set once per process)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from ctxledger.adapters import logs

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(logs, "_tracer", lambda: provider.get_tracer(LOGGER))
    yield exporter
    provider.shutdown()


def test_the_gen_ai_names_are_the_semantic_conventions_own() -> None:
    from opentelemetry.semconv._incubating.attributes import gen_ai_attributes as semconv

    from ctxledger.adapters.logs import GEN_AI

    assert GEN_AI == {
        "operation": semconv.GEN_AI_OPERATION_NAME,
        "provider": semconv.GEN_AI_PROVIDER_NAME,
        "system": semconv.GEN_AI_SYSTEM,
        "model": semconv.GEN_AI_REQUEST_MODEL,
        "agent": semconv.GEN_AI_AGENT_ID,
        "conversation": semconv.GEN_AI_CONVERSATION_ID,
        "input_tokens": semconv.GEN_AI_USAGE_INPUT_TOKENS,
        "output_tokens": semconv.GEN_AI_USAGE_OUTPUT_TOKENS,
        "cache_read": semconv.GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS,
        "cache_write": semconv.GEN_AI_USAGE_CACHE_CREATION_INPUT_TOKENS,
    }


def test_a_build_span_carries_the_gen_ai_operation_agent_and_conversation(
    engine: ContextEngine, spans: InMemorySpanExporter
) -> None:
    engine.build(AGENT)
    (span,) = spans.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.operation.name"] == "retrieval"
    assert attrs["gen_ai.agent.id"] == AGENT
    assert attrs["gen_ai.conversation.id"] == engine.settings.session_id
    assert "gen_ai.usage.input_tokens" not in attrs  # a build calls no model


def test_report_usage_is_a_span_with_the_gen_ai_usage_of_the_sdks_own_usage(
    spans: InMemorySpanExporter,
) -> None:
    from anthropic.types import Usage

    with open_engine("memory://") as e:
        e.register_agent(
            AgentIdentity(
                agent_id="coder",
                role="worker",
                task="t",
                budget=4000,
                model="claude-sonnet-4-5",
                session_id="run-7",
            )
        )
        e.build("coder")
        usage = Usage(
            input_tokens=40,
            output_tokens=7,
            cache_creation_input_tokens=1500,
            cache_read_input_tokens=2600,
        )
        event = e.report_usage("coder", usage)
    build, booked = spans.get_finished_spans()
    assert (build.name, booked.name) == ("ctxledger.build", "ctxledger.report_usage")
    assert dict(build.attributes or {})["gen_ai.conversation.id"] == "run-7"
    attrs = dict(booked.attributes or {})
    assert {k: v for k, v in attrs.items() if k.startswith("gen_ai.")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.system": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-5",
        "gen_ai.agent.id": "coder",
        "gen_ai.conversation.id": "run-7",
        # the whole prompt, cached parts included (Anthropic's input_tokens excludes them)
        "gen_ai.usage.input_tokens": 40 + 2600 + 1500,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_read.input_tokens": 2600,
        "gen_ai.usage.cache_creation.input_tokens": 1500,
    }
    assert (attrs["agent_id"], attrs["generation"]) == ("coder", event.generation)
    assert attrs["expected_cached_tokens"] == event.expected_cached_tokens


def test_openai_usage_counts_its_cached_tokens_once(
    engine: ContextEngine, spans: InMemorySpanExporter
) -> None:
    from openai.types import CompletionUsage
    from openai.types.completion_usage import PromptTokensDetails

    usage = CompletionUsage(
        prompt_tokens=4200,
        completion_tokens=9,
        total_tokens=4209,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=3968),
    )
    engine.report_usage(AGENT, usage)
    (span,) = spans.get_finished_spans()
    attrs = dict(span.attributes or {})
    assert attrs["gen_ai.provider.name"] == "openai"
    assert "gen_ai.request.model" not in attrs  # the agent's identity names no model
    assert attrs["gen_ai.usage.input_tokens"] == 4200  # prompt_tokens already includes them
    assert attrs["gen_ai.usage.cache_read.input_tokens"] == 3968


def test_unreadable_usage_is_an_error_span_without_usage(
    engine: ContextEngine, spans: InMemorySpanExporter
) -> None:
    from opentelemetry.trace import StatusCode

    from ctxledger.domain.errors import InvalidInputError

    with pytest.raises(InvalidInputError):
        engine.report_usage(AGENT, {"tokens": "many"})
    (span,) = spans.get_finished_spans()
    assert span.name == "ctxledger.report_usage"
    assert span.status.status_code is StatusCode.ERROR
    assert not [k for k in dict(span.attributes or {}) if k.startswith("gen_ai.usage.")]
