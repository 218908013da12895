"""Code in README.md and docs/*.md is executed, so the documentation cannot drift."""

from __future__ import annotations

import re
import unittest
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def _blocks() -> list[tuple[str, int, str]]:
    found = []
    for path in DOCS:
        for i, m in enumerate(BLOCK.finditer(path.read_text(encoding="utf-8"))):
            found.append((path.name, i, m.group(1)))
    return found


@pytest.mark.parametrize(("doc", "index", "code"), _blocks(), ids=lambda v: str(v)[:20])
def test_python_block_runs(doc: str, index: int, code: str) -> None:
    namespace: dict[str, object] = {"__name__": f"docs_{doc}_{index}"}
    exec(compile(code, f"{doc}#{index}", "exec"), namespace)
    for value in namespace.values():
        if isinstance(value, type) and issubclass(value, unittest.TestCase):
            result = unittest.TextTestRunner(verbosity=0).run(
                unittest.defaultTestLoader.loadTestsFromTestCase(value)
            )
            assert result.wasSuccessful(), result.failures + result.errors


def test_every_doc_linked_from_readme_exists() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link
