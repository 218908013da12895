"""The simulator on synthetic trajectories: metrics recomputed independently, refresh, errors."""

from __future__ import annotations

import itertools
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from ctxledger.adapters.engine import BuildResult
from ctxledger.adapters.importers import Step, Trajectory, load_trajectory
from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.simulation.simulate import (
    FIXED_START,
    StepClock,
    compare,
    context_limit_error,
    simulate,
    simulate_trajectory,
)
from ctxledger.domain import events as ev
from ctxledger.domain.codec import encode_event
from ctxledger.domain.errors import (
    BudgetError,
    InvalidInputError,
    RefreshExhaustedError,
    UnknownStrategyError,
)
from ctxledger.domain.prefix import prefix_reuse, prefix_reuse_within_generations
from ctxledger.domain.prompt import render_item
from ctxledger.domain.tokens import EstimatingCounter
from ctxledger.domain.turn_errors import classify_turn_error

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trajectories"
SWE = FIXTURES / "swe_agent_small.traj"
OPENHANDS = FIXTURES / "openhands_small.json"


def _synthetic(steps: int, obs_words: int, *, task_words: int = 12) -> Trajectory:
    start = datetime(2025, 3, 1, tzinfo=UTC)
    return Trajectory(
        format="mini-swe-agent",
        path="synthetic.traj.json",
        task=" ".join(f"goal{i}" for i in range(task_words)),
        role_texts=("You are a test agent.",),
        instance_id="synthetic-1",
        steps=tuple(
            Step(
                index=i,
                thought=f"thought {i}",
                action=f"thought {i}\n\n```bash\ncat part{i}.py\n```",
                observation=" ".join(f"w{i}x{j}" for j in range(obs_words)),
                command=f"cat part{i}.py",
                tool="bash",
                failure=i % 4 == 3,
                files=(f"part{i}.py",),
                at=start + timedelta(seconds=30 * i),
            )
            for i in range(steps)
        ),
    )


def test_metrics_match_an_independent_recomputation(tmp_path: Path) -> None:
    prompts: list[tuple[int, BuildResult, int]] = []
    url = f"sqlite:///{tmp_path / 'l.db'}"
    counter = EstimatingCounter()
    report = simulate_trajectory(
        load_trajectory(SWE),
        budget=900,
        strategy="variable",
        store_url=url,
        counter=counter,
        on_prompt=lambda n, r, t: prompts.append((n, r, t)),
    )
    texts = [r.prompt.text for _, r, _ in prompts]
    tokens = sorted(t for _, _, t in prompts)
    assert [n for n, _, _ in prompts] == list(range(report.steps))
    assert [counter.count(t) for t in texts] == [t for _, _, t in prompts]
    assert report.prompt_tokens.max == tokens[-1]
    assert report.prompt_tokens.p95 == tokens[math.ceil(0.95 * len(tokens)) - 1]
    assert report.prompt_tokens.mean == round(sum(tokens) / len(tokens), 1)
    assert report.prefix_reuse == round(prefix_reuse(texts), 4)
    pairs = [(r.generation, r.prompt.text) for _, r, _ in prompts]
    assert report.prefix_reuse_within_generation == round(prefix_reuse_within_generations(pairs), 4)
    hashes = [r.prompt.prefix_hash for _, r, _ in prompts]
    assert report.static_prefix_changes == sum(a != b for a, b in itertools.pairwise(hashes))
    assert report.generations == len({r.generation for _, r, _ in prompts})
    assert report.over_budget_prompts == sum(
        t > 900 and r.pack.overflow == 0 for _, r, t in prompts
    )
    assert report.overflow_prompts == sum(r.pack.overflow > 0 for _, r, _ in prompts)

    # The append-only transcript: everything recorded before call i, in recording order.
    with open_ledger(url) as ledger:
        recorded = [e.event.item for e in ledger.read_all() if isinstance(e.event, ev.ItemRecorded)]
    transcripts = [
        "".join(
            render_item(i)
            for i in recorded
            if not i.stage or int(i.stage.removeprefix("step-")) < n
        )
        for n in range(report.steps)
    ]
    assert report.prefix_reuse_limit == round(prefix_reuse(transcripts), 4)


