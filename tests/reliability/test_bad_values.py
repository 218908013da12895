"""Nothing a caller passes can poison the ledger: every event is checked against the decoder
that will read it before it is committed. For the public engine methods, arbitrary argument
values either raise a typed error with zero rows written, or append events that all decode;
afterwards the store reopens and audits clean (a real SQLite file)."""

from __future__ import annotations

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
