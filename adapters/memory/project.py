"""Project memory for the engine: promotion into the guarded catalog, explicit verification,
retirement, erasure, and fresh verified recall into each prompt (bodies never enter the ledger)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import datetime

from ctxledger.adapters.memory.catalog import MemoryCatalog
from ctxledger.adapters.memory.freshness import GitWorktreeProbe
from ctxledger.domain import events as ev
from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.memory import CommandEvidence, Evidence, FileEvidence
from ctxledger.domain.model import AgentIdentity, Item, content_hash
from ctxledger.domain.ports import FreshnessProbe, TokenCounter
from ctxledger.domain.recall import RecallGroup, RecallSettings, rank_for_recall, recall
from ctxledger.domain.request import BuildRequest

__all__ = ["RECALL_POOL", "ProjectMemory", "memory_stream"]

RECALL_POOL = 64
"""How many of a partition's newest verified entries recall ranks by relevance."""


def memory_stream(partition: str) -> str:
    """The ledger stream of one workspace partition's memory events."""
    return f"memory/{partition}"


def _git_probe(agent: AgentIdentity) -> FreshnessProbe:
    return GitWorktreeProbe(agent.workspace)


@dataclasses.dataclass
class ProjectMemory:
    """The catalog plus the recall policy; the engine appends the events this returns."""

    catalog: MemoryCatalog
    settings: RecallSettings = dataclasses.field(
        default_factory=lambda: RecallSettings(enabled=True)
    )
    probe_for: Callable[[AgentIdentity], FreshnessProbe] = _git_probe

    def partition(self, agent: AgentIdentity) -> str:
        if not agent.workspace:
            raise InvalidInputError(
                f"agent {agent.agent_id!r} has no workspace; project memory needs one"
            )
        return self.catalog.partition_for(agent.workspace)

    def stream_of(self, memory_id: str) -> str:
        """The ledger stream of a memory entry's events (its partition's)."""
        return memory_stream(self.catalog.get(memory_id).partition)

    def promote(self, agent: AgentIdentity, item: Item, *, now: datetime) -> ev.MemoryPromoted:
        """Store the item as an unverified candidate (intake checks it; the id is derived from
        partition and body) and return the event for it (its stream: ``memory_stream``). The
        evidence is what the item carries: its files with their hashes now, the command that
        produced it (``tool_signature``, exit code 1 for a failure, run when it was observed:
        the 30-day staleness rule applies to it) and the worktree's HEAD commit."""
        partition = self.partition(agent)
        memory_id = "mem_" + content_hash(f"{partition}\x1f{item.content}")[:24]
        probe = self.probe_for(agent)
        files = []
        for path in item.files[:20]:
            digest = probe.file_hash(path)
            if digest is not None:
                files.append(FileEvidence(path=path, sha256=digest))
        observed = item.observed_at or now
        commands = (
            (
                CommandEvidence(
                    cmd=item.tool_signature, exit_code=int(item.failure), ran_at=observed
                ),
            )
            if item.tool_signature
            else ()
        )
        entry = self.catalog.add_candidate(
            partition=partition,
            body=item.content,
            source=item.source.value,
            agent=agent.agent_id,
            task=item.task or agent.task,
            observed_at=observed,
            evidence=Evidence(
                files=tuple(files), commands=commands, commit=probe.head_commit() or ""
            ),
            memory_id=memory_id,
        )
        return ev.MemoryPromoted(
            at=now,
            memory_id=entry.id,
            item_id=item.id,
            agent_id=agent.agent_id,
            body_hash=content_hash(entry.body),
            partition=partition,
        )

    def verify(self, memory_id: str, *, now: datetime, by: str = "") -> ev.MemoryVerified:
        entry = self.catalog.get(memory_id)
        done = self.catalog.verify(memory_id, entry.revision)
        return ev.MemoryVerified(
            at=now, memory_id=memory_id, body_hash=content_hash(done.body), by=by
        )

    def retire(self, memory_id: str, *, now: datetime, reason: str = "") -> ev.MemoryRetired:
        entry = self.catalog.get(memory_id)
        self.catalog.retire(memory_id, entry.revision)
        return ev.MemoryRetired(at=now, memory_id=memory_id, reason=reason)

    def delete(self, memory_id: str, *, now: datetime) -> ev.MemoryDeleted:
        entry = self.catalog.get(memory_id)
        report = self.catalog.delete(memory_id, entry.revision)
        erasure = json.dumps(
            {
                "vacuumed": report.vacuumed,
                "checkpoint_blocked": report.checkpoint_blocked,
                "wal_bytes_after": report.wal_bytes_after,
            },
            sort_keys=True,
        )
        return ev.MemoryDeleted(at=now, memory_id=memory_id, erasure=erasure)

    def recall_for(
        self,
        agent: AgentIdentity,
        *,
        counter: TokenCounter,
        now: datetime,
        request: BuildRequest | None = None,
    ) -> tuple[RecallGroup, list[ev.MemoryMarkedStale]]:
        """The recalled group for one prompt, and staleness events for entries whose command
        evidence is too old for every view (those are marked stale in the catalog too). The
        newest :data:`RECALL_POOL` verified entries are ranked by relevance to *request*
        (``rank_for_recall``); its scope can exclude project memory."""
        if not self.settings.enabled or not agent.workspace:
            return RecallGroup(), []
        partition = self.partition(agent)
        entries = rank_for_recall(
            self.catalog.recall_candidates(partition, limit=RECALL_POOL), request
        )
        group = recall(
            entries,
            scope=request.scope if request is not None else None,
            role=agent.role,
            settings=self.settings,
            probe=self.probe_for(agent),
            counter=counter,
            now=now,
        )
        stale: list[ev.MemoryMarkedStale] = []
        for memory_id in group.stale_everywhere:
            entry = self.catalog.get(memory_id)
            if entry.state == "verified":
                self.catalog.mark_stale(memory_id, entry.revision)
                stale.append(
                    ev.MemoryMarkedStale(
                        at=now, memory_id=memory_id, reason="evidence older than 30 days"
                    )
                )
        return group, stale
