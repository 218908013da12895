"""Typed errors of ctxledger, in one place; the CLI turns each into one line and an exit code."""

from __future__ import annotations

__all__ = [
    "BudgetError",
    "ConflictError",
    "CtxLedgerError",
    "OverwriteRefusedError",
    "LedgerUnavailableError",
    "DamagedStreamError",
    "DecodeError",
    "FutureSchemaError",
    "IntakeMissingError",
    "InvalidInputError",
    "LegacyImportError",
    "MemoryConflictError",
    "MemoryGuardError",
    "MemoryIntakeError",
    "MemoryNotFoundError",
    "MemoryStateError",
    "ProtectedTableError",
    "RefreshExhaustedError",
    "SecretRefusedError",
    "StoredRowError",
    "StoreKindError",
    "StoreURLError",
    "TrajectoryFormatError",
    "UnknownAgentError",
    "UnknownEventTypeError",
    "UnknownGenerationError",
    "UnknownStrategyError",
]


class CtxLedgerError(Exception):
    """Base class of every error ctxledger raises on purpose."""

    exit_code: int = 1


class InvalidInputError(CtxLedgerError, ValueError):
    """Input from a caller or a file that does not fit the model."""


class StoreURLError(InvalidInputError):
    """A ledger URL with an unknown scheme or a malformed path."""


class StoreKindError(InvalidInputError):
    """A file that is not the kind of store asked for (not SQLite, a memory catalog given as a
    ledger, a ledger given as a catalog); it was only read, never written."""


class ConflictError(CtxLedgerError):
    """An optimistic-concurrency conflict: the stream moved since the caller read it.

    Nothing of the conflicting append was written.
    """

    def __init__(self, stream_id: str, expected_version: int, detail: str = "") -> None:
        self.stream_id = stream_id
        self.expected_version = expected_version
        msg = f"conflict on stream {stream_id}: expected version {expected_version}"
        super().__init__(f"{msg} ({detail})" if detail else msg)


class DecodeError(CtxLedgerError):
    """A stored event that cannot be decoded into the catalogue; names its position."""

    def __init__(self, reason: str, *, position: int | None = None) -> None:
        self.reason = reason
        self.position = position
        where = f"event at position {position}: " if position is not None else ""
        super().__init__(f"{where}{reason}")


class UnknownEventTypeError(DecodeError):
    """A stored type name that is not in the event catalogue (nothing is ever imported)."""


class FutureSchemaError(DecodeError):
    """A stored payload written by a newer schema version than this code knows."""


class StoredRowError(DecodeError):
    """A stored row whose columns are not what the ledger writes: a NULL or TEXT payload, a
    NULL or non-text topic (written behind the ledger's back). ``kind`` names which."""

    def __init__(self, kind: str, reason: str, *, position: int | None = None) -> None:
        self.kind = kind
        super().__init__(reason, position=position)


class DamagedStreamError(CtxLedgerError):
    """An append to a stream that has rows in quarantine (``ctxledger doctor --quarantine``):
    its history has a hole, so nothing more is decided on it until it is repaired."""

    def __init__(self, stream_id: str, positions: tuple[int, ...]) -> None:
        self.stream_id = stream_id
        self.positions = positions
        shown = ", ".join(str(p) for p in positions[:5]) + (" …" if len(positions) > 5 else "")
        super().__init__(
            f"stream {stream_id[:120]} is damaged: rows at position {shown} are quarantined "
            "(ctxledger_quarantine); it refuses appends until repaired"
        )


class TrajectoryFormatError(InvalidInputError):
    """A trajectory file that is unreadable, malformed or of no known format.

    The message names the file and what was expected; nothing was imported."""


class UnknownStrategyError(InvalidInputError):
    """A strategy name that is not registered."""


class UnknownAgentError(InvalidInputError):
    """An agent id that the ledger has never registered."""


class UnknownGenerationError(InvalidInputError):
    """A generation number the agent never had."""


class BudgetError(InvalidInputError):
    """A token budget that cannot be honoured (e.g. non-positive)."""


class RefreshExhaustedError(CtxLedgerError):
    """Repeated refreshes made no progress; the turn cannot be retried safely."""


# --- project memory catalog -------------------------------------------------------------------


class MemoryConflictError(ConflictError):
    """A memory write whose expected revision is not the stored one (check-and-set failed).

    Nothing was written. ``actual_revision`` is 0 when a create met an existing id."""

    def __init__(self, memory_id: str, expected_revision: int, actual_revision: int) -> None:
        self.memory_id = memory_id
        self.expected_revision = expected_revision
        self.actual_revision = actual_revision
        self.stream_id = memory_id
        self.expected_version = expected_revision
        CtxLedgerError.__init__(
            self,
            f"conflict on memory {memory_id}: expected revision {expected_revision}, "
            f"stored revision is {actual_revision}",
        )


class MemoryNotFoundError(InvalidInputError):
    """A memory id the catalog does not hold."""


class MemoryStateError(InvalidInputError):
    """A memory transition the entry's state does not allow (e.g. verifying a deleted entry)."""


class MemoryIntakeError(InvalidInputError):
    """The memory intake refused a value. Names the rule and the field, never the value."""

    def __init__(self, rule: str, field: str, detail: str = "") -> None:
        self.rule = rule
        self.field = field
        self.detail = detail
        msg = f"memory intake refused {field}: {rule}"
        super().__init__(f"{msg} ({detail})" if detail else msg)


class SecretRefusedError(InvalidInputError):
    """An item held a credential and the agent's secrets policy is ``refuse``: nothing was
    written. Names the item and the kinds found, never the value."""

    def __init__(self, agent_id: str, kinds: tuple[str, ...], item_id: str = "") -> None:
        self.agent_id = agent_id
        self.kinds = kinds
        self.item_id = item_id
        what = f"item {item_id[:80]!r}" if item_id else "the item"
        super().__init__(
            f"{what} for agent {agent_id[:80]!r} holds a secret ({', '.join(kinds)}); "
            "the agent's secrets policy is 'refuse', nothing was recorded"
        )


class IntakeMissingError(CtxLedgerError):
    """A memory write or legacy import with no intake registered; nothing was written."""


class MemoryGuardError(CtxLedgerError):
    """The catalog's guard triggers refused a write to the memory table."""


class ProtectedTableError(InvalidInputError):
    """A generic catalog accessor was asked for a table it must not touch (``memory``)."""


class LegacyImportError(CtxLedgerError):
    """A legacy catalog import failed as a whole and was rolled back."""


class OverwriteRefusedError(InvalidInputError):
    """A command was asked to replace a file or folder it did not create (``demo --force``
    replaces it)."""


class LedgerUnavailableError(CtxLedgerError):
    """The store could not be opened or reached (for PostgreSQL: within
    ``adapters.stream_locks.UNAVAILABLE_AFTER_S``; shorter outages are waited out)."""
