"""`ctxledger serve`: the web inspector over a ledger URL, on a loopback port by default; any
other bind needs an access token (``--token``, ``CTXLEDGER_WEB_TOKEN`` or one generated and
printed once)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Annotated

import typer

from ctxledger.adapters.ledger.store_files import check_catalog_file, check_ledger_file
from ctxledger.domain.errors import CtxLedgerError, StoreURLError

__all__ = ["TOKEN_ENV", "ServeError", "bind_socket", "serve"]

TOKEN_ENV = "CTXLEDGER_WEB_TOKEN"


class ServeError(CtxLedgerError):
    """The inspector could not start (e.g. the port is taken)."""


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket bound to *host*:*port* (0 picks a free port)."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ServeError(f"cannot resolve host {host!r}: {exc}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return sock


def _check_store(store: str, catalog: Path | None) -> None:
    """Refuse a SQLite URL whose file does not exist or is not a ledger (serving never creates
    or converts a ledger), and a catalog that is not one, before the server starts."""
    if store.startswith("sqlite:///"):
        path = Path(store[len("sqlite:///") :])
        if not path.is_file():
            raise StoreURLError(f"{store}: no ledger file at {path}")
        check_ledger_file(path, must_be_ledger=True)
    if catalog is not None:
        check_catalog_file(catalog, must_be_catalog=False)


ServeStoreOpt = Annotated[
    str,
    typer.Option(
        "--store",
        envvar="CTXLEDGER_STORE",
        help="Ledger URL: memory://, sqlite:///path, postgresql://…",
    ),
]
CatalogOpt = Annotated[
    Path | None,
    typer.Option(
        "--catalog",
        envvar="CTXLEDGER_CATALOG",
        help="Project-memory catalog: listed on /memory; promote and verify write to it.",
    ),
]
HostOpt = Annotated[str, typer.Option("--host", help="Address to bind (default loopback only).")]
PortOpt = Annotated[int, typer.Option("--port", help="TCP port; 0 picks a free one.")]
ReadOnlyOpt = Annotated[
    bool, typer.Option("--read-only", help="Hide the manual controls and refuse every POST.")
]
TokenOpt = Annotated[
    str | None,
    typer.Option(
        "--token",
        envvar=TOKEN_ENV,
        help="Access token every request must prove (?token=, Authorization: Bearer, then "
        "a cookie). Needed off loopback: without it one is generated and printed once.",
    ),
]


def serve(
    *,
    store: ServeStoreOpt,
    catalog: CatalogOpt = None,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8765,
    read_only: ReadOnlyOpt = False,
    token: TokenOpt = None,
) -> None:
    """The web inspector: agents, generations, diffs, cache and memory in a browser."""
    from ctxledger.adapters.extras import require_extra

    require_extra("web", "ctxledger serve")
    import uvicorn

    from ctxledger.adapters.web import create_app
    from ctxledger.adapters.web.access import (
        MIN_TOKEN_CHARS,
        access_for_bind,
        is_loopback_bind,
        new_token,
    )
    from ctxledger.adapters.web.headers import SecureH11Protocol

    if not 0 <= port <= 65535:
        raise ServeError(f"port {port} is out of range 0–65535")
    if token is not None and (len(token) < MIN_TOKEN_CHARS or not token.isascii()):
        raise ServeError(f"--token must be at least {MIN_TOKEN_CHARS} ASCII characters")
    generated = token is None and not is_loopback_bind(host)
    if generated:
        token = new_token()
    _check_store(store, catalog)
    sock = bind_socket(host, port)
    try:
        bound = sock.getsockname()[1]
        access = access_for_bind(host, bound, token)
        app = create_app(store, catalog=catalog, read_only=read_only, access=access)
    except BaseException:
        sock.close()
        raise
    shown = f"[{host}]" if ":" in host else host
    mode = "read-only" if read_only else "manual controls enabled"
    query = f"?token={token}" if generated else ""
    guard = "; access token required" if token is not None else ""
    sys.stdout.write(
        f"ctxledger inspector: http://{shown}:{bound}/{query} ({mode}{guard}; Ctrl-C stops)\n"
    )
    sys.stdout.flush()
    if not is_loopback_bind(host):
        sys.stderr.write(
            f"ctxledger: warning: {host} is reachable from other machines; anyone who has "
            "the token can read the ledger's pages and use the controls\n"
        )
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, lifespan="on", http=SecureH11Protocol
    )
    uvicorn.Server(config).run(sockets=[sock])
