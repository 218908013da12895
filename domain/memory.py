"""Project-memory entries, their evidence and the reports of erasure and legacy import."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Final, Literal

import msgspec

__all__ = [
    "MEMORY_ID_PATTERN",
    "MEMORY_STATES",
    "PARTITION_PATTERN",
    "CommandEvidence",
    "ErasureReport",
    "Evidence",
    "FileEvidence",
    "ImportReport",
    "MemoryEntry",
    "MemoryState",
    "is_memory_id",
    "is_partition_id",
]

MemoryState = Literal["candidate", "verified", "stale", "retired", "deleted"]

MEMORY_STATES: Final[tuple[MemoryState, ...]] = (
    "candidate",
    "verified",
    "stale",
    "retired",
    "deleted",
)

MEMORY_ID_PATTERN: Final = r"mem_[0-9a-f]{8,64}"
"""A memory id: ``mem_`` and 8–64 lowercase hex digits."""

PARTITION_PATTERN: Final = r"ws_[0-9a-f]{32}"
"""An opaque workspace partition: ``ws_`` and 32 lowercase hex digits (never a path)."""

_MEMORY_ID = re.compile(MEMORY_ID_PATTERN)
_PARTITION = re.compile(PARTITION_PATTERN)


def is_memory_id(value: str) -> bool:
    """True when *value* is a well-formed memory id."""
    return _MEMORY_ID.fullmatch(value) is not None


def is_partition_id(value: str) -> bool:
    """True when *value* is a well-formed opaque partition id."""
    return _PARTITION.fullmatch(value) is not None


class CommandEvidence(msgspec.Struct, frozen=True, kw_only=True):
    """A command that supported the observation, its exit code and when it ran (aware)."""

    cmd: str
    exit_code: int
    ran_at: datetime


class FileEvidence(msgspec.Struct, frozen=True, kw_only=True):
    """A workspace-relative file the observation cites, with the SHA-256 it had then."""

    path: str
    sha256: str


class Evidence(msgspec.Struct, frozen=True, kw_only=True):
    """Everything a recipient can check an entry against; ``commit`` may be empty."""

    commands: tuple[CommandEvidence, ...] = ()
    files: tuple[FileEvidence, ...] = ()
    commit: str = ""


class MemoryEntry(msgspec.Struct, frozen=True, kw_only=True):
    """One project-memory entry as stored (schema v2), without the storage envelope.

    ``revision`` starts at 1 and grows by one on every write (check-and-set). ``verified`` is
    true exactly while the state is ``verified`` (set by an explicit verify only)."""

    id: str
    partition: str
    state: MemoryState
    revision: int
    body: str
    source: str
    agent: str
    task: str
    observed_at: datetime
    verified: bool = False
    evidence: Evidence = Evidence()


class ErasureReport(msgspec.Struct, frozen=True, kw_only=True):
    """Outcome of the erasure policy: VACUUM ran, the checkpoint was blocked, WAL size after."""

    vacuumed: bool
    checkpoint_blocked: bool
    wal_bytes_after: int


class ImportReport(msgspec.Struct, frozen=True, kw_only=True):
    """Outcome of a legacy import: rows imported, rows dropped and drops counted by reason."""

    imported: int
    dropped: int
    reasons: dict[str, int] = {}
