"""Everything of ctxledger that touches the world: stores, tokenizers, CLI, web, importers."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

__all__ = ["__version__"]

if TYPE_CHECKING:
    __version__: str
    """The installed distribution's version (``ctxledger --version`` prints it)."""


@functools.cache
def _installed_version() -> str:
    # importlib.metadata costs ~35 ms (email parsing); only `--version` and callers pay it
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ctxledger")
    except PackageNotFoundError:  # running from a checkout that was never installed
        return "0+unknown"


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _installed_version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
