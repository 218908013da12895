"""Who may reach the inspector: loopback Host names on a loopback bind, an access token (then a
signed session cookie) on any other bind, and the actor a web control records."""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import ipaddress
import re
import secrets
from collections.abc import Callable
from typing import Final
from urllib.parse import urlencode

from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ctxledger.domain.errors import InvalidInputError

__all__ = [
    "BY",
    "COOKIE",
    "MIN_TOKEN_CHARS",
    "Access",
    "AccessGuard",
    "access_for_bind",
    "actor_of",
    "is_loopback_bind",
    "loopback_authorities",
    "new_token",
]

BY: Final = "web-inspector"
"""The actor prefix of every web control: ``web-inspector@<address>[#<session>]``."""
MIN_TOKEN_CHARS: Final = 16
COOKIE: Final = "ctxledger_session"
PUBLIC_PATHS: Final = frozenset({"/static/inspector.css"})
_SESSION_KEY: Final = "ctxledger.session"
_SESSION_ID = re.compile(r"[0-9a-f]{12}")

Refuse = Callable[[Request, int, str, "dict[str, str] | None"], Response]
"""Renders a refusal page: (request, status, one-line reason, extra headers)."""


def is_loopback_bind(host: str) -> bool:
    """True for ``localhost`` and any loopback address (``127.0.0.1``, ``::1``, ``[::1]``)."""
    name = host.strip().strip("[]").lower()
    if name == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def _bracketed(name: str) -> str:
    name = name.strip().strip("[]").lower()
    return f"[{name}]" if ":" in name else name


def loopback_authorities(host: str, port: int) -> frozenset[str]:
    """The Host header values a loopback bind on *port* answers to: ``localhost``,
    ``127.0.0.1``, ``[::1]`` and the bound address, each with the port (also without it on
    port 80, where browsers leave it out)."""
    names = {"localhost", "127.0.0.1", "[::1]", _bracketed(host)}
    authorities = {f"{name}:{port}" for name in names}
    if port == 80:
        authorities |= names
    return frozenset(authorities)


def new_token() -> str:
    """A fresh random access token (URL-safe, 43 characters)."""
    return secrets.token_urlsafe(32)


@dataclasses.dataclass(frozen=True, slots=True)
class Access:
    """Who may reach the app: the Host values it answers to (``None``: any) and the access
    token every request must prove (``None``: none)."""

    hosts: frozenset[str] | None = None
    token: str | None = None

    def __post_init__(self) -> None:
        if self.token is not None and (
            len(self.token) < MIN_TOKEN_CHARS or not self.token.isascii()
        ):
            raise InvalidInputError(
                f"the access token must be at least {MIN_TOKEN_CHARS} ASCII characters"
            )
        if self.hosts is None and self.token is None:
            raise InvalidInputError("an inspector open to any Host name needs an access token")


def access_for_bind(host: str, port: int, token: str | None) -> Access:
    """The access policy of a server bound to *host*:*port*: a loopback bind answers only to
    loopback Host names (a token is optional); any other bind needs a token (refused
    without one) and then answers to any Host name."""
    if is_loopback_bind(host):
        return Access(hosts=loopback_authorities(host, port), token=token)
    if token is None:
        raise InvalidInputError(
            f"{host} is not a loopback address: the inspector needs an access token there"
        )
    return Access(hosts=None, token=token)


def _mac(token: str, session: str) -> str:
    return hmac.new(
        token.encode("ascii"), b"ctxledger-session:" + session.encode("ascii"), hashlib.sha256
    ).hexdigest()


def _session_of(token: str, cookie: str | None) -> str | None:
    """The session id a cookie proves, or None (constant-time comparison of the signature)."""
    if not cookie or "." not in cookie:
        return None
    session, _, mac = cookie.partition(".")
    if not _SESSION_ID.fullmatch(session) or not mac.isascii():
        return None
    if not hmac.compare_digest(mac.encode("ascii"), _mac(token, session).encode("ascii")):
        return None
    return session


def _same_token(given: str, token: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8"), token.encode("utf-8"))


def _bearer(request: Request) -> str | None:
    value = request.headers.get("authorization", "")
    scheme, _, credentials = value.partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        return None
    return credentials.strip()


def actor_of(scope: Scope) -> str:
    """``web-inspector@<remote address>``, with ``#<session id>`` on a token-guarded server."""
    client = scope.get("client")
    address = str(client[0]) if client else "unknown"
    session = scope.get(_SESSION_KEY)
    return f"{BY}@{address}#{session}" if session else f"{BY}@{address}"


class AccessGuard:
    """Refuses, before any route runs (so nothing is written): a Host the bind does not
    answer to (421) and, with a token, a request that proves neither the session cookie nor
    the token (401). A valid ``?token=`` or ``Authorization: Bearer`` starts a session: an
    HttpOnly, SameSite=Strict cookie signed with the token (a GET with ``?token=`` is
    redirected to the same URL without it)."""

    def __init__(self, app: ASGIApp, *, access: Access, refuse: Refuse) -> None:
        self.app = app
        self.access = access
        self.refuse = refuse

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan; the app has no websocket route
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        refused = self._check_host(request)
        if refused is not None:
            await refused(scope, receive, send)
            return
        token = self.access.token
        if token is None or scope["path"] in PUBLIC_PATHS:
            await self.app(scope, receive, send)
            return
        session = _session_of(token, request.cookies.get(COOKIE))
        if session is not None:
            scope[_SESSION_KEY] = session
            await self.app(scope, receive, send)
            return
        given = request.query_params.get("token")
        bearer = _bearer(request)
        proof = given if given is not None else bearer
        if proof is None or not _same_token(proof, token):
            reason = (
                "this inspector needs its access token: open the URL printed when it started "
                "(…/?token=…) or send Authorization: Bearer <token>"
            )
            if proof is not None:
                reason = "wrong access token"
            response = self.refuse(request, 401, reason, {"www-authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        session = secrets.token_hex(6)
        cookie = self._cookie(token, session)
        scope[_SESSION_KEY] = session
        if given is not None and scope["method"] in ("GET", "HEAD"):
            rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
            raw = scope.get("raw_path")  # keeps an encoded "/" in an agent id encoded
            path = "/" + (raw.decode("latin-1") if raw else scope["path"]).lstrip("/")
            target = path + ("?" + urlencode(rest) if rest else "")
            redirect = RedirectResponse(target, status_code=303)
            redirect.headers.append("set-cookie", cookie)
            await redirect(scope, receive, send)
            return

        async def send_with_cookie(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).append("set-cookie", cookie)
            await send(message)

        await self.app(scope, receive, send_with_cookie)

    def _check_host(self, request: Request) -> Response | None:
        hosts = self.access.hosts
        if hosts is None:
            return None
        given = request.headers.getlist("host")
        if len(given) == 1 and given[0].strip().lower() in hosts:
            return None
        shown = given[0][:80] if given else ""
        names = ", ".join(sorted(hosts))
        reason = f"this inspector answers only to {names}; Host {shown!r} refused"
        return self.refuse(request, 421, reason, None)

    @staticmethod
    def _cookie(token: str, session: str) -> str:
        return f"{COOKIE}={session}.{_mac(token, session)}; Path=/; HttpOnly; SameSite=Strict"
