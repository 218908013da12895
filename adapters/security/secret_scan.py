"""Secret detection for the ledger's redaction and the memory intake (one scanner, one policy):
detect-secrets plugins on bounded chunks plus extra rules."""

from __future__ import annotations

import base64
import binascii
import bisect
import functools
import hashlib
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Final, NamedTuple

from ctxledger.adapters.security.secret_rules import EXTRA_RULES, SHAPED_RULES, SPAN_RULES, Rule
from ctxledger.adapters.security.secret_views import despaced, hex_runs, normalized, percent_decoded

if TYPE_CHECKING:  # detect-secrets (and requests under it) loads with the first scanner
    from types import ModuleType

    from detect_secrets.plugins.base import BasePlugin

__all__ = ["DEFAULT_MAX_SCAN_CHARS", "Finding", "SecretScanner", "redaction_marker"]

DEFAULT_MAX_SCAN_CHARS: Final = 256 * 1024
"""Longest text the scanner accepts; callers refuse longer text without scanning it."""

_ENTROPY_LIMIT: Final = 4.5

_AWS_CONTEXT: Final = re.compile(r"aws|secret|access.?key", re.IGNORECASE)
_WORD_CHAR = re.compile(r"\w")
_TOKEN_CHARS = "A-Za-z0-9+/=_-"
_TOKEN_CHAR = re.compile(rf"[{_TOKEN_CHARS}]")
_BREAK = re.compile(r"[ \t]*\r?\n[ \t]*")
_PEM_END = re.compile(r"-----END[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----", re.IGNORECASE)
_PEM_BODY_LINE = re.compile(r"[ \t]*[A-Za-z0-9+/=]{8,}[ \t]*(?:\r?\n|$)")
# Candidate base64 runs (standard or URL-safe alphabet) decoded and scanned once more.
_B64_RUN = re.compile(r"[A-Za-z0-9+/]{24,}={0,2}|[A-Za-z0-9_-]{24,}={0,2}")
_MAX_DECODED_RUNS: Final = 2000
_MAX_REDACTION_ROUNDS: Final = 4
_MAX_CLEAN_CHUNKS: Final = 16_384
_PERSON: Final = {True: b"ctxledger-kw", False: b"ctxledger-nokw"}
# A line goes to the detect-secrets plugins only if it has something a plugin could match: a
# credential word, a URL with user info, or a long run of token characters (every specific
# plugin's shape is at least 20 such characters; the entropy plugin needs more).
_PLUGIN_WORD = re.compile(r"pass|pwd|secret|token|key|auth|cred|contrase|cloudant|softlayer|://")
_PLUGIN_RUN = re.compile(rf"[{_TOKEN_CHARS}]{{20,}}")
# Keyword values that are words joined by - or _ ("test-secret-key", "not_a_secret") are
# placeholders, not credentials.
_WORDY = re.compile(r"[A-Za-z]+(?:[-_.][A-Za-z]+)+")

# Rules whose match only counts when it looks random (mixed letters and digits), so that
# kebab-case words ("sk-learn-compatible-estimator") and prose ("Bearer authentication") pass.
_NEEDS_MIXED: Final = frozenset({"openai key", "bearer token", "credential assignment"})
_LOWER = re.compile(r"[a-z]")
_UPPER = re.compile(r"[A-Z]")
_DIGIT = re.compile(r"[0-9]")
_PLACEHOLDER_START: Final = ("$", "<", "{", "%", "*", "xxx", "XXX")

# Runs of word characters longer than this are shortened before the keyword plugin sees them:
# its regexes backtrack cubically over one long \w run ("password" * 10000).
_MAX_WORD_RUN: Final = 64
_LONG_WORD_RUN = re.compile(rf"\w{{{_MAX_WORD_RUN + 1},}}")


class Finding(NamedTuple):
    """A credential found in a text: its kind and where it is (``text[start:end]``)."""

    kind: str
    start: int
    end: int


def redaction_marker(kind: str, length: int) -> str:
    """The typed marker that replaces a secret of *kind* and *length* characters."""
    return f"[secret: {kind}, {length} chars]"


def _merge(found: list[Finding]) -> list[Finding]:
    merged: list[Finding] = []
    for f in sorted(found, key=lambda f: (f.start, -f.end)):
        if merged and f.start < merged[-1].end:
            last = merged[-1]
            if f.end > last.end:
                merged[-1] = Finding(last.kind, last.start, f.end)
            continue
        merged.append(f)
    return merged


