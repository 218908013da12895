"""The public face: one module, ``ctxledger.adapters``, with an explicit ``__all__`` that the
quickstart imports from in one line, loading nothing heavy until a name is used."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import ctxledger.adapters as public

ROOT = Path(__file__).resolve().parents[2]


def test_every_public_name_resolves_to_its_home() -> None:
    import importlib

    assert set(public._HOME) == set(public.__all__) - {"__version__"}
    for name, home in public._HOME.items():
        assert getattr(public, name) is getattr(importlib.import_module(home), name), name
    assert public.__version__


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="NoSuchThing"):
        public.NoSuchThing  # noqa: B018


def test_importing_the_face_loads_no_engine() -> None:
    code = (
        "import sys, ctxledger.adapters\n"
        "heavy = [m for m in ('ctxledger.adapters.engine', 'eventsourcing', 'tiktoken')"
        " if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == ""


def test_the_quickstart_is_one_import_line() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quickstart = readme.split("## Quickstart", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    imports = [line for line in quickstart.splitlines() if re.match(r"(from|import) ", line)]
    assert imports == ["from ctxledger.adapters import AgentIdentity, Layer, Source, open_engine"]


@pytest.mark.parametrize(("old", "new"), sorted(public.MOVED.items()))
def test_a_moved_module_path_is_the_new_module_with_a_warning(old: str, new: str) -> None:
    import importlib

    sys.modules.pop(f"ctxledger.adapters.{old}", None)
    with pytest.warns(DeprecationWarning, match=f"ctxledger.adapters.{new}"):
        moved = importlib.import_module(f"ctxledger.adapters.{old}")
    assert moved is importlib.import_module(f"ctxledger.adapters.{new}")
    sys.modules.pop(f"ctxledger.adapters.{old}", None)


def test_the_old_paths_are_exactly_the_modules_that_moved() -> None:
    adapters = ROOT / "adapters"
    for old, new in public.MOVED.items():
        assert not (adapters / f"{old}.py").exists(), old  # a real module would shadow it
        assert not (adapters / old).is_dir(), old  # and so would a package
        assert (adapters / (new.replace(".", "/") + ".py")).is_file(), new


def test_token_budget_is_not_a_type_the_pack_carries_its_budget() -> None:
    """Seed 004's TokenBudget (limit, used) was a type nothing used (issue 39): it is removed,
    and a pack carries its budget as ``budget_limit``, ``budget_used`` and ``overflow``."""
    from ctxledger.domain import model

    assert "TokenBudget" not in public.__all__
    assert "TokenBudget" not in model.__all__
    assert not hasattr(model, "TokenBudget")
    assert {"budget_limit", "budget_used", "overflow"} <= set(model.ContextPack.__struct_fields__)
