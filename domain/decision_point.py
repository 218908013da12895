"""DecisionPointBuilder: which entries of a pack are sent for inference (core-context)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from ctxledger.domain.model import ContextPack, Item, Layer

__all__ = ["DECISION_LAYERS", "DecisionPointBuilder", "DefaultDecisionPointBuilder"]

DECISION_LAYERS = (Layer.L0, Layer.L1)


class DecisionPointBuilder(Protocol):
    """Selects the entries of a pack to send to the model."""

    def build(self, pack: ContextPack) -> tuple[Item, ...]: ...


class DefaultDecisionPointBuilder:
    """Only L0 (live execution) and L1 (stage-local) entries, L0 first, in pack order."""

    def build(self, pack: ContextPack) -> tuple[Item, ...]:
        return tuple(i for layer in DECISION_LAYERS for i in pack.layers.get(layer, ()))

    def select(self, items: Iterable[Item]) -> tuple[Item, ...]:
        """The same view over a plain item sequence (e.g. ``PackResult.items``)."""
        listed = tuple(items)
        return tuple(i for layer in DECISION_LAYERS for i in listed if i.layer is layer)
