"""Fake credentials of 40+ kinds for the record-time secret scan, generated from a fixed seed.

Every value is built here at import time: none is a real credential and none appears literally
in this file (prefixes are split so that the repository itself holds no token shape).
"""

from __future__ import annotations

import base64
import json
import random
import string
import textwrap
from typing import NamedTuple

__all__ = ["SECRET_CASES", "SecretCase"]

ALNUM = string.ascii_letters + string.digits
LOWER_ALNUM = string.ascii_lowercase + string.digits
UPPER_DIGITS = string.ascii_uppercase + string.digits
HEX = "0123456789abcdef"
B64 = ALNUM + "+/"
B64URL = ALNUM + "-_"


class SecretCase(NamedTuple):
    """One fixture: its kind, the text an agent saw, and the strings that must not survive
    redaction (the secret, or each fragment of a split or the encoded form of a wrapped one)."""

    kind: str
    text: str
    needles: tuple[str, ...]


def _r(rng: random.Random, alphabet: str, n: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _mixed(rng: random.Random, n: int) -> str:
    # Random with a digit, a lower and an upper letter, as every real token has.
    return rng.choice("aqz") + rng.choice("2579") + rng.choice("QXK") + _r(rng, ALNUM, n - 3)


def _b64url_json(data: dict[str, object]) -> str:
    raw = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _pem(rng: random.Random, label: str, *, end: bool = True) -> tuple[str, tuple[str, ...]]:
    body = [_r(rng, B64, 64) for _ in range(6)] + [_r(rng, B64, 20) + "=="]
    lines = [f"-----BEGIN {label}PRIVATE KEY-----", *body]
    if end:
        lines.append(f"-----END {label}PRIVATE KEY-----")
    return "\n".join(lines), tuple(body)


def _cases() -> list[SecretCase]:
    rng = random.Random(20261204)
    cases: list[SecretCase] = []

    def add(kind: str, secret: str, template: str) -> None:
        cases.append(SecretCase(kind, template.format(secret), (secret,)))

    aws_id = "AK" + "IA" + _r(rng, UPPER_DIGITS, 16)
    aws_secret = _mixed(rng, 40)
    add("aws access key id", aws_id, "aws_access_key_id = {}\nregion = eu-west-1")
    add("aws secret access key", aws_secret, 'aws_secret_access_key = "{}"')
    add("aws session key id", "AS" + "IA" + _r(rng, UPPER_DIGITS, 16), "temporary id {} (1h)")
    add("github classic token", "gh" + "p_" + _r(rng, ALNUM, 36), "export GH_TOKEN_VALUE {}")
    add("github oauth token", "gh" + "o_" + _r(rng, ALNUM, 36), "the oauth token was {}")
    add("github app token", "gh" + "s_" + _r(rng, ALNUM, 36), "installation token {} expires")
    add("github user token", "gh" + "u_" + _r(rng, ALNUM, 36), "user-to-server: {}")
    add(
        "github fine-grained token",
        "github" + "_pat_" + _r(rng, ALNUM, 22) + "_" + _r(rng, ALNUM, 59),
        "git clone https://x:{}@github.com/acme/app.git",
    )
    add(
        "slack bot token",
        "xo" + "xb-" + _r(rng, string.digits, 12) + "-" + _r(rng, LOWER_ALNUM, 24),
        "SLACK_BOT={}",
    )
    add(
        "slack user token",
        "xo"
        + "xp-"
        + _r(rng, string.digits, 11)
        + "-"
        + _r(rng, string.digits, 12)
        + "-"
        + _r(rng, LOWER_ALNUM, 32),
        "posted with {} yesterday",
    )
    add(
        "slack webhook",
        "https://hooks.slack"
        + ".com/services/T"
        + _r(rng, string.ascii_uppercase, 8)
        + "/B"
        + _r(rng, string.ascii_uppercase, 8)
        + "/"
        + _r(rng, ALNUM, 24),
        "alerts go to {}",
    )
    add("stripe live key", "sk" + "_live_" + _r(rng, ALNUM, 24), "stripe.api_key = {}")
    add("stripe restricted key", "rk" + "_live_" + _r(rng, ALNUM, 24), "restricted key {}")
    add("google api key", "AI" + "za" + _r(rng, ALNUM + "-_", 35), "maps key {} in config")
    for label in ("RSA ", "OPENSSH ", "EC ", ""):
        block, body = _pem(rng, label)
        cases.append(
            SecretCase(f"pem {label or 'pkcs8 '}private key", f"$ cat key\n{block}\n$ ", body)
        )
    block, body = _pem(rng, "DSA ", end=False)
    cases.append(SecretCase("pem key without end line", f"{block}\n", body))
    jwt = ".".join(
        (
            _b64url_json({"alg": "HS256", "typ": "JWT"}),
            _b64url_json({"sub": "user-" + _r(rng, LOWER_ALNUM, 8), "iat": 1764806400}),
            _r(rng, B64URL, 43),
        )
    )
    add("json web token", jwt, "Cookie: session={}; Path=/")
    add(
        "postgres url password",
        _mixed(rng, 16),
        "DATABASE_URL=postgres://app:{}@db.internal:5432/app",
    )
    add("mysql url password", _mixed(rng, 14), "mysql://root:{}@127.0.0.1:3306/shop")
    add("redis url password", _mixed(rng, 20), "connecting to redis://default:{}@cache:6379/0")
    add(
        "short db password in url", "pa55" + _r(rng, LOWER_ALNUM, 4), "postgresql://user:{}@host/db"
    )
    add("hex password assignment", _r(rng, HEX, 32) + "a1", "password={}")
    add("base64 secret assignment", _mixed(rng, 40), "secret = {}")
    add("token assignment", _mixed(rng, 36), "token: {}")
    add("env db password", _mixed(rng, 18), "DB_PASSWORD={}")
    add("json api key", _mixed(rng, 32), '{{"api_key": "{}", "region": "eu"}}')
    add("yaml client secret", _mixed(rng, 24), 'client_secret: "{}"')
    add("export github token", _mixed(rng, 30), "export github_token={}")
    add("bearer header", _mixed(rng, 40), "curl -H 'Authorization: Bearer {}' https://api")
    add("openai project key", "sk" + "-proj-" + _mixed(rng, 74), 'OpenAI(api_key="{}")')
    add("anthropic key", "sk" + "-ant-api03-" + _mixed(rng, 80), "ANTHROPIC_API_KEY {}")
    add("sendgrid key", "SG." + _r(rng, ALNUM, 22) + "." + _r(rng, ALNUM, 43), "mail via {}")
    add("twilio key", "SK" + _r(rng, HEX, 32), "twilio api key {}")
    add("npm token", "npm" + "_" + _r(rng, ALNUM, 36), "//registry.npmjs.org/:_authToken={}")
    add("pypi token", "pypi-AgEIcHlwaS5vcmc" + _r(rng, ALNUM, 80), "twine upload -p {}")
    add("gitlab token", "gl" + "pat-" + _r(rng, ALNUM, 20), "gitlab token {}")
    add("telegram bot token", _r(rng, string.digits, 9) + ":AA" + _r(rng, ALNUM, 33), "bot {}")
    add("mailchimp key", _r(rng, HEX, 32) + "-us12", "mailchimp key {}")
    add("square secret", "sq0" + "csp-" + _r(rng, ALNUM, 43), "square secret {}")
    add("quoted high entropy", _mixed(rng, 44), 'SIGNING = "{}"')

    # Split across lines: each fragment must go.
    token = "gh" + "p_" + _r(rng, ALNUM, 36)
    cases.append(
        SecretCase(
            "github token split over lines",
            f"token is {token[:22]}\n{token[22:]} ok",
            (token[:22], token[22:]),
        )
    )
    key = "AK" + "IA" + _r(rng, UPPER_DIGITS, 16)
    cases.append(
        SecretCase("aws key split over lines", f"id: {key[:12]}\n  {key[12:]}\n", (key[:12],))
    )
    cases.append(
        SecretCase(
            "jwt split over lines",
            f"Cookie: {jwt[:40]}\n{jwt[40:80]}\n{jwt[80:]}",
            (jwt[:40], jwt[40:80]),
        )
    )

    # Base64-wrapped: the encoded form must go (and the secret, which never appears plainly).
    stripe = "sk" + "_live_" + _r(rng, ALNUM, 24)
    env = f"export STRIPE_KEY={stripe}\n".encode()
    encoded = base64.b64encode(env).decode()
    cases.append(
        SecretCase("base64-wrapped env file", f"data:\n  env: {encoded}\n", (encoded, stripe))
    )
    gh = "gh" + "o_" + _r(rng, ALNUM, 36)
    encoded = base64.b64encode(gh.encode()).decode()
    cases.append(SecretCase("base64 github token", f"echo {encoded} | base64 -d", (encoded,)))
    dotenv = "\n".join(
        [
            "APP_NAME=shop",
            "AWS_ACCESS_KEY_ID=" + "AK" + "IA" + _r(rng, UPPER_DIGITS, 16),
            "AWS_SECRET_ACCESS_KEY=" + _mixed(rng, 40),
            "LOG_LEVEL=debug",
        ]
    ).encode()
    encoded = base64.b64encode(dotenv).decode()
    wrapped = "\n".join(textwrap.wrap(encoded, 76))
    pieces = tuple(line for line in wrapped.splitlines() if len(line) >= 20)
    cases.append(
        SecretCase("base64 dotenv wrapped at 76 columns", f"$ base64 .env\n{wrapped}\n$ ", pieces)
    )
    return cases


SECRET_CASES: tuple[SecretCase, ...] = tuple(_cases())
