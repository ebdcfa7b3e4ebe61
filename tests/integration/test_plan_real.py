"""`autoscaler plan` on a real provider (local worker processes, time-scaled): it samples
for real, holds, and `autoscaler run --plan DIR --option N` carries the same run on from
the samples, adopting the sampling machines that still have paid time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.daemon_helpers import (
    adopted,
    agents_of,
    assert_clean_end,
    assert_sampled_once,
    first_t,
    journal_rows,
    local_config,
    plan_in_background,
    read_plan,
    run_cli,
    run_id_of,
    wait_for,
)

pytestmark = pytest.mark.integration

N_TASKS = 400


def planning_config(tmp: Path, atu: str = "4h") -> Path:
    """Sampling ends well inside the first paid unit (4 emulated hours, 24 real s), so
    the sampling machines still have paid time to hand over."""
    return local_config(
        tmp,
        bag={"synthetic": N_TASKS},
        constraint={"budget": 100},
        machine_types=[
            {"name": "small", "price": 1, "max_count": 3, "boot_s": "2m"},
            {"name": "fast", "price": 2, "max_count": 3, "boot_s": "2m"},
        ],
        billing={"mode": "fixed", "atu_s": atu},
        local={"time_scale": 600},
        emulator={"speed": {"small": 1, "fast": 2}},
    )


def test_run_takes_the_sampling_machines_over_from_plan(tmp_path: Path) -> None:
    # 8 h units (48 real s): `run` has time to ask for the hand-over on a loaded host (at
    # a load average of 10, the plan had released its machines by then with 4 h units).
    config = planning_config(tmp_path, "8h")
    plan_dir = tmp_path / "plan"
    plan = plan_in_background(config, plan_dir, tmp_path)
    try:
        wait_for(lambda: (plan_dir / "plan.json").exists(), 120, "the plan's frontier")
        data = read_plan(plan_dir)
        run_dir = Path(data["run_dir"])
        option = len(data["options"])  # the fastest: the shortest test
        run = run_cli(
            "run",
            str(config),
            "--plan",
            str(plan_dir),
            "--option",
            str(option),
            cwd=tmp_path,
            timeout=300,
        )
        _, plan_err = plan.communicate(timeout=60)
    finally:
        plan.kill()
    assert plan.returncode == 0, plan_err
    assert "handed over" in plan_err
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    assert report["budget"] == pytest.approx(data["options"][option - 1]["budget"])
    assert_clean_end(run_dir, report, N_TASKS)
    assert_sampled_once(run_dir)
    assert adopted(run_dir), "no sampling machine was taken over"


@pytest.mark.long
def test_a_held_run_whose_machines_are_gone_carries_on_with_a_budget(tmp_path: Path) -> None:
    """`plan` to its end (its machines' paid time over), then `run --resume DIR --budget B`:
    the samples are reused and new machines finish the bag within B."""
    config = planning_config(tmp_path)
    plan_dir = tmp_path / "plan"
    plan = plan_in_background(config, plan_dir, tmp_path)
    try:
        _, plan_err = plan.communicate(timeout=180)
    finally:
        plan.kill()
    assert plan.returncode == 0, plan_err
    assert "machines are released" in plan_err
    data = read_plan(plan_dir)
    run_dir = Path(data["run_dir"])
    assert agents_of(run_id_of(run_dir)) == []
    too_little = run_cli("run", "--resume", str(run_dir), "--budget", "1", cwd=tmp_path)
    assert too_little.returncode == 2
    assert "committed already" in too_little.stdout + too_little.stderr
    budget = data["options"][-1]["budget"]
    run = run_cli(
        "run", "--resume", str(run_dir), "--budget", str(budget), cwd=tmp_path, timeout=300
    )
    assert run.returncode == 0, run.stdout + run.stderr
    report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    assert report["budget"] == pytest.approx(budget)
    assert_clean_end(run_dir, report, N_TASKS)
    assert_sampled_once(run_dir)
    assert first_t(run_dir, "BudgetSet") < max(
        t for t, _, _ in journal_rows(run_dir, "MachineLaunched")
    )
