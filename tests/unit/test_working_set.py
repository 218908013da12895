"""The working set (domain/working_set.py) and the identifiers it and the recall measure read
(domain/identifiers.py), on hand-written steps."""

from __future__ import annotations

from ctxledger.domain.identifiers import identifiers, paths
from ctxledger.domain.model import Item, Layer, Source
from ctxledger.domain.working_set import (
    WORKING_SET_SOURCE_ID,
    is_working_set,
    working_set_item,
    working_set_text,
)


def step(n: int, command: str, output: str, *, files: tuple[str, ...] = (), failed: bool = False,
         view: bool = False) -> list[Item]:  # fmt: skip
    group = f"step-{n:04d}"
    common = {"group": group, "tool_signature": command, "files": files}
    return [
        Item(id=f"s{n}.a", layer=Layer.L0, source=Source.CONVERSATION, content=command, **common),  # type: ignore[arg-type]
        Item(
            id=f"s{n}.o", layer=Layer.L0,
            source=Source.REPOSITORY_SOURCE if view else Source.TOOL_LOG,
            content=output, failure=failed, **common,  # type: ignore[arg-type]
        ),
    ]  # fmt: skip


HISTORY = [
    *step(0, "cat django/db/backends/ddl_references.py", "class Table:", files=(
        "django/db/backends/ddl_references.py",), view=True),
    *step(1, "python runtests.py schema", "FAILED test_rename", failed=True),
    *step(2, "sed -i 's/old/new/' django/db/backends/ddl_references.py", "",
          files=("django/db/backends/ddl_references.py",)),
    *step(3, "python runtests.py schema", "OK"),
    *step(4, "python -c 'from app import run_job; run_job()'", "Traceback", failed=True),
    *step(5, "ls", "README.md"),
]  # fmt: skip


def test_identifiers_are_paths_dotted_code_like_and_called_names() -> None:
    text = (
        "git diff -- django/db/backends/ddl_references.py; see ./tests/test_x.py and "
        "https://example.org/a.py; Table.rename_table_references(x); IndexName; "
        "snake_case_name; print(len(x)); foo(); self.assertEqual(a, b)"
    )
    assert identifiers(text) == [
        "django/db/backends/ddl_references.py",
        "tests/test_x.py",
        "Table.rename_table_references",
        "IndexName",
        "snake_case_name",
    ]
    assert paths("a/b.py and a/b.py, django.conf.py") == ["a/b.py"]


def test_the_working_set_of_the_hidden_steps() -> None:
    shown = {"s5.a", "s5.o"}
    text = working_set_text(HISTORY, shown)
    assert text.splitlines() == [
        "Working set of 5 earlier step(s) not shown (step-0000 … step-0004); 1 shown in full"
        " below. Newest first.",
        "files: django/db/backends/ddl_references.py (edited step-0002)",
        "commands, last result: `python -c 'from app import run_job; run_job()'` failed"
        " step-0004 · `python runtests.py schema` ok step-0003 · `sed -i 's/old/new/'"
        " django/db/backends/ddl_references.py` ok step-0002 · `cat"
        " django/db/backends/ddl_references.py` ok step-0000",
        "failures: `python -c 'from app import run_job; run_job()'` open since step-0004 ·"
        " `python runtests.py schema` fixed: failed step-0001, passed step-0003",
        "names used: runtests.py, run_job",  # most used first
    ]


def test_every_step_shown_means_no_working_set_and_a_limit_shortens_it() -> None:
    assert working_set_text(HISTORY, {it.id for it in HISTORY}) == ""
    full = working_set_text(HISTORY, set())
    short = working_set_text(HISTORY, set(), limit=300)
    assert 0 < len(short) <= 300 < len(full)
    assert short.startswith("Working set of 6 earlier step(s)")
    assert working_set_text(HISTORY, set(), limit=40) == ""  # not even its head fits


def test_the_item_is_task_state_with_a_content_id_and_its_rendered_tokens() -> None:
    item = working_set_item(
        HISTORY, {"s5.a", "s5.o"}, agent="a", token_budget=500, count=lambda it: len(it.content)
    )
    assert item is not None
    assert is_working_set(item)
    assert (item.layer, item.source, item.source_id) == (
        Layer.L1,
        Source.GENERATED_SUMMARY,
        WORKING_SET_SOURCE_ID,
    )
    assert item.id.startswith("ws.")
    assert item.token_count == len(item.content) <= 500
    assert working_set_item(HISTORY, set(), agent="a", token_budget=0, count=len) is None  # type: ignore[arg-type]
