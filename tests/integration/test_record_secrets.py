"""Secret scan at record time: a real SQLite ledger file holds no secret under ``redact``,
nothing at all under ``refuse``, the text as given under ``allow``; real agent runs are not
flagged."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.clock import SteppingClock
from ctxledger.adapters.engine import ContextEngine
from ctxledger.adapters.importers import Step, Trajectory, load_trajectory
from ctxledger.adapters.ledger.store_files import LEDGER_TABLE
from ctxledger.adapters.security.secret_scan import SecretScanner
from ctxledger.adapters.simulation.simulate import simulate_trajectory
from ctxledger.domain import events as ev
from ctxledger.domain.codec import decode_event, encode_event
from ctxledger.domain.errors import InvalidInputError, SecretRefusedError
from ctxledger.domain.model import AgentIdentity, Item, Layer, Source, content_hash, item_id_for
from ctxledger.domain.settings import AgentSettings
from tests.secret_corpus import SECRET_CASES

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
AGENT = "worker-1"


def test_the_fixture_set_has_30_kinds_and_more() -> None:
    assert len({case.kind for case in SECRET_CASES}) >= 30
    assert all(case.needles and all(len(n) >= 8 for n in case.needles) for case in SECRET_CASES)


def _open(path: Path, policy: str) -> ContextEngine:
    engine = open_engine(f"sqlite:///{path}", clock=SteppingClock(NOW))
    engine.register_agent(
        AgentIdentity(agent_id=AGENT, role="worker", budget=8000),
        AgentSettings(secrets=policy),  # type: ignore[arg-type]
    )
    return engine


def _database_bytes(path: Path) -> bytes:
    """Every byte of the ledger's files: the main database, its WAL and shared memory."""
    files = [path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")]
    return b"".join(f.read_bytes() for f in files if f.exists())


def _rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        (count,) = conn.execute(f"SELECT count(*) FROM {LEDGER_TABLE}").fetchone()
    assert isinstance(count, int)
    return count


def _record_all(engine: ContextEngine) -> None:
    for n, case in enumerate(SECRET_CASES):
        text = f"step {n}: {case.kind}\n{case.text}"
        if n % 3 == 0:
            engine.record(AGENT, text, source=Source.TOOL_LOG, tool_signature=f"run {n}")
        elif n % 3 == 1:
            item = engine.make_item(
                AGENT, text, source=Source.REPOSITORY_SOURCE, item_id=f"obs-{n}"
            )
            engine.record_many(AGENT, [item])
        else:
            engine.add_steering_note(AGENT, text)


def test_redact_leaves_no_secret_in_the_database_bytes(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with _open(path, "redact") as engine:
        _record_all(engine)
        pool = engine.pool(AGENT)
        redacted = [it for it in pool.items.values() if it.redacted]
        assert len(redacted) == len(SECRET_CASES)
        for item in redacted:
            assert "[secret: " in item.content
            assert item.token_count > 0
        engine.checkpoint()
    data = _database_bytes(path)
    assert b"[secret: " in data  # the scan reads the real payloads
    leaked = [case.kind for case in SECRET_CASES for n in case.needles if n.encode() in data]
    assert leaked == []


def test_allow_stores_the_text_as_given(tmp_path: Path) -> None:
    # The control for the byte scan above: the same records with ``allow`` are in the bytes.
    path = tmp_path / "ledger.db"
    with _open(path, "allow") as engine:
        _record_all(engine)
        assert not any(it.redacted for it in engine.pool(AGENT).items.values())
        engine.checkpoint()
    data = _database_bytes(path)
    shown = [(case.kind, n) for case in SECRET_CASES for n in case.needles if n in case.text]
    assert len(shown) >= len(SECRET_CASES)
    missing = [kind for kind, n in shown if n.encode() not in data]
    assert missing == []


def test_refuse_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    with _open(path, "refuse") as engine:
        engine.checkpoint()
        before = _rows(path)
        for case in SECRET_CASES:
            with pytest.raises(SecretRefusedError) as caught:
                engine.record(AGENT, case.text)
            shown = f"{caught.value} {caught.value.args} {caught.value.kinds}"
            assert not any(n in shown for n in case.needles)
        clean = engine.make_item(AGENT, "collected 12 items; 12 passed")
        dirty = engine.make_item(AGENT, SECRET_CASES[0].text)
        with pytest.raises(SecretRefusedError):
            engine.record_many(AGENT, [clean, dirty])  # all or none
        with pytest.raises(SecretRefusedError):
            engine.add_steering_note(AGENT, SECRET_CASES[1].text)
        assert engine.pool(AGENT).items == {}
        engine.checkpoint()
        assert _rows(path) == before
    data = _database_bytes(path)
    assert [c.kind for c in SECRET_CASES for n in c.needles if n.encode() in data] == []


def test_a_content_derived_id_is_derived_from_the_redacted_text(tmp_path: Path) -> None:
    case = SECRET_CASES[0]
    with _open(tmp_path / "ledger.db", "redact") as engine:
        item = engine.record(AGENT, case.text)
        assert item.id == item_id_for(Layer.L0, Source.TOOL_LOG, item.content)
        assert item.id != item_id_for(Layer.L0, Source.TOOL_LOG, case.text)
        # an importer's kind.<hash prefix> id is re-derived the same way
        imported = engine.make_item(AGENT, case.text, item_id=f"obs.{content_hash(case.text)[:16]}")
        [stored] = engine.record_many(AGENT, [imported])
        assert stored.id == f"obs.{content_hash(stored.content)[:16]}"
        assert stored.redacted == item.redacted


def test_the_policy_is_a_recorded_setting(tmp_path: Path) -> None:
    with _open(tmp_path / "ledger.db", "redact") as engine:
        assert engine.agent(AGENT).settings.secrets == "redact"
        assert engine.configure(AGENT, secrets="refuse").secrets == "refuse"
        with pytest.raises(SecretRefusedError):
            engine.record(AGENT, SECRET_CASES[3].text)
        with pytest.raises(InvalidInputError):
            engine.configure(AGENT, secrets="shred")  # type: ignore[arg-type]
        engine.configure(AGENT, secrets="allow")
        assert not engine.record(AGENT, SECRET_CASES[3].text).redacted
    with open_engine(f"sqlite:///{tmp_path / 'ledger.db'}") as reopened:
        assert reopened.agent(AGENT).settings.secrets == "allow"


def test_events_written_before_the_policy_still_decode() -> None:
    # An AgentConfigured and an ItemRecorded as older code wrote them: no ``secrets``, no
    # ``redacted``; they decode to the defaults.
    old_settings = b'{"strategy":"variable","budget":0}'
    settings = msgspec.json.decode(old_settings, type=AgentSettings)
    assert settings.secrets == "redact"
    item = Item(id="it_1", layer=Layer.L0, source=Source.TOOL_LOG, content="ok")
    event = ev.ItemRecorded(at=NOW, agent_id=AGENT, item=item)
    topic, payload = encode_event(event)
    assert b"redacted" not in payload
    _, configured = encode_event(
        ev.AgentConfigured(at=NOW, agent_id=AGENT, settings=AgentSettings())
    )
    assert b"secrets" not in configured  # the default is omitted: old readers see nothing new
    decoded = decode_event(topic, payload)
    assert isinstance(decoded, ev.ItemRecorded)
    assert decoded.item.redacted == ()


# --- false positives on real agent runs -------------------------------------------------------


def _observations(folder: Path) -> Iterator[str]:
    for path in sorted(folder.iterdir()):
        if path.suffix == ".md":
            continue
        for step in load_trajectory(path).steps:
            if step.observation.strip():
                yield step.observation
            if step.action.strip():
                yield step.action


def test_real_agent_runs_are_not_flagged(shared_trajectories: Path) -> None:
    texts = list(_observations(shared_trajectories))
    assert len(texts) >= 200, f"only {len(texts)} observations in {shared_trajectories}"
    scanner = SecretScanner()
    flagged = [n for n, text in enumerate(texts) if scanner.findings(text)]
    assert len(flagged) <= 0.01 * len(texts), f"{len(flagged)} of {len(texts)} flagged"


# --- the importers' path: simulate records through record_many ---------------------------------


def test_simulate_redacts_secrets_in_an_imported_run(tmp_path: Path) -> None:
    cases = SECRET_CASES[:6]
    start = datetime(2025, 3, 1, tzinfo=UTC)
    traj = Trajectory(
        format="mini-swe-agent",
        path="leaky.traj.json",
        task=f"deploy the app; {cases[0].text}",
        role_texts=("You are a test agent.",),
        instance_id="leaky-1",
        steps=tuple(
            Step(
                index=i,
                action=f"```bash\ncat .env.{i}\n```",
                observation=f"$ cat .env.{i}\n{case.text}\nAPP_NAME=shop",
                command=f"cat .env.{i}",
                tool="bash",
                at=start + timedelta(seconds=30 * i),
            )
            for i, case in enumerate(cases)
        ),
    )
    path = tmp_path / "sim.db"
    report = simulate_trajectory(traj, budget=4000, store_url=f"sqlite:///{path}")
    assert report.objective_present == 1.0  # the redacted task is the one looked for
    assert report.latest_observation_present == 1.0
    with open_engine(f"sqlite:///{path}") as engine:
        (agent,) = engine.states.generations.by_agent
        redacted = [i for i in engine.pool(agent).items.values() if i.redacted]
        assert len(redacted) == len(cases) + 1
        engine.checkpoint()
    data = _database_bytes(path)
    assert [c.kind for c in cases for n in c.needles if n.encode() in data] == []


def test_an_id_holding_a_secret_is_replaced(tmp_path: Path) -> None:
    token = SECRET_CASES[3].needles[0]  # a github classic token
    with _open(tmp_path / "ledger.db", "redact") as engine:
        item = engine.make_item(AGENT, "collected 3 items", item_id=f"obs-{token}")
        [stored] = engine.record_many(AGENT, [item])
        assert stored.id == item_id_for(Layer.L0, Source.TOOL_LOG, "collected 3 items")
        assert stored.content == "collected 3 items"
        assert stored.redacted == ("github token",)
        kept = engine.make_item(AGENT, f"token {token}", item_id="obs-7")
        assert engine.record(AGENT, kept).id == "obs-7"  # a plain caller id is kept
        engine.checkpoint()
    assert token.encode() not in _database_bytes(tmp_path / "ledger.db")


def test_redact_covers_every_free_text_field_not_only_items(tmp_path: Path) -> None:
    """Provider errors, ``stage``, ``by``, evidence, removal and rebuild reasons, a build's
    task and keywords, failure reasons (every field of ``FREE_TEXT``): redacted by the same
    scanner as item content, so a plain ledger's bytes hold none of them; with ``allow``
    the same calls leave them all in (the control)."""
    from tests.reliability.test_forgetting import _every_field

    found = {}
    for policy in ("redact", "allow"):
        path = tmp_path / f"{policy}.db"
        with _open(path, policy) as engine:
            _every_field(engine)
            engine.checkpoint()
        data = _database_bytes(path)
        found[policy] = {
            n
            for case in SECRET_CASES
            for n in case.needles
            if n in case.text and n.encode() in data
        }
    assert found["redact"] == set()
    assert len(found["allow"]) >= 20


def test_an_erase_reason_is_redacted_and_stays_readable(tmp_path: Path) -> None:
    from ctxledger.adapters.bootstrap import open_engine

    secret = SECRET_CASES[0]
    path = tmp_path / "ledger.db"
    with open_engine(
        f"sqlite:///{path}", clock=SteppingClock(NOW), master_key=bytes(32), encrypt=True
    ) as engine:
        engine.register_agent(AgentIdentity(agent_id=AGENT, role="worker"))
        engine.record(AGENT, "some observation")
        erased = engine.erase(AGENT, reason=f"leaked {secret.text}")
        assert "[secret: " in erased.reason
        assert erased.reason.startswith("leaked ")
        engine.checkpoint()
    data = _database_bytes(path)
    assert b"leaked aws_access_key_id = [secret: " in data  # readable, redacted
    assert not any(n.encode() in data for n in secret.needles)
