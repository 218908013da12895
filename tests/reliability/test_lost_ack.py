"""A lost commit acknowledgement never duplicates an event: when the driver retries an insert
whose first COMMIT landed, the retry hits the (stream, version) key; the ledger recognises its
own append (the random ``op`` key in its first payload, the bytes identical) and reports
success instead of a conflict the engine would re-decide and append again. A real conflict
(another writer's events at those versions) is still a ConflictError."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError, StoredEvent

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.ledger import Ledger, open_ledger, stream_id_for
from ctxledger.domain import events as ev
from ctxledger.domain.chain import ChainCheck
from ctxledger.domain.codec import encode_event
from ctxledger.domain.errors import ConflictError
from ctxledger.domain.model import AgentIdentity

AT = datetime(2026, 1, 1, tzinfo=UTC)


def _pinned(n: int) -> ev.ItemPinned:
    return ev.ItemPinned(at=AT, agent_id="a", item_id=f"item-{n}")


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return str(request.getfixturevalue("pg_url"))


def _ack_lost_once(ledger: Ledger, before: Callable[[], None] | None = None) -> list[int]:
    """The next insert commits, then fails as a driver's retry after a lost acknowledgement
    does (the unique key); *before* runs first (another writer getting in)."""
    recorder: Any = ledger._recorder
    real = recorder.insert_events
    calls: list[int] = []

    def insert(stored: list[StoredEvent], **kwargs: Any) -> Any:
        calls.append(len(stored))
        recorder.insert_events = real
        if before is not None:
            before()
        real(stored, **kwargs)
        raise IntegrityError("duplicate key value violates unique constraint (the retry)")

    recorder.insert_events = insert
    return calls


def test_a_retry_after_a_lost_acknowledgement_is_not_a_second_append(url: str) -> None:
    with open_ledger(url) as ledger:
        ledger.append("s", [_pinned(0)], expected_version=0)
        calls = _ack_lost_once(ledger)
        recs = ledger.append("s", [_pinned(1), _pinned(2)], expected_version=1)
        assert calls == [2]
        assert [r.version for r in recs] == [2, 3]
        assert [r.event for r in ledger.read_stream("s")] == [_pinned(0), _pinned(1), _pinned(2)]
        check = ChainCheck().feed(ledger.stored_rows())
        assert check.tampered == []


def test_another_writers_events_at_those_versions_are_still_a_conflict(url: str) -> None:
    with open_ledger(url) as ledger:
        ledger.append("s", [_pinned(0)], expected_version=0)
        topic, payload = encode_event(_pinned(99))

        def other_writer() -> None:
            ledger._recorder.insert_events([StoredEvent("s", 2, topic, payload)])

        real = ledger._recorder.insert_events

        def insert(stored: list[StoredEvent], **kwargs: Any) -> Any:
            ledger._recorder.insert_events = real  # type: ignore[method-assign]
            other_writer()
            return real(stored, **kwargs)

        ledger._recorder.insert_events = insert  # type: ignore[method-assign,assignment]
        with pytest.raises(ConflictError):
            ledger.append("s", [_pinned(1)], expected_version=1)
        assert [r.event for r in ledger.read_stream("s")] == [_pinned(0), _pinned(99)]


def test_the_engine_records_once_when_the_acknowledgement_is_lost(url: str) -> None:
    engine = open_engine(url)
    engine.register_agent(AgentIdentity(agent_id="a", role="worker"))
    calls = _ack_lost_once(engine.ledger)
    item = engine.record("a", "observed once")
    assert calls == [1]
    stream = engine.ledger.read_stream(stream_id_for("default", "a"))
    recorded = [r.event for r in stream if isinstance(r.event, ev.ItemRecorded)]
    assert [e.item.id for e in recorded] == [item.id]
    assert item.id in engine.pool("a").items
    engine.close()
