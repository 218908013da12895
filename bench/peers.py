"""Peers on the same trajectories and budget: append-only transcript, LangChain's
``trim_messages``, OpenHands' non-LLM condensers, and every ctxledger strategy.

Every peer sees the same messages, built from the same items the simulator records (the
role texts, the objective, each step's action and observation), rendered the same simple way
(``### role`` header, the content, a blank line) and counted with the same tokenizer.
Metrics (per trajectory and peer): prompt tokens (mean, max), prompts over the budget,
prefix reuse (bytes shared with the previous prompt / prompt bytes) and its ratio to the
append-only transcript (the limit), the share of prompts holding the objective, the latest
observation (whole) and the observations of failed steps among the last three (whole), and
the time per turn.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.pools import make_pool
from ctxledger.adapters.importers import Step, Trajectory, load_trajectory
from ctxledger.adapters.importers.items import objective_item, role_items, step_items
from ctxledger.adapters.simulation.prompt_quality import QualityTally, StepFacts
from ctxledger.adapters.simulation.simulate import simulate_trajectory
from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.prefix import lcp_bytes
from ctxledger.domain.strategies import strategy_names

__all__ = [
    "PEERS_PYTHON",
    "Transcript",
    "long_session",
    "run_peers",
    "transcript_of",
]

ROOT = Path(__file__).resolve().parent.parent
PEERS_PYTHON = ROOT / ".venv" / "peers" / "bin" / "python"
"""The benchmark-only Python ≥ 3.12 environment for OpenHands (``make bench-peers``)."""
OPENHANDS_CHILD = Path(__file__).resolve().parent / "openhands_peer.py"
_RECENT = 3  # failures among the last three steps count as "recent" (as the simulator does)
_AT = datetime(2025, 1, 1, tzinfo=UTC)

Message = tuple[str, str]  # (role: system | human | ai, content)


@dataclass
class Transcript:
    """A trajectory as chat messages: ``head`` (system, objective) then each step's."""

    name: str
    objective: str
    head: list[Message]
    steps: list[list[Message]]
    observations: list[str | None]
    failures: list[bool]
    trajectory: Trajectory
    kinds: list[list[str]] = field(default_factory=list)
    """Per step, the kind of each message: action, observation or user (head: system,
    objective) — what the OpenHands peer turns into events."""


def _make(content: str, *, layer: Layer, source: Source, item_id: str, **prov: Any) -> Item:
    return Item(id=item_id, layer=layer, source=source, content=content, **prov)


def transcript_of(traj: Trajectory, name: str) -> Transcript:
    """The messages of *traj*, from the items the simulator would record."""
    objective = objective_item(traj, _make, at=_AT).content
    head: list[Message] = [
        ("system", "\n\n".join(i.content for i in role_items(traj, _make, at=_AT)))
    ]
    if not head[0][1]:
        head = []
    head.append(("human", objective))
    kinds = [["system", "objective"][-len(head) :]]
    steps: list[list[Message]] = []
    observations: list[str | None] = []
    failures: list[bool] = []
    for step in traj.steps:
        items = step_items(traj, step, _make, at=_AT)
        msgs: list[Message] = []
        step_kinds: list[str] = []
        for kind, role, item in (
            ("action", "ai", items.action),
            ("observation", "human", items.observation),
            ("user", "human", items.user),
        ):
            if item is not None:
                msgs.append((role, item.content))
                step_kinds.append(kind)
        steps.append(msgs)
        kinds.append(step_kinds)
        observations.append(items.observation.content if items.observation else None)
        failures.append(bool(items.observation and items.observation.failure))
    return Transcript(name, objective, head, steps, observations, failures, traj, kinds)


def render(messages: Sequence[Message]) -> str:
    """The prompt text of a message list."""
    return "".join(f"### {role}\n{content}\n\n" for role, content in messages)


