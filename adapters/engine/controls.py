"""Manual controls on one item: pin, unpin, remove, verify a finding.

Every guard runs inside the decision (``domain.controls_policy``), under the agent's stream
lock and after catching up (``decide_and_append``): a check made on state read before the lock
could be undone by a writer that pinned, removed or replaced the item in between.
"""

from __future__ import annotations

from ctxledger.adapters.engine.boundary import checked
from ctxledger.adapters.engine.core import EngineCore, serialized
from ctxledger.domain.controls_policy import decide_pin, decide_remove, decide_unpin, decide_verify

__all__ = ["Controls"]


class Controls(EngineCore):
    """Pin, unpin, remove and verify items of an agent's pool."""

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
