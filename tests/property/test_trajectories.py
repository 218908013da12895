"""Properties of the importers and the simulator: total on any JSON, bounded heuristics, and the
simulation invariants (objective always present, pinned never dropped, window respected)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctxledger.adapters.engine import BuildResult
from ctxledger.adapters.importers import FORMATS, Step, Trajectory, parse_trajectory
from ctxledger.adapters.importers.classify import (
    MAX_FILES,
    classify_step,
    extract_files,
    normalize_command,
)
from ctxledger.adapters.importers.common import split_task
from ctxledger.adapters.simulation.simulate import simulate_trajectory
from ctxledger.domain.errors import RefreshExhaustedError, TrajectoryFormatError
from ctxledger.domain.strategies import strategy_names
from ctxledger.domain.tokens import EstimatingCounter

PATH = Path("fuzz/input.json")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=16,
)
texts = st.text(max_size=40) | st.sampled_from(
    ["", " ", "Traceback (most recent call last):", "ls"]
)
contents = texts | st.lists(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts}), max_size=2
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool", "exit"]), "content": contents},
        optional={
            "tool_calls": st.lists(
                st.fixed_dictionaries(
                    {"function": st.fixed_dictionaries({"name": st.just("bash"),
                                                        "arguments": st.text(max_size=30)})}
                ),
                max_size=2,
            ),
            "extra": st.dictionaries(st.sampled_from(["timestamp", "returncode", "response"]), json_values, max_size=2),
        },
    ),
    max_size=6,
)  # fmt: skip
events = st.lists(
    st.fixed_dictionaries(
        {"id": st.integers(0, 8), "source": st.sampled_from(["user", "agent", "environment"])},
        optional={
            "action": st.sampled_from(["message", "run", "read", "edit", "system", "finish"]),
            "observation": st.sampled_from(["run", "read", "null"]),
            "cause": st.integers(0, 8),
            "args": st.dictionaries(st.sampled_from(["content", "command", "thought", "path"]), texts, max_size=3),
            "content": texts,
            "extras": json_values,
            "timestamp": st.sampled_from(["2025-01-01T00:00:00", "bad", 5]),
        },
    ),
    max_size=8,
)  # fmt: skip
swe_steps = st.lists(
    st.fixed_dictionaries(
        {"action": texts, "observation": texts},
        optional={"thought": texts, "response": texts, "state": texts},
    ),
    max_size=5,
)
shaped = (
    st.builds(lambda m: {"messages": m}, messages)
    | events
    | st.builds(
        lambda h, t: {"history": h, "trajectory": t},
        st.lists(st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "assistant"]),
                                         "content": contents}), max_size=4),
        swe_steps,
    )
)  # fmt: skip


def _check(data: Any, fmt: str) -> None:
    try:
        traj = parse_trajectory(data, PATH, fmt)
    except TrajectoryFormatError as exc:
        message = str(exc)
        assert "\n" not in message
        assert message.startswith(str(PATH))
        return
    assert traj.task.strip()
    assert traj.steps
    assert [s.index for s in traj.steps] == list(range(len(traj.steps)))
    assert all(len(s.files) <= MAX_FILES for s in traj.steps)


@given(json_values | shaped, st.sampled_from(("auto", *FORMATS)))
def test_import_of_any_json_is_a_trajectory_or_a_typed_error(data: Any, fmt: str) -> None:
    _check(data, fmt)


@given(st.text(max_size=300))
def test_normalize_command_is_one_bounded_line_and_idempotent(command: str) -> None:
    sig = normalize_command(command)
    assert "\n" not in sig
    assert len(sig) <= 200
    assert normalize_command(sig) == sig


@given(st.lists(st.text(alphabet="ab/._-:xyz py\n", max_size=60), max_size=4))
def test_extracted_files_are_bounded_unique_and_found_in_the_text(parts: list[str]) -> None:
    files = extract_files(*parts)
    assert len(files) <= MAX_FILES
    assert len(set(files)) == len(files)
    joined = "\n".join(parts)
    assert all(f in joined for f in files)


@given(st.text(max_size=200), st.text(max_size=80))
def test_split_task_returns_text_of_the_message(message: str, template: str) -> None:
    task, instructions = split_task(message, template)
    assert task in message
    assert task == task.strip()
    if message.strip():
        assert task
    if instructions:
        assert "{{task}}" in instructions


@given(st.text(max_size=80), st.text(max_size=200), st.none() | st.integers(-2, 3))
def test_classification_is_consistent(command: str, output: str, code: int | None) -> None:
    flags = classify_step(command, output, exit_code=code)
    assert flags.test_failure <= flags.test_run
    assert flags.test_failure <= flags.failure
    if code not in (None, 0):
        assert flags.failure


def _trajectory(observations: list[str], failures: list[bool], task: str) -> Trajectory:
    start = datetime(2025, 5, 1, tzinfo=UTC)
    return Trajectory(
        format="swe-agent",
        path="synthetic.traj",
        task=task,
        role_texts=("Role text.",),
        instance_id="prop",
        steps=tuple(
            Step(
                index=i,
                action=f"step {i}: run it",
                observation=obs,
                command=f"run {i % 3}",
                failure=fail,
                at=start + timedelta(minutes=i),
            )
            for i, (obs, fail) in enumerate(zip(observations, failures, strict=False))
        ),
    )


word_blobs = st.lists(
    st.sampled_from(["alpha", "beta", "gamma", "delta", "x.py", "\n"]), max_size=120
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(word_blobs.map(" ".join), min_size=1, max_size=8),
    st.lists(st.booleans(), min_size=8, max_size=8),
    st.sampled_from(strategy_names()),
    st.integers(200, 1500),
    st.none() | st.integers(300, 2500),
)
def test_simulation_invariants(
    observations: list[str],
    failures: list[bool],
    strategy: str,
    budget: int,
    window: int | None,
) -> None:
    traj = _trajectory(observations, failures, "Make the alpha beta work.")
    latest_fates: list[tuple[str, str, str]] = []

    def on_prompt(n: int, result: BuildResult, _tokens: int) -> None:
        prefix = f"s{n - 1:04d}.observation"
        for d in result.pack.decisions:
            if n and d.item_id.startswith(prefix):
                latest_fates.append((result.kind, d.action, d.reason))

    try:
        report = simulate_trajectory(
            traj,
            budget=budget,
            window=window,
            strategy=strategy,
            store_url="memory://",
            counter=EstimatingCounter(),
            on_prompt=on_prompt,
        )
    except RefreshExhaustedError:
        assert window is not None  # only a window can make a turn impossible
        return
    assert report.prompts == len(traj.steps)
    assert report.objective_present == 1.0
    assert report.pinned_dropped == 0
    if report.latest_observation_present not in (None, 1.0):
        # The latest observation is only ever left out by a (re)build that packed below its
        # watermark with no room for it — never by an append, never for another reason.
        missing = [f for f in latest_fates if f[1] == "dropped"]
        assert missing
        assert all(kind != "append" and reason == "over_budget" for kind, _, reason in missing)
    assert 0.0 <= report.prefix_reuse <= 1.0
    assert 0.0 <= report.prefix_reuse_limit <= 1.0
    assert report.refreshes >= report.rejected_prompts  # every rejection refreshed
    if window is not None:
        assert report.prompt_tokens.max <= window
    assert report.generations == 1 + report.refreshes + report.rebuilds
