"""The installed CLI: `ctxledger simulate` / `ctxledger compare` output and one-line errors."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.e2e._cli import run

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trajectories"


@pytest.fixture(scope="module")
def shared(shared_trajectories: Path) -> Path:
    return shared_trajectories


def _one_line_error(out: subprocess.CompletedProcess[str]) -> str:
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1
    assert out.stderr.startswith("ctxledger: error: ")
    assert "Traceback" not in out.stderr
    return out.stderr


def test_simulate_json_is_one_object_and_its_store_verifies(shared: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'sim.db'}"
    path = shared / "openhands__claude35sonnet__basic_gui_mode.json"
    out = run("simulate", str(path), "--budget", "8000", "--window", "12000", "--store", url,
              "--json", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1
    report = json.loads(out.stdout)
    assert report["format"] == "openhands"
    assert report["store"] == url
    assert report["window"] == 12000
    assert report["objective_present"] == 1.0
    assert report["over_budget_prompts"] == 0
    assert set(report["prompt_tokens"]) == {"max", "mean", "p95"}
    verify = run("replay", "--store", url, "--verify", "--json", cwd=tmp_path)
    assert verify.returncode == 0, verify.stderr
    assert json.loads(verify.stdout)["equal"] is True


def test_compare_json_has_one_row_per_strategy(shared: Path, tmp_path: Path) -> None:
    path = shared / "swe-agent__gpt4__pydicom-1458.traj"
    out = run("compare", str(path), "--budget", "8000", "--window", "12000", "--strategies",
              "variable,layered", "--store", f"sqlite:///{tmp_path / 'c.db'}", "--json",
              cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert out.stdout.count("\n") == 1
    result = json.loads(out.stdout)
    assert [r["strategy"] for r in result["rows"]] == ["variable", "layered"]
    assert result["budget"] == 8000
    assert result["format"] == "swe-agent"
    assert all(r["latest_observation_present"] == 1.0 for r in result["rows"])


def test_simulate_reports_what_the_next_action_needs_and_takes_a_watermark(
    shared: Path, tmp_path: Path
) -> None:
    """The prompt-quality keys, exactly these names, and ``--watermark`` recorded and used."""
    path = shared / "swe-agent__gpt4__pydicom-1458.traj"
    out = run("simulate", str(path), "--budget", "32000", "--watermark", "0.3", "--store",
              "memory://", "--json", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["watermark"] == 0.3
    recall = report["next_action_recall"]
    assert set(recall) == {"pooled", "min", "hits", "needed"}
    assert recall["needed"] > 0
    assert recall["pooled"] == round(recall["hits"] / recall["needed"], 4)
    assert report["instructions_whole"] == 1.0  # role instructions are forced
    assert (report["order_inversions"], report["observation_before_action"]) == (0, 0)
    assert 0.0 <= report["stale_failures_share"] <= 0.02
    assert set(report["latest_observation_kept_fraction"]) == {"mean", "min"}
    table = run("compare", str(path), "--budget", "8000", "--strategies",
                "variable,trim_last,keep_first_last,window", "--store", "memory://",
                cwd=tmp_path)  # fmt: skip
    assert table.returncode == 0, table.stderr
    header = table.stdout.splitlines()[1].split("\t")
    assert {"recall", "instr", "order", "stale"} <= set(header)
    rows = [line.split("\t")[0] for line in table.stdout.splitlines()[2:6]]
    assert rows == ["variable", "trim_last", "keep_first_last", "window"]
    bad = run("simulate", str(path), "--watermark", "0.95", "--store", "memory://", cwd=tmp_path)
    assert "--watermark" in _one_line_error(bad)


def test_human_output_is_a_table_with_the_store(tmp_path: Path) -> None:
    out = run("simulate", str(FIXTURES / "swe_agent_small.traj"), "--budget", "2000",
              "--store", f"sqlite:///{tmp_path / 's.db'}", cwd=tmp_path)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "simulate · swe-agent · swe_agent_small.traj" in out.stdout
    assert "latest observation present" in out.stdout
    assert f"store: sqlite:///{tmp_path / 's.db'}" in out.stdout
    table = run("compare", str(FIXTURES / "swe_agent_small.traj"), "--budget", "2000",
                "--strategies", "variable,summary", cwd=tmp_path)  # fmt: skip
    assert table.returncode == 0, table.stderr
    assert "summary" in table.stdout
    assert "store: sqlite:///" in table.stdout


def test_default_store_is_a_temporary_sqlite_file(tmp_path: Path) -> None:
    out = run("simulate", str(FIXTURES / "openhands_small.json"), "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    store = json.loads(out.stdout)["store"]
    assert store.startswith("sqlite:///")
    db = Path(store.removeprefix("sqlite:///"))
    assert db.is_file()
    assert not db.is_relative_to(tmp_path)
    shutil.rmtree(db.parent)


def test_malformed_file_is_one_line_exit_1(tmp_path: Path) -> None:
    path = FIXTURES / "malformed.traj"
    err = _one_line_error(run("simulate", str(path), "--json", cwd=tmp_path))
    assert "malformed.traj: expected" in err
    assert "malformed JSON" in err
    err = _one_line_error(
        run("compare", str(path), "--budget", "100", "--strategies", "variable", cwd=tmp_path)
    )
    assert "malformed.traj" in err


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("simulate", str(FIXTURES / "unknown_shape.json")), "found a JSON object with keys"),
        (("simulate", str(FIXTURES / "swe_agent_no_steps.traj")), "no steps"),
        (("simulate", "missing.traj"), "missing.traj: expected"),
        (("simulate", str(FIXTURES / "swe_agent_small.traj"), "--format", "yaml"), "'yaml'"),
        (("simulate", str(FIXTURES / "swe_agent_small.traj"), "--strategy", "x"), "strategy"),
        (("simulate", str(FIXTURES / "swe_agent_small.traj"), "--budget", "0"), "--budget"),
    ],
)
def test_bad_input_is_one_line_exit_1(tmp_path: Path, args: tuple[str, ...], fragment: str) -> None:
    assert fragment in _one_line_error(run(*args, cwd=tmp_path))
