"""Importing a legacy (schema v1) memory catalog: reading its rows read-only and turning each
into a v2 entry through the intake, or naming why it is dropped."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Final

from pydantic import ValidationError

from ctxledger.adapters.memory.intake import MemoryIntakePort
from ctxledger.adapters.memory.schema import LegacyRecordV1, entry_from_legacy
from ctxledger.domain.errors import InvalidInputError, LegacyImportError, MemoryIntakeError
from ctxledger.domain.memory import MemoryEntry

__all__ = ["LEGACY_COLUMNS", "legacy_entry", "legacy_rows", "read_legacy_rows"]

LEGACY_COLUMNS: Final = frozenset({"id", "workspace_path", "payload"})


def legacy_entry(
    intake: MemoryIntakePort,
    partition_for: Callable[[str], str],
    position: int,
    workspace: object,
    payload: object,
) -> MemoryEntry | str:
    """One legacy row as a v2 entry admitted by *intake*, or the reason it is dropped; a
    payload that is not JSON text fails the whole import."""
    if isinstance(payload, bytes):
        try:
            payload = payload.decode("utf-8")
        except UnicodeDecodeError:
            payload = None
    if not isinstance(payload, str):
        raise LegacyImportError(
            f"legacy row {position} payload is not JSON text; nothing was imported"
        )
    try:
        data = json.loads(payload)
    except ValueError:
        raise LegacyImportError(
            f"legacy row {position} payload is not JSON; nothing was imported"
        ) from None
    if not isinstance(data, dict):
        return "invalid_shape"
    if data.get("schemaVersion") != 1:
        return "unsupported_schema"
    try:
        record = LegacyRecordV1.model_validate(data)
    except ValidationError:
        return "invalid_shape"
    if not isinstance(workspace, str):
        return "invalid_workspace"
    try:
        partition = partition_for(workspace)
    except InvalidInputError:
        return "invalid_workspace"
    try:
        return intake.admit(entry_from_legacy(record, partition))
    except MemoryIntakeError as exc:
        return exc.rule


def legacy_rows(conn: sqlite3.Connection) -> list[tuple[object, object, object]]:
    """The rows of a legacy ``memory(id, workspace_path, payload)`` table, in insertion order."""
    rows = conn.execute("SELECT id, workspace_path, payload FROM memory ORDER BY rowid").fetchall()
    return [(r[0], r[1], r[2]) for r in rows]


def read_legacy_rows(path: Path) -> list[tuple[object, object, object]]:
    """The rows of the legacy catalog at *path*, read-only, in insertion order."""
    if not path.is_file():
        raise LegacyImportError("the legacy catalog file does not exist")
    try:
        old = sqlite3.connect(path.resolve().as_uri() + "?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise LegacyImportError(f"cannot open the legacy catalog: {exc}") from None
    try:
        columns = {str(r[1]) for r in old.execute("PRAGMA table_info(memory)").fetchall()}
        if not columns >= LEGACY_COLUMNS:
            raise LegacyImportError(
                "not a legacy catalog: no memory(id, workspace_path, payload) table"
            )
        return legacy_rows(old)
    except sqlite3.DatabaseError as exc:
        raise LegacyImportError(f"cannot read the legacy catalog: {exc}") from None
    finally:
        old.close()
