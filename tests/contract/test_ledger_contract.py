"""One contract suite, run against every store: memory://, sqlite:///, postgresql://."""

from __future__ import annotations

import itertools
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest
from eventsourcing.persistence import StoredEvent
from hypothesis import HealthCheck, given, settings

from ctxledger.adapters.ledger import Ledger, Recorded, open_ledger
from ctxledger.adapters.ledger.projection_runner import (
    ProjectionRunner,
    encode_state,
    replay_states,
)
from ctxledger.adapters.testing import events
from ctxledger.domain import events as ev
from ctxledger.domain.codec import encode_event
from ctxledger.domain.errors import ConflictError, DecodeError, StoreURLError
from ctxledger.domain.model import Item, Layer, Source

AT = datetime(2026, 1, 1, tzinfo=UTC)
_streams = itertools.count(1)


def pinned(i: int) -> ev.ItemPinned:
    return ev.ItemPinned(at=AT, agent_id="a", item_id=f"item-{i}")


def test_append_then_read_stream_and_log(store_url: str) -> None:
    with open_ledger(store_url) as ledger:
        recs = ledger.append("s1", [pinned(1), pinned(2)], expected_version=0)
        assert [r.version for r in recs] == [1, 2]
        ledger.append("s2", [pinned(3)], expected_version=0)
        ledger.append("s1", [pinned(4)], expected_version=2)
        assert [r.event for r in ledger.read_stream("s1")] == [pinned(1), pinned(2), pinned(4)]
        log = list(ledger.read_all())
        assert [r.event for r in log] == [pinned(1), pinned(2), pinned(3), pinned(4)]
        assert [r.stream_id for r in log] == ["s1", "s1", "s2", "s1"]
        positions = [r.position for r in log]
        assert positions == sorted(positions)
        assert len(set(positions)) == 4
        assert [r.position for r in recs] == positions[:2]
        assert ledger.max_position() == positions[-1]
        assert [r.event for r in ledger.read_all(after=positions[1])] == [pinned(3), pinned(4)]
        assert ledger.stream_version("s1") == 3
        assert ledger.stream_version("nope") == 0


@pytest.mark.parametrize("expected", [0, 1, 3])
def test_conflicting_append_raises_and_writes_nothing(store_url: str, expected: int) -> None:
    with open_ledger(store_url) as ledger:
        ledger.append("s", [pinned(1), pinned(2)], expected_version=0)
        with pytest.raises(ConflictError) as info:
            ledger.append("s", [pinned(3), pinned(4)], expected_version=expected)
        assert info.value.stream_id == "s"
        assert [r.event for r in ledger.read_all()] == [pinned(1), pinned(2)]
        assert ledger.stream_version("s") == 2


def test_reading_paginates_a_long_log(store_url: str) -> None:
    with open_ledger(store_url) as ledger:
        batch = [pinned(i) for i in range(2500)]
        ledger.append("s", batch, expected_version=0)
        assert [r.event for r in ledger.read_all()] == batch
        assert len(list(ledger.read_all(limit=1200))) == 1200


def test_follow_sees_events_appended_while_following(store_url: str) -> None:
    with open_ledger(store_url) as ledger:
        ledger.append("s", [pinned(0)], expected_version=0)
        seen: list[ev.Event] = []
        stop = threading.Event()

        def writer() -> None:
            for i in range(1, 6):
                ledger.append("s", [pinned(i)], expected_version=i)

        t = threading.Thread(target=writer)
        t.start()
        for rec in ledger.follow(stop=stop, poll_interval=0.02, idle_timeout=5):
            seen.append(rec.event)
            if len(seen) == 6:
                stop.set()
        t.join()
        assert seen == [pinned(i) for i in range(6)]


def test_projection_runner_resumes_after_restart(store_url: str) -> None:
    ledger = open_ledger(store_url)
    try:
        for i in range(3):
            ledger.append(
                f"s{i}",
                [ev.ContextBuildingStarted(at=AT, agent_id=f"a{i}", pack_id="p")],
                expected_version=0,
            )
        first = ProjectionRunner(ledger, batch_size=2)
        assert first.run_once() == 3
        position = first.position
        ledger.append(
            "s0", [ev.ContextPackBuilt(at=AT, agent_id="a0", pack_id="p")], expected_version=1
        )
        if not store_url.startswith("memory"):
            ledger.close()
            ledger = open_ledger(store_url)
        second = ProjectionRunner(ledger, batch_size=2)
        assert second.position == position  # resumed, not rebuilt
        assert second.run_once() == 1  # exactly the one new event
        states, count, _ = replay_states(ledger)
        assert count == 4
        for name, state in states.items():
            assert encode_state(second.states[name]) == encode_state(state)
    finally:
        ledger.close()


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(event=events())
def test_every_event_type_round_trips(store_url: str, event: ev.Event) -> None:
    ledger = _ledger_for(store_url)
    stream = f"rt-{next(_streams)}"
    back: list[Recorded] = []
    ledger.append(stream, [event], expected_version=0, read_back=back)
    assert [r.event for r in ledger.read_stream(stream)] == [event]
    # what the append read back is what a reader of the row gets
    (row,) = ledger.read_all(after=ledger.max_position() - 1)
    assert [(r.position, r.stream_id, r.version, r.event) for r in back] == [
        (row.position, stream, 1, row.event)
    ]


