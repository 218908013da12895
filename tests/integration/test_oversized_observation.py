"""A window smaller than one observation is survived: a generated run whose single observation
is 5× the model's window finishes under every strategy, every accepted prompt within the
budget and the window, the observation clipped (never dropped) in each prompt after it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ctxledger.adapters.engine.rederive import rederive
from ctxledger.adapters.importers import load_trajectory
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.simulation.simulate import simulate_trajectory
from ctxledger.adapters.tokens import default_counter
from ctxledger.domain import events as ev
from ctxledger.domain.strategies import BASELINES, strategy_names
from ctxledger.projections.audit import audit

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "trajectories" / "swe_agent_small.traj"
WINDOW = 4000
HUGE_STEP = 2  # the step whose observation is 5× the window


def _huge_run(tmp_path: Path) -> tuple[Path, str]:
    """The small SWE-agent run with one observation of ~5 × WINDOW tokens (generated here)."""
    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    line = "src/acme/sizes.py:12: parse_size('10MB') returned 10 instead of 10485760\n"
    counter = default_counter()
    repeats = 5 * WINDOW // counter.count(line) + 1
    huge = "".join(f"{n:05d} {line}" for n in range(repeats))
    assert counter.count(huge) >= 5 * WINDOW
    data["trajectory"][HUGE_STEP]["observation"] = huge
    path = tmp_path / "huge.traj"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path, huge


@pytest.mark.parametrize("budget", [3000, 8000])
@pytest.mark.parametrize("strategy", [n for n in strategy_names() if n not in BASELINES])
def test_an_observation_five_times_the_window_is_clipped_not_fatal(
    tmp_path: Path, strategy: str, budget: int
) -> None:
    path, huge = _huge_run(tmp_path)
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    prompts: list[tuple[int, int, str]] = []
    report = simulate_trajectory(
        load_trajectory(path),
        budget=budget,
        window=WINDOW,
        strategy=strategy,
        store_url=url,
        on_prompt=lambda n, result, tokens: prompts.append((n, tokens, result.prompt.text)),
    )
    assert report.prompts == report.steps
    assert report.over_budget_prompts == 0
    assert report.overflow_prompts == 0
    assert report.prompt_tokens.max <= min(budget, WINDOW)
    assert report.latest_observation_present == 1.0
    assert report.objective_present == 1.0
    # the prompt right after the huge step holds a clipped excerpt of it, never the whole
    after = [text for n, _, text in prompts if n == HUGE_STEP + 1]
    assert after, "no prompt after the huge step"
    assert "tokens clipped" in after[0]
    assert huge[:40] in after[0]
    assert huge not in after[0]
    with open_ledger(url) as ledger:
        records = list(ledger.read_all())
    assert audit((r.position, r.event) for r in records) == []
    rd = rederive(records)
    assert (rd.mismatches, rd.not_rederivable) == (0, 0)
    assert rd.rederived == rd.builds > 0
    # nothing was pinned by the simulator besides the objective
    assert not any(isinstance(r.event, ev.ItemUnpinned) for r in records)
    pinned = [
        r.event.item.id
        for r in records
        if isinstance(r.event, ev.ItemRecorded) and r.event.item.pinned
    ]
    assert len(pinned) == 1
