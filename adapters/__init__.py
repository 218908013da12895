"""Everything of ctxledger that touches the world: stores, tokenizers, CLI, web, importers."""

from importlib.metadata import PackageNotFoundError, version

__all__ = ["__version__"]

try:
    __version__: str = version("ctxledger")
    """The installed distribution's version (``ctxledger --version`` prints it)."""
except PackageNotFoundError:  # running from a checkout that was never installed
    __version__ = "0+unknown"
