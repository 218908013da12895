"""How an imported trajectory becomes context items (layers, sources, provenance, groups).

| trajectory part | layer | source | flags / provenance |
|---|---|---|---|
| task statement | L1 | user_requirement | pinned, mandatory, durable: the objective |
| system prompt, demonstrations, instance instructions | L1 | role_instruction | durable |
| thought + action of a step | L0 | conversation | ephemeral, ``tool_signature`` |
| observation: test run | L0 | test_result | ``failure`` when the tests failed |
| observation: file view | L0 | repository_source | session durability |
| observation: anything else | L0 | tool_log | ephemeral; ``failure`` on tracebacks, tool errors, non-zero exits |
| later user message | L1 | user_requirement | durable (not pinned) |

A step's action and observation share ``group`` (``step-NNNN``), so packing includes, drops
or compresses them together; both carry the step's files, symbols and ``tool_signature``
(the normalised command). Thoughts and actions are L0, not L4: they are the agent's live
working state (partial hypotheses, the commands whose output follows), needed while the step
is recent and dropped with its observation at a refresh — not an archive kept only for
observability.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

import msgspec

from ctxledger.adapters.importers.model import Step, Trajectory
from ctxledger.domain.model import Durability, Item, Layer, Source, content_hash

__all__ = [
    "NO_OUTPUT",
    "ItemFactory",
    "StepItems",
    "factory",
    "objective_item",
    "observation_source",
    "role_items",
    "step_group",
    "step_items",
]

NO_OUTPUT = "(no output)"
"""The content of the observation item of a command that printed nothing."""


class ItemFactory(Protocol):
    """Makes an item with its token count (e.g. ``functools.partial(engine.make_item, agent)``)."""

    def __call__(
        self, content: str, *, layer: Layer, source: Source, item_id: str, **provenance: Any
    ) -> Item: ...


class StepItems(msgspec.Struct, frozen=True, kw_only=True):
    """The items of one step (``None`` where the step has no such part)."""

    action: Item | None = None
    observation: Item | None = None
    user: Item | None = None

    @property
    def all(self) -> tuple[Item, ...]:
        return tuple(i for i in (self.action, self.observation, self.user) if i is not None)


def _id(kind: str, content: str) -> str:
    return f"{kind}.{content_hash(content)[:16]}"


def step_group(step: Step) -> str:
    """The ``group`` shared by a step's action and observation."""
    return f"step-{step.index:04d}"


def observation_source(step: Step) -> Source:
    """test_result for test runs, repository_source for file views, else tool_log."""
    if step.test_run:
        return Source.TEST_RESULT
    if step.file_view:
        return Source.REPOSITORY_SOURCE
    return Source.TOOL_LOG


def role_items(traj: Trajectory, make: ItemFactory, *, at: datetime) -> list[Item]:
    """The scaffold's instructions as role_instruction items (L1, durable)."""
    return [
        make(
            text,
            layer=Layer.L1,
            source=Source.ROLE_INSTRUCTION,
            item_id=_id(f"role.{n}", text),
            durability=Durability.DURABLE,
            task=traj.instance_id,
            observed_at=at,
        )
        for n, text in enumerate(traj.role_texts)
        if text.strip()
    ]


def objective_item(traj: Trajectory, make: ItemFactory, *, at: datetime) -> Item:
    """The task statement: the pinned, mandatory objective (L1 user_requirement)."""
    return make(
        traj.task,
        layer=Layer.L1,
        source=Source.USER_REQUIREMENT,
        item_id=_id("task", traj.task),
        pinned=True,
        mandatory=True,
        durability=Durability.DURABLE,
        task=traj.instance_id,
        observed_at=at,
    )


def step_items(
    traj: Trajectory,
    step: Step,
    make: ItemFactory,
    *,
    at: datetime,
    pin: bool = False,
) -> StepItems:
    """The items of one step (see the module table). An empty observation of a command is
    recorded as ``(no output)``; a step with neither command nor output (e.g. a final chat
    message) has no observation item. ``pin`` pins the action and the observation (the caller
    unpins them once the turn that must react to them has been built)."""
    common: dict[str, Any] = {
        "task": traj.instance_id,
        "stage": f"step-{step.index}",
        "observed_at": at,
        "files": step.files,
        "symbols": step.symbols,
        "tool_signature": step.command,
    }
    group = step_group(step)
    prefix = f"s{step.index:04d}"
    action = None
    if step.action.strip():
        action = make(
            step.action,
            layer=Layer.L0,
            source=Source.CONVERSATION,
            item_id=_id(f"{prefix}.action", step.action),
            durability=Durability.EPHEMERAL,
            group=group,
            pinned=pin,
            **common,
        )
    observation = None
    text = step.observation if step.observation.strip() else (NO_OUTPUT if step.command else "")
    if text:
        source = observation_source(step)
        observation = make(
            text,
            layer=Layer.L0,
            source=source,
            item_id=_id(f"{prefix}.observation", text),
            durability=Durability.EPHEMERAL if source is Source.TOOL_LOG else Durability.SESSION,
            failure=step.failure,
            group=group,
            pinned=pin,
            source_id=f"{traj.instance_id}:{group}",
            **common,
        )
    user = None
    if step.user_input.strip():
        user = make(
            step.user_input,
            layer=Layer.L1,
            source=Source.USER_REQUIREMENT,
            item_id=_id(f"{prefix}.user", step.user_input),
            durability=Durability.DURABLE,
            task=traj.instance_id,
            observed_at=at,
        )
    return StepItems(action=action, observation=observation, user=user)


def factory(make_item: Callable[..., Item], agent_id: str) -> ItemFactory:
    """An :class:`ItemFactory` over ``ContextEngine.make_item`` for one agent."""

    def make(content: str, *, layer: Layer, source: Source, item_id: str, **prov: Any) -> Item:
        return make_item(agent_id, content, layer=layer, source=source, item_id=item_id, **prov)

    return make
