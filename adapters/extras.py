"""Optional extras: a feature whose libraries are not installed fails with one line naming the
``pip install`` that adds them."""

from __future__ import annotations

import importlib.util
from typing import Final

from ctxledger.domain.errors import CtxLedgerError

__all__ = ["EXTRA_MODULES", "MissingExtraError", "require_extra"]

EXTRA_MODULES: Final[dict[str, tuple[str, ...]]] = {
    "postgres": ("psycopg",),
    "web": ("starlette", "uvicorn", "jinja2"),
    "testing": ("hypothesis",),
    "otel": ("opentelemetry",),
}
"""The top-level modules each extra of pyproject.toml installs (checked before importing)."""


class MissingExtraError(CtxLedgerError):
    """A feature needs an optional extra that is not installed."""

    def __init__(self, feature: str, extra: str, missing: str) -> None:
        super().__init__(
            f"{feature} needs the {extra} extra ({missing} is not installed): "
            f"pip install 'ctxledger[{extra}]'"
        )
        self.extra = extra
        self.missing = missing


def require_extra(extra: str, feature: str) -> None:
    """Raise MissingExtraError unless every module of *extra* can be imported (found on the
    path; nothing is imported here)."""
    for module in EXTRA_MODULES[extra]:
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(feature, extra, module)
