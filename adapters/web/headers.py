"""The security headers of every inspector response: app pages, error pages, the 500 of an
unexpected exception and the HTTP server's own 400 for a request it cannot parse."""

from __future__ import annotations

from typing import Final

import h11
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

__all__ = ["SECURITY_HEADERS", "SecureH11Protocol", "SecurityHeaders"]

SECURITY_HEADERS: Final = (
    (
        "content-security-policy",
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "same-origin"),
    ("cache-control", "no-store"),
)


class SecurityHeaders:
    """Adds a strict CSP (no scripts at all) and friends to every response that does not set
    its own value; wraps the whole app, outside the handler of unexpected exceptions."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS:
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)


class SecureH11Protocol(H11Protocol):
    """uvicorn's h11 protocol whose own 400 (a request it cannot parse, never reaching the
    app) carries the security headers too."""

    def send_400_response(self, msg: str) -> None:
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"connection", b"close"),
            *((name.encode("ascii"), value.encode("ascii")) for name, value in SECURITY_HEADERS),
        ]
        event = h11.Response(status_code=400, headers=headers, reason=b"Bad Request")
        self.transport.write(self.conn.send(event) or b"")
        self.transport.write(self.conn.send(h11.Data(data=msg.encode("ascii"))) or b"")
        self.transport.write(self.conn.send(h11.EndOfMessage()) or b"")
        self.transport.close()
