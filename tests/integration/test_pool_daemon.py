"""A deadline pool for real (issue 13): a keep-open deadline run on local worker
processes, time-scaled, takes a second job while its machines run, finishes both on
time with every task done once, stays open, and ends on Shutdown with no agent left."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.core.model import JobSpec, MachineState, Shutdown, TaskSpec
from autoscaler.run.assemble import new_run_id
from autoscaler.run.daemon import Daemon, Outcome
from autoscaler.run.rundir import RunFiles
from tests.integration.daemon_helpers import (
    agents_of,
    assigned_rows,
    done_counts,
    journal_rows,
    kill_agents,
    wait_for,
)

pytestmark = pytest.mark.integration

APP = {"m3.medium": 60, "m3.large": 28, "m3.xlarge": 14}


def pool_config(tmp: Path) -> Path:
    data: dict[str, Any] = {
        "name": "pool",
        "jobs": [
            {
                "name": "first",
                "bag": {"synthetic": 40},
                "constraint": {"deadline_s": 1200},
                "task_s": APP,
            }
        ],
        "deadline": {"keep_open": True},
        "machine_types": [
            {"name": "m3.medium", "price": 0.073, "max_count": 10, "boot_s": 100},
            {"name": "m3.large", "price": 0.146, "max_count": 10, "boot_s": 100},
            {"name": "m3.xlarge", "price": 0.293, "max_count": 10, "boot_s": 100},
        ],
        "billing": {"mode": "fixed", "atu_s": 3600},
        "provider": "local",
        "local": {"time_scale": 30},
        "monitoring_interval_s": 60,
        "daemon": {"heartbeat_s": 1, "lost_after_s": 10},
        "emulator": {"seed": 2, "runtime": {"dist": "uniform", "low_s": 90, "high_s": 110}},
    }
    path = tmp / "pool.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_job_added_to_a_live_pool_runs_on_its_machines_and_the_pool_ends_on_shutdown(
    tmp_path: Path,
) -> None:
    config = pool_config(tmp_path)
    cfg = load_config(config)
    run_dir = tmp_path / "run"
    files = RunFiles.create(cfg, expand_bag(cfg), run_dir, new_run_id(cfg), cfg.emulator.seed)
    daemon = Daemon(files)
    result: list[Outcome | BaseException] = []

    def run() -> None:
        try:
            result.append(daemon.run())
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_for(
            lambda: (
                hasattr(daemon, "state")
                and any(m.state is MachineState.READY for m in daemon.state.fleet.machines.values())
                and daemon.state.tasks.done >= 5
            ),
            120,
            "the pool's machines never ran the first job",
        )
        now = daemon.now()
        tasks = [TaskSpec(0, None) for _ in range(30)]
        answer = daemon.add_job(JobSpec("second", 0, 0, 0.0, now + 1200.0, None, APP), tasks)
        second = answer.result(timeout=60)
        assert (second.first, second.count) == (40, 30)
        assert second.at >= now
        wait_for(lambda: daemon.state.tasks.done == 70, 240, "the pool never finished both jobs")
        # Open with no work: still running, not stopped.
        assert thread.is_alive()
        assert not daemon.state.money.stopped
        daemon.tell(Shutdown("the service stops"))
        thread.join(120)
        assert not thread.is_alive()
    finally:
        kill_agents(files.run_id)
    (outcome,) = result
    assert isinstance(outcome, Outcome), outcome
    state = outcome.state
    assert state.money.stop_reason == "the service stops"
    assert not state.fleet.any_alive()
    assert agents_of(files.run_id) == []
    # Every task of both jobs done exactly once, each job by its deadline.
    done = done_counts(run_dir)
    assert sorted(done) == list(range(70))
    assert max(done.values()) == 1
    for job in state.work.jobs:
        ends = [s.end for s in state.tasks.segments if s.outcome == "done" and job.owns(s.task)]
        assert len(ends) == job.count
        assert max(ends) <= job.deadline, job.name
    # The added job went onto the machines that ran (Algorithm 1) in the step it came.
    (added_t, _, _), *_ = journal_rows(run_dir, "JobAdded")
    running = {m.id for m in state.fleet.machines.values() if m.launched_at < added_t}
    assigned = {
        d["machine"]
        for t, _, d in assigned_rows(run_dir)
        if t == added_t and second.owns(d["task"])
    }
    assert assigned
    assert assigned <= running
    # The run directory knows the added tasks: a resumed daemon would.
    again = RunFiles.open(run_dir)
    assert (again.config_tasks, len(again.tasks)) == (40, 70)
