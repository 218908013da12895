"""Manual controls on one item: pin, unpin, remove, verify a finding; and the ledger-wide recall
switch.

Every guard runs inside the decision (``domain.controls_policy``), under the agent's stream
lock and after catching up (``decide_and_append``): a check made on state read before the lock
could be undone by a writer that pinned, removed or replaced the item in between.
"""

from __future__ import annotations

from ctxledger.adapters.engine.boundary import checked
from ctxledger.adapters.engine.core import RECALL_STREAM, EngineCore, serialized
from ctxledger.domain import events as ev
from ctxledger.domain.controls_policy import (
    decide_pin,
    decide_recall_switch,
    decide_remove,
    decide_unpin,
    decide_verify,
)

__all__ = ["Controls"]


class Controls(EngineCore):
    """Pin, unpin, remove and verify items of an agent's pool; switch recall."""

    @checked
    @serialized
    def pin(self, agent_id: str, item_id: str, *, by: str = "") -> None:
        self._append_agent(
            agent_id,
            lambda: decide_pin(
                agent_id, item_id, self._pool_item(agent_id, item_id), now=self._now, by=by
            ),
        )

    @checked
    @serialized
    def unpin(self, agent_id: str, item_id: str, *, by: str = "") -> None:
        self._append_agent(
            agent_id,
            lambda: decide_unpin(
                agent_id, item_id, self._pool_item(agent_id, item_id), now=self._now, by=by
            ),
        )

    @checked
    @serialized
    def remove(self, agent_id: str, item_id: str, *, reason: str = "manual") -> None:
        self._append_agent(
            agent_id,
            lambda: decide_remove(
                agent_id, item_id, self._pool_item(agent_id, item_id), now=self._now, reason=reason
            ),
        )

    @checked
    @serialized
    def verify_finding(
        self, agent_id: str, item_id: str, *, by: str = "", evidence: str = ""
    ) -> None:
        """Explicitly verify exactly one finding identity."""
        self._append_agent(
            agent_id,
            lambda: decide_verify(
                agent_id,
                item_id,
                self._pool_item(agent_id, item_id),
                now=self._now,
                by=by,
                evidence=evidence,
            ),
        )

    @checked
    @serialized
    def set_recall(self, enabled: bool, *, by: str = "") -> bool:
        """Turn project-memory recall on or off for the whole ledger: a ``RecallSwitched``
        event (none when it already is so), which every process opening the ledger folds
        (``recall_enabled``). Returns *enabled*."""

        def decide(_version: int) -> list[ev.Event]:
            recorded = self.runner.inspector.recall_enabled
            if recorded is None:  # before any switch: the engine's default, if it has one
                recorded = self.memory.settings.enabled if self.memory is not None else None
            current = (not enabled) if recorded is None else recorded
            return decide_recall_switch(enabled, current, now=self._now, by=by)

        self.decide_and_append(RECALL_STREAM, decide)
        return enabled
