"""Replay a recorded agent run turn by turn through one ContextEngine and measure the prompts.

For every model call of the trajectory the simulator builds the agent's next pack, composes
and renders it, and — when a window is given and the prompt is larger — fails the turn with
an Anthropic-shaped context-limit error so that the engine refreshes and the turn is retried.
Then it records what the call produced (the step's action and observation). Every event goes
to the store. The clock follows the trajectory's timestamps (or a fixed start plus one minute
per step), so two runs of the same file write the same events. Metric definitions:
docs/trajectories.md.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from ctxledger.adapters.bootstrap import open_engine
from ctxledger.adapters.engine import BuildResult, ContextEngine, EngineSettings
from ctxledger.adapters.importers import Trajectory, load_trajectory
from ctxledger.adapters.importers.items import (
    StepItems,
    factory,
    objective_item,
    role_items,
    step_items,
)
from ctxledger.adapters.simulation.prompt_quality import NextActionRecall
from ctxledger.adapters.simulation.turns import (
    Provider,
    TurnMeasures,
    accepted_build,
    context_limit_error,
    rendered_bytes,
)
from ctxledger.domain.errors import BudgetError, CtxLedgerError, InvalidInputError
from ctxledger.domain.model import AgentIdentity, Generation, Item
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.settings import AgentSettings
from ctxledger.domain.strategies import get_strategy, strategy_names

__all__ = [
    "FIXED_START",
    "PromptHook",
    "PromptTokens",
    "RecordedTotals",
    "SimulationReport",
    "StepClock",
    "compare",
    "context_limit_error",
    "simulate",
    "simulate_trajectory",
]

FIXED_START = datetime(2025, 1, 1, tzinfo=UTC)
"""Start of the simulated clock when the trajectory has no timestamps."""
_STEP = timedelta(minutes=1)
_SIM_ROLE = "worker"

ProgressFn = Callable[[int, int], None]
PromptHook = Callable[[int, BuildResult, int], None]
"""Called with (step index, the accepted build, its prompt tokens) for every accepted prompt."""


class StepClock:
    """A settable, timezone-aware clock (the simulator moves it step by step)."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise InvalidInputError("the simulated clock needs a timezone-aware start")
        self._now = start

    def now(self) -> datetime:
        return self._now

    def set(self, at: datetime) -> None:
        self._now = at


class KeptFraction(msgspec.Struct, frozen=True, kw_only=True):
    """Kept tokens ÷ original tokens of the latest observation, over prompts (0 when dropped)."""

    mean: float
    min: float


class PromptTokens(msgspec.Struct, frozen=True, kw_only=True):
    """Token counts of the accepted prompts: maximum, mean, 95th percentile (nearest rank)."""

    max: int
    mean: float
    p95: int


class RecordedTotals(msgspec.Struct, frozen=True, kw_only=True):
    """The original run's own provider usage, summed over the calls that recorded it."""

    calls: int
    prompt_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    hit_rate: float