def test_a_runner_folds_an_append_as_read_back_only_at_the_next_positions(
    store_url: str,
) -> None:
    """``fold_appended`` folds the events an append read back when they directly follow
    the runner's position — the same models as reading them — and declines (folding
    nothing) when something else landed in between, which ``catch_up`` then reads."""
    with open_ledger(store_url) as ledger:
        runner = ProjectionRunner(ledger)
        back: list[Recorded] = []
        started = ev.ContextBuildingStarted(at=AT, agent_id="a", pack_id="p")
        ledger.append("s", [started], expected_version=0, read_back=back)
        assert runner.fold_appended(back)
        assert runner.position == back[-1].position == ledger.max_position()
        first: list[Recorded] = []
        ledger.append("s", [pinned(1)], expected_version=1, read_back=first)
        second: list[Recorded] = []
        built = ev.ContextPackBuilt(at=AT, agent_id="a", pack_id="p")
        ledger.append("s", [built, pinned(2)], expected_version=2, read_back=second)
        assert not runner.fold_appended(second)  # the first append lies in between
        assert runner.position == back[-1].position
        assert runner.catch_up() == 3
        states, count, _ = replay_states(ledger)
        assert count == 4
        for name, state in states.items():
            assert encode_state(runner.states[name]) == encode_state(state)


_open: dict[str, Ledger] = {}


def _ledger_for(url: str) -> Ledger:
    if url not in _open:
        _open[url] = open_ledger(url)
    return _open[url]


@pytest.fixture(autouse=True)
def _close_cached_ledgers() -> object:
    yield
    for ledger in _open.values():
        ledger.close()
    _open.clear()


