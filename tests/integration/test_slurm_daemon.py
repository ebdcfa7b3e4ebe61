"""Real runs on the one-node Slurm of ``infra/slurm/setup.sh``, through the CLI.

The daemon runs as a process (``autoscaler run``); every machine is a Slurm batch job on
one of two partitions running the worker agent. Synthetic tasks sleep a few real seconds
(Slurm cannot be sped up), so a run takes tens of seconds. A ``kill -9`` of the daemon
leaves its jobs running; ``run --resume`` adopts them by name and finishes the bag.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.providers.slurm import cancel_jobs
from tests.integration.daemon_helpers import (
    ROOT,
    assert_clean_end,
    assert_deadline_end,
    cli,
    journal_rows,
    setup_ran,
    start_daemon,
    wait_for,
    with_setup,
)
from tests.integration.slurm import XDIST_GROUP, Slurm, jobs_of, slurm_config
from tests.integration.test_sge_daemon import output_of, wait_run_id

pytestmark = [pytest.mark.integration, XDIST_GROUP]

RUN_TIMEOUT_S = 150.0


def stop(daemon: subprocess.Popen[str], run_id: str | None) -> None:
    """End what a failed test left: the daemon, then any job of its run."""
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    if run_id is not None:
        cancel_jobs([job for job, _ in jobs_of(run_id).values()])


def watch(daemon: subprocess.Popen[str], run_id: str, seen: dict[str, str]) -> int:
    """Record the run's jobs (machine -> job id) until the daemon exits; its exit code."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while daemon.poll() is None:
        assert time.monotonic() < deadline, f"the run took over {RUN_TIMEOUT_S:g}s"
        for machine, (job, _) in jobs_of(run_id).items():
            seen.setdefault(machine, job)
        time.sleep(0.5)
    return daemon.wait()


def run_to_its_end(config: Path, run_dir: Path) -> tuple[str, dict[str, str]]:
    """``autoscaler run CONFIG`` to its end, recording the run's jobs; the run id and
    those jobs. Whatever fails, no daemon or job of the run is left."""
    daemon = start_daemon(str(config), "--out", str(run_dir))
    run_id: str | None = None
    seen: dict[str, str] = {}
    try:
        run_id = wait_run_id(run_dir, daemon)
        code = watch(daemon, run_id, seen)
        assert code == 0, output_of(daemon)
    finally:
        stop(daemon, run_id)
    return run_id, seen


def report_of(run_dir: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((run_dir / "report.json").read_text())
    return report


def assert_no_job_left(run_id: str) -> None:
    wait_for(lambda: jobs_of(run_id) == {}, 30, "the run's jobs to leave the queue")


def test_a_budget_run_on_two_partitions(slurm: Slurm, tmp_path: Path) -> None:
    """A synthetic bag on two partition-backed types: all done once, within budget, the
    report's machines the run's jobs, none left in squeue."""
    marker = tmp_path / "setup.log"
    config = with_setup(slurm_config(tmp_path, 30), marker)
    run_dir = tmp_path / "run"
    started = time.monotonic()
    run_id, seen = run_to_its_end(config, run_dir)
    wall = time.monotonic() - started
    report = report_of(run_dir)
    assert report["stop_reason"] is None
    assert_clean_end(run_dir, report, 30)
    setup_ran(run_dir, marker)  # each job ran the run's set-up once (issue 23 §1)
    print(f"\nslurm, 30 tasks: wall {wall:.1f}s, cost {report['cost']:.2f} of {report['budget']:g}")
    used = {m["type"] for m in report["machines"] if m["tasks_run"] > 0}
    assert used == {"small", "large"}
    launched = {d["machine"]: t for t, _, d in journal_rows(run_dir, "MachineLaunched")}
    ready = {d["machine"]: t for t, _, d in journal_rows(run_dir, "MachineReady")}
    waits = sorted(ready[m] - launched[m] for m in ready if m in launched)
    assert waits, "no machine became ready"
    print(f"slurm, sbatch to agent ready: {', '.join(f'{w:.2f}s' for w in waits)}")
    assert seen, "squeue never listed a job of the run"
    assert set(seen) <= {m["id"] for m in report["machines"]}
    assert_no_job_left(run_id)


def test_a_deadline_job_runs_on_slurm(slurm: Slurm, tmp_path: Path) -> None:
    """Deadline mode: one job with known task times, planned on the two partitions,
    every task done once; no job of the run left."""
    config = slurm_config(tmp_path, 1)
    data = yaml.safe_load(config.read_text())
    del data["bag"], data["constraint"]
    data["jobs"] = [
        {
            "name": "sweep",
            "bag": {"synthetic": 16},
            "constraint": {"deadline_s": 30},
            "task_s": {"small": 4, "large": 2},
        }
    ]
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    run_dir = tmp_path / "run"
    run_id, seen = run_to_its_end(config, run_dir)
    report = assert_deadline_end(run_dir, 16)
    (job,) = report["jobs"]
    print(
        f"\nslurm deadline job: finish {job['finish_s']:.0f}s of {job['deadline_s']:.0f}s, "
        f"{job['tasks_late']} late, cost {report['cost']:.2f}"
    )
    assert journal_rows(run_dir, "Launch"), "nothing was launched"
    assert seen, "squeue never listed a job of the run"
    assert_no_job_left(run_id)


def test_kill_9_then_resume_adopts_the_jobs_and_loses_nothing(slurm: Slurm, tmp_path: Path) -> None:
    """kill -9 of the daemon with jobs running; the jobs live on; ``run --resume`` adopts
    them by name and finishes the bag: every task once, no job left."""
    config = slurm_config(tmp_path, 40)
    run_dir = tmp_path / "run"
    daemon = start_daemon(str(config), "--out", str(run_dir))
    run_id: str | None = None
    try:
        run_id = wait_run_id(run_dir, daemon)
        wait_for(lambda: len(journal_rows(run_dir, "TaskDone")) >= 8, 60, "8 tasks done")
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait(10)
        alive = jobs_of(run_id)
        assert alive, "the run's jobs should outlive a killed daemon"
        before = len(journal_rows(run_dir, "TaskDone"))
        resumed = subprocess.run(
            cli("run", "--resume", str(run_dir)),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    finally:
        stop(daemon, run_id)
    report = report_of(run_dir)
    assert report["stop_reason"] is None
    assert_clean_end(run_dir, report, 40)
    after = {d["machine"] for _, _, d in journal_rows(run_dir, "TaskDone")[before:]}
    assert after & set(alive), f"none of the jobs {sorted(alive)} was adopted: {sorted(after)}"
    assert_no_job_left(run_id)
