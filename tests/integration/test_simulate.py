"""simulate / compare on the real third-party trajectories in ../shared/trajectories/.

The whole matrix (every file × every strategy × {budget 8000 window 12000, budget 32000}) runs
by default; it writes one SQLite ledger per run and checks replay --verify and audit on it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxledger.adapters.cli.main import main
from ctxledger.adapters.simulation.simulate import SimulationReport, compare, simulate
from ctxledger.domain.strategies import BASELINES, strategy_names

FILES = (
    "swe-agent__gpt4__pydicom-1458.traj",
    "mini-swe-agent__deepseek-chat__django-14997.traj.json",
    "openhands__claude35sonnet__basic_gui_mode.json",
)
CONFIGS: tuple[tuple[int, int | None], ...] = ((8000, 12000), (32000, None))


@pytest.fixture(scope="module")
def shared(shared_trajectories: Path) -> Path:
    missing = [f for f in FILES if not (shared_trajectories / f).is_file()]
    if missing:
        pytest.fail(f"missing shared trajectories: {', '.join(missing)}")
    return shared_trajectories


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    capsys.readouterr()
    code = main(list(argv))
    out = capsys.readouterr()
    assert code == 0, out.err
    result: dict[str, object] = json.loads(out.out)
    return result


def _check_store(capsys: pytest.CaptureFixture[str], url: str) -> None:
    verify = _cli_json(capsys, "replay", "--store", url, "--verify", "--json")
    assert verify["equal"] is True
    assert verify["behind"] == 0
    audit = _cli_json(capsys, "audit", "--store", url, "--rederive", "--json")
    assert audit["clean"] is True, audit["violations"]
    # every build re-derives from the log alone: same planner, same selection
    assert audit["builds"] == audit["rederived"]
    assert isinstance(audit["builds"], int)
    assert audit["builds"] > 0
    assert (audit["mismatches"], audit["not_rederivable"]) == (0, 0), audit


def _check_targets(r: SimulationReport) -> None:
    assert r.prompts == r.steps
    assert r.over_budget_prompts == 0
    assert r.overflow_prompts == 0  # nothing pinned there exceeds the budget
    assert r.prompt_tokens.max <= r.budget
    assert r.pinned_dropped == 0
    assert r.objective_present == 1.0
    assert r.instructions_whole in (None, 1.0)  # role instructions are never traded
    assert (r.order_inversions, r.observation_before_action) == (0, 0)  # a transcript
    if r.window is not None:
        assert r.prompt_tokens.max <= r.window
    assert r.events > 0
    if r.strategy in BASELINES:  # the peers' rules: no latest-step policy
        return
    assert r.latest_observation_present == 1.0
    assert r.latest_observation_kept_fraction is not None
    assert 0.0 < r.latest_observation_kept_fraction.min <= r.latest_observation_kept_fraction.mean
    if r.recent_failures_present is not None:
        # On the SWE-agent run at 8 000 the forced role text (system prompt, a 4 800-token
        # demonstration, the instructions: 7 000 tokens) leaves about 630 tokens for the
        # newest step and the failures of three edit retries of ~620 tokens each: measured
        # 0.67, stated in docs/trajectories.md. Everywhere else the failures fit.
        cramped = Path(r.trajectory).name.startswith("swe-agent__") and r.budget <= 8000
        assert r.recent_failures_present >= (0.6 if cramped else 0.97)


CASES = [
    pytest.param((name, strategy, budget, window), id=f"{name.split('__')[0]}-{strategy}-b{budget}")
    for name in FILES
    for strategy in strategy_names()
    for budget, window in CONFIGS
]


@pytest.mark.parametrize("case", CASES)
def test_every_strategy_meets_the_targets(
    shared: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    case: tuple[str, str, int, int | None],
) -> None:
    name, strategy, budget, window = case
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    report = simulate(shared / name, budget=budget, window=window, strategy=strategy, store_url=url)
    assert report.strategy == strategy
    assert report.budget == budget
    assert report.store == url
    _check_targets(report)
    if strategy == "variable" and window is None:
        assert report.prefix_reuse >= 0.90 * report.prefix_reuse_limit
    _check_store(capsys, url)


def test_compare_rows_match_single_runs(shared: Path, tmp_path: Path) -> None:
    path = shared / FILES[0]
    rows = compare(path, 8000, 12000, ["variable", "summary"], store_url="memory://")
    assert [r.strategy for r in rows] == ["variable", "summary"]
    assert len({r.agent for r in rows}) == 2
    alone = simulate(path, budget=8000, window=12000, strategy="summary", store_url="memory://")
    strip = {"store", "events", "agent"}
    assert {k: v for k, v in rows[1].to_dict().items() if k not in strip} == {
        k: v for k, v in alone.to_dict().items() if k not in strip
    }


def test_recorded_usage_is_reported(shared: Path) -> None:
    mini = simulate(shared / FILES[1], budget=8000, store_url="memory://")
    assert mini.recorded_usage is not None
    assert mini.recorded_usage.calls == 130
    assert mini.provider == "openai"
    oh = simulate(shared / FILES[2], budget=8000, store_url="memory://")
    assert oh.provider == "anthropic"
    assert oh.recorded_usage is not None
    assert oh.recorded_usage.cache_write_tokens > 0
    swe = simulate(shared / FILES[0], budget=8000, store_url="memory://")
    assert swe.recorded_usage is None


@pytest.mark.parametrize("name", FILES)
def test_prefix_reuse_within_two_points_of_the_append_only_limit(shared: Path, name: str) -> None:
    """Issue 4: at a budget large enough to need no rebuild, `variable` stays within 2 % of
    the reuse an unbounded append-only transcript of the same items would get."""
    r = simulate(shared / name, budget=400_000, strategy="variable", store_url="memory://")
    assert r.rebuilds == 0
    assert r.refreshes == 0
    print(
        f"{name}: prefix reuse {r.prefix_reuse:.4f} vs append-only limit {r.prefix_reuse_limit:.4f}"
    )
    assert r.prefix_reuse >= r.prefix_reuse_limit - 0.02
