"""`ctxledger control` on the demo store: each control appends events, audit stays clean;
readers refuse a missing store instead of creating an empty one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e._cli import run


def test_controls_append_events_and_keep_the_audit_clean(tmp_path: Path) -> None:
    assert run("demo", cwd=tmp_path).returncode == 0
    store = "sqlite:///.ctxledger/demo.db"
    view = json.loads(
        run("inspect", "--store", store, "--agent", "primary-1", "--json", cwd=tmp_path).stdout
    )
    item = next(v["id"] for v in view["included"] if not v["pinned"])
    pinned = json.loads(
        run(
            "control", "pin", item, "--store", store, "--agent", "primary-1", "--json", cwd=tmp_path
        ).stdout
    )
    assert pinned["events"] == 1
    rebuilt = json.loads(
        run(
            "control", "rebuild", "--store", store, "--agent", "primary-1", "--json", cwd=tmp_path
        ).stdout
    )
    assert rebuilt["generation"] == view["generation"] + 1
    assert rebuilt["message"].startswith(f"Context rebuilt · Generation {view['generation']} → ")
    after = json.loads(
        run("inspect", "--store", store, "--agent", "primary-1", "--json", cwd=tmp_path).stdout
    )
    assert next(v for v in after["included"] if v["id"] == item)["pinned"] is True
    audit = run("audit", "--store", store, "--json", cwd=tmp_path)
    assert audit.returncode == 0
    assert json.loads(audit.stdout)["clean"] is True


def test_bad_control_input_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    assert run("demo", cwd=tmp_path).returncode == 0
    store = "sqlite:///.ctxledger/demo.db"
    before = json.loads(run("replay", "--store", store, "--verify", "--json", cwd=tmp_path).stdout)[
        "events"
    ]
    for args in (("pin",), ("pin", "it_nope"), ("refresh", "it_x"), ("promote", "it_x")):
        out = run("control", *args, "--store", store, "--agent", "primary-1", cwd=tmp_path)
        assert out.returncode == 1, args
        assert out.stderr.count("\n") == 1
        assert "Traceback" not in out.stderr
    after = json.loads(run("replay", "--store", store, "--verify", "--json", cwd=tmp_path).stdout)[
        "events"
    ]
    assert after == before


def test_readers_refuse_a_missing_store(tmp_path: Path) -> None:
    for command in ("inspect", "audit"):
        out = run(command, "--store", "sqlite:///missing.db", cwd=tmp_path)
        assert out.returncode == 1
        assert "no ledger at missing.db" in out.stderr
    assert not (tmp_path / "missing.db").exists()


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trajectories"


@pytest.mark.parametrize("strategy", ["summary", "layered"])
def test_a_new_process_builds_with_the_recorded_settings(tmp_path: Path, strategy: str) -> None:
    """simulate with --strategy/--budget, then `control refresh|rebuild` from new processes:
    both build with the settings the ledger recorded, not the engine's defaults, and every
    build re-derives."""
    store = "sqlite:///s.db"
    traj = str(FIXTURES / "swe_agent_small.traj")
    sim = run(
        "simulate", traj, "--strategy", strategy, "--budget", "1500", "--store", store, cwd=tmp_path
    )
    assert sim.returncode == 0, sim.stderr
    agent = json.loads(run("inspect", "--store", store, "--json", cwd=tmp_path).stdout)["agent"][
        "agent_id"
    ]
    for action in ("rebuild", "refresh"):
        done = run("control", action, "--store", store, "--agent", agent, "--json", cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        view = json.loads(
            run("inspect", "--store", store, "--agent", agent, "--json", cwd=tmp_path).stdout
        )
        assert view["generation"] == json.loads(done.stdout)["generation"]
        assert (view["strategy"], view["budget"]) == (strategy, 1500)
        assert view["settings"]["strategy"] == strategy
    other = "variable" if strategy != "variable" else "summary"
    done = run(
        "configure",
        "--store",
        store,
        "--agent",
        agent,
        "--strategy",
        other,
        "--budget",
        "2000",
        "--json",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    configured = json.loads(done.stdout)
    assert (configured["events"], configured["settings"]["strategy"]) == (1, other)
    assert configured["settings"]["budget"] == 2000
    rebuilt = run("control", "rebuild", "--store", store, "--agent", agent, cwd=tmp_path)
    assert rebuilt.returncode == 0, rebuilt.stderr
    view = json.loads(
        run("inspect", "--store", store, "--agent", agent, "--json", cwd=tmp_path).stdout
    )
    assert (view["strategy"], view["budget"]) == (other, 2000)
    audit = run("audit", "--store", store, "--rederive", "--json", cwd=tmp_path)
    assert audit.returncode == 0, audit.stdout + audit.stderr
    report = json.loads(audit.stdout)
    assert report["builds"] == report["rederived"] > 0
    assert (report["mismatches"], report["not_rederivable"]) == (0, 0)


def test_an_id_copied_from_a_piped_table_is_accepted_by_control(tmp_path: Path) -> None:
    """Piped, tables are plain tab-separated columns with whole ids and whole lines (no box
    drawing, no wrapping at COLUMNS): the first column of a row is an id `control` takes."""
    assert run("demo", cwd=tmp_path).returncode == 0
    store = "sqlite:///.ctxledger/demo.db"
    out = run("inspect", "--store", store, "--agent", "primary-1", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert not any(ch in out.stdout for ch in "┃│┏└")
    start = lines.index(next(line for line in lines if line.startswith("# included")))
    assert lines[start + 1].split("\t")[:5] == ["id", "layer", "source", "tokens", "fate"]
    rows = [line.split("\t") for line in lines[start + 2 :] if line and not line.startswith("#")]
    view = json.loads(
        run("inspect", "--store", store, "--agent", "primary-1", "--json", cwd=tmp_path).stdout
    )
    included = {v["id"] for v in view["included"]}
    ids = [r[0] for r in rows[: len(included)]]
    assert set(ids) == included  # whole ids, one row per item
    target = next(v["id"] for v in view["included"] if not v["pinned"])
    pinned = run("control", "pin", target, "--store", store, "--agent", "primary-1", cwd=tmp_path)
    assert pinned.returncode == 0, pinned.stderr


def test_promote_finding_puts_a_worker_finding_in_the_parent_pool(tmp_path: Path) -> None:
    """`control promote-finding` on the demo's worker finding: two events on the parent's
    stream, the item in the parent's pool, replay equal and audit --rederive clean."""
    assert run("demo", cwd=tmp_path).returncode == 0
    store = "sqlite:///.ctxledger/demo.db"
    view = json.loads(
        run("inspect", "--store", store, "--agent", "worker-1", "--json", cwd=tmp_path).stdout
    )
    finding = next(
        v["id"] for v in view["included"] + view["excluded"] if v["source"] == "worker_finding"
    )
    out = run("control", "promote-finding", finding, "--store", store, "--agent", "worker-1",
              "--json", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    promoted = json.loads(out.stdout)
    assert promoted["events"] == 2
    again = run("control", "promote-finding", finding, "--store", store, "--agent", "worker-1",
                cwd=tmp_path)  # fmt: skip
    assert again.returncode == 1
    assert "already promoted into 'primary-1'" in again.stderr
    parent = json.loads(
        run("inspect", "--store", store, "--agent", "primary-1", "--json", cwd=tmp_path).stdout
    )
    controls = [c for c in parent["controls"] if c["kind"] == "promote_finding"]
    assert [c["target"] for c in controls] == [promoted["item_id"]]
    assert json.loads(run("replay", "--store", store, "--verify", "--json", cwd=tmp_path).stdout)[
        "equal"
    ]
    audit = run("audit", "--store", store, "--rederive", "--json", cwd=tmp_path)
    assert audit.returncode == 0, audit.stdout
    assert json.loads(audit.stdout)["mismatches"] == 0


def test_memory_recall_switch_is_recorded_once_and_audited(tmp_path: Path) -> None:
    assert run("demo", cwd=tmp_path).returncode == 0
    store = "sqlite:///.ctxledger/demo.db"

    def recall(*state: str) -> dict[str, object]:
        out = run("memory", "recall", *state, "--store", store, "--json", cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return dict(json.loads(out.stdout))

    assert recall() == {"recall": "not recorded", "events": 0}
    assert recall("off") == {"recall": "off", "events": 1}
    assert recall("off") == {"recall": "off", "events": 0}  # already off: nothing appended
    assert recall() == {"recall": "off", "events": 0}  # a new process reads it from the log
    audit = run("audit", "--store", store, "--rederive", "--json", cwd=tmp_path)
    assert audit.returncode == 0, audit.stdout
    assert json.loads(audit.stdout)["clean"] is True
    missing = run("memory", "recall", "off", "--store", "sqlite:///nope.db", cwd=tmp_path)
    assert missing.returncode == 1
    assert "no ledger at nope.db" in missing.stderr
