"""`ctxledger serve` as a user starts it (a subprocess on a free port), probed over real
sockets: a non-loopback bind prints a generated access token once and refuses (401, nothing
written) every request without it; a loopback bind refuses a foreign Host (DNS rebinding);
the HTTP server's own 400 carries the security headers."""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import selectors
import signal
import socket
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

import pytest

from ctxledger.adapters.ledger import EVENTS_TABLE, open_ledger
from ctxledger.adapters.web.headers import SECURITY_HEADERS
from ctxledger.domain import events as ev
from tests.e2e._cli import CLI, run
from tests.web_store import AGENT, EngineStore, build_engine_store

FORM = {"content-type": "application/x-www-form-urlencoded"}


@dataclass
class Server:
    """A running `ctxledger serve`: where to connect, the first line it printed, and (after
    it stopped) everything it wrote."""

    connect: str
    port: int
    line: str
    output: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Reply:
    status: int
    headers: http.client.HTTPMessage
    body: str


def request(
    server: Server,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: str | None = None,
) -> Reply:
    conn = http.client.HTTPConnection(server.connect, server.port, timeout=15)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        response = conn.getresponse()
        return Reply(response.status, response.headers, response.read().decode("utf-8"))
    finally:
        conn.close()


@contextmanager
def serving(
    store: EngineStore, host: str, *extra: str, env: dict[str, str] | None = None
) -> Iterator[Server]:
    """`ctxledger serve --host HOST --port 0`; yields once the port answers."""
    proc = subprocess.Popen(
        [*CLI, "serve", "--store", store.url, "--host", host, "--port", "0", *extra],
        cwd=store.path.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    server: Server | None = None
    try:
        assert proc.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout=60):
            pytest.fail("ctxledger serve printed no URL within 60 s")
        line = proc.stdout.readline()
        found = re.search(r"http://(\[[^\]]+\]|[^:/]+):(\d+)/", line)
        assert found, f"no URL in {line!r}; stderr: {proc.stderr.read() if proc.stderr else ''}"
        shown, port = found.group(1).strip("[]"), int(found.group(2))
        server = Server(connect="127.0.0.1" if shown == "0.0.0.0" else shown, port=port, line=line)
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection((server.connect, port), timeout=5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.1)
        yield server
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate(timeout=5)
        if server is not None:
            server.output.extend([server.line, out, err])


@pytest.fixture
def store(tmp_path: Path) -> EngineStore:
    return build_engine_store(tmp_path / "ledger.db")


def rows(store: EngineStore) -> int:
    with sqlite3.connect(store.path) as conn:
        (count,) = conn.execute(f"SELECT count(*) FROM {EVENTS_TABLE}").fetchone()
    return int(count)


def ledger_bytes(store: EngineStore) -> str:
    digest = hashlib.sha256()
    for suffix in ("", "-wal"):
        path = Path(f"{store.path}{suffix}")
        digest.update(path.read_bytes() if path.exists() else b"<none>")
    return digest.hexdigest()


def events_after(store: EngineStore, position: int) -> list[ev.Event]:
    with open_ledger(store.url) as ledger:
        return [r.event for r in ledger.read_all(after=position)]


def log_end(store: EngineStore) -> int:
    with open_ledger(store.url) as ledger:
        return ledger.max_position()


def has_security_headers(reply: Reply) -> bool:
    return all(reply.headers.get(name) == value for name, value in SECURITY_HEADERS)


def ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
    except OSError:
        return False
    return True


# --- a non-loopback bind needs the token ------------------------------------------------------


def test_a_non_loopback_bind_prints_a_generated_token_once_and_refuses_requests_without_it(
    store: EngineStore,
) -> None:
    with serving(store, "0.0.0.0") as server:
        found = re.search(r"\?token=([A-Za-z0-9_-]{43}) ", server.line)
        assert found, server.line
        token = found.group(1)
        page = f"/agents/{AGENT}/generations/3"

        first = request(server, "GET", "/")
        assert first.status == 401
        assert has_security_headers(first)
        before_rows, before_bytes = rows(store), ledger_bytes(store)
        refused = [
            request(server, "GET", page),
            request(server, "GET", f"{page}?token={token[:-1]}"),
            request(server, "GET", page, {"authorization": f"Bearer {token}x"}),
            request(
                server,
                "POST",
                f"/agents/{AGENT}/control",
                FORM,
                urlencode({"csrf_token": "x" * 43, "action": "refresh"}),
            ),
        ]
        assert [r.status for r in refused] == [401] * len(refused)
        assert all("csrf_token" not in r.body and AGENT not in r.body for r in refused)
        assert all(has_security_headers(r) for r in refused)
        assert rows(store) == before_rows
        assert ledger_bytes(store) == before_bytes

        opened = request(server, "GET", f"{page}?token={token}")
        assert opened.status == 303
        assert opened.headers["location"] == page
        cookie_header = opened.headers["set-cookie"]
        assert "HttpOnly" in cookie_header
        assert "SameSite=Strict" in cookie_header
        assert token not in cookie_header
        cookie = cookie_header.split(";", 1)[0]
        session = re.fullmatch(r"ctxledger_session=([0-9a-f]{12})\.[0-9a-f]{64}", cookie)
        assert session, cookie

        shown = request(server, "GET", page, {"cookie": cookie})
        assert shown.status == 200
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', shown.body)
        assert csrf
        start = log_end(store)
        pinned = request(
            server,
            "POST",
            f"/agents/{AGENT}/control",
            {**FORM, "cookie": cookie},
            urlencode({"csrf_token": csrf.group(1), "action": "pin", "item_id": store.finding}),
        )
        assert pinned.status == 303, pinned.body
    (event,) = events_after(store, start)
    assert isinstance(event, ev.ItemPinned)
    assert event.by == f"web-inspector@127.0.0.1#{session.group(1)}"
    assert "".join(server.output).count(token) == 1  # printed once, at start
    assert "reachable from other machines" in server.output[2]


