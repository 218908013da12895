"""Baselines as strategies: the rules of the context policies agent frameworks ship, so a user
can hold any strategy against them on their own recorded runs (``ctxledger compare``).

- ``trim_last`` — LangChain's ``trim_messages(strategy="last", include_system=True,
  allow_partial=False)``: the forced content (role instructions, the pinned objective), then
  the newest steps while they fit, stopping at the first that does not.
- ``keep_first_last`` — keep the first :data:`FIRST_STEPS` steps and the newest ones that fit
  (the "keep first N, then the latest" rule of OpenHands' RecentEventsCondenser).
- ``window`` — OpenHands' ConversationWindowCondenser: when the history no longer fits, keep
  the system message and the task, and of the rest the newer half (at least one step); a
  step's observation never stays without its action. The engine applies it where OpenHands
  does, at the overflow: the window strategy's generation appends until the budget is
  reached, and its rebuild keeps the newer half of what the closing generation showed.

A step is a unit: its action and observation (one ``group``) go in or out together; the
engine's invariants hold for them as for every strategy (scope exclusions, no steering note of
another stage, no raw history, forced content whole). None of
them compresses, clips, recalls memory, extracts a working set or runs the latest-step
policy — they are the peers, not the engine. ``stateless`` (``trim_last``,
``keep_first_last``) means every build re-selects from the whole pool at the full budget: the
engine appends while the selection extends the previous prompt and opens a new generation
when it does not — exactly how those policies' prompts change.
"""

from __future__ import annotations

from collections.abc import Sequence

from ctxledger.domain.model import Layer
from ctxledger.domain.packing import (
    EXCLUDED_BY_SCOPE,
    OVER_BUDGET,
    RAW_HISTORY,
    Accumulator,
    Candidate,
    PackResult,
    Unit,
    drop_other_stage,
    effective_budget,
    make_units,
    prepare,
    scope_excluder,
)
from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.request import BuildRequest
from ctxledger.domain.retrieval import ScoredItem

__all__ = [
    "FIRST_STEPS",
    "KeepFirstLastStrategy",
    "TrimLastStrategy",
    "WindowStrategy",
    "newer_half",
]

FIRST_STEPS = 2
"""How many of the oldest steps ``keep_first_last`` keeps."""


def _pack(
    request: BuildRequest,
    candidates: Sequence[ScoredItem],
    counter: TokenCounter,
    *,
    name: str,
    first: int,
) -> PackResult:
    """Forced units, then the *first* oldest steps, then the newest steps while they fit."""
    limit = effective_budget(request)
    acc = Accumulator(counter, name)
    units = make_units(drop_other_stage(prepare(candidates, counter), request.stage_id, acc))
    excluded = scope_excluder(request.scope)
    steps: list[Unit] = []
    for u in units:
        members = (u,) if type(u) is Candidate else u.members
        if u.forced:
            acc.include_unit(u, u.chrono_key())
        elif excluded is not None and any(excluded(m.item) for m in members):
            acc.drop_unit(u, EXCLUDED_BY_SCOPE)
        elif any(m.item.layer is Layer.L4 for m in members):
            acc.drop_unit(u, RAW_HISTORY)  # raw history is for observability only (seed 000)
        else:
            steps.append(u)
    steps.sort(key=lambda u: u.chrono_key())
    head = steps[:first]
    taken: set[int] = set()
    for u in head:
        if acc.used + u.tokens <= limit:
            acc.include_unit(u, u.chrono_key())
            taken.add(id(u))
    stopped = False
    for u in reversed(steps[len(head) :]):
        if not stopped and acc.used + u.tokens <= limit:
            acc.include_unit(u, u.chrono_key())
            taken.add(id(u))
        else:
            stopped = True
    for u in steps:
        if id(u) not in taken:
            acc.drop_unit(u, OVER_BUDGET)
    return acc.result(limit)


class _Baseline:
    """A peer's rule: the forced content, the first :attr:`first` steps, then the newest
    steps while they fit (:func:`_pack`)."""

    label = ""
    first = 0
    stateless = False
    rolling = False

    @property
    def name(self) -> str:
        return self.label

    def select(
        self, request: BuildRequest, candidates: Sequence[ScoredItem], counter: TokenCounter
    ) -> PackResult:
        return _pack(request, candidates, counter, name=self.label, first=self.first)


class TrimLastStrategy(_Baseline):
    """LangChain ``trim_messages(strategy="last")``'s rule (module docstring)."""

    label = "trim_last"
    stateless = True


class KeepFirstLastStrategy(_Baseline):
    """The first :data:`FIRST_STEPS` steps and the newest that fit (module docstring)."""

    label = "keep_first_last"
    first = FIRST_STEPS
    stateless = True


class WindowStrategy(_Baseline):
    """OpenHands' ConversationWindowCondenser's rule (module docstring): selects like
    ``trim_last`` among the candidates the engine's rolling window leaves it."""

    label = "window"
    rolling = True


def newer_half(steps: Sequence[str]) -> tuple[str, ...]:
    """ConversationWindowCondenser's cut of the shown *steps* (oldest first): the newer half,
    at least one."""
    keep = max(1, len(steps) // 2)
    return tuple(steps[len(steps) - keep :])