def _joined(text: str) -> tuple[str, list[int], list[int]]:
    """*text* with line breaks inside tokens removed, and the map back: for the k-th cut,
    the joined offset where it was and the characters removed before it (cumulative)."""
    at: list[int] = []
    removed: list[int] = []
    parts: list[str] = []
    last = 0
    gone = 0
    for match in _BREAK.finditer(text):
        if not (
            match.start() > 0
            and match.end() < len(text)
            and _TOKEN_CHAR.match(text, match.start() - 1)
            and _TOKEN_CHAR.match(text, match.end())
        ):
            continue
        parts.append(text[last : match.start()])
        at.append(match.start() - gone)
        gone += match.end() - match.start()
        removed.append(gone)
        last = match.end()
    if not at:
        return text, at, removed
    parts.append(text[last:])
    return "".join(parts), at, removed


def _original(pos: int, at: list[int], removed: list[int], *, end: bool) -> int:
    # Cuts at exactly *pos* are before the character at pos (start) or after the span (end).
    k = bisect.bisect_left(at, pos) if end else bisect.bisect_right(at, pos)
    return pos + (removed[k - 1] if k else 0)


def _lower(text: str) -> str:
    """``text.lower()`` when it keeps every offset, else an ASCII-only lower-casing."""
    lower = text.lower()
    if len(lower) == len(text):
        return lower
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _decoded(run: str) -> str | None:
    padded = run.rstrip("=")
    padded += "=" * (-len(padded) % 4)
    try:
        if "-" in run or "_" in run:
            raw = base64.urlsafe_b64decode(padded)
        else:
            raw = base64.b64decode(padded, validate=True)
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError):
        return None
    if not text or sum(c.isprintable() or c in "\n\r\t" for c in text) < len(text):
        return None
    return text


def _aws_secret(text: str, start: int, end: int) -> bool:
    """Whether ``text[start:end]`` (a run of 40+ base64 characters) is shaped like an AWS
    secret access key: exactly 40, not followed by ``=`` padding, mixed upper, lower and
    digits, and holding ``/`` or ``+`` or named by its line (``aws``, ``secret``…)."""
    if end - start != 40 or text.startswith("=", end):
        return False
    value = text[start:end]
    if not (_LOWER.search(value) and _UPPER.search(value) and _DIGIT.search(value)):
        return False
    if "/" in value or "+" in value:
        return True
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line = text[line_start : len(text) if line_end < 0 else line_end]
    return _AWS_CONTEXT.search(line) is not None


def _looks_random(value: str) -> bool:
    if value.startswith(_PLACEHOLDER_START):
        return False
    has_digit = _DIGIT.search(value) is not None
    has_lower = _LOWER.search(value) is not None
    has_upper = _UPPER.search(value) is not None
    return has_digit and (has_lower or has_upper)


def _shorten_word_runs(text: str) -> str:
    half = _MAX_WORD_RUN // 2
    return _LONG_WORD_RUN.sub(lambda m: m.group()[:half] + " " + m.group()[-half:], text)


@functools.cache
def _heuristic() -> ModuleType:
    from detect_secrets.filters import heuristic

    return heuristic


