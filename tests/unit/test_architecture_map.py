"""The house's map in docs/architecture.md is generated from the code, and its limits hold:
no import cycle, no private name imported across modules, no module over 600 lines (but the
listed domain modules) and no function over 80 lines in adapters/ and projections/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench import architecture_map

ROOT = Path(__file__).resolve().parents[2]


def test_the_docs_map_is_the_code_and_every_limit_holds() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "architecture_map.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr


def test_the_check_catches_a_cycle_a_private_import_and_a_long_function() -> None:
    mods = architecture_map._modules()
    a, b = "ctxledger.domain.errors", "ctxledger.domain.ports"
    mods[a].imports.add(b)
    mods[b].imports.add(a)
    mods[a].private.append("_x from ctxledger.domain.ports")
    web = mods["ctxledger.adapters.web.app"]
    web.long_functions.append(("create_app", 249))
    broken = architecture_map.limits(mods)
    assert any(line.startswith("import cycle:") and a in line and b in line for line in broken)
    assert any("imports private _x" in line for line in broken)
    assert any("create_app() 249 lines" in line for line in broken)


def test_components_are_named_from_the_tree() -> None:
    c = architecture_map.component
    assert c("ctxledger.adapters.engine.build") == "adapters.engine"
    assert c("ctxledger.adapters.tokens") == "adapters.shared"
    assert c("ctxledger.adapters") == "adapters (public face)"
    assert c("ctxledger.domain.packing") == "domain"
