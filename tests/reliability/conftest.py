"""Prints the reliability figures of this run at the end of the pytest output."""

from __future__ import annotations

import pytest

from tests.reliability._support import figures_path, recorded


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    rows = recorded()
    if not rows:
        return
    terminalreporter.section("reliability figures")
    for row in rows:
        terminalreporter.write_line(f"{row['test']} | {row['scale']} | {row['result']}")
    terminalreporter.write_line(f"(merged into {figures_path()})")
