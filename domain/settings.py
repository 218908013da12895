"""Per-agent settings: what a build uses when its caller names nothing, recorded as events."""

from __future__ import annotations

from typing import Literal

import msgspec

from ctxledger.domain.model import Count
from ctxledger.domain.request import Scope

__all__ = [
    "DEFAULT_STRATEGY",
    "DEFAULT_WATERMARK",
    "MIB",
    "SECRET_POLICIES",
    "AgentSettings",
    "InputLimits",
    "SecretPolicy",
]

MIB = 1024 * 1024

DEFAULT_WATERMARK = 0.4
"""A rebuild re-packs its fixed part (forced content) plus this share of the room beside it,
and never above 90 % of the budget, as the seed's hysteresis requires. The watermark trades
prefix reuse (fewer rebuilds) against next-action recall (more history after a rebuild);
0.4 is the point measured on the shared runs where both stay at or above the peers'
(docs/trajectories.md, "Reuse against recall")."""

DEFAULT_STRATEGY = "variable"

SecretPolicy = Literal["redact", "refuse", "allow"]
SECRET_POLICIES: tuple[SecretPolicy, ...] = ("redact", "refuse", "allow")
"""What recording an item that holds a credential does: replace each by a typed marker and
note the kinds on the item (``redact``, the default), refuse the whole record
(``SecretRefusedError``, nothing written), or store it as given (``allow``)."""


class AgentSettings(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One agent's build settings, folded from ``AgentConfigured`` events.

    ``budget`` 0 falls back to the identity's budget; ``scope`` takes effect at the next
    generation boundary (it is fixed within a generation); ``recall`` turns project-memory
    recall off for this agent; ``watermark`` is the rebuild target as a fraction of the
    budget; ``latest_step`` keeps the newest step's group in every build; ``secrets`` is what
    recording an item that holds a credential does (``SECRET_POLICIES``)."""

    strategy: str = DEFAULT_STRATEGY
    budget: Count = 0
    scope: Scope = Scope()
    recall: bool = True
    watermark: float = DEFAULT_WATERMARK
    latest_step: bool = True
    secrets: SecretPolicy = "redact"


class InputLimits(msgspec.Struct, frozen=True, kw_only=True):
    """Size limits of what a caller passes the engine, in UTF-8 bytes (an engine setting:
    ``EngineSettings.limits``). ``text_bytes`` bounds each body of text (item content, a
    steering note, verification evidence, a provider error message, the latest user input);
    ``field_bytes`` bounds every other string (ids, tasks, reasons, ``by``, stages, paths,
    symbols, keywords…), each element of a list on its own. Anything over a limit, and any
    string that is not valid Unicode (a lone surrogate), is refused with a one-line
    ``InvalidInputError`` before anything is appended (``domain.input_checks``)."""

    text_bytes: Count = 4 * MIB
    field_bytes: Count = 1 * MIB
