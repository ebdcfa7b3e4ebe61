"""The guard a deadline plan keeps before each job's deadline (``deadline.jobs.guard``):
``guard_z`` spreads of one of the job's tasks, from its own runs, or, before it has any,
from the runs of the earlier jobs of its application (a recurring job planned from
memory). Without the latter, a recurring job's first plan aimed at the deadline itself
and the watch bought a machine it had not forecast once the job's first runs showed
their spread: ``benchmarks/recurring``'s third job, one machine-hour (14 %) over its
first forecast in every seed."""

from __future__ import annotations

import pytest

from autoscaler.core.billing import BillingModel
from autoscaler.core.model import JobSpec, TypeSpec
from autoscaler.core.state import RunState
from autoscaler.deadline.jobs import DeadlineSettings, guard, job_deadlines

HOURLY = BillingModel("fixed", 3600.0, 60.0, 300.0)


def state() -> RunState:
    jobs = [
        JobSpec("a", 0, 4, 0.0, 1500.0, None, {"small": 120.0}, app="sweep"),
        JobSpec("b", 4, 4, 7200.0, 8700.0, None, {"small": 120.0}, app="sweep"),
        JobSpec("other", 8, 4, 7200.0, 8700.0, None, {"small": 120.0}, app="render"),
    ]
    types = [TypeSpec("small", 1.0, 10, 120.0)]
    return RunState.new(types, HOURLY, None, 12, list(range(12)), jobs=jobs)


def ran(s: RunState, job: str, times: list[float]) -> None:
    s.observed.job_runs[(job, "small")] = [
        float(len(times)),
        sum(times),
        sum(t * t for t in times),
    ]


def test_a_job_without_runs_is_guarded_by_its_application_s_earlier_runs() -> None:
    s = state()
    cfg = DeadlineSettings()
    assert guard(cfg, s, s.work.jobs[1]) == 0.0  # nothing seen of the application yet
    ran(s, "a", [90.0, 150.0, 90.0, 150.0])  # sd 34.64
    sd = (sum((t - 120.0) ** 2 for t in [90.0, 150.0, 90.0, 150.0]) / 3) ** 0.5
    assert guard(cfg, s, s.work.jobs[1]) == pytest.approx(cfg.guard_z * sd)
    assert job_deadlines(cfg, s, guarded=True)["b"] == pytest.approx(8700.0 - 2 * sd)
    # A job of another application learns nothing from them.
    assert guard(cfg, s, s.work.jobs[2]) == 0.0


def test_a_job_s_own_runs_come_before_its_application_s() -> None:
    s = state()
    cfg = DeadlineSettings()
    ran(s, "a", [90.0, 150.0, 90.0, 150.0])
    ran(s, "b", [119.0, 121.0])
    assert guard(cfg, s, s.work.jobs[1]) == pytest.approx(cfg.guard_z * 2**0.5)