def long_session(steps: int, *, seed: int = 3) -> Trajectory:
    """A generated long session: views, greps and test runs (some failing) with outputs of
    realistic, long-tailed size drawn from the benchmark pool text."""
    rng = random.Random(seed)
    bodies = [i.content for i in make_pool(steps + 8, seed=seed)[6:]]
    out: list[Step] = []
    for n in range(steps):
        f = f"src/pkg{n % 7}/mod{n % 23}.py"
        kind = n % 4
        body = bodies[n % len(bodies)]
        if kind == 0:
            out.append(Step(index=n, action=f"cat {f}", command=f"cat {f}", observation=body,
                            file_view=True, files=(f,), exit_code=0))  # fmt: skip
        elif kind == 1:
            failed = rng.random() < 0.35
            obs = ("FAILED " if failed else "PASSED ") + f"tests/test_mod{n % 23}.py\n{body}"
            out.append(Step(index=n, action=f"pytest tests/test_mod{n % 23}.py",
                            command="pytest", observation=obs, test_run=True, failure=failed,
                            test_failure=failed, exit_code=1 if failed else 0, files=(f,)))  # fmt: skip
        elif kind == 2:
            out.append(Step(index=n, action=f"grep -rn mod{n % 23} src", command="grep",
                            observation=body, exit_code=0))  # fmt: skip
        else:
            out.append(Step(index=n, action=f"edit {f}: apply the fix for step {n}",
                            command=f"edit {f}", observation=f"File {f} edited.\n{body[:400]}",
                            files=(f,), exit_code=0))  # fmt: skip
    return Trajectory(
        format="swe-agent",
        path=f"generated:long-session-{steps}",
        task="Fix the failing tests in src/pkg0 without changing the public API.",
        steps=tuple(out),
        role_texts=("You are a careful coding agent. Run the tests after every edit.",),
        instance_id=f"generated-{steps}",
    )


# --- metrics ------------------------------------------------------------------------------------


def _score(
    t: Transcript,
    prompts: Sequence[str],
    seconds: Sequence[float],
    counter: TokenCounter,
    budget: int,
) -> dict[str, Any]:
    tokens = [counter.count(p) for p in prompts]
    shared = total = 0
    prev: bytes | None = None
    for p in prompts:
        data = p.encode("utf-8")
        if prev is not None:
            shared += lcp_bytes(prev, data)
            total += len(data)
        prev = data
    latest_hits = latest_total = fail_hits = fail_total = 0
    for n, p in enumerate(prompts):
        if n and t.observations[n - 1] is not None:
            latest_total += 1
            latest_hits += t.observations[n - 1] in p  # type: ignore[operator]
        for k in range(max(0, n - _RECENT), n):
            obs = t.observations[k]
            if obs is not None and t.failures[k]:
                fail_total += 1
                fail_hits += obs in p
    quality = _quality(t, prompts, tokens, counter)
    n = len(prompts)
    return {
        **quality,
        "prompts": n,
        "tokens_mean": round(statistics.fmean(tokens), 1) if tokens else 0.0,
        "tokens_max": max(tokens, default=0),
        "over_budget": sum(x > budget for x in tokens),
        "prefix_reuse": round(shared / total, 4) if total else 0.0,
        "objective": round(sum(t.objective in p for p in prompts) / n, 4) if n else 0.0,
        "latest_observation": round(latest_hits / latest_total, 4) if latest_total else None,
        "recent_failures": round(fail_hits / fail_total, 4) if fail_total else None,
        "ms_per_turn": round(statistics.fmean(seconds) * 1e3, 3) if seconds else 0.0,
    }


def _quality(
    t: Transcript, prompts: Sequence[str], tokens: Sequence[int], counter: TokenCounter
) -> dict[str, Any]:
    """The prompt-quality measures of ``simulate`` (adapters/simulation/prompt_quality.py) over a peer's
    prompts. A peer's prompt is a sublist of the transcript's messages in their order, so
    its order faults are not measured (``None``): there is no block order to get wrong."""
    traj = t.trajectory
    facts = [
        StepFacts(action=s.action, observation=s.observation, failure=s.failure, command=s.command)
        for s in traj.steps
    ]
    tally = QualityTally(traj.role_texts, traj.task, facts)
    for n, p in enumerate(prompts):
        stale = sum(
            counter.count(obs)
            for k in tally.stale_steps(n)
            if (obs := t.observations[k]) is not None and obs in p
        )
        tally.prompt(n, p, tokens[n], stale_tokens=stale)
    report = tally.report()
    return {
        "next_action_recall": report.next_action_recall.pooled,
        "instructions_whole": report.instructions_whole,
        "order_inversions": None,
        "observation_before_action": None,
        "stale_failures_share": report.stale_failures_share,
    }