def _specific_plugins() -> tuple[BasePlugin, ...]:
    # Every detect-secrets 1.5 plugin with a specific shape. Left out on purpose: the hex
    # entropy plugin (commit ids and file hashes are ordinary project memory) and the public
    # IP plugin (an address is not a credential). Imported here, not at module level:
    # detect-secrets pulls in requests (~0.4 s), which `ctxledger --help` must not pay.
    from detect_secrets.plugins.aws import AWSKeyDetector
    from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
    from detect_secrets.plugins.basic_auth import BasicAuthDetector
    from detect_secrets.plugins.cloudant import CloudantDetector
    from detect_secrets.plugins.discord import DiscordBotTokenDetector
    from detect_secrets.plugins.github_token import GitHubTokenDetector
    from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
    from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
    from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
    from detect_secrets.plugins.jwt import JwtTokenDetector
    from detect_secrets.plugins.mailchimp import MailchimpDetector
    from detect_secrets.plugins.npm import NpmDetector
    from detect_secrets.plugins.openai import OpenAIDetector
    from detect_secrets.plugins.private_key import PrivateKeyDetector
    from detect_secrets.plugins.pypi_token import PypiTokenDetector
    from detect_secrets.plugins.sendgrid import SendGridDetector
    from detect_secrets.plugins.slack import SlackDetector
    from detect_secrets.plugins.softlayer import SoftlayerDetector
    from detect_secrets.plugins.square_oauth import SquareOAuthDetector
    from detect_secrets.plugins.stripe import StripeDetector
    from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
    from detect_secrets.plugins.twilio import TwilioKeyDetector

    return (
        AWSKeyDetector(),
        AzureStorageKeyDetector(),
        BasicAuthDetector(),
        CloudantDetector(),
        DiscordBotTokenDetector(),
        GitHubTokenDetector(),
        GitLabTokenDetector(),
        IbmCloudIamDetector(),
        IbmCosHmacDetector(),
        JwtTokenDetector(),
        MailchimpDetector(),
        NpmDetector(),
        OpenAIDetector(),
        PrivateKeyDetector(),
        PypiTokenDetector(),
        SendGridDetector(),
        SlackDetector(),
        SoftlayerDetector(),
        SquareOAuthDetector(),
        StripeDetector(),
        TelegramBotTokenDetector(),
        TwilioKeyDetector(),
    )


