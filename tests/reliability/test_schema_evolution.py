"""Schema evolution: frozen payloads of every event type at every schema version that ever
existed (committed bytes under tests/fixtures/events/v<N>/) decode forever; a payload from a
future version is the typed FutureSchemaError, never accepted silently."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import msgspec
import pytest

from ctxledger.adapters.ledger import EVENTS_TABLE, open_ledger
from ctxledger.adapters.ledger.projection_runner import replay_states
from ctxledger.domain.codec import decode_event
from ctxledger.domain.errors import FutureSchemaError
from ctxledger.domain.events import EVENT_TYPES
from tests.reliability._support import record, rerun

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "events"
VERSIONED = sorted(
    (name, version)
    for name, cls in EVENT_TYPES.items()
    for version in range(1, cls.schema_version + 1)
)


def _fixture(name: str, version: int) -> Path:
    return FIXTURES / f"v{version}" / f"{name}.json"


def test_every_type_and_version_has_a_frozen_fixture() -> None:
    missing = [f"v{v}/{n}.json" for n, v in VERSIONED if not _fixture(n, v).is_file()]
    assert missing == [], "add a fixture for each new schema version (never edit old ones)"
    sums = {}
    for line in (FIXTURES / "SHA256SUMS").read_text(encoding="utf-8").splitlines():
        digest, rel = line.split(maxsplit=1)
        sums[rel] = digest
    on_disk = {str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("v*/*.json")}
    assert on_disk == set(sums), "SHA256SUMS lists exactly the committed fixtures"
    for rel, digest in sums.items():
        assert hashlib.sha256((FIXTURES / rel).read_bytes()).hexdigest() == digest, (
            f"{rel} changed: fixtures are frozen bytes; add a new version instead"
        )


@pytest.mark.parametrize(("name", "version"), VERSIONED, ids=[f"{n}.v{v}" for n, v in VERSIONED])
def test_frozen_payload_decodes(name: str, version: int) -> None:
    raw = _fixture(name, version).read_bytes()
    event = decode_event(f"{name}.v{version}", raw, position=1)
    assert type(event) is EVENT_TYPES[name]
    stored = json.loads(raw)
    if version == EVENT_TYPES[name].schema_version:
        # Nothing lost or changed: the decoded event holds every stored field as stored.
        assert json.loads(msgspec.json.encode(event)) == stored
    else:  # upcast: still the same fact at the same time
        assert msgspec.to_builtins(event)["at"] == stored["at"]


@pytest.mark.parametrize("name", sorted(EVENT_TYPES))
def test_future_version_is_a_typed_error(name: str) -> None:
    current = EVENT_TYPES[name].schema_version
    raw = _fixture(name, current).read_bytes()
    for future in (current + 1, current + 7, 999_999):
        with pytest.raises(FutureSchemaError) as info:
            decode_event(f"{name}.v{future}", raw, position=9)
        assert info.value.position == 9


def test_stored_rows_of_every_version_replay(tmp_path: Path) -> None:
    """The fixtures as rows an older program stored: the ledger reads and replays them; a row
    from a future version stops the read with FutureSchemaError naming its position."""
    db = tmp_path / "old.db"
    url = f"sqlite:///{db}"
    open_ledger(url).close()
    con = sqlite3.connect(db)
    with con:
        for i, (name, version) in enumerate(VERSIONED, start=1):
            con.execute(
                f"INSERT INTO {EVENTS_TABLE} (originator_id, originator_version, topic, state) "
                "VALUES (?, ?, ?, ?)",
                ("old-stream", i, f"{name}.v{version}", _fixture(name, version).read_bytes()),
            )
    con.close()
    with open_ledger(url) as ledger:
        log = list(ledger.read_all())
        assert [type(r.event).__name__ for r in log] == [n for n, _ in VERSIONED]
        _, count, _ = replay_states(ledger)
        assert count == len(VERSIONED)
    con = sqlite3.connect(db)
    with con:
        name = VERSIONED[0][0]
        con.execute(
            f"INSERT INTO {EVENTS_TABLE} (originator_id, originator_version, topic, state) "
            "VALUES (?, ?, ?, ?)",
            (
                "new-stream",
                1,
                f"{name}.v{EVENT_TYPES[name].schema_version + 1}",
                _fixture(name, 1).read_bytes(),
            ),
        )
    con.close()
    with open_ledger(url) as ledger, pytest.raises(FutureSchemaError) as info:
        list(ledger.read_all())
    assert info.value.position == len(VERSIONED) + 1
    record(
        "schema evolution",
        scale=f"{len(VERSIONED)} frozen payloads ({len(EVENT_TYPES)} types × every version), "
        "future versions of each",
        result=(
            f"{len(VERSIONED)}/{len(VERSIONED)} decode unchanged and replay from stored rows; "
            f"future versions: FutureSchemaError {len(EVENT_TYPES) * 3}/{len(EVENT_TYPES) * 3} "
            "(+ a stored future row stops the read at its position)"
        ),
        rerun_cmd=rerun("test_schema_evolution.py"),
        fixtures=len(VERSIONED),
        types=len(EVENT_TYPES),
    )
