"""The request and response bodies of ``ctxledger api`` (``/v1/``), one msgspec Struct each:
the service decodes requests with them, encodes responses from them, and ``/v1/openapi.json``
is generated from them (``adapters.api.openapi``)."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from ctxledger.domain.turn_errors import TurnError
from ctxledger.projections.inspector import ContextView, GenerationDiff

__all__ = [
    "AgentIn",
    "AgentOut",
    "BuildIn",
    "BuildOut",
    "ControlIn",
    "ControlOut",
    "DecisionsSummary",
    "ErrorBody",
    "ErrorDetail",
    "GenerationRow",
    "GenerationsOut",
    "InspectOut",
    "ItemIn",
    "ItemOut",
    "ItemsIn",
    "ItemsOut",
    "TurnErrorIn",
    "TurnErrorOut",
    "UsageIn",
    "UsageOut",
    "DiffOut",
]


class _Body(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Request bodies refuse fields they do not name (a typo is a 422, never ignored)."""


class AgentIn(_Body, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Register an agent (idempotent for the same identity) and, with any setting, configure it."""

    agent_id: str
    role: str
    task: str = ""
    parent: str = ""
    scope: list[str] = []
    model: str = ""
    workspace: str = ""
    budget: int = 0
    session_id: str = ""
    strategy: str | None = None
    recall: bool | None = None
    watermark: float | None = None
    latest_step: bool | None = None
    secrets: Literal["redact", "refuse", "allow"] | None = None


class AgentOut(msgspec.Struct, frozen=True, kw_only=True):
    agent_id: str
    session_id: str
    generation: int
    strategy: str
    budget: int


class ItemIn(_Body, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One item to record; ``id`` defaults to a content address (layer, source, content)."""

    content: str
    layer: int = 0
    source: str = "tool_log"
    id: str = ""
    task: str = ""
    stage: str = ""
    phase: str = ""
    files: list[str] = []
    symbols: list[str] = []
    pinned: bool = False
    failure: bool = False
    tool_signature: str = ""
    group: str = ""
    confidence: float = 1.0
    relevance: float = 0.5


class ItemsIn(_Body, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Exactly one of ``item`` (one) or ``items`` (a batch, appended in one commit)."""

    item: ItemIn | None = None
    items: list[ItemIn] | None = None


class ItemOut(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    token_count: int
    redacted: list[str] = []


class ItemsOut(msgspec.Struct, frozen=True, kw_only=True):
    items: list[ItemOut]


class BuildIn(_Body, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Build the agent's next pack; with ``provider`` and ``model``, also render the request."""

    budget: int | None = None
    strategy: str | None = None
    task: str = ""
    phase: str = ""
    files: list[str] = []
    symbols: list[str] = []
    keywords: list[str] = []
    failures: list[str] = []
    provider: Literal["anthropic", "openai", "openai-responses"] | None = None
    model: str = ""
    max_tokens: int = 4096
    messages: list[Any] | None = None
    tools: list[Any] | None = None
    prompt_cache_key: str | None = None
    """OpenAI's (chat and responses)."""
    cache_ttl: Literal["5m", "1h"] | None = None
    """Anthropic's cache breakpoint lifetime."""


class DecisionsSummary(msgspec.Struct, frozen=True, kw_only=True):
    included: int
    dropped: int
    compressed: int
    clipped: int


class BuildOut(msgspec.Struct, frozen=True, kw_only=True):
    pack_id: str
    kind: Literal["initial", "append", "rebuild"]
    generation: int
    static_prefix: str
    dynamic_tail: str
    prefix_hash: str
    budget_used: int
    budget_limit: int
    decisions: DecisionsSummary
    message: str = ""
    request: dict[str, Any] | None = None


class UsageIn(_Body, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The provider's usage object as it came (anthropic, openai chat/responses, deepseek)."""

    usage: dict[str, Any]


class UsageOut(msgspec.Struct, frozen=True, kw_only=True):
    provider: str
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    output_tokens: int
    expected_cached_tokens: int


class TurnErrorIn(_Body, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The provider's error: its JSON body (``error``) or its message (``message``)."""

    error: dict[str, Any] | None = None
    message: str = ""
    provider: str = ""


class TurnErrorOut(msgspec.Struct, frozen=True, kw_only=True):
    error: TurnError
    refreshed: bool
    message: str = ""
    build: BuildOut | None = None


class ControlIn(_Body, frozen=True, kw_only=True, forbid_unknown_fields=True):
    action: Literal["pin", "unpin", "remove", "verify"]
    item_id: str
    by: str = ""
    reason: str = "manual"
    evidence: str = ""


class ControlOut(msgspec.Struct, frozen=True, kw_only=True):
    action: str
    item_id: str


class GenerationRow(msgspec.Struct, frozen=True, kw_only=True):
    number: int
    kind: str
    trigger: str
    reason: str
    strategy: str
    budget: int
    tokens_used: int
    overflow: int
    builds: int
    included: int
    dropped: int


class GenerationsOut(msgspec.Struct, frozen=True, kw_only=True):
    agent: str
    generations: list[GenerationRow]


InspectOut = ContextView
DiffOut = GenerationDiff


class ErrorDetail(msgspec.Struct, frozen=True, kw_only=True):
    type: str
    message: str
    field: str | None = None


class ErrorBody(msgspec.Struct, frozen=True, kw_only=True):
    error: ErrorDetail
