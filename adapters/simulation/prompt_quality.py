"""What a prompt gives the agent for its next step, measured on a recorded run.

``simulate`` and the peer benchmark (``bench/peers.py``) feed one :class:`QualityTally` the
run's steps and then, turn by turn, the prompt sent before each step; it measures (definitions
in docs/trajectories.md, "Metrics"):

- ``next_action_recall``: of the identifiers the agent's next action names that were seen in
  earlier steps (and are not in the role or objective text), the share the prompt contains;
- ``instructions_whole``: the share of prompts holding every role-instruction text whole;
- ``order_inversions`` / ``observation_before_action``: step blocks out of transcript order;
- ``stale_failures_share``: tokens of failures a later passing run of the same command had
  already superseded, over all tokens sent.

Pure: the caller supplies the texts, token counts and block positions.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec

from ctxledger.domain.identifiers import identifiers

__all__ = ["NextActionRecall", "QualityReport", "QualityTally", "StepFacts", "order_faults"]


class StepFacts(msgspec.Struct, frozen=True, kw_only=True):
    """One recorded step as the measures need it."""

    action: str
    observation: str | None = None
    failure: bool = False
    command: str = ""
    """The normalised command (the items' ``tool_signature``)."""


class NextActionRecall(msgspec.Struct, frozen=True, kw_only=True):
    """Pooled hits ÷ needed identifiers, the per-turn minimum (over turns that need one), and
    the two sums."""

    pooled: float | None
    min: float | None
    hits: int
    needed: int


class QualityReport(msgspec.Struct, frozen=True, kw_only=True):
    """The measures of one run (see the module docstring)."""

    next_action_recall: NextActionRecall
    instructions_whole: float | None
    order_inversions: int
    observation_before_action: int
    stale_failures_share: float


def order_faults(blocks: Sequence[tuple[int, str]]) -> tuple[int, int]:
    """``(adjacent pairs going backwards, steps whose observation precedes their action)`` of
    the step blocks of one prompt, each ``(step, part)`` in prompt order."""
    steps = [s for s, _ in blocks]
    backwards = sum(b < a for a, b in itertools.pairwise(steps))
    first: dict[tuple[int, str], int] = {}
    for n, key in enumerate(blocks):
        first.setdefault(key, n)
    early = sum(
        1
        for (s, part), n in first.items()
        if part == "observation" and n < first.get((s, "action"), -1)
    )
    return backwards, early


class QualityTally:
    """Running sums over the prompts of one run (one prompt per step, in step order)."""

    def __init__(self, role_texts: Iterable[str], objective: str, steps: Sequence[StepFacts]):
        self.roles = [t for t in role_texts if t.strip()]
        fixed = "\n".join([*self.roles, objective])
        self.steps = steps
        self._needed: list[list[str]] = []
        seen: set[str] = set()
        history: list[str] = []
        for step in steps:
            names = [n for n in identifiers(step.action) if n not in fixed]
            need = []
            for name in names:
                if name not in seen and any(name in text for text in history):
                    seen.add(name)
                if name in seen:
                    need.append(name)
            self._needed.append(need)
            history.append(step.action)
            if step.observation:
                history.append(step.observation)
        self.hits = self.needed = 0
        self.turn_recall: list[float] = []
        self.whole = self.prompts = 0
        self.inversions = self.early = 0
        self.stale_tokens = self.tokens = 0

    def stale_steps(self, turn: int) -> set[int]:
        """Steps before *turn* whose failure a later passing run of the same command, also
        before *turn*, superseded."""
        stale: set[int] = set()
        open_failures: dict[str, list[int]] = {}
        for n, step in enumerate(self.steps[:turn]):
            if not step.command:
                continue
            if step.failure:
                open_failures.setdefault(step.command, []).append(n)
            else:
                stale.update(open_failures.pop(step.command, ()))
        return stale

    def prompt(
        self,
        turn: int,
        text: str,
        tokens: int,
        *,
        blocks: Sequence[tuple[int, str]] = (),
        stale_tokens: int = 0,
    ) -> None:
        """Add the prompt sent before step *turn*: its text and tokens, its step blocks in
        order and the tokens of superseded failures it carries."""
        self.prompts += 1
        self.tokens += tokens
        self.stale_tokens += stale_tokens
        self.whole += all(r in text for r in self.roles)
        back, early = order_faults(blocks)
        self.inversions += back
        self.early += early
        need = self._needed[turn] if turn < len(self._needed) else []
        if need:
            hits = sum(name in text for name in need)
            self.hits += hits
            self.needed += len(need)
            self.turn_recall.append(hits / len(need))

    def report(self) -> QualityReport:
        return QualityReport(
            next_action_recall=NextActionRecall(
                pooled=round(self.hits / self.needed, 4) if self.needed else None,
                min=round(min(self.turn_recall), 4) if self.turn_recall else None,
                hits=self.hits,
                needed=self.needed,
            ),
            instructions_whole=(
                round(self.whole / self.prompts, 4) if self.roles and self.prompts else None
            ),
            order_inversions=self.inversions,
            observation_before_action=self.early,
            stale_failures_share=round(self.stale_tokens / self.tokens, 4) if self.tokens else 0.0,
        )

    def fields(self) -> dict[str, Any]:
        """The report's fields by name (to spread into another report)."""
        report = self.report()
        return {name: getattr(report, name) for name in report.__struct_fields__}