class SimulationReport(msgspec.Struct, frozen=True, kw_only=True):
    """What one simulated run measured (definitions in docs/trajectories.md)."""

    trajectory: str
    format: str
    steps: int
    prompts: int
    rejected_prompts: int
    strategy: str
    budget: int
    window: int | None
    watermark: float
    tokenizer: str
    generations: int
    refreshes: int
    rebuilds: int
    prompt_tokens: PromptTokens
    over_budget_prompts: int
    overflow_prompts: int
    pinned_dropped: int
    objective_present: float
    latest_observation_present: float | None
    latest_observation_kept_fraction: KeptFraction | None
    recent_failures_present: float | None
    eviction_regret: float | None
    next_action_recall: NextActionRecall
    instructions_whole: float | None
    order_inversions: int
    observation_before_action: int
    stale_failures_share: float
    prefix_reuse: float
    prefix_reuse_limit: float
    prefix_reuse_within_generation: float
    static_prefix_changes: int
    expected_cached_tokens: int
    events: int
    store: str
    agent: str
    provider: str
    recorded_usage: RecordedTotals | None = None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready builtins."""
        out: dict[str, Any] = msgspec.to_builtins(self)
        return out


def _provider_for(traj: Trajectory) -> Provider:
    model = traj.model.lower()
    if "claude" in model or any(s.usage and s.usage.provider == "anthropic" for s in traj.steps):
        return "anthropic"
    return "openai"


def _step_times(traj: Trajectory) -> list[datetime]:
    """One time per step: the recorded time when it moves forward, else one minute on."""
    times: list[datetime] = []
    current = traj.started_at or next((s.at for s in traj.steps if s.at), None) or FIXED_START
    for n, step in enumerate(traj.steps):
        if step.at is not None and (not times or step.at > times[-1]):
            current = step.at
        elif n:
            current = times[-1] + _STEP
        times.append(current)
    return times


def _p95(values: Sequence[int]) -> int:
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)] if ordered else 0


def _recorded(traj: Trajectory) -> RecordedTotals | None:
    usages = [s.usage for s in traj.steps if s.usage is not None]
    if not usages:
        return None
    prompt = sum(u.prompt_tokens for u in usages)
    read = sum(u.cache_read_tokens for u in usages)
    return RecordedTotals(
        calls=len(usages),
        prompt_tokens=prompt,
        cache_read_tokens=read,
        cache_write_tokens=sum(u.cache_write_tokens for u in usages),
        hit_rate=round(read / prompt, 4) if prompt else 0.0,
    )


def _temp_store() -> str:
    directory = Path(tempfile.mkdtemp(prefix="ctxledger-simulate-"))
    return f"sqlite:///{directory / 'ledger.db'}"


def _agent_id(engine: ContextEngine, traj: Trajectory, strategy: str) -> str:
    base = f"{strategy}:{traj.instance_id[:120] or 'trajectory'}"
    known = engine.runner.models.generations.by_agent
    if base not in known:
        return base
    n = 2
    while f"{base}#{n}" in known:
        n += 1
    return f"{base}#{n}"


def _agent_settings(
    strategy: str, budget: int, window: int | None, watermark: float | None
) -> AgentSettings:
    """The simulated agent's settings, the arguments checked first."""
    if budget <= 0:
        raise BudgetError(f"--budget must be a positive number of tokens, got {budget}")
    if window is not None and window <= 0:
        raise BudgetError(f"--window must be a positive number of tokens, got {window}")
    get_strategy(strategy)
    settings = AgentSettings(strategy=strategy, budget=budget)
    if watermark is not None:
        if not 0 < watermark <= 0.9:
            raise BudgetError(f"--watermark must be in (0, 0.9], got {watermark}")
        settings = msgspec.structs.replace(settings, watermark=watermark)
    return settings


def _start_agent(
    engine: ContextEngine, traj: Trajectory, settings: AgentSettings, clock: StepClock
) -> tuple[str, TurnMeasures]:
    """Register the simulated agent and record its role and objective items: its id, and the
    measures of the run about to start."""
    agent = _agent_id(engine, traj, settings.strategy)
    engine.register_agent(
        AgentIdentity(
            agent_id=agent,
            role=_SIM_ROLE,
            task=traj.instance_id,
            model=traj.model,
            budget=settings.budget,
            session_id="simulate",
        ),
        settings,
    )
    make = factory(engine.make_item, agent)
    objective = objective_item(traj, make, at=clock.now())
    # record_many returns the items as recorded (a secret in them redacted, the id with it)
    *_, objective = engine.record_many(agent, [*role_items(traj, make, at=clock.now()), objective])
    start = rendered_bytes(engine.pool(agent).items.values())
    return agent, TurnMeasures(traj, settings.budget, objective, start)


