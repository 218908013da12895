"""The installed `ctxledger` console script on usage errors, --version and env defaults.

Runs `.venv/bin/ctxledger` itself (the script pip wrote, importing whatever typer and click pip
installed), so a typer that raises its own copy of click's exceptions is what is tested."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

SCRIPT = Path(sys.executable).parent / "ctxledger"
TRAJECTORY = Path(__file__).parents[1] / "fixtures" / "trajectories" / "swe_agent_small.traj"


def ctxledger(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("CTXLEDGER_")}
    return subprocess.run(
        [str(SCRIPT), *args],
        check=False,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**base, **(env or {})},
    )


def test_the_console_script_is_installed() -> None:
    assert SCRIPT.is_file(), f"{SCRIPT} missing: install the package (make demo)"


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("inspect",), "Missing option '--store'"),
        (("replay", "--verify"), "Missing option '--store'"),
        (("simulate", str(TRAJECTORY), "--budget", "abc"), "'--budget'"),
        (("frobnicate",), "No such command 'frobnicate'"),
        (("inspect", "--store", "sqlite:///x.db", "--json", "true"), "unexpected extra argument"),
        (("audit", "--store"), "'--store' requires an argument"),
        (("inspect", "--stor", "sqlite:///x.db"), "No such option: --stor"),
        (("memory", "list", "--nope"), "No such option: --nope"),
        (("control", "explode", "--store", "memory://", "--agent", "a"), "'explode'"),
    ],
)
def test_usage_error_is_one_line_on_stderr_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], fragment: str
) -> None:
    out = ctxledger(*args, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("ctxledger: error: ")
    assert fragment in out.stderr
    assert "--help" in out.stderr  # says where to look
    assert out.stdout == ""
    assert list(tmp_path.iterdir()) == []  # nothing created (no x.db)


@pytest.mark.parametrize("args", [(), ("memory",)])
def test_no_command_prints_the_help_and_exit_2(tmp_path: Path, args: tuple[str, ...]) -> None:
    out = ctxledger(*args, cwd=tmp_path)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert f"Usage: ctxledger {' '.join(args)}".rstrip() in out.stdout
    assert ("import-legacy" if args else "generations") in out.stdout  # commands listed
    assert out.stderr.strip() == ""


def test_help_is_on_stdout_exit_0_and_names_the_env_defaults(tmp_path: Path) -> None:
    out = ctxledger("inspect", "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "Usage: ctxledger inspect" in out.stdout
    assert "CTXLEDGER_STORE" in out.stdout
    listing = ctxledger("memory", "list", "--help", cwd=tmp_path)
    assert "CTXLEDGER_CATALOG" in listing.stdout


def test_version_prints_the_installed_distribution_version(tmp_path: Path) -> None:
    out = ctxledger("--version", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"ctxledger {version('ctxledger')}\n"
    from ctxledger.adapters import __version__

    assert __version__ == version("ctxledger")


def test_domain_error_is_one_line_exit_1(tmp_path: Path) -> None:
    out = ctxledger("audit", "--store", "sqlite:///absent.db", cwd=tmp_path)
    assert out.returncode == 1
    assert out.stderr == "ctxledger: error: sqlite:///absent.db: no ledger at absent.db\n"
    assert not (tmp_path / "absent.db").exists()


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("demo")
    out = ctxledger("demo", "--path", "d.db", "--json", cwd=where)
    assert out.returncode == 0, out.stderr
    assert (where / "d.db").is_file()
    assert (where / "catalog.db").is_file()
    return where


def test_ctxledger_store_is_the_default_of_every_store_option(demo_dir: Path) -> None:
    env = {"CTXLEDGER_STORE": "sqlite:///d.db"}
    explicit = ctxledger("inspect", "--store", "sqlite:///d.db", "--json", cwd=demo_dir)
    assert explicit.returncode == 0, explicit.stderr
    implicit = ctxledger("inspect", "--json", cwd=demo_dir, env=env)
    assert implicit.returncode == 0, implicit.stderr
    assert json.loads(implicit.stdout) == json.loads(explicit.stdout)
    for args in (("audit", "--json"), ("replay", "--verify", "--json")):
        out = ctxledger(*args, cwd=demo_dir, env=env)
        assert out.returncode == 0, out.stderr
    agent = json.loads(explicit.stdout)["agent"]["agent_id"]
    gens = ctxledger("generations", "--agent", agent, "--json", cwd=demo_dir, env=env)
    assert gens.returncode == 0, gens.stderr
    # an explicit option wins over the environment
    other = ctxledger("inspect", "--store", "sqlite:///absent.db", cwd=demo_dir, env=env)
    assert other.returncode == 1
    assert "absent.db" in other.stderr


def test_ctxledger_catalog_is_the_default_of_every_catalog_option(demo_dir: Path) -> None:
    explicit = ctxledger("memory", "list", "--catalog", "catalog.db", "--json", cwd=demo_dir)
    assert explicit.returncode == 0, explicit.stderr
    entries = json.loads(explicit.stdout)["entries"]
    assert entries
    implicit = ctxledger(
        "memory", "list", "--json", cwd=demo_dir, env={"CTXLEDGER_CATALOG": "catalog.db"}
    )
    assert implicit.returncode == 0, implicit.stderr
    assert json.loads(implicit.stdout)["entries"] == entries
    shown = ctxledger(
        "memory",
        "show",
        entries[0]["id"],
        "--json",
        cwd=demo_dir,
        env={"CTXLEDGER_CATALOG": "catalog.db"},
    )
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == entries[0]["id"]


def test_the_installed_typer_is_inside_the_tested_range() -> None:
    import tomllib

    from packaging.requirements import Requirement

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    (typer_req,) = [
        Requirement(d) for d in pyproject["project"]["dependencies"] if d.startswith("typer")
    ]
    assert typer_req.specifier, "typer needs a tested version range"
    assert version("typer") in typer_req.specifier


def test_an_unexpected_failure_is_one_line_unless_debugging(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("a file where a directory should be\n")
    out = ctxledger("demo", "--path", "afile/demo.db", cwd=tmp_path)
    assert out.returncode == 1
    assert "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith("ctxledger: error: ")
    assert "afile" in out.stderr
    assert "CTXLEDGER_DEBUG=1" in out.stderr
    debug = ctxledger("demo", "--path", "afile/demo.db", cwd=tmp_path, env={"CTXLEDGER_DEBUG": "1"})
    assert debug.returncode == 1
    assert "Traceback (most recent call last)" in debug.stderr
