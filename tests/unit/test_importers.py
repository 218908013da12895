"""Importers of SWE-agent, mini-swe-agent and OpenHands trajectories, on synthetic fixtures."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from ctxledger.adapters.importers import (
    Trajectory,
    detect_format,
    load_trajectory,
    parse_trajectory,
)
from ctxledger.adapters.importers.classify import (
    classify_step,
    extract_files,
    extract_symbols,
    normalize_command,
)
from ctxledger.adapters.importers.common import recorded_usage, split_task
from ctxledger.adapters.importers.items import (
    NO_OUTPUT,
    factory,
    objective_item,
    role_items,
    step_items,
)
from ctxledger.adapters.importers.model import RecordedUsage
from ctxledger.domain.errors import InvalidInputError, TrajectoryFormatError
from ctxledger.domain.model import Durability, Item, Layer, Source
from ctxledger.domain.tokens import EstimatingCounter

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "trajectories"
SWE = FIXTURES / "swe_agent_small.traj"
MINI = FIXTURES / "mini_swe_agent_small.traj.json"
MINI_V1 = FIXTURES / "mini_swe_agent_v1_text.traj.json"
OPENHANDS = FIXTURES / "openhands_small.json"


def _error(path: Path | str, fmt: str = "auto") -> str:
    with pytest.raises(TrajectoryFormatError) as info:
        load_trajectory(path, fmt)
    message = str(info.value)
    assert "\n" not in message
    assert isinstance(info.value, InvalidInputError)
    return message


# --- detection --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (SWE, "swe-agent"),
        (MINI, "mini-swe-agent"),
        (MINI_V1, "mini-swe-agent"),
        (OPENHANDS, "openhands"),
    ],
)
def test_auto_detects_each_format_by_shape(path: Path, expected: str) -> None:
    assert detect_format(json.loads(path.read_text())) == expected
    assert load_trajectory(path).format == expected
    assert load_trajectory(path, expected).format == expected


def test_detection_ignores_the_file_name(tmp_path: Path) -> None:
    renamed = tmp_path / "run.traj"  # an OpenHands file with a SWE-agent extension
    renamed.write_text(OPENHANDS.read_text())
    assert load_trajectory(renamed).format == "openhands"


def test_openhands_events_wrapped_in_a_history_object_are_detected(tmp_path: Path) -> None:
    wrapped = tmp_path / "output.json"
    wrapped.write_text(
        json.dumps({"instance_id": "x", "history": json.loads(OPENHANDS.read_text())})
    )
    assert load_trajectory(wrapped).format == "openhands"


# --- SWE-agent --------------------------------------------------------------------------------


def test_swe_agent_task_role_text_and_steps() -> None:
    t = load_trajectory(SWE)
    assert t.task == "parse_size('10MB') returns 10 instead of 10485760 in sizes.py"
    assert t.role_texts[0].startswith("SETTING: You are a careful programmer")
    assert t.role_texts[1].startswith("Here is a demonstration.")
    assert "{{task}}" in t.role_texts[2]
    assert "INSTRUCTIONS:" in t.role_texts[2]
    assert t.recorded["tokens_sent"] == 5400.0
    assert len(t.steps) == 7
    assert [s.index for s in t.steps] == list(range(7))


def test_swe_agent_step_flags() -> None:
    steps = load_trajectory(SWE).steps
    view, traceback, bad_edit, edit, pytest_run, rm, _submit = steps
    assert view.file_view
    assert not view.failure
    assert view.files == ("src/acme/sizes.py",)
    assert traceback.failure
    assert not traceback.file_view
    assert "parse_size" in traceback.symbols
    assert bad_edit.failure
    assert bad_edit.command == "edit 2:3"
    assert edit.command == bad_edit.command  # retries of one edit share the tool signature
    assert edit.file_view
    assert not edit.failure
    assert pytest_run.test_run
    assert pytest_run.test_failure
    assert pytest_run.failure
    assert rm.observation == ""
    assert not rm.failure
    assert view.usage is None
    assert view.at is None


def test_swe_agent_steps_paired_from_history_when_trajectory_is_empty(tmp_path: Path) -> None:
    data = json.loads(SWE.read_text())
    data["trajectory"] = []
    path = tmp_path / "h.traj"
    path.write_text(json.dumps(data))
    t = load_trajectory(path)
    assert len(t.steps) == 1
    assert t.steps[0].command == "open src/acme/sizes.py"
    assert t.steps[0].observation.startswith("[File: /acme__sizes/src/acme/sizes.py")


# --- mini-swe-agent ---------------------------------------------------------------------------


def test_mini_swe_agent_task_from_the_instance_template() -> None:
    t = load_trajectory(MINI)
    assert (
        t.task
        == "Slugify drops non-ASCII letters.\nslugify('Crème brûlée') should return 'creme-brulee'."
    )
    assert t.role_texts[0] == "You are a helpful assistant that uses a shell."
    assert "{{task}}" in t.role_texts[1]
    assert "one command per call" in t.role_texts[1]
    assert t.model == "deepseek/deepseek-chat"
    assert t.instance_id == "acme__slug-7"


def test_mini_swe_agent_steps_exit_codes_usage_and_times() -> None:
    t = load_trajectory(MINI)
    grep, sed, repro, log, no_match, tests = t.steps
    assert grep.command == "grep -rn 'def slugify' text/"  # `cd /repo &&` removed
    assert grep.exit_code == 0
    assert not grep.failure
    assert sed.file_view
    assert sed.files == ("text/slug.py",)
    assert repro.exit_code == 1
    assert repro.failure
    assert log.truncated
    assert no_match.exit_code == 1
    assert no_match.failure
    assert tests.test_run
    assert not tests.test_failure
    assert not tests.failure
    assert grep.usage == RecordedUsage(provider="deepseek", input_tokens=1000, output_tokens=20)
    assert sed.usage is not None
    assert sed.usage.cache_read_tokens == 900
    assert grep.at is not None
    assert sed.at is not None
    assert sed.at > grep.at
    assert "```bash\ncd /repo && grep -rn 'def slugify' text/\n```" in grep.action
    assert grep.action.startswith("Find the function.")


def test_mini_swe_agent_text_only_format() -> None:
    t = load_trajectory(MINI_V1)
    assert t.task == "The CSV export writes a trailing comma on every row."
    assert [s.command for s in t.steps] == [
        "grep -rn 'def export_csv' .",
        "python -m pytest tests/test_csv.py",
    ]
    assert t.steps[0].files == ("report/csv.py",)
    assert t.steps[1].test_failure
    assert t.steps[1].exit_code == 1


# --- OpenHands --------------------------------------------------------------------------------


def test_openhands_steps_observations_and_user_messages() -> None:
    t = load_trajectory(OPENHANDS)
    assert t.task == "Make the Todo model's title required."
    assert t.model == "claude-3-5-sonnet-20241022"
    tests, view, server, final = t.steps
    assert tests.command == "python -m pytest -q"
    assert tests.exit_code == 1
    assert tests.test_failure
    assert tests.failure
    assert view.file_view
    assert view.files == ("app/models.py",)
    assert "Todo" in view.symbols
    assert server.exit_code == -1
    assert server.failure
    assert server.user_input == "Also add a test."
    assert final.tool == "message"
    assert final.command == ""
    assert final.observation == ""
    assert final.action == "Done: title is required and tested."


def test_openhands_usage_counted_once_per_model_response() -> None:
    tests, view, server, _ = load_trajectory(OPENHANDS).steps
    # LiteLLM's Anthropic usage: prompt_tokens include cache reads and writes.
    assert tests.usage == RecordedUsage(
        provider="anthropic", input_tokens=10, cache_write_tokens=1990, output_tokens=50
    )
    assert view.usage == RecordedUsage(
        provider="anthropic",
        input_tokens=10,
        cache_read_tokens=1990,
        cache_write_tokens=600,
        output_tokens=60,
    )
    assert server.usage is None  # same model response as the view


def test_recorded_usage_shapes() -> None:
    assert recorded_usage(None) is None
    assert recorded_usage({"weird": 1}) is None
    openai = recorded_usage(
        {
            "prompt_tokens": 50,
            "completion_tokens": 5,
            "prompt_tokens_details": {"cached_tokens": 20},
        }
    )
    assert openai == RecordedUsage(
        provider="openai", input_tokens=30, cache_read_tokens=20, output_tokens=5
    )
    anthropic = recorded_usage({"usage": {"input_tokens": 7, "cache_read_input_tokens": 3}})
    assert anthropic == RecordedUsage(provider="anthropic", input_tokens=7, cache_read_tokens=3)


# --- errors -----------------------------------------------------------------------------------


def test_malformed_json_names_the_file_and_the_expected_formats() -> None:
    message = _error(FIXTURES / "malformed.traj")
    assert "malformed.traj" in message
    assert "malformed JSON at line 2" in message
    assert "SWE-agent .traj" in message
    assert "OpenHands" in message


def test_unknown_shape_is_refused_with_its_keys() -> None:
    message = _error(FIXTURES / "unknown_shape.json")
    assert "unknown_shape.json" in message
    assert "found a JSON object with keys note, runs" in message


def test_no_steps_is_refused_not_imported_empty() -> None:
    message = _error(FIXTURES / "swe_agent_no_steps.traj")
    assert "swe_agent_no_steps.traj" in message
    assert "no steps" in message


def test_forced_format_names_that_format(tmp_path: Path) -> None:
    message = _error(SWE, "openhands")
    assert "swe_agent_small.traj" in message
    assert "expected an OpenHands event list" in message
    message = _error(OPENHANDS, "mini-swe-agent")
    assert "expected a mini-swe-agent .traj.json" in message


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "the file is empty"),
        (b"  \n ", "the file is empty"),
        (b"\xff\xfe\x00garbage", "not UTF-8"),
        (b"[1, 2, 3]", "found a JSON list of unrecognised entries"),
        (b"[]", "found an empty JSON list"),
        (b'"just a string"', "found a JSON str"),
        (b"{}", "found an empty JSON object"),
        (b'{"messages": [{"role": "system", "content": "s"}]}', "no task statement"),
        (
            b'{"messages": [{"role": "user", "content": "do it"}]}',
            "no steps (no assistant message)",
        ),
        (b'{"messages": [{"role": "user", "content": "x"}, 7]}', "messages[1] is not an object"),
        (b'[{"source": "user", "action": "message", "args": {"content": "x"}}]', "no steps"),
        (b'[{"source": "agent", "action": "run", "args": {"command": "ls"}}]', "no task"),
        (b'{"trajectory": [{"action": "ls", "observation": ""}], "history": []}', "no task"),
        (
            b'{"trajectory": [{"action": "ls", "observation": ""}, 3], '
            b'"history": [{"role": "user", "content": "t"}]}',
            "trajectory[1] is not an object",
        ),
    ],
)
def test_broken_files_raise_one_line_typed_errors(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    path = tmp_path / "broken.json"
    path.write_bytes(content)
    message = _error(path)
    assert str(path) in message
    assert problem in message


def test_missing_file_directory_and_unknown_format_name(tmp_path: Path) -> None:
    assert "no such file" in _error(tmp_path / "absent.traj")
    assert "is a directory" in _error(tmp_path)
    with pytest.raises(TrajectoryFormatError, match="unknown trajectory format 'yaml'"):
        load_trajectory(SWE, "yaml")
    with pytest.raises(TrajectoryFormatError, match="unknown trajectory format"):
        parse_trajectory({}, SWE, "yaml")


# --- heuristics -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "signature"),
    [
        ("cd /testbed && grep -n foo  bar.py", "grep -n foo bar.py"),
        ("cd '/a b' ; cd x && ls", "ls"),
        ("edit 3:4\n    x = 1\nend_of_edit", "edit 3:4"),
        ("  pytest   -q  ", "pytest -q"),
        ("", ""),
    ],
)
def test_normalize_command(command: str, signature: str) -> None:
    assert normalize_command(command) == signature


def test_extract_files_filters_urls_modules_and_roots() -> None:
    text = (
        "see https://example.org/docs/page.html and django.conf settings;\n"
        "File /testbed/pkg/mod.py line 3; ./setup.cfg; README.md; a/pkg/mod.py b/pkg/mod.py"
    )
    assert extract_files(text, roots=("/testbed",)) == (
        "pkg/mod.py",
        "setup.cfg",
        "README.md",
    )
    many = " ".join(f"f{i}.py" for i in range(20))
    assert len(extract_files(many)) == 8


def test_extract_symbols() -> None:
    text = 'File "x.py", line 2, in parse_size\n    def helper_fn(a):\nuse `Size.parse` and obj.method(1)'
    assert extract_symbols(text) == ("parse_size", "helper_fn", "Size.parse", "obj.method")
    assert "x.py" not in extract_symbols("see `x.py`")


def test_classify_step_rules() -> None:
    assert classify_step("grep -n x y.py", "", exit_code=1).failure
    assert not classify_step("grep -n x y.py", "y.py:1:x", exit_code=0).failure
    view = classify_step("cat y.py", "raise ValueError('x')\nValueError: shown code")
    assert view.file_view
    assert not view.failure
    assert not classify_step("cat > y.py << 'EOF'", "").file_view
    assert classify_step("sed -n '1,9p' y.py | nl", "1 x").file_view
    assert not classify_step("cat y.py | grep x", "x").file_view
    run = classify_step("tox -e py", "===== 2 failed, 3 passed in 1.2s =====")
    assert run.test_run
    assert run.test_failure
    assert run.failure
    assert classify_step("python x.py", "Traceback (most recent call last):\n  ...").failure
    assert classify_step("ls", "bash: foo: command not found").failure
    assert classify_step("ls", "<elided_chars>\n10 characters elided").truncated
    assert classify_step("open x.py", "[File: /r/x.py (3 lines total)]\n1:").file_view


@pytest.mark.parametrize(
    ("message", "template", "task", "instructions"),
    [
        ("A\n<pr_description>\nFix it.\n</pr_description>\nB", "", "Fix it.", None),
        ("Hello {x}\nTASK: Fix it.\nEND", "Hello {x}\nTASK: {{task}}\nEND", "Fix it.", None),
        ("just a task", "", "just a task", ""),
        ("ISSUE:\nBug.\n\nINSTRUCTIONS:\nGo.", "", "Bug.", None),
    ],
)
def test_split_task(message: str, template: str, task: str, instructions: str | None) -> None:
    got_task, got_instructions = split_task(message, template)
    assert got_task == task
    if instructions is None:
        assert "{{task}}" in got_instructions
        assert task not in got_instructions
    else:
        assert got_instructions == instructions


# --- items ------------------------------------------------------------------------------------

AT = datetime(2025, 1, 1, tzinfo=UTC)


def _make() -> Any:
    counter = EstimatingCounter()

    def make_item(agent: str, content: str, **kw: Any) -> Item:
        item_id = kw.pop("item_id")
        return Item(
            id=item_id, content=content, token_count=counter.count(content), agent=agent, **kw
        )

    return factory(make_item, "agent-1")


def _traj(path: Path) -> Trajectory:
    return load_trajectory(path)


def test_objective_and_role_items() -> None:
    at = AT
    t = _traj(SWE)
    obj = objective_item(t, _make(), at=at)
    assert (obj.layer, obj.source, obj.pinned, obj.mandatory) == (
        Layer.L1,
        Source.USER_REQUIREMENT,
        True,
        True,
    )
    assert obj.content == t.task
    assert obj.durability is Durability.DURABLE
    roles = role_items(t, _make(), at=at)
    assert [r.content for r in roles] == list(t.role_texts)
    assert {(r.layer, r.source) for r in roles} == {(Layer.L1, Source.ROLE_INSTRUCTION)}


def test_step_items_layers_sources_groups_and_flags() -> None:
    at = AT
    t = _traj(SWE)
    make = _make()
    tests = step_items(t, t.steps[4], make, at=at)
    assert tests.action is not None
    assert tests.observation is not None
    assert (tests.action.layer, tests.action.source) == (Layer.L0, Source.CONVERSATION)
    assert (tests.observation.layer, tests.observation.source) == (Layer.L0, Source.TEST_RESULT)
    assert tests.observation.failure
    assert tests.action.group == tests.observation.group == "step-0004"
    assert tests.observation.tool_signature == "pytest tests/test_sizes.py -q"
    assert tests.observation.files == ("tests/test_sizes.py",)
    view = step_items(t, t.steps[0], make, at=at, pin=True)
    assert view.observation is not None
    assert view.observation.source is Source.REPOSITORY_SOURCE
    assert view.observation.pinned
    assert view.action is not None
    assert view.action.pinned
    log = step_items(t, t.steps[1], make, at=at)
    assert log.observation is not None
    assert log.observation.source is Source.TOOL_LOG
    assert log.observation.durability is Durability.EPHEMERAL
    assert log.observation.failure
    silent = step_items(t, t.steps[5], make, at=at)
    assert silent.observation is not None
    assert silent.observation.content == NO_OUTPUT
    oh = _traj(OPENHANDS)
    final = step_items(oh, oh.steps[3], make, at=at)
    assert final.observation is None
    assert final.action is not None
    server = step_items(oh, oh.steps[2], make, at=at)
    assert server.user is not None
    assert (server.user.layer, server.user.source) == (Layer.L1, Source.USER_REQUIREMENT)
    assert not server.user.pinned
    ids = [i.id for s in t.steps for i in step_items(t, s, make, at=at).all]
    assert len(ids) == len(set(ids))  # identical outputs of two steps stay two items


def test_openhands_action_observation_pairs_are_flattened(tmp_path: Path) -> None:
    events = json.loads(OPENHANDS.read_text())
    pairs = []
    for e in events:
        if "action" in e:
            obs = next((o for o in events if o.get("cause") == e["id"]), None)
            rest = {k: v for k, v in (obs or {"observation": "null"}).items() if k != "cause"}
            pairs.append([e, {"source": "agent", **rest}])
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps({"instance_id": "x", "history": pairs}))
    t = load_trajectory(path)
    assert t.format == "openhands"
    assert t.task == "Make the Todo model's title required."
    assert [s.exit_code for s in t.steps] == [1, None, -1, None]


def test_swe_agent_1x_shape_with_content_blocks_and_state_objects(tmp_path: Path) -> None:
    instance = (
        "<uploaded_files>\n/testbed\n</uploaded_files>\nConsider the following PR description:"
        "\n\n<pr_description>\nThe timeout flag is ignored.\n</pr_description>\n\nFix it."
    )
    data = {
        "history": [
            {"role": "system", "content": [{"type": "text", "text": "You are an agent."}]},
            {"role": "user", "content": [{"type": "text", "text": instance}]},
        ],
        "trajectory": [
            {
                "action": "str_replace_editor view /testbed/app/cli.py  --view_range 1 20",
                "observation": "Here's the result of running `cat -n` on /testbed/app/cli.py",
                "response": "Look at the CLI.",
                "thought": "Look at the CLI.",
                "state": {"open_file": "/testbed/app/cli.py", "working_dir": "/testbed"},
                "execution_time": 0.1,
            }
        ],
        "info": {"model_stats": {"api_calls": 1}},
        "replay_config": json.dumps({"agent": {"model": {"name": "gpt-4o"}}}),
    }
    path = tmp_path / "v1.traj"
    path.write_text(json.dumps(data))
    t = load_trajectory(path)
    assert t.format == "swe-agent"
    assert t.task == "The timeout flag is ignored."
    assert t.role_texts[0] == "You are an agent."
    assert "<pr_description>\n{{task}}\n</pr_description>" in t.role_texts[1]
    assert t.model == "gpt-4o"
    assert t.steps[0].files == ("app/cli.py",)
    assert t.steps[0].file_view
    assert t.steps[0].command == "str_replace_editor view /testbed/app/cli.py --view_range 1 20"
