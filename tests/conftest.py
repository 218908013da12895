"""Test-wide settings: Hypothesis profiles ``dev``/``ci`` ($CI or $HYPOTHESIS_PROFILE), stores."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# too_slow is off in both: the machines drive real SQLite files, so on a loaded machine the
# time Hypothesis counts against data generation is mostly waiting for the CPU (a min-versions
# run beside a 32-process soak failed it with 4 examples in 35 s)
settings.register_profile(
    "dev", max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci",
    max_examples=100,
    deadline=None,
    derandomize=True,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") == "true" else "dev")
)


# --- stores ----------------------------------------------------------------------------------

import itertools  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from tests.pg_server import PgServer, find_pg_bin, start_pg_server  # noqa: E402

_db_names = itertools.count(1)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PgServer | str]:
    """A real PostgreSQL server: $CTXLEDGER_TEST_POSTGRES_URL, or a throwaway local cluster.

    Without one the PostgreSQL tests skip with a reason, except under CI=true where the
    absence fails the run.
    """
    given = os.environ.get("CTXLEDGER_TEST_POSTGRES_URL")
    if given:
        yield given
        return
    bindir = find_pg_bin()
    if bindir is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL server binaries not found and CI=true (install postgresql)")
        pytest.skip(
            "PostgreSQL server binaries (pg_ctl) not found; set CTXLEDGER_TEST_POSTGRES_URL"
        )
    with start_pg_server(bindir) as server:
        yield server


@pytest.fixture
def pg_url(pg_server: PgServer | str) -> str:
    """A fresh, empty database on the test server for one test."""
    import psycopg

    if isinstance(pg_server, str):
        base = pg_server
        admin = base
    else:
        base = pg_server.url()
        admin = base
    name = f"ctxl_{os.getpid()}_{next(_db_names)}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return base.rsplit("/", 1)[0] + f"/{name}"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """One URL per store kind; the contract suites run against each."""
    kind: str = request.param
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


StoreFactory = Callable[[], str]


SHARED_TRAJECTORIES = Path(__file__).resolve().parents[2] / "shared" / "trajectories"
"""Real third-party agent runs beside the repository (``../shared/trajectories``)."""


@pytest.fixture(scope="session")
def shared_trajectories() -> Path:
    """``../shared/trajectories``: skipped with a reason when absent, a failure under CI=true."""
    if not SHARED_TRAJECTORIES.is_dir():
        reason = f"shared trajectories not found at {SHARED_TRAJECTORIES}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{reason} (CI=true: they must be present)")
        pytest.skip(reason)
    return SHARED_TRAJECTORIES
