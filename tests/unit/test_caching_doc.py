"""docs/caching.md: its example code runs, and the rendered prompts shown are the real output."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from ctxledger.domain.prompt import SEGMENT_ORDER, PromptParts

DOC = Path(__file__).resolve().parents[2] / "docs" / "caching.md"


def block(text: str, name: str) -> str:
    match = re.search(rf"<!-- example:{name} -->\n```\w+\n(.*?)\n```", text, re.DOTALL)
    assert match is not None, f"docs/caching.md lost its {name!r} block"
    return match.group(1)


def segmented(parts: PromptParts) -> str:
    shown = "".join(
        f"--- {s.value} ---\n{parts.segments[s]}" for s in SEGMENT_ORDER if parts.segments[s]
    )
    return shown.rstrip("\n")


@pytest.fixture(scope="module")
def doc_example() -> tuple[str, dict[str, Any]]:
    text = DOC.read_text(encoding="utf-8")
    namespace: dict[str, Any] = {}
    exec(compile(block(text, "code"), str(DOC), "exec"), namespace)
    return text, namespace


@pytest.mark.parametrize("name", ["first", "second"])
def test_rendered_prompts_in_the_doc_are_real(
    doc_example: tuple[str, dict[str, Any]], name: str
) -> None:
    text, namespace = doc_example
    assert block(text, name) == segmented(namespace[name])


def test_figures_in_the_doc_are_real(doc_example: tuple[str, dict[str, Any]]) -> None:
    text, namespace = doc_example
    figures = namespace["figures"]
    assert block(text, "figures") == "\n".join(f"{k}: {v}" for k, v in figures.items())
    # The claims the prose makes about the example:
    assert figures["same prefix_hash"] is True
    assert figures["changed_segment"] == "generation"
    assert figures["stable prefix kept"] is True