# --- peers ---------------------------------------------------------------------------------------


def _append_only(t: Transcript) -> tuple[list[str], list[float]]:
    prompts: list[str] = []
    seconds: list[float] = []
    history: list[Message] = list(t.head)
    for n in range(len(t.steps)):
        start = time.perf_counter()
        if n:
            history.extend(t.steps[n - 1])
        prompts.append(render(history))
        seconds.append(time.perf_counter() - start)
    return prompts, seconds


def langchain_available() -> str:
    """The langchain-core version, or "" when it is not installed."""
    try:
        from importlib.metadata import version

        import langchain_core.messages  # noqa: F401

        return version("langchain-core")
    except ImportError:
        return ""


def _langchain(t: Transcript, budget: int, counter: TokenCounter) -> tuple[list[str], list[float]]:
    from langchain_core import messages as lc

    kinds: dict[str, Callable[[str], Any]] = {
        "system": lambda c: lc.SystemMessage(content=c),
        "human": lambda c: lc.HumanMessage(content=c),
        "ai": lambda c: lc.AIMessage(content=c),
    }
    roles = {"system": "system", "human": "human", "ai": "ai"}

    def count(msgs: Sequence[Any]) -> int:
        return sum(counter.count(f"### {roles.get(m.type, m.type)}\n{m.content}\n\n") for m in msgs)

    history: list[Any] = [kinds[r](c) for r, c in t.head]
    prompts: list[str] = []
    seconds: list[float] = []
    for n in range(len(t.steps)):
        start = time.perf_counter()
        if n:
            history.extend(kinds[r](c) for r, c in t.steps[n - 1])
        kept = lc.trim_messages(
            history,
            max_tokens=budget,
            token_counter=count,
            strategy="last",
            include_system=True,
            start_on="human",
            allow_partial=False,
        )
        prompts.append(render([(roles.get(m.type, m.type), str(m.content)) for m in kept]))
        seconds.append(time.perf_counter() - start)
    return prompts, seconds


def openhands_available() -> str:
    """Why the OpenHands condensers cannot run, or "" when they can."""
    if not PEERS_PYTHON.exists():
        return "not installed (make bench-peers: Python ≥ 3.12 venv with openhands-ai 0.x)"
    return ""


