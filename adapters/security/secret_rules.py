"""The scanner's own rules: credential shapes detect-secrets misses, or matches only in
narrower shapes, each a linear regular expression (no nested quantifiers)."""

from __future__ import annotations

import re
from typing import Final, NamedTuple

__all__ = ["EXTRA_RULES", "SHAPED_RULES", "SPAN_RULES", "Rule"]


# Rules detect-secrets misses or only matches in narrower shapes. Every pattern is linear: no
# nested quantifiers, bounded alternations, so the whole (size-capped) text is scanned at once.
EXTRA_RULES: Final[tuple[tuple[str, re.Pattern[str]], ...]] = (
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


# The record-time scan (``findings``) runs the same shapes, written so that Python's regex
# engine can jump to a literal prefix (a leading \b or (?i:) makes it try every position,
# 10x slower): word boundaries are checked after a match, and case-insensitive rules run on
# the lower-cased text. Plus shapes the intake leaves to detect-secrets, which gives no span
# for them or misses them unquoted and lower-case.
class Rule(NamedTuple):
    kind: str
    pattern: re.Pattern[str]
    lower: bool = False  # matched on text.lower()
    boundary: bool = False  # the match must not follow a word character
    shaped: bool = False  # a fixed-prefix token: also searched across joined line breaks


SPAN_RULES: Final[tuple[Rule, ...]] = (
    Rule("github fine-grained token", re.compile(r"github_pat_[A-Za-z0-9_]{20,}"), shaped=True),
    Rule("github token", re.compile(r"gh[pousr]_[A-Za-z0-9]{30,}"), boundary=True, shaped=True),
    Rule(
        "openai key",
        re.compile(r"sk-(?:proj-|svcacct-|admin-|ant-[a-z0-9]+-)?[A-Za-z0-9_-]{20,}"),
        boundary=True,
        shaped=True,
    ),
    Rule("slack token", re.compile(r"xox[abposr]-[A-Za-z0-9-]{10,}"), boundary=True, shaped=True),
    Rule(
        "aws access key",
        re.compile(r"A(?:KIA|SIA|BIA|CCA)[0-9A-Z]{16}(?![0-9A-Za-z_])"),
        boundary=True,
        shaped=True,
    ),
    Rule("google api key", re.compile(r"AIza[0-9A-Za-z_-]{35}"), boundary=True, shaped=True),
    Rule(
        "private key",
        re.compile(r"-----begin[a-z0-9 ]{0,40} private key(?: block)?-----"),
        lower=True,
    ),
    # a key's base64 body pasted without its header: four or more 64-character lines
    Rule(
        "private key body",
        re.compile(r"(?m)^(?:[A-Za-z0-9+/]{64}[ \t]*\r?\n){4,}[A-Za-z0-9+/]{0,64}={0,2}"),
    ),
    # an AWS secret access key: exactly 40 characters, checked after the match (_aws_secret)
    Rule("aws secret key", re.compile(r"[A-Za-z0-9/+]{40,}")),
    Rule(
        "bearer token",
        re.compile(r"bearer[ \t]+([a-z0-9._~+/-]{16,}=*)"),
        lower=True,
        boundary=True,
    ),
    Rule(
        "json web token",
        # (?<!…) after the literal keeps the prefix search and tries only token starts: a run
        # of "eyJ" with no dot would otherwise be re-scanned from each of its positions
        re.compile(
            r"eyJ(?<![A-Za-z0-9_-]eyJ)[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"
        ),
        boundary=True,
        shaped=True,
    ),
    Rule("stripe key", re.compile(r"[rs]k_live_[0-9A-Za-z]{20,}"), boundary=True, shaped=True),
    Rule(
        "credential assignment",
        re.compile(
            r"(?:password|passwd|pwd|secret|token|api_?key|access_?key|private_?key|auth_?key)"
            r"[a-z0-9_.-]{0,40}['\"]?[ \t]*[=:][ \t]*['\"]?"
            r"([^\s'\",;(){}\[\]<>]{8,200})(?=$|[\s'\",;])"
        ),
        lower=True,
    ),
    Rule("password in URL", re.compile(r"://[^\s:@/]{1,100}:([^\s@/]{4,200})@")),
)
SHAPED_RULES: Final = tuple(r for r in SPAN_RULES if r.shaped)
