"""Pure token counters: the byte-estimate fallback and a bounded content-hash cache wrapper."""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

from ctxledger.domain.errors import InvalidInputError
from ctxledger.domain.ports import TokenCounter

__all__ = ["DEFAULT_CACHE_SIZE", "CacheInfo", "CachedCounter", "EstimatingCounter"]

DEFAULT_CACHE_SIZE = 65_536


class EstimatingCounter:
    """Fallback estimate, not a tokenizer: ``ceil(len(utf8 bytes) / 4)``.

    Used only when no real encoding is available; its name ``estimate-4cpb`` is recorded on
    every pack it counted so an auditor can tell estimated budgets from real ones.
    """

    @property
    def name(self) -> str:
        return "estimate-4cpb"

    def count(self, text: str) -> int:
        return -(-len(text.encode("utf-8")) // 4)


class CacheInfo:
    """Hit/miss statistics of a :class:`CachedCounter`."""

    __slots__ = ("hits", "maxsize", "misses", "size")

    def __init__(self, hits: int, misses: int, size: int, maxsize: int) -> None:
        self.hits = hits
        self.misses = misses
        self.size = size
        self.maxsize = maxsize

    def __repr__(self) -> str:
        return (
            f"CacheInfo(hits={self.hits}, misses={self.misses}, "
            f"size={self.size}, maxsize={self.maxsize})"
        )


class CachedCounter:
    """Wraps a counter with a bounded LRU cache keyed by the SHA-256 of the text.

    Keys are 32-byte digests, so the cache never pins large texts in memory. Thread-safe.
    """

    def __init__(self, inner: TokenCounter, *, maxsize: int = DEFAULT_CACHE_SIZE) -> None:
        if maxsize < 1:
            raise InvalidInputError("maxsize must be at least 1")
        self._inner = inner
        self._maxsize = maxsize
        self._cache: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    @property
    def name(self) -> str:
        return self._inner.name

    @property
    def inner(self) -> TokenCounter:
        return self._inner

    def count(self, text: str) -> int:
        if not text:
            return 0
        key = hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self._hits += 1
                return cached
        value = self._inner.count(text)
        with self._lock:
            self._misses += 1
            self._cache[key] = value
            if len(self._cache) > self._maxsize:
                self._cache.popitem(last=False)
        return value

    def cache_info(self) -> CacheInfo:
        with self._lock:
            return CacheInfo(self._hits, self._misses, len(self._cache), self._maxsize)

    def clear(self) -> None:
        with self._lock:
            self._cache.clear()
            self._hits = 0
            self._misses = 0
