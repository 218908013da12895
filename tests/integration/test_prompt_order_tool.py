"""The shared prompt-order tool (``../shared/tools/prompt_order.py``) runs against the
installed package, as another project's script would, and finds the prompts in order:
no step pair going backwards within a prompt and no observation before its own action."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[3] / "shared" / "tools" / "prompt_order.py"
RUNS = (
    "mini-swe-agent__deepseek-chat__django-14997.traj.json",
    "swe-agent__gpt4__pydicom-1458.traj",
)


@pytest.mark.parametrize("run", RUNS)
def test_the_shared_tool_sees_no_prompt_out_of_order(shared_trajectories: Path, run: str) -> None:
    if not TOOL.is_file():
        pytest.fail(f"the shared tool is missing at {TOOL}")
    out = subprocess.run(
        [sys.executable, str(TOOL), str(shared_trajectories / run), "8000"],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    found = re.search(
        r"(\d+) prompts; backward step pairs (\d+)/(\d+); observation before its action (\d+)/(\d+)",
        out.stdout,
    )
    assert found, out.stdout
    prompts, backward, pairs, obs_first, groups = map(int, found.groups())
    assert prompts > 0
    assert pairs > 0
    assert groups > 0
    assert backward == 0
    assert obs_first == 0
