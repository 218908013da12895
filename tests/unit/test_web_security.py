"""Who may reach the web inspector, through Starlette's TestClient on a real engine-written
ledger: foreign Host names refused on every loopback bind (DNS rebinding), the access token of
a non-loopback bind (401 and nothing written without it, a signed HttpOnly SameSite=Strict
session cookie with it), the actor a control records, malformed query parameters as 400, and
the security headers on every response, errors included."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.requests import Request
from starlette.routing import Route
from starlette.testclient import TestClient

from ctxledger.adapters.ledger import open_ledger
from ctxledger.adapters.web import create_app
from ctxledger.adapters.web.access import (
    COOKIE,
    Access,
    access_for_bind,
    is_loopback_bind,
    loopback_authorities,
)
from ctxledger.adapters.web.headers import SECURITY_HEADERS
from ctxledger.domain import events as ev
from ctxledger.domain.errors import InvalidInputError
from tests.web_store import AGENT, EngineStore, build_engine_store, copy_engine_store

CSRF = "csrf-token-0123456789abcdef"
ACCESS = "access-token-0123456789abcdef"
PORT = 8765
LOOPBACK_BINDS = ("127.0.0.1", "::1", "localhost")
LOOPBACK_URLS = (f"http://127.0.0.1:{PORT}", f"http://localhost:{PORT}", f"http://[::1]:{PORT}")
FOREIGN_URLS = (
    f"http://attacker.example:{PORT}",  # a rebound name on the right port
    "http://attacker.example",
    f"http://localhost:{PORT + 1}",  # the right name, another port
    f"http://127.0.0.2:{PORT}",
    f"http://localhost.attacker.example:{PORT}",
)


@pytest.fixture(scope="module")
def template_store(tmp_path_factory: pytest.TempPathFactory) -> EngineStore:
    return build_engine_store(tmp_path_factory.mktemp("web-security") / "ledger.db")


@pytest.fixture
def store(template_store: EngineStore, tmp_path: Path) -> EngineStore:
    """A private copy of the engine-written store for one test."""
    return copy_engine_store(template_store, tmp_path)


def log_end(store: EngineStore) -> int:
    with open_ledger(store.url) as ledger:
        return ledger.max_position()


def events_after(store: EngineStore, position: int) -> list[ev.Event]:
    with open_ledger(store.url) as ledger:
        return [r.event for r in ledger.read_all(after=position)]


def ledger_bytes(store: EngineStore) -> str:
    """A digest of the ledger file and its WAL, to prove a refused request wrote nothing."""
    digest = hashlib.sha256()
    for suffix in ("", "-wal"):
        path = Path(f"{store.path}{suffix}")
        digest.update(path.read_bytes() if path.exists() else b"<none>")
    return digest.hexdigest()


def reason_of(html: str) -> str:
    found = re.search(r'data-testid="reason"[^>]*>([^<]*)<', html)
    assert found is not None, html[:500]
    return found.group(1).strip()


def assert_security_headers(response: Any) -> None:
    for name, value in SECURITY_HEADERS:
        assert response.headers.get(name) == value, (response.status_code, name)


def pin(client: TestClient, store: EngineStore, **kwargs: Any) -> Any:
    return client.post(
        f"/agents/{AGENT}/control",
        data={"csrf_token": CSRF, "action": "pin", "item_id": store.finding},
        **kwargs,
    )


# --- Host check on loopback binds (DNS rebinding) ---------------------------------------------


@pytest.mark.parametrize("bind", LOOPBACK_BINDS)
@pytest.mark.parametrize("foreign", FOREIGN_URLS)
def test_a_foreign_host_is_refused_on_every_loopback_bind_and_writes_nothing(
    store: EngineStore, bind: str, foreign: str
) -> None:
    app = create_app(store.url, token=CSRF, access=access_for_bind(bind, PORT, None))
    with TestClient(app, base_url=foreign, follow_redirects=False) as c:
        start, before = log_end(store), ledger_bytes(store)
        page = c.get(f"/agents/{AGENT}/generations/3")
        assert page.status_code == 421
        assert CSRF not in page.text  # a rebinding page cannot read the form token
        assert "answers only to" in reason_of(page.text)
        assert_security_headers(page)
        posted = pin(c, store)  # even with the right CSRF token
        assert posted.status_code == 421
        assert ledger_bytes(store) == before  # measured while the app runs (closing
        assert log_end(store) == start  # checkpoints the WAL into the file)


@pytest.mark.parametrize("bind", LOOPBACK_BINDS)
@pytest.mark.parametrize("own", LOOPBACK_URLS)
def test_a_loopback_bind_answers_to_every_loopback_name_on_its_port(
    store: EngineStore, bind: str, own: str
) -> None:
    app = create_app(store.url, token=CSRF, access=access_for_bind(bind, PORT, None))
    start = log_end(store)
    with TestClient(app, base_url=own, follow_redirects=False) as c:
        assert c.get("/").status_code == 200
        assert pin(c, store, headers={"origin": own}).status_code == 303
    assert [type(e) for e in events_after(store, start)] == [ev.ItemPinned]


def test_a_request_with_two_host_headers_is_refused(store: EngineStore) -> None:
    app = create_app(store.url, token=CSRF, access=access_for_bind("127.0.0.1", PORT, None))
    with TestClient(app, base_url=f"http://127.0.0.1:{PORT}") as c:
        r = c.get("/", headers=[("host", f"127.0.0.1:{PORT}"), ("host", "attacker.example")])
    assert r.status_code == 421


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("LOCALHOST", True),
        ("0.0.0.0", False),
        ("::", False),
        ("192.168.1.10", False),
        ("example.com", False),
    ],
)
def test_is_loopback_bind(host: str, loopback: bool) -> None:
    assert is_loopback_bind(host) is loopback


def test_loopback_authorities_carry_the_port() -> None:
    assert loopback_authorities("::1", 8000) == {
        "localhost:8000",
        "127.0.0.1:8000",
        "[::1]:8000",
    }
    assert "localhost" in loopback_authorities("127.0.0.1", 80)  # browsers omit :80
    assert "localhost" not in loopback_authorities("127.0.0.1", 8000)


# --- the access token of a non-loopback bind --------------------------------------------------


def test_a_non_loopback_bind_without_a_token_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="needs an access token"):
        access_for_bind("0.0.0.0", PORT, None)
    with pytest.raises(InvalidInputError, match="needs an access token"):
        Access(hosts=None, token=None)
    with pytest.raises(InvalidInputError, match="at least 16"):
        access_for_bind("0.0.0.0", PORT, "short")


@pytest.fixture
def guarded(store: EngineStore) -> Iterator[TestClient]:
    """The app as `serve --host 0.0.0.0 --token ACCESS` builds it, over any Host name."""
    app = create_app(
        store.url,
        token=CSRF,
        catalog=store.catalog,
        access=access_for_bind("0.0.0.0", PORT, ACCESS),
    )
    with TestClient(app, base_url="http://192.0.2.10:8765", follow_redirects=False) as c:
        yield c


@pytest.mark.parametrize(
    "path", ["/", f"/agents/{AGENT}", f"/agents/{AGENT}/generations/3", "/cache", "/memory"]
)
def test_without_the_token_every_page_is_a_401_that_shows_nothing(
    guarded: TestClient, store: EngineStore, path: str
) -> None:
    r = guarded.get(path)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == "Bearer"
    assert "set-cookie" not in r.headers
    assert CSRF not in r.text
    assert str(store.path) not in r.text  # not even the store's name
    assert AGENT not in r.text
    assert_security_headers(r)


@pytest.mark.parametrize(
    "proof",
    [
        {},
        {"params": {"token": ACCESS[:-1]}},
        {"params": {"token": ""}},
        {"headers": {"authorization": "Bearer " + ACCESS + "x"}},
        {"headers": {"authorization": "Basic " + ACCESS}},
        {"headers": {"cookie": f"{COOKIE}=0123456789ab.{'0' * 64}"}},  # a forged session
        {"headers": {"cookie": f"{COOKIE}={ACCESS}"}},
    ],
)
def test_a_control_without_the_token_is_a_401_and_writes_nothing(
    guarded: TestClient, store: EngineStore, proof: dict[str, Any]
) -> None:
    start, before = log_end(store), ledger_bytes(store)
    r = guarded.post(
        f"/agents/{AGENT}/control",
        data={"csrf_token": CSRF, "action": "refresh"},  # the right CSRF token
        **proof,
    )
    assert r.status_code == 401
    assert_security_headers(r)
    assert ledger_bytes(store) == before
    assert log_end(store) == start


def session_cookie(response: Any) -> tuple[str, str]:
    """(the Set-Cookie header, the session id it carries)."""
    header = response.headers["set-cookie"]
    found = re.match(rf"{COOKIE}=([0-9a-f]{{12}})\.[0-9a-f]{{64}}; ", header)
    assert found is not None, header
    return header, found.group(1)


def test_token_in_the_url_sets_a_strict_http_only_cookie_and_is_dropped_from_the_url(
    guarded: TestClient, store: EngineStore
) -> None:
    r = guarded.get(f"/agents/{AGENT}/diff", params={"from": "1", "to": "3", "token": ACCESS})
    assert r.status_code == 303
    assert r.headers["location"] == f"/agents/{AGENT}/diff?from=1&to=3"
    header, session = session_cookie(r)
    attributes = {a.strip().lower() for a in header.split(";")[1:]}
    assert {"httponly", "samesite=strict", "path=/"} <= attributes
    assert ACCESS not in header  # the cookie proves the token without carrying it
    # the cookie alone now opens every page and the controls
    page = guarded.get(r.headers["location"])
    assert page.status_code == 200
    start = log_end(store)
    assert pin(guarded, store).status_code == 303
    (pinned,) = events_after(store, start)
    assert isinstance(pinned, ev.ItemPinned)
    assert pinned.by == f"web-inspector@testclient#{session}"


def test_a_bearer_header_is_accepted_and_starts_a_session(
    guarded: TestClient, store: EngineStore
) -> None:
    r = guarded.get("/", headers={"authorization": f"Bearer {ACCESS}"})
    assert r.status_code == 200
    _, session = session_cookie(r)
    assert guarded.get("/cache").status_code == 200  # now by the cookie
    start = log_end(store)
    r = guarded.post(
        f"/agents/{AGENT}/control",
        data={"csrf_token": CSRF, "action": "rebuild", "reason": "operator"},
    )
    assert r.status_code == 303
    reasons = [
        e.reason for e in events_after(store, start) if isinstance(e, ev.GenerationRefreshed)
    ]
    assert reasons == [f"manual: operator (by web-inspector@testclient#{session})"]


def test_a_session_signed_with_another_token_is_refused(store: EngineStore) -> None:
    other = create_app(store.url, token=CSRF, access=access_for_bind("0.0.0.0", PORT, "o" * 20))
    with TestClient(other, base_url="http://192.0.2.10:8765", follow_redirects=False) as c:
        cookie, _ = session_cookie(c.get("/", params={"token": "o" * 20}))
    value = cookie.split(";", 1)[0].split("=", 1)[1]
    app = create_app(store.url, token=CSRF, access=access_for_bind("0.0.0.0", PORT, ACCESS))
    with TestClient(app, base_url="http://192.0.2.10:8765", follow_redirects=False) as c:
        assert c.get("/", headers={"cookie": f"{COOKIE}={value}"}).status_code == 401


def test_the_stylesheet_needs_no_token_but_the_host_check(store: EngineStore) -> None:
    app = create_app(store.url, access=access_for_bind("127.0.0.1", PORT, ACCESS))
    with TestClient(app, base_url=f"http://127.0.0.1:{PORT}") as c:
        assert c.get("/static/inspector.css").status_code == 200
        assert c.get("/").status_code == 401  # a token on a loopback bind is required too
    with TestClient(app, base_url="http://attacker.example") as c:
        assert c.get("/static/inspector.css").status_code == 421


# --- the actor of a web control ---------------------------------------------------------------


def test_the_actor_of_each_control_names_the_remote_address(store: EngineStore) -> None:
    app = create_app(
        store.url, token=CSRF, catalog=store.catalog, access=access_for_bind("::1", PORT, None)
    )
    start = log_end(store)
    with TestClient(
        app, base_url=f"http://[::1]:{PORT}", follow_redirects=False, client=("::1", 50000)
    ) as c:
        for action, item in (("verify", store.finding), ("remove", store.hypothesis)):
            r = c.post(
                f"/agents/{AGENT}/control",
                data={"csrf_token": CSRF, "action": action, "item_id": item},
            )
            assert r.status_code == 303, r.text
    verified, removed = events_after(store, start)
    assert isinstance(verified, ev.FindingVerified)
    assert verified.by == "web-inspector@::1"
    assert isinstance(removed, ev.ItemRemoved)
    assert removed.reason == "no reason given (by web-inspector@::1)"


# --- malformed query parameters ---------------------------------------------------------------


@pytest.mark.parametrize(
    "query",
    [
        "from=²&to=3",
        "from=①&to=3",
        "from=1&to=²",
        "from=٣&to=3",  # Arabic-Indic three: int() would take it, it is not a generation number
        "from=%FF&to=3",
        "from=1234567890&to=3",
        "from= 1&to=3",
    ],
)
def test_a_malformed_query_parameter_is_a_400_with_the_headers(
    store: EngineStore, query: str
) -> None:
    app = create_app(store.url, token=CSRF)
    with TestClient(app, raise_server_exceptions=False) as c:
        r = c.get(f"/agents/{AGENT}/diff?{query}")
    assert r.status_code == 400
    assert "must be a generation number" in reason_of(r.text)
    assert_security_headers(r)


# --- security headers on every response -------------------------------------------------------


def test_every_error_response_carries_the_security_headers(store: EngineStore) -> None:
    app = create_app(store.url, token=CSRF)

    def boom(_request: Request) -> Any:
        raise RuntimeError("an unexpected bug")

    app.router.routes.append(Route("/boom", boom))  # a route that fails the way a bug would
    with TestClient(app, raise_server_exceptions=False, follow_redirects=False) as c:
        responses = {
            404: c.get("/nowhere"),
            405: c.get(f"/agents/{AGENT}/control"),
            400: c.get(f"/agents/{AGENT}/diff?from=²"),
            403: c.post(f"/agents/{AGENT}/control", data={"action": "refresh"}),
            500: c.get("/boom"),
        }
    for status, response in responses.items():
        assert response.status_code == status
        assert_security_headers(response)
    assert "an unexpected error" in reason_of(responses[500].text)
    assert "an unexpected bug" not in responses[500].text
