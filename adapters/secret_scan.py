"""Secret detection for memory intake: detect-secrets plugins on bounded chunks plus extra rules."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

from detect_secrets.filters import heuristic
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import BasePlugin
from detect_secrets.plugins.basic_auth import BasicAuthDetector
from detect_secrets.plugins.cloudant import CloudantDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString
from detect_secrets.plugins.ibm_cloud_iam import IbmCloudIamDetector
from detect_secrets.plugins.ibm_cos_hmac import IbmCosHmacDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.keyword import KeywordDetector
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

__all__ = ["DEFAULT_MAX_SCAN_CHARS", "SecretScanner"]

DEFAULT_MAX_SCAN_CHARS: Final = 256 * 1024
"""Longest text the scanner accepts; callers refuse longer text without scanning it."""

_ENTROPY_LIMIT: Final = 4.5

# Rules detect-secrets misses or only matches in narrower shapes. Every pattern is linear: no
# nested quantifiers, bounded alternations, so the whole (size-capped) text is scanned at once.
_EXTRA_RULES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
    ("github fine-grained token", re.compile(r"github_pat_[A-Za-z0-9_]{20,}")),
    ("github token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{30,}")),
    ("openai key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-|ant-[a-z0-9]+-)?[A-Za-z0-9_-]{20,}")),
    ("slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}")),
    ("aws access key", re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16}\b")),
    ("google api key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}")),
    ("private key", re.compile(r"-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY(?: BLOCK)?-----")),
    ("bearer token", re.compile(r"\b[Bb]earer[ \t]+[A-Za-z0-9._~+/-]{16,}=*")),
    ("json web token", re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")),
    (
        "credential assignment",
        re.compile(
            r"\b[A-Z0-9_]{0,40}(?:PASSWORD|PASSWD|SECRET|TOKEN|API_?KEY|PRIVATE_?KEY|ACCESS_?KEY)"
            r"[A-Z0-9_]{0,40}[ \t]*[=:][ \t]*['\"]?([^\s'\"]{8,200})"
        ),
    ),
)

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


def _specific_plugins() -> tuple[BasePlugin, ...]:
    # Every detect-secrets 1.5 plugin with a specific shape. Left out on purpose: the hex
    # entropy plugin (commit ids and file hashes are ordinary project memory) and the public
    # IP plugin (an address is not a credential).
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
        self._specific = _specific_plugins()
        self._keyword = KeywordDetector()
        self._entropy = Base64HighEntropyString(limit=_ENTROPY_LIMIT)

    def first_finding(self, text: str) -> str | None:
        """The kind of the first credential found in *text*, or None."""
        if len(text) > self.max_chars:
            raise ValueError("text is longer than the scanner's cap")
        found = self._extra(text)
        if found is not None:
            return found
        for chunk in self._chunks(text):
            found = self._detect_secrets(chunk)
            if found is not None:
                return found
        return None

    def _extra(self, text: str) -> str | None:
        for kind, pattern in _EXTRA_RULES:
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
            if self._plausible(value, shortened) and not heuristic.is_indirect_reference(chunk):
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
            heuristic.is_templated_secret(value)
            or heuristic.is_prefixed_with_dollar_sign(value)
            or heuristic.is_sequential_string(value)
            or heuristic.is_potential_uuid(value)
            or heuristic.is_not_alphanumeric_string(value)
            or heuristic.is_likely_id_string(value, line)
        )
