"""One simulated turn: the accepted build of the agent's next prompt, and its measurement.

The builder retries a prompt larger than the window through the engine's context-limit
refresh; :class:`TurnMeasures` keeps the running sums over the accepted prompts and the
items each step recorded (metric definitions: docs/trajectories.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from ctxledger.adapters.engine import BuildResult, ContextEngine
from ctxledger.adapters.importers import Step, Trajectory
from ctxledger.adapters.importers.items import StepItems
from ctxledger.adapters.simulation.prompt_quality import QualityTally, StepFacts
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import Item
from ctxledger.domain.prefix import lcp_bytes
from ctxledger.domain.prompt import render_item
from ctxledger.projections.pool import AgentPool

__all__ = [
    "HINT_STEPS",
    "PromptTally",
    "Provider",
    "Regret",
    "TurnMeasures",
    "accepted_build",
    "build_hints",
    "context_limit_error",
    "in_prompt",
    "kept_fraction",
    "rendered_bytes",
]

HINT_STEPS = 3  # steps whose files/failures hint the next build; and "recent" failures
_HINT_FILES = 12
_FAILURE_HINT_CHARS = 300
_REGRET_STEPS = 5  # an item evicted and re-observed within this many steps is a regret

Provider = Literal["anthropic", "openai"]


def context_limit_error(prompt_tokens: int, window: int) -> dict[str, Any]:
    """The Anthropic Messages error body for a prompt larger than the window."""
    return {
        "type": "error",
        "error": {
            "type": "invalid_request_error",
            "message": f"prompt is too long: {prompt_tokens} tokens > {window} maximum",
        },
    }


class Regret:
    """Items a prompt dropped or compressed, and which of them the agent re-observed (same
    content, or the same command run again) within the next :data:`_REGRET_STEPS` steps."""

    def __init__(self) -> None:
        self.evicted: dict[str, tuple[int, str, str]] = {}  # id → (step, content, command)
        self.regretted: set[str] = set()

    def prompt(self, step: int, result: BuildResult, pool: dict[str, Item]) -> None:
        for d in result.pack.decisions:
            if d.action in ("dropped", "compressed") and d.item_id in pool:
                if d.reason in ("duplicate", "superseded", "raw_history"):
                    continue  # nothing was lost: the same content is in, or never belongs
                it = pool[d.item_id]
                self.evicted.setdefault(d.item_id, (step, it.content, it.tool_signature))

    def observed(self, step: int, items: Sequence[Item]) -> None:
        for iid, (at, content, command) in self.evicted.items():
            if iid in self.regretted or not 0 < step - at <= _REGRET_STEPS:
                continue
            if any(i.id != iid and (i.content == content or (command and i.tool_signature ==
                   command)) for i in items):  # fmt: skip
                self.regretted.add(iid)

    def value(self) -> float | None:
        return round(len(self.regretted) / len(self.evicted), 4) if self.evicted else None


def kept_fraction(item: Item, result: BuildResult) -> float:
    """Kept tokens ÷ original tokens of *item* in the prompt (0 when dropped)."""
    decision = next((d for d in result.pack.decisions if d.item_id == item.id), None)
    if decision is None or decision.action == "dropped" or not decision.tokens_before:
        return 0.0
    return min(1.0, decision.tokens_after / decision.tokens_before)


def in_prompt(item: Item, result: BuildResult, text: str, *, compressed: bool) -> bool:
    """The item is in the prompt whole or clipped (or compressed, if *compressed*)."""
    decision = next((d for d in result.pack.decisions if d.item_id == item.id), None)
    if decision is None or decision.action == "dropped":
        return False
    if decision.action == "compressed" and not compressed:
        return False
    body = decision.content if decision.action in ("clipped", "compressed") else item.content
    return bool(body) and body in text


def rendered_bytes(items: Iterable[Item]) -> int:
    """UTF-8 length of the items as rendered into a prompt, one after the other."""
    return sum(len(render_item(i).encode("utf-8")) for i in items)


class PromptTally:
    """Running sums over the accepted prompts."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.shared = 0
        self.total = 0
        self.shared_within = 0
        self.total_within = 0
        self.expected_cached = 0
        self.static_changes = 0
        self.prev: tuple[int, bytes, str] | None = None  # generation, text, prefix hash

    def add(self, result: BuildResult, tokens: int) -> None:
        data = result.prompt.text.encode("utf-8")
        self.tokens.append(tokens)
        if self.prev is not None:
            gen, prev, prefix = self.prev
            shared = lcp_bytes(prev, data)
            self.shared += shared
            self.total += len(data)
            if gen == result.generation:
                self.shared_within += shared
                self.total_within += len(data)
            self.expected_cached += round(tokens * shared / len(data)) if data else 0
            self.static_changes += prefix != result.prompt.prefix_hash
        self.prev = (result.generation, data, result.prompt.prefix_hash)