class _Run(msgspec.Struct, frozen=True, kw_only=True):
    """What one simulated run is, beside its measures."""

    traj: Trajectory
    settings: AgentSettings
    window: int | None
    tokenizer: str
    generations: tuple[Generation, ...]
    events: int
    store: str
    agent: str
    provider: Provider


def _report(run: _Run, m: TurnMeasures) -> SimulationReport:
    """The final report of a run from its measures."""
    tally, gens, kept = m.tally, run.generations, m.kept
    prompts = len(tally.tokens)
    # The append-only transcript: prompt i holds every item recorded before call i, in order,
    # so each prompt extends the previous one and lcp(T[i-1], T[i]) = len(T[i-1]).
    limit_total = sum(m.transcript[1:prompts])
    limit_shared = sum(m.transcript[: prompts - 1])
    return SimulationReport(
        trajectory=run.traj.path,
        format=run.traj.format,
        steps=len(run.traj.steps),
        prompts=prompts,
        rejected_prompts=m.rejected,
        strategy=run.settings.strategy,
        budget=run.settings.budget,
        window=run.window,
        watermark=run.settings.watermark,
        tokenizer=run.tokenizer,
        generations=len(gens),
        refreshes=sum(g.kind == "refresh" for g in gens),
        rebuilds=sum(g.kind == "rebuild" for g in gens),
        prompt_tokens=PromptTokens(
            max=max(tally.tokens, default=0),
            mean=round(sum(tally.tokens) / prompts, 1) if prompts else 0.0,
            p95=_p95(tally.tokens),
        ),
        over_budget_prompts=m.over_budget,
        overflow_prompts=m.overflow,
        pinned_dropped=m.pinned_dropped,
        objective_present=round(m.objective_hits / prompts, 4) if prompts else 0.0,
        latest_observation_present=(
            round(m.latest_hits / m.latest_total, 4) if m.latest_total else None
        ),
        latest_observation_kept_fraction=(
            KeptFraction(mean=round(sum(kept) / len(kept), 4), min=round(min(kept), 4))
            if kept
            else None
        ),
        eviction_regret=m.regret.value(),
        recent_failures_present=(
            round(m.failure_hits / m.failure_total, 4) if m.failure_total else None
        ),
        **m.quality.fields(),
        prefix_reuse=round(tally.shared / tally.total, 4) if tally.total else 0.0,
        prefix_reuse_limit=round(limit_shared / limit_total, 4) if limit_total else 0.0,
        prefix_reuse_within_generation=(
            round(tally.shared_within / tally.total_within, 4) if tally.total_within else 0.0
        ),
        static_prefix_changes=tally.static_changes,
        expected_cached_tokens=tally.expected_cached,
        events=run.events,
        store=run.store,
        agent=run.agent,
        provider=run.provider,
        recorded_usage=_recorded(run.traj),
    )


def simulate_trajectory(
    traj: Trajectory,
    *,
    budget: int,
    window: int | None = None,
    strategy: str = "variable",
    store_url: str | None = None,
    counter: TokenCounter | None = None,
    progress: ProgressFn | None = None,
    on_prompt: PromptHook | None = None,
    encrypt: bool | None = None,
    watermark: float | None = None,
    allow_foreign: bool = False,
) -> SimulationReport:
    """Drive one engine through an imported trajectory (see the module docstring).
    *encrypt*: content encryption of a new store, as ``open_ledger`` says; *watermark*: the
    agent's rebuild target (a fraction of the budget; None: the default); *allow_foreign*:
    write into another application's SQLite database (refused by default)."""
    settings = _agent_settings(strategy, budget, window, watermark)
    url = store_url or _temp_store()
    times = _step_times(traj)
    clock = StepClock(times[0] if times else FIXED_START)
    provider = _provider_for(traj)
    kwargs: dict[str, Any] = {"clock": clock, "settings": EngineSettings(session_id="simulate")}
    if counter is not None:
        kwargs["counter"] = counter
    with open_engine(url, encrypt=encrypt, allow_foreign=allow_foreign, **kwargs) as engine:
        start_position = engine.ledger.max_position()
        agent, measures = _start_agent(engine, traj, settings, clock)
        make = factory(engine.make_item, agent)
        for n, step in enumerate(traj.steps):
            clock.set(times[n])
            result, tokens = accepted_build(
                engine, agent, traj, n, provider=provider, window=window, measures=measures
            )
            engine.turn_succeeded(agent)
            if on_prompt is not None:
                on_prompt(n, result, tokens)
            measures.accepted_prompt(n, result, tokens, engine.pool(agent))
            items = _as_recorded(
                step_items(traj, step, make, at=times[n]), engine.record_many, agent
            )
            measures.step_recorded(n, items)
            if progress is not None:
                progress(n + 1, len(traj.steps))
        gens = engine.agent(agent).generations
        events = engine.ledger.max_position() - start_position
    run = _Run(
        traj=traj,
        settings=settings,
        window=window,
        tokenizer=engine.counter.name,
        generations=gens,
        events=events,
        store=url,
        agent=agent,
        provider=provider,
    )
    return _report(run, measures)


