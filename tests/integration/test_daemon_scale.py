"""``benchmarks/daemon_scale.py`` at a tiny size: the real daemon on simulated agents.

The benchmark's figures are not checked (no timing here), only what must hold whatever
the host's load: every task done once, no machine lost, the journal written, the agents'
latencies recorded, and no process of the run left behind.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmarks.daemon_scale import alive_pids, main, measure
from benchmarks.daemon_scale_run import Spec
from benchmarks.dispatch_floor import main as floor_main
from benchmarks.sim_agents import quantile

pytestmark = [pytest.mark.integration, pytest.mark.slow]

AGENTS, TASKS, PER_PROCESS = 20, 200, 8


def test_a_tiny_row_does_every_task_once_and_leaves_nothing_behind(tmp_path: Path) -> None:
    spec = Spec(AGENTS, TASKS, task_s=0.5, per_process=PER_PROCESS, out=str(tmp_path / "row"))
    row = measure("row", spec)
    assert row.done == row.distinct == row.counted == TASKS
    assert row.lost == 0
    assert row.figures["stop_reason"] is None
    assert row.generators == 3  # 20 agents, 8 a process
    gens = row.figures["generators"]
    assert sum(g["agents"] for g in gens) == AGENTS
    assert sum(g["tasks"] for g in gens) == TASKS  # none sent twice: nothing was lost
    assert row.journal_b > 0
    assert row.outputs_b > 0
    assert row.figures["polls"] >= TASKS // 2
    assert sum(row.rtt) > 0
    assert sum(row.gap) > 0
    assert quantile(row.rtt, 0.5) <= quantile(row.rtt, 0.99)
    assert row.leftovers == []
    assert alive_pids(tmp_path / "row" / "generators.pids", ("benchmarks.sim_agents",)) == []


def test_the_benchmark_prints_its_rows_baselines_and_extrapolation(
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = ["--agents", str(AGENTS), "--tasks-per-agent", "5", "--task-s", "0.5"]
    args += ["--per-process", str(PER_PROCESS), "--baseline-agents", "4", "--ramp-s", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    table = out.split("Targets (issue 36):")[0]
    rows = [line for line in table.splitlines() if line.startswith(("baseline ", "row1 "))]
    assert len(rows) == 2
    assert all(" yes " in line for line in rows)  # every task done once
    assert "Emulator baseline" in out
    assert "1,000,000 tasks on 20 agents" in out
    targets = out.split("Targets (issue 36):")[1].split("\n\n")[0]
    (checked,) = [line for line in targets.splitlines() if line.startswith("row1 ")]
    assert checked.startswith("row1 20 × 0.5 s, 100")
    assert "ok (0)" in checked  # no machine lost: the only target that holds on any host
    assert "No process of any row was left behind." in out


def test_the_floor_hands_out_every_task_once_and_prints_its_row(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert floor_main(["--row", f"{AGENTS}:0.5:{TASKS}", "--per-process", str(PER_PROCESS)]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith(f"{AGENTS} × 0.5 s, {TASKS} ")]
    _, results, us, kernel, rate = re.split(r"\s{2,}", row.strip())
    assert int(results) == TASKS  # every result came back once: none lost, none twice
    assert float(us.replace(",", "")) > 0
    assert kernel.endswith(" %")
    assert float(rate.replace(",", "")) > 0