def build_hints(steps: Sequence[Step], upto: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The files and failures of the steps just before *upto* (hints for its build)."""
    recent = steps[max(0, upto - HINT_STEPS) : upto]
    files: dict[str, None] = {}
    for s in reversed(recent):
        for f in s.files:
            files.setdefault(f, None)
    failures = tuple(s.observation[:_FAILURE_HINT_CHARS] for s in recent if s.failure)
    return tuple(files)[:_HINT_FILES], failures


class TurnMeasures:
    """What the accepted prompts of one run showed, and the items its steps recorded."""

    def __init__(self, traj: Trajectory, budget: int, objective: Item, recorded_bytes: int) -> None:
        self.budget = budget
        self.objective = objective
        self.tally = PromptTally()
        self.over_budget = 0
        self.overflow = 0
        self.pinned_dropped = 0
        self.rejected = 0
        self.objective_hits = 0
        self.latest_hits = 0
        self.latest_total = 0
        self.failure_hits = 0
        self.failure_total = 0
        self.transcript = [recorded_bytes]  # bytes of the append-only transcript per call
        self.recorded: list[StepItems] = []
        self.quality = QualityTally(
            traj.role_texts,
            traj.task,
            [
                StepFacts(
                    action=s.action,
                    observation=s.observation,
                    failure=s.failure,
                    command=s.command,
                )
                for s in traj.steps
            ],
        )
        self.blocks: dict[str, tuple[int, str]] = {}  # item id → (step, part)
        self.kept: list[float] = []
        self.regret = Regret()

    def rejected_prompt(self, result: BuildResult, tokens: int) -> None:
        """A prompt the window refused."""
        self.rejected += 1
        self.over_budget += tokens > self.budget and result.pack.overflow == 0

    def accepted_prompt(self, n: int, result: BuildResult, tokens: int, pool: AgentPool) -> None:
        """Measure the prompt accepted for step *n* against the agent's pool."""
        text = result.prompt.text
        self.tally.add(result, tokens)
        self.over_budget += tokens > self.budget and result.pack.overflow == 0
        self.overflow += result.pack.overflow > 0
        self.objective_hits += self.objective.content in text
        included = {d.item_id for d in result.pack.decisions if d.action != "dropped"}
        self.pinned_dropped += sum(
            1
            for i, it in pool.items.items()
            if (it.pinned or it.mandatory) and i not in pool.removed and i not in included
        )
        recorded = self.recorded
        if recorded and recorded[-1].observation is not None:
            self.latest_total += 1
            self.latest_hits += in_prompt(recorded[-1].observation, result, text, compressed=True)
            self.kept.append(kept_fraction(recorded[-1].observation, result))
        self.regret.prompt(n, result, pool.items)
        stale = {
            items.observation.id
            for k in self.quality.stale_steps(n)
            if (items := recorded[k]).observation is not None
        }
        self.quality.prompt(
            n,
            text,
            tokens,
            blocks=[self.blocks[i] for i in result.prompt.order if i in self.blocks],
            stale_tokens=sum(
                d.tokens_after
                for d in result.pack.decisions
                if d.item_id in stale and d.action != "dropped"
            ),
        )
        for back in recorded[-HINT_STEPS:]:  # a failure since fixed is not current
            obs = back.observation
            if obs is not None and obs.failure and obs.id not in stale:
                self.failure_total += 1
                self.failure_hits += in_prompt(obs, result, text, compressed=True)

    def step_recorded(self, n: int, items: StepItems) -> None:
        """The items step *n* recorded (as the ledger holds them)."""
        self.regret.observed(n + 1, items.all)
        for part, item in (("action", items.action), ("observation", items.observation)):
            if item is not None:
                self.blocks[item.id] = (n, part)
        self.recorded.append(items)
        self.transcript.append(self.transcript[-1] + rendered_bytes(items.all))


def accepted_build(
    engine: ContextEngine,
    agent: str,
    traj: Trajectory,
    n: int,
    *,
    provider: Provider,
    window: int | None,
    measures: TurnMeasures,
) -> tuple[BuildResult, int]:
    """Build, render and count step *n*'s prompt; while it is larger than *window*, fail the
    turn with a context-limit error and take the engine's refreshed build. The accepted build
    and its prompt tokens (the turn is not yet marked as succeeded)."""
    files, failures = build_hints(traj.steps, n)
    result = engine.build(agent, files=files, failures=failures)
    engine.render(result, provider=provider, model=traj.model or "unknown")
    tokens = engine.counter.count(result.prompt.text)
    while window is not None and tokens > window:
        measures.rejected_prompt(result, tokens)
        outcome = engine.on_turn_error(agent, context_limit_error(tokens, window))
        if outcome.result is None:  # pragma: no cover - a context-limit error refreshes
            raise InvalidInputError("the engine did not refresh on a context-limit error")
        result = outcome.result
        engine.render(result, provider=provider, model=traj.model or "unknown")
        tokens = engine.counter.count(result.prompt.text)
    return result, tokens
