"""Row payloads of the memory table: schema v2 (stored) and schema v1 (legacy), with pydantic."""

from __future__ import annotations

import json
from typing import Final, Literal

import msgspec
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictInt, ValidationError

from ctxledger.domain.errors import DecodeError, MemoryIntakeError
from ctxledger.domain.memory import (
    MEMORY_ID_PATTERN,
    PARTITION_PATTERN,
    CommandEvidence,
    Evidence,
    FileEvidence,
    MemoryEntry,
    MemoryState,
)

__all__ = [
    "SCHEMA_VERSION",
    "LegacyRecordV1",
    "RecordV2",
    "decode_payload",
    "encode_payload",
    "entry_from_legacy",
]

SCHEMA_VERSION: Final = 2

# --- row payload (schema v2) and the legacy shape (schema v1) ---------------------------------


class _CommandV2(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    cmd: str
    exit_code: StrictInt
    ran_at: AwareDatetime


class _FileV2(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


class _EvidenceV2(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    commands: tuple[_CommandV2, ...] = ()
    files: tuple[_FileV2, ...] = ()
    commit: str = ""


class RecordV2(BaseModel):
    """The stored payload: every field required, nothing extra, strict types."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    schema_version: StrictInt = Field(alias="schemaVersion", ge=2, le=2)
    id: str = Field(pattern=f"^{MEMORY_ID_PATTERN}$")
    partition: str = Field(pattern=f"^{PARTITION_PATTERN}$")
    state: MemoryState
    revision: StrictInt = Field(ge=1)
    body: str
    source: str
    agent: str
    task: str
    observed_at: AwareDatetime
    verified: bool
    evidence: _EvidenceV2


class _LegacyCommandV1(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    cmd: str
    exit_code: int = 0
    ran_at: AwareDatetime


class _LegacyFileV1(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    path: str
    sha256: str


class LegacyRecordV1(BaseModel):
    """A schema v1 payload of the legacy catalog (``memory(id, workspace_path, payload)``).

    v1 called the body ``text`` and the observation time ``created_at``; it had no state,
    revision or verification, so every imported row becomes an unverified candidate."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    schema_version: Literal[1] = Field(alias="schemaVersion")
    id: str
    text: str
    source: str = "worker_finding"
    agent: str = ""
    task: str = ""
    created_at: AwareDatetime
    files: tuple[_LegacyFileV1, ...] = ()
    commands: tuple[_LegacyCommandV1, ...] = ()
    commit: str = ""


def encode_payload(entry: MemoryEntry) -> str:
    """The stored JSON of *entry* (schema v2, sorted keys); MemoryIntakeError if it breaks the
    schema (rule ``schema``, naming the field, never the value)."""
    data = msgspec.to_builtins(entry)
    data["schemaVersion"] = SCHEMA_VERSION
    text = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    try:
        RecordV2.model_validate_json(text)
    except ValidationError as exc:
        raise MemoryIntakeError("schema", _first_error_field(exc)) from None
    return text


def decode_payload(memory_id: str, payload: object) -> MemoryEntry:
    """The entry stored in *payload*; DecodeError when the row does not match schema v2."""
    if not isinstance(payload, str):
        raise DecodeError(f"memory row {memory_id} has a non-text payload")
    try:
        RecordV2.model_validate_json(payload)
        return msgspec.json.decode(payload, type=MemoryEntry)
    except (ValidationError, msgspec.ValidationError, msgspec.DecodeError):
        raise DecodeError(f"memory row {memory_id} does not match schema v2") from None


def _first_error_field(exc: ValidationError) -> str:
    errors = exc.errors(include_input=False)
    if not errors:
        return "payload"
    return ".".join(str(p) for p in errors[0]["loc"]) or "payload"


def entry_from_legacy(record: LegacyRecordV1, partition: str) -> MemoryEntry:
    """A v1 record as a v2 candidate (revision 1, unverified) in *partition*."""
    return MemoryEntry(
        id=record.id,
        partition=partition,
        state="candidate",
        revision=1,
        body=record.text,
        source=record.source,
        agent=record.agent,
        task=record.task,
        observed_at=record.created_at,
        verified=False,
        evidence=Evidence(
            commands=tuple(
                CommandEvidence(cmd=c.cmd, exit_code=c.exit_code, ran_at=c.ran_at)
                for c in record.commands
            ),
            files=tuple(FileEvidence(path=f.path, sha256=f.sha256) for f in record.files),
            commit=record.commit,
        ),
    )
