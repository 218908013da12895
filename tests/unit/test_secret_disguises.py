"""Credentials in disguise are found and redacted whole (issue 19, item 6).

Each disguise an agent's tool output can carry — fullwidth forms, look-alike letters of other
scripts, zero-width characters and soft hyphens, percent- and hex-encoding, a token typed in
groups, a PEM header in lower case or with one Cyrillic letter, a key body with no header,
an AWS secret key unquoted in prose — is applied to fake credentials generated here, and the
redacted text must hold neither the disguised value nor the plain one. Hypothesis composes
disguises over random tokens; the views' maps back to the original text are checked on any
text."""

from __future__ import annotations

import random
import string
import unicodedata
import urllib.parse
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ctxledger.adapters.security.secret_scan import SecretScanner
from ctxledger.adapters.security.secret_views import despaced, normalized, percent_decoded

ALNUM = string.ascii_letters + string.digits
SCANNER = SecretScanner()
_rng = random.Random(20261204)


def _r(alphabet: str, n: int) -> str:
    return "".join(_rng.choice(alphabet) for _ in range(n))


def _mixed(n: int) -> str:
    return "a7Q" + _r(ALNUM, n - 3)


# prefixes split so that this file holds no token shape
GITHUB = "gh" + "p_" + _mixed(36)
SLACK = "xo" + "xb-" + _r(string.digits, 12) + "-" + _mixed(24)
AWS_ID = "AK" + "IA" + _r(string.ascii_uppercase + string.digits, 16)
AWS_SECRET = _mixed(18) + "/" + _mixed(21)
PEM_BODY = "\n".join(_r(ALNUM + "+/", 64) for _ in range(6))


def fullwidth(s: str) -> str:
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in s)


def zero_width(s: str) -> str:
    return "\u200b".join(s[i : i + 7] for i in range(0, len(s), 7))


def soft_hyphen(s: str) -> str:
    return s[:9] + "\u00ad" + s[9:]


def homoglyph(s: str) -> str:
    # Cyrillic look-alikes of the first Latin letters that have one
    table = str.maketrans("aeopcxyAEKMHOPCTX", "аеорсхуАЕКМНОРСТХ")
    return s[:6].translate(table) + s[6:]


def percent(s: str) -> str:
    return "".join(f"%{b:02X}" for b in s.encode())


def hexed(s: str) -> str:
    return s.encode().hex()


def grouped(s: str) -> str:
    return " ".join(s[i : i + 6] for i in range(0, len(s), 6))


DISGUISES: dict[str, Callable[[str], str]] = {
    "fullwidth": fullwidth,
    "zero-width": zero_width,
    "soft hyphen": soft_hyphen,
    "homoglyph": homoglyph,
    "percent-encoded": percent,
    "url-quoted": lambda s: urllib.parse.quote(s, safe=""),
    "hex": hexed,
    "typed in groups": grouped,
}

TOKENS = {"github token": GITHUB, "slack token": SLACK, "aws access key": AWS_ID}


def _assert_gone(text: str, *needles: str) -> None:
    redacted, kinds = SCANNER.redact(text)
    assert kinds, f"nothing found in {text!r}"
    for needle in needles:
        assert needle not in redacted
    # nothing of the disguised value survives either: its canonical form is gone too
    view = normalized(redacted)
    for needle in needles:
        assert view is None or needle not in view.text


@pytest.mark.parametrize("disguise", sorted(DISGUISES))
@pytest.mark.parametrize("kind", sorted(TOKENS))
def test_a_disguised_token_is_redacted_whole(kind: str, disguise: str) -> None:
    token = TOKENS[kind]
    shown = DISGUISES[disguise](token)
    text = f"$ cat ~/.config/tool.env\nTOKEN {shown}\n(end)"
    _assert_gone(text, shown, token)