def test_a_token_from_the_environment_is_not_printed_and_a_bearer_header_opens(
    store: EngineStore,
) -> None:
    token = "env-token-0123456789abcdef"
    with serving(store, "0.0.0.0", env={"CTXLEDGER_WEB_TOKEN": token}) as server:
        assert "?token=" not in server.line
        assert "access token required" in server.line
        assert request(server, "GET", "/cache").status == 401
        opened = request(server, "GET", "/cache", {"authorization": f"Bearer {token}"})
        assert opened.status == 200
        assert "HttpOnly" in opened.headers["set-cookie"]
    assert token not in "".join(server.output)


def test_a_short_token_is_refused_in_one_line(store: EngineStore) -> None:
    out = run(
        "serve",
        "--store",
        store.url,
        "--host",
        "0.0.0.0",
        "--port",
        "0",
        "--token",
        "short",
        cwd=store.path.parent,
    )
    assert out.returncode == 1
    assert out.stderr == "ctxledger: error: --token must be at least 16 ASCII characters\n"


# --- a loopback bind answers only to loopback names -------------------------------------------


@pytest.mark.parametrize("bind", ["127.0.0.1", "localhost", "::1"])
def test_a_loopback_server_refuses_a_foreign_host_and_writes_nothing(
    store: EngineStore, bind: str
) -> None:
    if bind == "::1" and not ipv6_loopback():
        pytest.skip("no IPv6 loopback here; test_web_security covers the ::1 bind in the app")
    with serving(store, bind) as server:
        own = f"{'[::1]' if bind == '::1' else bind}:{server.port}"
        shown = request(server, "GET", f"/agents/{AGENT}/generations/3", {"host": own})
        assert shown.status == 200
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', shown.body)
        assert csrf
        before_rows, before_bytes = rows(store), ledger_bytes(store)
        for foreign in (f"attacker.example:{server.port}", "attacker.example"):
            page = request(server, "GET", f"/agents/{AGENT}/generations/3", {"host": foreign})
            assert page.status == 421
            assert csrf.group(1) not in page.body
            assert has_security_headers(page)
            posted = request(
                server,
                "POST",
                f"/agents/{AGENT}/control",
                {**FORM, "host": foreign},
                urlencode({"csrf_token": csrf.group(1), "action": "refresh"}),
            )
            assert posted.status == 421
        assert rows(store) == before_rows
        assert ledger_bytes(store) == before_bytes


# --- headers on the server's own errors -------------------------------------------------------


def test_the_servers_own_errors_carry_the_security_headers(store: EngineStore) -> None:
    with serving(store, "127.0.0.1") as server:
        with socket.create_connection((server.connect, server.port), timeout=15) as s:
            s.sendall(b"NOT AN HTTP REQUEST\r\n\r\n")
            raw = b""
            while chunk := s.recv(65536):
                raw += chunk
        head = raw.split(b"\r\n\r\n", 1)[0].decode("latin-1").lower()
        assert head.startswith("http/1.1 400")
        for name, value in SECURITY_HEADERS:
            assert f"{name}: {value}".lower() in head
        host = {"host": f"127.0.0.1:{server.port}"}
        for query in ("from=%C2%B2&to=3", "from=%E2%91%A0&to=3"):  # ² and ①
            reply = request(server, "GET", f"/agents/{AGENT}/diff?{query}", host)
            assert reply.status == 400
            assert "must be a generation number" in reply.body
            assert has_security_headers(reply)
        missing = request(server, "GET", "/nowhere", host)
        assert missing.status == 404
        assert has_security_headers(missing)