def _openhands(
    t: Transcript, budget: int, counter: TokenCounter
) -> dict[str, tuple[list[str], list[float]]] | str:
    """Run the condensers in the benchmark-only environment; per condenser, the prompts."""
    flat: list[Message] = []
    payload: dict[str, Any] = {"budget": budget, "messages": [], "head": [], "steps": []}

    def add(msg: Message, kind: str) -> int:
        flat.append(msg)
        payload["messages"].append([kind, counter.count(render([msg]))])
        return len(flat) - 1

    payload["head"] = [add(m, k) for m, k in zip(t.head, t.kinds[0], strict=True)]
    payload["steps"] = [
        [add(m, k) for m, k in zip(msgs, kinds, strict=True)]
        for msgs, kinds in zip(t.steps, t.kinds[1:], strict=True)
    ]
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(payload, f)
        path = f.name
    try:
        out = subprocess.run(
            [str(PEERS_PYTHON), str(OPENHANDS_CHILD), path],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    finally:
        os.unlink(path)
    if out.returncode != 0:
        tail = out.stderr.strip().splitlines()[-1:] or [f"exit {out.returncode}"]
        return f"failed: {tail[0][:200]}"
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    masked: Message = ("human", "<MASKED>")
    prompts: dict[str, tuple[list[str], list[float]]] = {}
    for name, turns in result["condensers"].items():
        texts = [render([flat[i] if i >= 0 else masked for i in turn["kept"]]) for turn in turns]
        prompts[name] = (texts, [turn["seconds"] for turn in turns])
    prompts["_version"] = ([str(result.get("version", ""))], [])
    return prompts


def _ctxledger(t: Transcript, budget: int, strategy: str, counter: TokenCounter) -> dict[str, Any]:
    stamps: list[float] = []

    def hook(n: int, result: object, tokens: int) -> None:
        stamps.append(time.perf_counter())

    with tempfile.TemporaryDirectory(prefix="ctxledger-bench-peers-") as tmp:
        start = time.perf_counter()
        report = simulate_trajectory(
            t.trajectory,
            budget=budget,
            strategy=strategy,
            store_url=f"sqlite:///{Path(tmp) / 'ledger.db'}",
            counter=counter,
            on_prompt=hook,
        )
        took = time.perf_counter() - start
    gaps = [b - a for a, b in itertools.pairwise(stamps)]
    return {
        "prompts": report.prompts,
        "tokens_mean": report.prompt_tokens.mean,
        "tokens_max": report.prompt_tokens.max,
        "over_budget": report.over_budget_prompts + report.overflow_prompts,
        "prefix_reuse": report.prefix_reuse,
        "prefix_vs_limit": (
            round(report.prefix_reuse / report.prefix_reuse_limit, 3)
            if report.prefix_reuse_limit
            else None
        ),
        "objective": report.objective_present,
        "latest_observation": report.latest_observation_present,
        "recent_failures": report.recent_failures_present,
        "ms_per_turn": round(statistics.fmean(gaps) * 1e3, 3) if gaps else round(took * 1e3, 3),
        "generations": report.generations,
        "next_action_recall": report.next_action_recall.pooled,
        "instructions_whole": report.instructions_whole,
        "order_inversions": report.order_inversions,
        "observation_before_action": report.observation_before_action,
        "stale_failures_share": report.stale_failures_share,
    }


def run_peers(
    trajectories: Sequence[Path],
    *,
    long_steps: int,
    budget: int,
    counter: TokenCounter,
    openhands: bool = True,
) -> dict[str, Any]:
    """Every peer and every ctxledger strategy on every trajectory, at one budget."""
    transcripts = [transcript_of(load_trajectory(p), p.name) for p in trajectories]
    if long_steps:
        transcripts.append(
            transcript_of(long_session(long_steps), f"generated long session ({long_steps} steps)")
        )
    lc_version = langchain_available()
    oh_missing = openhands_available() if openhands else "not run (disabled in this run)"
    notes: dict[str, str] = {
        "langchain": f"langchain-core {lc_version}" if lc_version else "not installed",
        "openhands": oh_missing,
    }
    tables: list[dict[str, Any]] = []
    for t in transcripts:
        rows: dict[str, Any] = {}
        limit_prompts, limit_s = _append_only(t)
        limit = _score(t, limit_prompts, limit_s, counter, budget)
        limit["prefix_vs_limit"] = 1.0
        rows["append-only transcript"] = limit

        def peer(
            name: str,
            prompts: list[str],
            seconds: list[float],
            *,
            t: Transcript = t,
            rows: dict[str, Any] = rows,
            reuse: float = limit["prefix_reuse"],
        ) -> None:
            r = _score(t, prompts, seconds, counter, budget)
            r["prefix_vs_limit"] = round(r["prefix_reuse"] / reuse, 3) if reuse else None
            rows[name] = r

        if lc_version:
            peer("langchain trim_messages(last)", *_langchain(t, budget, counter))
        else:
            rows["langchain trim_messages(last)"] = {"missing": "not installed"}
        if oh_missing:
            rows["openhands condensers"] = {"missing": oh_missing}
        else:
            got = _openhands(t, budget, counter)
            if isinstance(got, str):
                rows["openhands condensers"] = {"missing": got}
            else:
                notes["openhands"] = f"openhands-ai {got.pop('_version')[0][0]}"
                for name, (prompts, seconds) in got.items():
                    peer(f"openhands {name}", prompts, seconds)
        for strategy in strategy_names():
            rows[f"ctxledger {strategy}"] = _ctxledger(t, budget, strategy, counter)
        tables.append({"trajectory": t.name, "steps": len(t.steps), "rows": rows})
    return {"budget": budget, "notes": notes, "trajectories": tables}