@pytest.mark.parametrize(
    ("case", "text", "needles"),
    [
        ("aws secret in prose", f"the secret access key is {AWS_SECRET} for prod", (AWS_SECRET,)),
        ("aws secret bare", f"{AWS_SECRET}\n", (AWS_SECRET,)),
        (
            "pem with a Cyrillic header letter",
            "-----BEGIN RSA PRIV\u0410TE KEY-----\n" + PEM_BODY + "\n-----END RSA PRIVATE KEY-----",
            tuple(PEM_BODY.splitlines()),
        ),
        (
            "pem in lower case",
            "-----begin rsa private key-----\n" + PEM_BODY + "\n-----end rsa private key-----",
            tuple(PEM_BODY.splitlines()),
        ),
        ("pem body with no header", "key material:\n" + PEM_BODY + "\n", tuple(PEM_BODY.split())),
        ("db_password", "db_password=" + _mixed(16), ()),
        ("export github_token", "export github_token=" + _mixed(40), ()),
    ],
    ids=lambda v: v if isinstance(v, str) and len(v) < 40 else "",
)
def test_shapes_that_were_admitted(case: str, text: str, needles: tuple[str, ...]) -> None:
    value = text.split("=", 1)[1] if not needles else ""
    _assert_gone(text, *(needles or (value,)))


def test_the_intake_check_sees_disguises_too() -> None:
    for disguise in DISGUISES.values():
        assert SCANNER.first_finding(f"TOKEN {disguise(GITHUB)}") is not None


@pytest.mark.parametrize(
    "text",
    [
        "commit 3f9a1c0b2d4e5f60718293a4b5c6d7e8f9012345 (HEAD -> main)",
        "sha256: " + "ab" * 32,
        "the café’s menu — naïve façade, ½ price, №5",
        "ghost_town is a variable; skip the sk- prefix docs",
        "100% done, 50%% left, a%20b",
    ],
)
def test_ordinary_text_is_not_flagged(text: str) -> None:
    assert SCANNER.findings(text) == []


@given(st.text(max_size=60))
def test_the_normalised_view_maps_back_to_the_characters_it_came_from(text: str) -> None:
    view = normalized(text)
    if view is None:
        return
    assert len(view.starts) == len(view.ends) == len(view.text)
    assert view.starts == sorted(view.starts)
    # exactly the invisible format characters are dropped, each other one is mapped
    dropped = set(range(len(text))) - set(view.starts)
    assert dropped == {i for i, c in enumerate(text) if unicodedata.category(c) == "Cf"}
    for k, ch in enumerate(view.text):
        assert view.ends[k] == view.starts[k] + 1
        source = text[view.starts[k]]
        if source.isascii():
            assert ch == source  # ASCII is never rewritten


@given(st.text(alphabet=string.printable, max_size=60))
def test_the_percent_view_maps_back_to_its_escapes(text: str) -> None:
    view = percent_decoded(text)
    if view is None:
        return
    for k, ch in enumerate(view.text):
        source = text[view.starts[k] : view.ends[k]]
        assert source == ch or urllib.parse.unquote(source) == ch or source.startswith("%")


@given(
    token=st.sampled_from(sorted(TOKENS.values())),
    chain=st.lists(
        st.sampled_from(["fullwidth", "zero-width", "soft hyphen", "homoglyph"]),
        min_size=1,
        max_size=3,
        unique=True,
    ),
    before=st.text(alphabet=string.ascii_letters + " .:\n", max_size=30),
)
def test_composed_disguises_are_redacted(token: str, chain: list[str], before: str) -> None:
    shown = token
    for name in chain:
        shown = DISGUISES[name](shown)
    _assert_gone(f"{before} {shown} done", shown, token)


def test_spaces_are_joined_only_after_a_token_prefix() -> None:
    assert despaced("the quick brown fox jumps over the lazy dog") is None
    view = despaced("key: " + grouped(GITHUB) + " ok")
    assert view is not None
    assert GITHUB in view.text
