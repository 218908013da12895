"""`ctxledger api`: the JSON service of ``adapters.api`` over a ledger URL, over HTTP (loopback
by default; any other bind needs ``--token`` or ``CTXLEDGER_API_TOKEN``) or, with ``--stdio``,
as JSON lines on stdin/stdout."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from ctxledger.adapters.cli.options import StoreOpt
from ctxledger.adapters.cli.serve import bind_socket
from ctxledger.domain.errors import CtxLedgerError

__all__ = ["TOKEN_ENV", "ApiStartError", "api", "idempotency_path"]

TOKEN_ENV = "CTXLEDGER_API_TOKEN"
MIN_TOKEN_CHARS = 16


class ApiStartError(CtxLedgerError):
    """``ctxledger api`` refused to start (a usage mistake: exit 2)."""

    exit_code = 2


def idempotency_path(store: str, given: Path | None) -> str:
    """Where the ``Idempotency-Key`` answers live: *given*, else beside a SQLite ledger
    (``<ledger>.api-keys.db``), else in memory."""
    if given is not None:
        return str(given)
    if store.startswith("sqlite:///"):
        return store[len("sqlite:///") :] + ".api-keys.db"
    return ":memory:"


def api(
    *,
    store: StoreOpt,
    host: Annotated[str, typer.Option("--host", help="Address to bind (default loopback).")] = (
        "127.0.0.1"
    ),
    port: Annotated[int, typer.Option("--port", help="TCP port; 0 picks a free one.")] = 8766,
    token: Annotated[
        str | None,
        typer.Option(
            "--token",
            envvar=TOKEN_ENV,
            help="Bearer token every request must send (Authorization: Bearer …); required "
            "off loopback.",
        ),
    ] = None,
    stdio: Annotated[
        bool, typer.Option("--stdio", help="Answer JSON-line requests on stdin/stdout instead.")
    ] = False,
    idempotency_db: Annotated[
        Path | None,
        typer.Option(
            "--idempotency-db",
            help="SQLite file of the Idempotency-Key answers (default: <ledger>.api-keys.db "
            "beside a SQLite ledger, else in memory); share one between processes.",
        ),
    ] = None,
) -> None:
    """A JSON API over the engine (/v1/) for orchestrators in any language."""
    from ctxledger.adapters.api.idempotency import IdempotencyStore
    from ctxledger.adapters.api.service import ApiService
    from ctxledger.adapters.bootstrap import open_engine

    if not 0 <= port <= 65535:
        raise ApiStartError(f"port {port} is out of range 0–65535")
    if token is not None and (len(token) < MIN_TOKEN_CHARS or not token.isascii()):
        raise ApiStartError(f"--token must be at least {MIN_TOKEN_CHARS} ASCII characters")
    if not stdio:
        from ctxledger.adapters.extras import require_extra

        require_extra("web", "ctxledger api")
        from ctxledger.adapters.api.app import is_loopback_bind

        if token is None and not is_loopback_bind(host):
            raise ApiStartError(
                f"binding {host} (off loopback) needs a bearer token: --token or {TOKEN_ENV}"
            )
    keys = IdempotencyStore(idempotency_path(store, idempotency_db))
    try:
        with open_engine(store) as engine:
            from ctxledger.adapters import __version__

            service = ApiService(engine, keys, version=__version__)
            if stdio:
                from ctxledger.adapters.api.stdio import serve_stdio

                serve_stdio(service, sys.stdin.buffer, sys.stdout.buffer)
            else:
                _serve_http(service, host, port, token)
    finally:
        keys.close()


def _serve_http(service: object, host: str, port: int, token: str | None) -> None:
    import uvicorn

    from ctxledger.adapters.api.app import create_api_app
    from ctxledger.adapters.api.service import ApiService

    assert isinstance(service, ApiService)
    sock = bind_socket(host, port)
    try:
        sock.listen(2048)  # connections queue from here, before the address is printed
        bound = sock.getsockname()[1]
        app = create_api_app(service, token=token)
    except BaseException:
        sock.close()
        raise
    shown = f"[{host}]" if ":" in host else host
    guard = "bearer token required" if token is not None else "no token (loopback)"
    sys.stdout.write(f"ctxledger api: http://{shown}:{bound}/v1/ ({guard}; Ctrl-C stops)\n")
    sys.stdout.flush()
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])
