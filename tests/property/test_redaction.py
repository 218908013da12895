"""Properties of record-time redaction: idempotent, and no found secret survives it."""

from __future__ import annotations

import re
import string

from hypothesis import given
from hypothesis import strategies as st

from ctxledger.adapters.security.secret_scan import SecretScanner, redaction_marker
from tests.secret_corpus import SECRET_CASES

SCANNER = SecretScanner()
MARKER = re.compile(r"\[secret: [^\]\n]{1,80}, \d+ chars\]")

# Ordinary text around the secrets: code-ish and log-ish characters, line breaks included.
FILLER = st.text(
    alphabet=string.ascii_letters + string.digits + " _-=:./'\"\n\t()[]{}#@",
    max_size=120,
)
SECRETS = st.sampled_from([case.text for case in SECRET_CASES])
TEXTS = st.lists(st.one_of(FILLER, SECRETS), max_size=8).map("".join)


@given(text=TEXTS)
def test_redaction_is_idempotent(text: str) -> None:
    once, kinds = SCANNER.redact(text)
    twice, again = SCANNER.redact(once)
    assert twice == once
    assert again == ()
    assert SCANNER.findings(once) == []
    assert bool(kinds) == (MARKER.search(once) is not None)
    assert len(MARKER.findall(once)) <= len(kinds)


@given(text=TEXTS)
def test_no_found_secret_is_left_outside_a_marker(text: str) -> None:
    found = SCANNER.findings(text)
    redacted, kinds = SCANNER.redact(text)
    outside = MARKER.sub("\x00", redacted)
    for finding in found:
        assert text[finding.start : finding.end] not in outside
    assert bool(kinds) == bool(found)


@given(index=st.integers(min_value=0, max_value=len(SECRET_CASES) - 1), before=FILLER, after=FILLER)
def test_every_fixture_secret_is_redacted_anywhere(index: int, before: str, after: str) -> None:
    case = SECRET_CASES[index]
    redacted, kinds = SCANNER.redact(f"{before}\n{case.text}\n{after}")
    assert kinds
    for needle in case.needles:
        assert needle not in MARKER.sub("\x00", redacted)


def test_the_marker_names_kind_and_length_only() -> None:
    assert redaction_marker("aws access key", 20) == "[secret: aws access key, 20 chars]"
    assert MARKER.fullmatch(redaction_marker("base64 github token", 56))


@given(texts=st.lists(TEXTS, min_size=1, max_size=4))
def test_the_memo_of_clean_lines_never_changes_a_result(texts: list[str]) -> None:
    # SCANNER has seen thousands of texts; a new scanner has seen none.
    for text in texts:
        assert SCANNER.findings(text) == SecretScanner().findings(text)
