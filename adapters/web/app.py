"""The web inspector: a Starlette app over one ledger URL, server-rendered, without scripts."""

from __future__ import annotations

import contextlib
import importlib.resources
import os
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import urlsplit

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.routing import Route
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp

from ctxledger.adapters.web.access import Access, AccessGuard
from ctxledger.adapters.web.backend import InspectorBackend
from ctxledger.adapters.web.controls import FormError
from ctxledger.adapters.web.headers import SecurityHeaders
from ctxledger.adapters.web.links import environment
from ctxledger.adapters.web.pages import Pages
from ctxledger.domain.errors import CtxLedgerError, InvalidInputError

__all__ = ["create_app", "display_url"]


def display_url(url: str) -> str:
    """A store URL fit to show on a page: any password replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password:
        return url.replace(f":{parts.password}@", ":***@", 1)
    return url


class _InspectorApp(Starlette):
    """Starlette with the security headers outside everything, the 500 page included."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


def create_app(
    store_url: str,
    *,
    catalog: str | os.PathLike[str] | None = None,
    read_only: bool = False,
    token: str | None = None,
    access: Access | None = None,
) -> Starlette:
    """The inspector app over the ledger at *store_url*.

    ``token`` is the per-server secret every control form carries (random when not given);
    ``read_only`` hides the controls and refuses every POST with 403; ``access`` (from
    ``access_for_bind``: ``ctxledger serve`` always passes one) refuses a Host the bind does
    not answer to, which closes DNS rebinding, and requests without the access token. The
    ledger opens now, so a bad URL fails here."""
    if token is not None and len(token) < 16:
        raise InvalidInputError("the CSRF token must be at least 16 characters")
    secret = token or secrets.token_urlsafe(32)
    catalog_path = Path(catalog) if catalog is not None else None
    css = (
        importlib.resources.files("ctxledger.adapters.web")
        .joinpath("static/inspector.css")
        .read_bytes()
    )
    env = environment(
        token=secret,
        read_only=read_only,
        store_label=display_url(store_url),
        catalog=catalog_path,
    )
    backend = InspectorBackend(store_url, catalog_path)
    pages = Pages(
        Jinja2Templates(env=env),
        backend,
        secret=secret,
        read_only=read_only,
        catalog=catalog_path,
        css=css,
    )

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            backend.close()

    middleware = []
    if access is not None:
        middleware.append(Middleware(AccessGuard, access=access, refuse=pages.refuse))
    app = _InspectorApp(
        routes=[
            Route("/", pages.index, methods=["GET"]),
            Route("/cache", pages.cache, methods=["GET"]),
            Route("/memory", pages.memory, methods=["GET"]),
            Route("/memory/control", pages.memory_control, methods=["POST"]),
            Route("/static/inspector.css", pages.stylesheet, methods=["GET"]),
            Route("/agents/{rest:path}", pages.agents, methods=["GET", "POST"]),
        ],
        middleware=middleware,
        exception_handlers={
            HTTPException: pages.on_http_error,
            FormError: pages.on_form_error,
            CtxLedgerError: pages.on_ledger_error,
            Exception: pages.on_unexpected,
        },
        lifespan=lifespan,
    )
    app.state.csrf_token = secret
    app.state.read_only = read_only
    return app