def test_latest_observation_is_pinned_for_its_turn_then_unpinned(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    report = simulate(SWE, budget=700, strategy="summary", store_url=url)
    assert report.latest_observation_present == 1.0
    with open_ledger(url) as ledger:
        events = [e.event for e in ledger.read_all()]
    pinned = {e.item.id for e in events if isinstance(e, ev.ItemRecorded) and e.item.pinned}
    unpinned = {e.item_id for e in events if isinstance(e, ev.ItemUnpinned)}
    objective = {e.item.id for e in events if isinstance(e, ev.ItemRecorded) and e.item.mandatory}
    assert pinned - objective == unpinned  # every step pin is released; the objective stays
    assert all(e.by == "simulate" for e in events if isinstance(e, ev.ItemUnpinned))


def test_a_small_window_forces_refreshes_and_every_sent_prompt_fits(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    traj = _synthetic(24, 120)
    report = simulate_trajectory(traj, budget=3000, window=1500, store_url=url)
    assert report.rejected_prompts >= 1
    assert report.refreshes >= 1
    assert report.prompt_tokens.max <= 1500
    assert report.prompts == 24
    assert report.latest_observation_present == 1.0
    assert report.objective_present == 1.0
    with open_ledger(url) as ledger:
        events = [e.event for e in ledger.read_all()]
    failed = [e for e in events if isinstance(e, ev.TurnFailed)]
    assert len(failed) == report.rejected_prompts
    assert {e.error_class for e in failed} == {"context_limit"}
    refreshed = [e for e in events if isinstance(e, ev.GenerationRefreshed) and e.kind == "refresh"]
    assert len(refreshed) == report.refreshes


def test_refresh_that_cannot_fit_ends_in_a_clear_error() -> None:
    traj = _synthetic(3, 10, task_words=400)  # the pinned objective alone exceeds the window
    with pytest.raises(RefreshExhaustedError, match="refreshes without a successful turn"):
        simulate_trajectory(traj, budget=4000, window=200, store_url="memory://")


def test_runs_are_reproducible_event_for_event(tmp_path: Path) -> None:
    urls = [f"sqlite:///{tmp_path / f'{n}.db'}" for n in (1, 2)]
    reports = [simulate(OPENHANDS, budget=2000, store_url=u) for u in urls]
    a, b = (r.to_dict() for r in reports)
    assert a.pop("store") != b.pop("store")
    assert a == b
    streams = []
    for url in urls:
        with open_ledger(url) as ledger:
            streams.append([encode_event(r.event) for r in ledger.read_all()])
    assert streams[0] == streams[1]


def test_a_second_run_on_one_store_gets_its_own_agent(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'l.db'}"
    rows = compare(SWE, 1500, None, ["variable", "variable"], store_url=url)
    assert rows[0].agent != rows[1].agent
    assert rows[1].agent.endswith("#2")


def test_invalid_arguments_are_typed_errors() -> None:
    with pytest.raises(BudgetError):
        simulate(SWE, budget=0, store_url="memory://")
    with pytest.raises(BudgetError):
        simulate(SWE, budget=100, window=-1, store_url="memory://")
    with pytest.raises(UnknownStrategyError):
        simulate(SWE, budget=100, strategy="nope", store_url="memory://")
    with pytest.raises(UnknownStrategyError):
        compare(SWE, 100, None, ["variable", "nope"], store_url="memory://")
    with pytest.raises(InvalidInputError, match="no strategies"):
        compare(SWE, 100, None, [" ", ""], store_url="memory://")


def test_context_limit_error_body_is_classified_with_its_sizes() -> None:
    verdict = classify_turn_error(context_limit_error(13000, 12000))
    assert verdict.error_class == "context_limit"
    assert verdict.provider == "anthropic"
    assert (verdict.prompt_tokens, verdict.limit_tokens) == (13000, 12000)


def test_step_clock_and_times_without_timestamps() -> None:
    clock = StepClock(FIXED_START)
    assert clock.now() == FIXED_START
    with pytest.raises(InvalidInputError):
        StepClock(datetime(2025, 1, 1))
    prompts: list[datetime] = []
    simulate_trajectory(
        load_trajectory(SWE),
        budget=2000,
        store_url="memory://",
        on_prompt=lambda n, r, t: prompts.append(r.pack.items[0].observed_at or FIXED_START),
    )
    assert prompts[0] == FIXED_START


def test_report_serialises_to_plain_json() -> None:
    report = simulate(OPENHANDS, budget=2000, store_url="memory://")
    data = msgspec.json.decode(msgspec.json.encode(report.to_dict()))
    for key in (
        "trajectory", "format", "steps", "prompts", "strategy", "budget", "window",
        "tokenizer", "generations", "refreshes", "rebuilds", "prompt_tokens",
        "over_budget_prompts", "overflow_prompts", "pinned_dropped", "objective_present",
        "latest_observation_present", "recent_failures_present", "prefix_reuse",
        "prefix_reuse_limit", "prefix_reuse_within_generation", "static_prefix_changes",
        "expected_cached_tokens", "events", "store",
    ):  # fmt: skip
        assert key in data
    assert set(data["prompt_tokens"]) == {"max", "mean", "p95"}
    assert data["window"] is None
