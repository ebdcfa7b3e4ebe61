"""``benchmarks.daemon_scale``'s rows as a user writes them (``--row A:S:N``)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks.bats_scenarios import REPO
from benchmarks.daemon_scale import RowSpec


@pytest.mark.parametrize(
    ("text", "row"),
    [
        ("10000:10:100000", RowSpec(10_000, 10.0, 100_000)),
        ("5_000:2:1M", RowSpec(5_000, 2.0, 1_000_000)),
        ("16:0.5:2.5k", RowSpec(16, 0.5, 2_500)),
    ],
)
def test_a_row_is_agents_task_seconds_and_tasks(text: str, row: RowSpec) -> None:
    assert RowSpec.parse(text) == row


@pytest.mark.parametrize("text", ["5000:2", "a:2:10", "5000:0:10", "0:2:10", "5000:2:-1"])
def test_a_bad_row_is_refused_by_name_without_a_traceback(text: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.daemon_scale", "--row", text],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert f"--row {text!r}" in proc.stderr
    assert "Traceback" not in proc.stderr