class SecretScanner:
    """Finds credentials in text and names their kind (never returns the value).

    detect-secrets plugins run line by line on windows of ``chunk_chars`` overlapping by
    ``overlap_chars`` (a token up to that long is always seen whole), so one huge line costs
    linear time; the extra rules run over the whole text. Text longer than ``max_chars`` is
    refused with ValueError: callers must reject it without scanning."""

    def __init__(
        self,
        *,
        chunk_chars: int = 1024,
        overlap_chars: int = 256,
        max_chars: int = DEFAULT_MAX_SCAN_CHARS,
    ) -> None:
        if not 0 <= overlap_chars < chunk_chars:
            raise ValueError("overlap_chars must be >= 0 and below chunk_chars")
        self._chunk = chunk_chars
        self._step = chunk_chars - overlap_chars
        self.max_chars = max_chars
        from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
        from detect_secrets.plugins.keyword import KeywordDetector

        self._specific = _specific_plugins()
        self._keyword = KeywordDetector()
        self._entropy = Base64HighEntropyString(limit=_ENTROPY_LIMIT)
        self._clean: set[bytes] = set()
        """Digests of chunks the plugins found nothing in (tool output repeats lines: a file
        viewed twice, a log line per request); digests only, so no text is kept."""

    def first_finding(self, text: str) -> str | None:
        """The kind of the first credential found in *text*, or None: every credential the
        ledger's redaction replaces (``findings``, the one policy of both), and what the
        detect-secrets plugins find on bounded chunks of any line."""
        if len(text) > self.max_chars:
            raise ValueError("text is longer than the scanner's cap")
        found = self._extra(text)
        if found is not None:
            return found
        spans = self.findings(text)
        if spans:
            return spans[0].kind
        for chunk in self._chunks(text):
            found = self._detect_secrets(chunk)
            if found is not None:
                return found
        return None

    def findings(self, text: str) -> list[Finding]:
        """Every credential in *text* with its span, sorted and merged where spans overlap.

        Unlike ``first_finding`` there is no size cap: the rules are linear and the
        detect-secrets plugins see only lines that hold a credential word, a URL with user
        info or a run of 20+ token characters. Tokens split over lines are found on the text
        with such breaks joined, and base64 runs that decode to text holding a credential are
        reported whole (kind prefixed with ``base64``)."""
        found = self._spans(text)
        joined, at, removed = _joined(text)
        if at:
            for f in self._rule_spans(joined, SHAPED_RULES):
                start = _original(f.start, at, removed, end=False)
                stop = _original(f.end, at, removed, end=True)
                if stop - start != f.end - f.start:
                    found.append(Finding(f.kind, start, stop))
        for run in list(_B64_RUN.finditer(joined))[:_MAX_DECODED_RUNS]:
            # A wrapped blob may have been joined to the word before it ("$ base64 .env"):
            # also try the run from each joined line start inside it.
            k = bisect.bisect_right(at, run.start())
            starts = [run.start(), *at[k : k + 3]]
            for start in starts:
                if start >= run.end():
                    break
                decoded = _decoded(joined[start : run.end()])
                inner = self._spans(decoded) if decoded is not None else []
                if inner:
                    stop = run.end()
                    if at:
                        start = _original(start, at, removed, end=False)
                        stop = _original(stop, at, removed, end=True)
                    found.append(Finding(f"base64 {inner[0].kind}", start, stop))
                    break
        found += self._disguised(text)
        return _merge(found)

    def _disguised(self, text: str) -> list[Finding]:
        """Findings in the views that undo disguises (``adapters.secret_views``): the NFKC,
        invisible-free, look-alike-free text and the percent-decoded text (every rule), the
        text with spaced token groups joined (the fixed-prefix rules), and hex runs that
        decode to a credential (kind prefixed with ``hex``), mapped back to the original."""
        found: list[Finding] = []
        for view, rules in (
            (normalized(text), SPAN_RULES),
            (percent_decoded(text), SPAN_RULES),
            (despaced(text), SHAPED_RULES),
        ):
            if view is None:
                continue
            for f in self._rule_spans(view.text, rules):
                start, end = view.original(f.start, f.end)
                found.append(Finding(f.kind, start, end))
        for start, end, decoded in hex_runs(text):
            inner = self._rule_spans(decoded, SPAN_RULES)
            if inner:
                found.append(Finding(f"hex {inner[0].kind}", start, end))
        return found

    def redact(self, text: str) -> tuple[str, tuple[str, ...]]:
        """*text* with every credential replaced by ``redaction_marker`` (every other
        occurrence of a found value too), and the kinds replaced, in order.

        Repeated until the result holds no finding (a marker can complete a shape a plugin
        matches around it), so redacting a redacted text changes nothing."""
        kinds: tuple[str, ...] = ()
        for _ in range(_MAX_REDACTION_ROUNDS):
            found = self.findings(text)
            if not found:
                break
            text, more = self._replaced(text, found)
            kinds += more
        return text, kinds

    @staticmethod
    def _replaced(text: str, found: list[Finding]) -> tuple[str, tuple[str, ...]]:
        values = {text[f.start : f.end] for f in found}
        extra: list[Finding] = []
        for f in found:
            value = text[f.start : f.end]
            if len(value) < 6 or value not in values:
                continue
            start = text.find(value)
            while start >= 0:
                extra.append(Finding(f.kind, start, start + len(value)))
                start = text.find(value, start + 1)
        found = _merge(found + extra)
        parts: list[str] = []
        last = 0
        for f in found:
            parts.append(text[last : f.start])
            parts.append(redaction_marker(f.kind, f.end - f.start))
            last = f.end
        parts.append(text[last:])
        return "".join(parts), tuple(f.kind for f in found)

    def _spans(self, text: str) -> list[Finding]:
        found = self._rule_spans(text, SPAN_RULES)
        # Lines with a credential word get every plugin; lines with only a long token run
        # skip the keyword plugin (three quarters of the plugins' time, and it needs a word).
        lines: dict[int, tuple[int, bool]] = {}
        hits = [(m.start(), True) for m in _PLUGIN_WORD.finditer(_lower(text))]
        hits += [(m.start(), False) for m in _PLUGIN_RUN.finditer(text)]
        for hint, word in hits:
            line_start = text.rfind("\n", 0, hint) + 1
            seen = lines.get(line_start)
            if seen is not None and (seen[1] or not word):
                continue
            line_end = text.find("\n", hint)
            lines[line_start] = (len(text) if line_end < 0 else line_end, word)
        for line_start, (line_end, word) in sorted(lines.items()):
            found.extend(self._plugin_spans(text, line_start, line_end, keyword=word))
        return found

    def _rule_spans(self, text: str, rules: tuple[Rule, ...]) -> list[Finding]:
        found: list[Finding] = []
        lower = _lower(text)
        for rule in rules:
            for match in rule.pattern.finditer(lower if rule.lower else text):
                if rule.boundary and match.start() and _WORD_CHAR.match(text, match.start() - 1):
                    continue
                group = match.lastindex or 0
                start, end = match.span(group)
                value = text[start:end]
                if rule.kind in _NEEDS_MIXED and not _looks_random(value.split()[-1]):
                    continue
                if rule.kind == "aws secret key" and not _aws_secret(text, start, end):
                    continue
                if rule.kind == "private key":
                    end = self._pem_end(text, end)
                found.append(Finding(rule.kind, start, end))
        return found

    @staticmethod
    def _pem_end(text: str, header_end: int) -> int:
        """Where the key block that starts at a header ends: its END line, else the last of
        the base64 lines that follow."""
        end = _PEM_END.search(text, header_end)
        next_begin = _lower(text).find("-----begin", header_end)
        if end is not None and (next_begin < 0 or end.start() < next_begin):
            return end.end()
        pos = header_end
        if text.startswith("\r\n", pos):
            pos += 2
        elif text.startswith("\n", pos):
            pos += 1
        while (line := _PEM_BODY_LINE.match(text, pos)) is not None and line.end() > pos:
            pos = line.end()
        return max(header_end, pos)

    def _plugin_spans(
        self, text: str, line_start: int, line_end: int, *, keyword: bool = True
    ) -> list[Finding]:
        found: list[Finding] = []
        start = line_start
        while start < line_end:
            stop = min(line_end, start + self._chunk)
            chunk = text[start:stop]
            digest = hashlib.blake2b(
                chunk.encode("utf-8", "surrogatepass"), digest_size=16, person=_PERSON[keyword]
            ).digest()
            if digest not in self._clean:
                values = list(self._plugin_values(chunk, keyword=keyword))
                if not values:
                    if len(self._clean) >= _MAX_CLEAN_CHUNKS:
                        self._clean.clear()
                    self._clean.add(digest)
                for kind, value in values:
                    at = chunk.find(value)
                    while at >= 0:
                        found.append(Finding(kind, start + at, start + at + len(value)))
                        at = chunk.find(value, at + 1)
            if stop >= line_end:
                break
            start += self._step
        return found

    def _plugin_values(self, chunk: str, *, keyword: bool) -> Iterator[tuple[str, str]]:
        for plugin in self._specific:
            for value in plugin.analyze_string(chunk):
                if value:
                    yield str(plugin.secret_type), str(value)
        shortened = _shorten_word_runs(chunk) if keyword else ""
        for value in self._keyword.analyze_string(shortened):
            if (
                value
                and self._plausible(value, shortened)
                and not _WORDY.fullmatch(value)
                and not _heuristic().is_indirect_reference(chunk)
            ):
                yield str(self._keyword.secret_type), str(value)
        for value in self._entropy.analyze_string(chunk):
            if self._entropy.calculate_shannon_entropy(value) > _ENTROPY_LIMIT and self._plausible(
                value, chunk
            ):
                yield str(self._entropy.secret_type), str(value)

    def _extra(self, text: str) -> str | None:
        for kind, pattern in EXTRA_RULES:
            for match in pattern.finditer(text):
                value = match.group(match.lastindex or 0)
                if kind not in _NEEDS_MIXED or _looks_random(value.split()[-1]):
                    return kind
        return None

    def _chunks(self, text: str) -> Iterator[str]:
        for line in text.splitlines():
            if len(line) <= self._chunk:
                yield line
                continue
            start = 0
            while True:
                yield line[start : start + self._chunk]
                if start + self._chunk >= len(line):
                    break
                start += self._step

    def _detect_secrets(self, chunk: str) -> str | None:
        for plugin in self._specific:
            for _ in plugin.analyze_string(chunk):
                return str(plugin.secret_type)
        shortened = _shorten_word_runs(chunk)
        for value in self._keyword.analyze_string(shortened):
            if self._plausible(value, shortened) and not _heuristic().is_indirect_reference(chunk):
                return str(self._keyword.secret_type)
        for value in self._entropy.analyze_string(chunk):
            if self._entropy.calculate_shannon_entropy(value) > _ENTROPY_LIMIT and self._plausible(
                value, chunk
            ):
                return str(self._entropy.secret_type)
        return None

    @staticmethod
    def _plausible(value: str, line: str) -> bool:
        return not (
            _heuristic().is_templated_secret(value)
            or _heuristic().is_prefixed_with_dollar_sign(value)
            or _heuristic().is_sequential_string(value)
            or _heuristic().is_potential_uuid(value)
            or _heuristic().is_not_alphanumeric_string(value)
            or _heuristic().is_likely_id_string(value, line)
        )
