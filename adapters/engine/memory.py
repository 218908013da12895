"""Project memory (the catalog decides; the ledger records), reports to a parent agent, and
forgetting (crypto-shredding an agent's recorded text)."""

from __future__ import annotations

import json
from typing import Any

import msgspec

from ctxledger.adapters.engine.boundary import checked
from ctxledger.adapters.engine.core import EngineCore, serialized
from ctxledger.domain import events as ev
from ctxledger.domain.compression import compress_report
from ctxledger.domain.erasure_policy import decide_erase
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.model import Item

__all__ = ["Memory"]


class Memory(EngineCore):
    """Erase, promote / verify / retire / delete memory, report to the parent."""

    @checked
    @serialized
    def erase(self, agent_id: str, item_id: str = "", *, reason: str) -> ev.ContentErased:
        """Erase the text of one item (*item_id*) or of everything the agent recorded, by
        destroying its content keys (``adapters.content_seal``). The items leave the pool
        (``ItemRemoved``, reason ``erased: …``) and a ``ContentErased`` event records the
        erase; every event stays, and the erased text reads ``[erased: reason, at]``. The
        read models are then rebuilt from the log, so no copy of the text stays in them."""
        if not reason.strip():
            raise InvalidInputError("an erase needs a reason (--reason)")
        if self._policy(agent_id) != "allow":  # the reason stays readable: it explains the erase
            reason = self._redacted_text("", reason)
        if not self.ledger.keyring.encrypted:
            raise InvalidInputError(
                "this ledger does not encrypt content, so nothing in it can be erased without "
                "rewriting history; create ledgers with a master key (CTXLEDGER_MASTER_KEY)"
            )
        self.agent(agent_id)
        if item_id:
            self._known_item(agent_id, item_id)
        at = self._now()

        def decide() -> list[ev.Event]:
            pool = self.pool(agent_id)
            return decide_erase(
                agent_id, item_id, pool_items=tuple(pool.items), removed=pool.removed,
                at=at, reason=reason,
            )  # fmt: skip

        erased = self._append_agent(agent_id, decide)[-1]
        assert isinstance(erased, ev.ContentErased)
        self.ledger.erase_content(
            agent_id,
            [item_id] if item_id else None,
            reason=reason,
            at=at.isoformat(timespec="seconds"),
        )
        self._forget()
        return erased

    @checked
    @serialized
    def promote(self, agent_id: str, item_id: str) -> str:
        """Promote an item to a project-memory candidate (verified stays false until an
        explicit ``verify_memory``); the body goes to the catalog, the ledger gets its hash."""
        memory = self._require_memory()
        item = self._known_item(agent_id, item_id)
        event = memory.promote(self.agent(agent_id).agent, item, now=self._now())
        from ctxledger.adapters.memory.project import memory_stream

        self._append_memory(memory_stream(event.partition), event)
        return event.memory_id

    @checked
    @serialized
    def verify_memory(self, memory_id: str, *, by: str = "") -> None:
        """Explicit verification of one memory entry (the only way it becomes verified)."""
        memory = self._require_memory()
        self._append_memory(
            memory.stream_of(memory_id), memory.verify(memory_id, now=self._now(), by=by)
        )

    @checked
    @serialized
    def retire_memory(self, memory_id: str, *, reason: str = "") -> None:
        memory = self._require_memory()
        event = memory.retire(memory_id, now=self._now(), reason=reason)
        self._append_memory(memory.stream_of(memory_id), event)

    @checked
    @serialized
    def delete_memory(self, memory_id: str) -> ev.MemoryDeleted:
        """Erase a memory body under the erasure policy, and the ledger's copy of it: the
        text of the item(s) it was promoted from is erased too (``erase``) when the ledger
        encrypts content; otherwise the report names every event that still holds it. The
        event's ``erasure`` carries the report (JSON; ``ledger`` is the ledger's part)."""
        memory = self._require_memory()
        stream = memory.stream_of(memory_id)
        sources = sorted(
            {
                (r.event.agent_id, r.event.item_id)
                for r in self.ledger.read_stream(stream)
                if isinstance(r.event, ev.MemoryPromoted) and r.event.memory_id == memory_id
            }
        )
        event = memory.delete(memory_id, now=self._now())
        ledger: dict[str, Any]
        if self.ledger.keyring.encrypted:
            for agent_id, item_id in sources:
                self.erase(agent_id, item_id, reason=f"memory {memory_id} deleted")
            ledger = {"erased": [{"agent": a, "item": i} for a, i in sources]}
        else:
            ledger = {
                "copies": [{"agent": a, "item": i} for a, i in sources],
                "note": "this ledger does not encrypt content: the text stays in the "
                "ItemRecorded events of these items and cannot be erased from it; ledgers "
                "created with a master key can (ctxledger erase)",
            }
        report = {**json.loads(event.erasure or "{}"), "ledger": ledger}
        event = msgspec.structs.replace(event, erasure=json.dumps(report, sort_keys=True))
        self._append_memory(stream, event)
        return event

    @checked
    @serialized
    def report_to_parent(self, worker_id: str) -> Item:
        """Compress a worker's transcript into a parent report and record it in the parent's
        pool: the Primary sees the report, never the raw transcript."""
        worker = self.agent(worker_id).agent
        if not worker.parent:
            raise InvalidInputError(f"agent {worker_id!r} has no parent to report to")
        self.agent(worker.parent)
        report = compress_report(
            self.pool(worker_id).candidates(),
            agent=worker_id,
            task=worker.task,
            observed_at=self._now(),
        )
        report = self._sized(report)
        self._append_agent(
            worker.parent,
            lambda: [ev.ItemRecorded(at=self._now(), agent_id=worker.parent, item=report)],
        )
        return report