@contextlib.contextmanager
def _progress_bar(enabled: bool, label: str) -> Iterator[ProgressFn | None]:
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    with Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    ) as bar:
        task = bar.add_task(label, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


def _as_recorded(
    items: StepItems, record: Callable[[str, Sequence[Item]], list[Item]], agent: str
) -> StepItems:
    """Record the step's items; the same items as the ledger holds them (redacted by the
    agent's secrets policy where they held a credential)."""
    stored = iter(record(agent, items.all))
    return StepItems(
        action=next(stored) if items.action is not None else None,
        observation=next(stored) if items.observation is not None else None,
        user=next(stored) if items.user is not None else None,
    )


def simulate(
    path: str | Path,
    *,
    format: str = "auto",
    budget: int = 8000,
    window: int | None = None,
    strategy: str = "variable",
    store_url: str | None = None,
    progress: bool = False,
    counter: TokenCounter | None = None,
    encrypt: bool | None = None,
    watermark: float | None = None,
    allow_foreign: bool = False,
) -> SimulationReport:
    """Import *path* and simulate it with one strategy (a progress bar on stderr if asked)."""
    traj = load_trajectory(path, format)
    get_strategy(strategy)
    with _progress_bar(progress, f"simulate {strategy}") as update:
        return simulate_trajectory(
            traj,
            budget=budget,
            window=window,
            strategy=strategy,
            store_url=store_url,
            counter=counter,
            progress=update,
            encrypt=encrypt,
            watermark=watermark,
            allow_foreign=allow_foreign,
        )


def compare(
    path: str | Path,
    budget: int,
    window: int | None,
    strategies: Sequence[str],
    *,
    format: str = "auto",
    store_url: str | None = None,
    progress: bool = False,
    counter: TokenCounter | None = None,
    on_failure: Callable[[str, CtxLedgerError], None] | None = None,
    watermark: float | None = None,
) -> list[SimulationReport]:
    """The same trajectory through several strategies (one agent each, one shared store).

    With ``on_failure``, a strategy whose run ends in a typed error (e.g. the refresh ladder
    exhausted) is reported to it and the others still run; without it the error propagates."""
    names = [s.strip() for s in strategies if s.strip()]
    if not names:
        raise InvalidInputError(f"no strategies given; choose from {', '.join(strategy_names())}")
    for name in names:
        get_strategy(name)
    traj = load_trajectory(path, format)
    url = store_url or _temp_store()
    reports = []
    for name in names:
        with _progress_bar(progress, f"compare {name}") as update:
            try:
                report = simulate_trajectory(
                    traj,
                    budget=budget,
                    window=window,
                    strategy=name,
                    store_url=url,
                    counter=counter,
                    progress=update,
                    watermark=watermark,
                )
            except CtxLedgerError as exc:
                if on_failure is None:
                    raise
                on_failure(name, exc)
                continue
            reports.append(report)
    return reports
