"""Nothing a caller passes can poison the ledger: every event is checked against the decoder
that will read it before it is committed. For the public engine methods, arbitrary argument
values either raise a typed error with zero rows written, or append events that all decode;
afterwards the store reopens and audits clean (a real SQLite file)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.ledger import open_ledger
from ctxledger.domain import events as ev
from ctxledger.domain.codec import encode_checked
from ctxledger.domain.errors import CtxLedgerError, InvalidInputError
from ctxledger.domain.model import AgentIdentity
from ctxledger.projections.audit import audit
from tests.reliability._support import record, rerun

AGENT = "agent"

WEIRD: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)
"""Values of the wrong type, size or shape (and sometimes the right one)."""


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContextEngine]:
    path = tmp_path_factory.mktemp("bad") / "ledger.db"
    eng = open_engine(f"sqlite:///{path}")
    eng.register_agent(AgentIdentity(agent_id=AGENT, role="worker", budget=4_000))
    eng.record(AGENT, "a first observation")
    try:
        yield eng
    finally:
        url = eng.ledger.url
        eng.close()
        # the store reopens and audits clean after the whole sweep
        with open_ledger(url) as ledger:
            records = [(r.position, r.event) for r in ledger.read_all()]
        assert records
        assert audit(records) == []
        open_engine(url).close()


Call = Callable[[ContextEngine, Any], object]

CALLS: dict[str, Call] = {
    "register_agent.budget": lambda e, v: e.register_agent(
        AgentIdentity(agent_id="other", role="worker", budget=v)
    ),
    "register_agent.role": lambda e, v: e.register_agent(AgentIdentity(agent_id="r", role=v)),
    "record.task": lambda e, v: e.record(AGENT, "observed", task=v),
    "record.pinned": lambda e, v: e.record(AGENT, "observed", pinned=v),
    "record.confidence": lambda e, v: e.record(AGENT, "observed", confidence=v),
    "record.files": lambda e, v: e.record(AGENT, "observed", files=v),
    "record.content": lambda e, v: e.record(AGENT, v),
    "report_usage.input_tokens": lambda e, v: e.report_usage(
        AGENT, {"input_tokens": v, "output_tokens": 1}
    ),
    "report_usage.cache_read": lambda e, v: e.report_usage(
        AGENT, {"input_tokens": 10, "cache_read_input_tokens": v}
    ),
    "configure.budget": lambda e, v: e.configure(AGENT, budget=v),
    "configure.watermark": lambda e, v: e.configure(AGENT, watermark=v),
    "pin.item_id": lambda e, v: e.pin(AGENT, v),
    "remove.reason": lambda e, v: e.remove(AGENT, "missing-item", reason=v),
    "build.budget": lambda e, v: e.build(AGENT, budget=v),
}


def _rows(engine: ContextEngine) -> int:
    return engine.ledger.max_position()


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=st.sampled_from(sorted(CALLS)), value=WEIRD)
def test_any_value_is_refused_typed_or_stored_readable(
    engine: ContextEngine, name: str, value: Any
) -> None:
    before = _rows(engine)
    try:
        CALLS[name](engine, value)
    except CtxLedgerError:
        assert _rows(engine) == before, f"{name}={value!r}: refused, yet rows were written"
        return
    except Exception as exc:
        pytest.fail(f"{name}={value!r}: untyped {type(exc).__name__}: {exc}")
    # Accepted: everything it stored reads back with the real decoder (read_all decodes).
    assert all(isinstance(r.event, ev.EventBase) for r in engine.ledger.read_all(after=before))


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (8000.0, "$.agent.budget"),
        (True, "$.agent.budget"),
        (2**63, "$.agent.budget"),
        (math.nan, "$.agent.budget"),
    ],
)
def test_the_check_names_the_field(value: Any, where: str) -> None:
    from datetime import UTC, datetime

    event = ev.AgentRegistered(
        at=datetime(2026, 1, 1, tzinfo=UTC),
        agent=AgentIdentity(agent_id="a", role="worker", budget=value),
    )
    with pytest.raises(InvalidInputError, match=r"AgentRegistered .*" + where.replace("$", r"\$")):
        encode_checked(event)


def test_refused_event_leaves_the_file_untouched(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    eng = open_engine(f"sqlite:///{path}")
    eng.register_agent(AgentIdentity(agent_id=AGENT, role="worker"))
    eng.checkpoint()
    before = eng.ledger.max_position()
    with pytest.raises(InvalidInputError, match="pinned"):
        eng.record(AGENT, "x", pinned=1)
    with pytest.raises(InvalidInputError, match="budget"):
        eng.register_agent(AgentIdentity(agent_id="b", role="worker", budget=8000.0))  # type: ignore[arg-type]
    assert eng.ledger.max_position() == before
    eng.close()
    again = open_engine(f"sqlite:///{path}")
    assert again.ledger.max_position() == before
    again.close()


# --- arbitrary text (lone surrogates included) into every method that takes text ------------

ANY_TEXT: st.SearchStrategy[str] = st.text(st.characters(exclude_categories=()), max_size=24)
"""Any code points, lone surrogates (category Cs) too."""

TextCall = Callable[[ContextEngine, str], object]

TEXT_CALLS: dict[str, TextCall] = {
    "register_agent.agent_id": lambda e, t: e.register_agent(
        AgentIdentity(agent_id=t or "x", role="worker")
    ),
    "register_agent.task": lambda e, t: e.register_agent(
        AgentIdentity(agent_id="t-agent", role="worker", task=t)
    ),
    "record.content": lambda e, t: e.record(AGENT, t or "x"),
    "record.task": lambda e, t: e.record(AGENT, "x", task=t),
    "record.tool_signature": lambda e, t: e.record(AGENT, "y", tool_signature=t),
    "record.stage": lambda e, t: e.record(AGENT, "z", stage=t),
    "record.item_id": lambda e, t: e.record(AGENT, "w", item_id=t),
    "record.files": lambda e, t: e.record(AGENT, "v", files=(t,)),
    "record.source": lambda e, t: e.record(AGENT, "u", source=t),
    "record.layer": lambda e, t: e.record(AGENT, "u", layer=t),
    "add_steering_note.text": lambda e, t: e.add_steering_note(AGENT, t or "note"),
    "add_steering_note.stage": lambda e, t: e.add_steering_note(AGENT, "note", stage=t),
    "pin.by": lambda e, t: e.pin(AGENT, _first(e), by=t),
    "unpin.by": lambda e, t: e.unpin(AGENT, _first(e), by=t),
    "remove.reason": lambda e, t: e.remove(AGENT, "missing-item", reason=t),
    "verify_finding.evidence": lambda e, t: e.verify_finding(AGENT, _first(e), evidence=t),
    "verify_finding.by": lambda e, t: e.verify_finding(AGENT, _first(e), by=t),
    "configure.by": lambda e, t: e.configure(AGENT, budget=4_001, by=t),
    "build.task": lambda e, t: e.build(AGENT, task=t),
    "build.keywords": lambda e, t: e.build(AGENT, keywords=(t,)),
    "build.latest_user_input": lambda e, t: e.build(AGENT, latest_user_input=t),
    "build.stage_id": lambda e, t: e.build(AGENT, stage_id=t),
    "on_turn_error.message": lambda e, t: e.on_turn_error(AGENT, {"error": {"message": t}}),
    "on_turn_error.exception": lambda e, t: e.on_turn_error(AGENT, RuntimeError(t)),
    "on_turn_error.provider": lambda e, t: e.on_turn_error(AGENT, "boom", provider=t),
    "rebuild.reason": lambda e, t: e.rebuild(AGENT, reason=t),
    "erase.reason": lambda e, t: e.erase(AGENT, reason=t),
}


def _first(engine: ContextEngine) -> str:
    return next(iter(engine.pool(AGENT).items))


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(name=st.sampled_from(sorted(TEXT_CALLS)), text=ANY_TEXT)
def test_any_text_is_accepted_decodable_or_refused_typed_with_nothing_appended(
    engine: ContextEngine, name: str, text: str
) -> None:
    before = _rows(engine)
    try:
        TEXT_CALLS[name](engine, text)
    except CtxLedgerError:
        assert _rows(engine) == before, f"{name}={text!r}: refused, yet rows were written"
        return
    except Exception as exc:
        pytest.fail(f"{name}={text!r}: untyped {type(exc).__name__}: {exc}")
    # Accepted: valid Unicode only, and everything stored decodes.
    text.encode("utf-8")
    assert all(isinstance(r.event, ev.EventBase) for r in engine.ledger.read_all(after=before))


def test_a_lone_surrogate_is_refused_typed_before_anything_is_appended(
    engine: ContextEngine,
) -> None:
    refused = 0
    for name in sorted(TEXT_CALLS):
        before = _rows(engine)
        with pytest.raises(InvalidInputError, match=r"not valid Unicode|is not one of"):
            TEXT_CALLS[name](engine, "a\ud800b")
        assert _rows(engine) == before, name
        refused += 1
    record(
        "lone surrogates · sqlite",
        scale=f"{len(TEXT_CALLS)} text arguments of {len({n.split('.')[0] for n in TEXT_CALLS})} "
        "engine methods, each given 'a\\ud800b' (plus 300 Hypothesis examples of any code points)",
        result=f"{refused} of {len(TEXT_CALLS)} refused with InvalidInputError, 0 rows appended",
        rerun_cmd=rerun("test_bad_values.py"),
        arguments=len(TEXT_CALLS),
        refused=refused,
    )


def test_bad_layer_and_source_are_typed_errors(engine: ContextEngine) -> None:
    before = _rows(engine)
    with pytest.raises(InvalidInputError, match="source: 'bogus' is not one of"):
        engine.record(AGENT, "x", source="bogus")
    with pytest.raises(InvalidInputError, match="layer: 'L9' is not one of L0"):
        engine.record(AGENT, "x", layer="L9")
    assert _rows(engine) == before
    assert engine.record(AGENT, "named", layer="L2", source="worker_finding").layer == 2


def test_size_limits_are_configurable_one_line_and_checked_first(tmp_path: Path) -> None:
    """Small limits (EngineSettings.limits): each over-long argument is one line naming the
    argument, the size and the limit, with nothing appended; at the limit it is accepted."""
    import time

    from ctxledger.adapters.engine import EngineSettings
    from ctxledger.domain.settings import InputLimits

    limits = InputLimits(text_bytes=4_000, field_bytes=100)
    eng = open_engine(f"sqlite:///{tmp_path / 'l.db'}", settings=EngineSettings(limits=limits))
    eng.register_agent(AgentIdentity(agent_id=AGENT, role="worker", budget=4_000))
    item = eng.record(AGENT, "x" * 4_000)
    before = eng.ledger.max_position()
    over: list[tuple[str, Callable[[], object]]] = [
        ("record: item", lambda: eng.record(AGENT, "é" * 2_001)),
        ("record: task", lambda: eng.record(AGENT, "ok", task="t" * 101)),
        ("record: files[0]", lambda: eng.record(AGENT, "ok", files=("f" * 101,))),
        ("remove: reason", lambda: eng.remove(AGENT, item.id, reason="r" * 101)),
        ("pin: item_id", lambda: eng.pin(AGENT, "i" * 101)),
        (
            "verify_finding: evidence",
            lambda: eng.verify_finding(AGENT, item.id, evidence="e" * 4_001),
        ),
        ("build: task", lambda: eng.build(AGENT, task="t" * 101)),
        ("add_steering_note: stage", lambda: eng.add_steering_note(AGENT, "n", stage="s" * 101)),
        ("on_turn_error: error", lambda: eng.on_turn_error(AGENT, "m" * 4_001)),
    ]
    for where, call in over:
        with pytest.raises(InvalidInputError) as raised:
            call()
        message = str(raised.value)
        assert message.startswith(where + ":"), message
        assert "\n" not in message
        assert "above the limit" in message
        assert eng.ledger.max_position() == before, where
    eng.close()

    # the default limits: a 20 MiB record is refused at once (it took 97 s to be stored);
    # 4 MiB of text without whitespace, the most a record may hold, is stored in seconds
    big = open_engine(f"sqlite:///{tmp_path / 'big.db'}")
    big.register_agent(AgentIdentity(agent_id=AGENT, role="worker"))
    start = big.ledger.max_position()
    t0 = time.perf_counter()
    with pytest.raises(
        InvalidInputError, match=r"record: item: 20971520 bytes, above the limit of 4194304"
    ):
        big.record(AGENT, "x" * (20 << 20))
    refused_s = time.perf_counter() - t0
    assert refused_s < 5
    assert big.ledger.max_position() == start
    t0 = time.perf_counter()
    big.record(AGENT, "ab" * (2 << 20))
    stored_s = time.perf_counter() - t0
    assert stored_s < 60
    big.close()
    record(
        "size limits · sqlite",
        scale=f"{len(over)} over-long arguments at small limits; a 20 MiB and a 4 MiB "
        "whitespace-free record at the defaults (4 MiB per text, 1 MiB per other string)",
        result=f"{len(over)} of {len(over)} refused in one line with 0 rows appended; 20 MiB "
        f"refused in {refused_s:.2f} s (stored in 97 s before); 4 MiB stored in {stored_s:.1f} s",
        rerun_cmd=rerun("test_bad_values.py"),
        refused=len(over),
        refused_20mib_s=round(refused_s, 3),
        stored_4mib_s=round(stored_s, 2),
    )


def test_token_counting_is_linear_in_the_text_size() -> None:
    """tiktoken alone on whitespace-free text: 4 → 8 → 16 MiB = 2.4 → 5.8 → 20 s. Counted in
    bounded chunks, doubling the text at most about doubles the CPU time."""
    import time

    from ctxledger.adapters.tokens import TiktokenCounter

    times: list[float] = []
    sizes = [1 << 20, 2 << 20, 4 << 20]
    for size in sizes:
        counter = TiktokenCounter(cache_size=1)
        text = "x" * size
        t0 = time.process_time()
        counter.count(text)
        times.append(time.process_time() - t0)
    ratios = [b / max(a, 1e-3) for a, b in itertools.pairwise(times)]
    assert max(ratios) < 3.0
    record(
        "token counting · linear",
        scale="1, 2 and 4 MiB of one letter (no whitespace, one pre-tokenizer piece)",
        result=" → ".join(f"{t:.2f}" for t in times)
        + f" s CPU (doubling ×{max(ratios):.2f} at most)",
        rerun_cmd=rerun("test_bad_values.py"),
        cpu_s=[round(t, 3) for t in times],
    )