def test_corrupt_row_is_a_decode_error_naming_its_position(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with open_ledger(url) as ledger:
        ledger.append("s", [pinned(1), pinned(2), pinned(3)], expected_version=0)
        runner = ProjectionRunner(ledger)
        runner.run_once()
        saved = ledger.load_projection("context_state")
    con = sqlite3.connect(tmp_path / "l.db")
    con.execute("UPDATE ctxledger_events SET state=substr(state,1,20) WHERE rowid=2")
    con.commit()
    con.close()
    with open_ledger(url) as ledger:
        with pytest.raises(DecodeError) as info:
            list(ledger.read_all())
        assert info.value.position == 2
        # the persisted read models are untouched by a failed replay
        with pytest.raises(DecodeError):
            replay_states(ledger)
        assert ledger.load_projection("context_state") == saved


def _damaged_log(path: Path, bad: int) -> tuple[str, list[ev.Event]]:
    """A SQLite log of 150 events whose row *bad* no longer decodes: its url, and the events
    as they were before the damage."""
    url = f"sqlite:///{path}"
    with open_ledger(url) as ledger:
        ledger.append("s", [pinned(i) for i in range(1, 151)], expected_version=0)
        log = [r.event for r in ledger.read_all()]
    con = sqlite3.connect(path)
    con.execute("UPDATE ctxledger_events SET state=substr(state,1,20) WHERE rowid=?", (bad,))
    con.commit()
    con.close()
    return url, log


@pytest.mark.parametrize("bad", [1, 63, 64, 65, 100, 150])
@pytest.mark.parametrize("page", [7, 64, 1000])
def test_the_stream_takes_every_event_before_a_damaged_row_then_names_it(
    tmp_path: Path, bad: int, page: int
) -> None:
    # The stream decodes runs of rows together (``DECODE_RUN``: 64); a damaged row in a run,
    # at its edges or in a page of its own, still comes after every event before it.
    url, log = _damaged_log(tmp_path / "l.db", bad)
    taken: list[ev.Event] = []
    # (a reader: a writer is refused a ledger whose last row, the head, was rewritten)
    with open_ledger(url, must_exist=True) as ledger:
        with pytest.raises(DecodeError) as info:
            taken.extend(ledger.events(page=page))  # (extend keeps what came before the error)
        assert info.value.position == bad
        assert taken == log[: bad - 1]
        # the same rows read by runs: the run holding the damage is refused whole
        run = min(page, 64)
        runs: list[list[ev.Event]] = []
        stream = ledger.events(page=page)
        with pytest.raises(DecodeError):
            runs.extend(stream.runs())
        assert [e for r in runs for e in r] == log[: ((bad - 1) // run) * run]
        assert (stream.count, stream.last) == (((bad - 1) // run) * run,) * 2


@pytest.mark.parametrize(("batch", "kept"), [(2000, 64), (64, 64), (7, 98), (1, 99)])
def test_the_runner_stops_at_the_last_complete_run_before_a_damaged_row(
    tmp_path: Path, batch: int, kept: int
) -> None:
    # ``run_once`` and ``catch_up`` fold runs of up to 64 rows of a page, each decoded whole:
    # the run holding the damaged row (position 100) is not folded, every run before it is
    # (and ``run_once`` saves them).
    url, _ = _damaged_log(tmp_path / "l.db", 100)
    with open_ledger(url) as ledger:
        in_memory = ProjectionRunner(ledger, batch_size=batch)
        with pytest.raises(DecodeError):
            in_memory.catch_up()  # the same runs, nothing saved
        assert in_memory.position == kept
        assert ledger.load_projection("pool") is None
        runner = ProjectionRunner(ledger, batch_size=batch)
        with pytest.raises(DecodeError) as info:
            runner.run_once()
        assert info.value.position == 100
        assert runner.position == kept
        assert {n: encode_state(s) for n, s in in_memory.states.items()} == {
            n: encode_state(s) for n, s in runner.states.items()
        }
        expected, count, _ = replay_states(ledger, upto=kept)
        assert count == kept
        assert {n: encode_state(s) for n, s in runner.states.items()} == {
            n: encode_state(s) for n, s in expected.items()
        }
        assert ProjectionRunner(ledger).position == kept  # saved there


def test_unknown_type_name_in_the_log_is_typed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    with open_ledger(url) as ledger:
        ledger.append("s", [pinned(1)], expected_version=0)
    con = sqlite3.connect(tmp_path / "l.db")
    con.execute("UPDATE ctxledger_events SET topic='subprocess.Popen.v1'")
    con.commit()
    con.close()
    # (a reader: a writer is refused a ledger whose last row, the head, was rewritten)
    with (
        open_ledger(url, must_exist=True) as ledger,
        pytest.raises(DecodeError, match="position 1"),
    ):
        list(ledger.read_all())


@pytest.mark.parametrize(
    "url",
    [
        "redis://localhost/0",
        "sqlite://relative.db",
        "sqlite:///",
        "nothing",
        "sqlite:///no/such/dir/x.db",
    ],
)
def test_bad_store_urls_are_typed_errors_naming_the_url(url: str) -> None:
    with pytest.raises(StoreURLError) as info:
        open_ledger(url)
    assert url.split("/", maxsplit=1)[0] in str(info.value)


def test_a_stale_head_from_stream_version_is_still_a_conflict(store_url: str) -> None:
    """``stream_version`` keeps the head row for the next append; if another writer moved the
    stream in between, that append conflicts on the (stream, version) key and writes nothing."""
    with open_ledger(store_url) as ledger:
        ledger.append("s", [pinned(1)], expected_version=0)
        assert ledger.stream_version("s") == 1  # head kept
        topic, payload = encode_event(pinned(2))  # another writer, straight into the store
        ledger._recorder.insert_events([StoredEvent("s", 2, topic, payload)])
        with pytest.raises(ConflictError):
            ledger.append("s", [pinned(3)], expected_version=1)
        assert [r.event for r in ledger.read_stream("s")] == [pinned(1), pinned(2)]


def test_an_encrypted_append_reads_nothing_back(tmp_path: Path) -> None:
    """Sealed text reads back sealed: what a reader gets is opened by the keyring, so an
    append to an encrypting ledger leaves *read_back* empty (its runner reads the rows)."""
    url = f"sqlite:///{tmp_path / 'sealed.db'}"
    with open_ledger(url, master_key=b"k" * 32, encrypt=True) as ledger:
        back: list[Recorded] = []
        text = ev.SteeringNoteAdded(
            at=AT,
            agent_id="a",
            item=Item(
                id="n1", content="keep the retry", layer=Layer.L1, source=Source.STEERING_NOTE
            ),
        )
        ledger.append("s", [text], expected_version=0, read_back=back)
        assert back == []
        assert [r.event for r in ledger.read_all()] == [text]
