"""Declared task times as a prior (issue 22 §1): the blend of ``deadline.prior``, the
planning means of ``deadline.jobs.task_times``, and a deviation said once."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import jsonschema
import pytest

from autoscaler.config.load import load_config
from autoscaler.core.billing import BillingModel
from autoscaler.core.model import JobSpec, Learned, TypeSpec
from autoscaler.core.state import RunState
from autoscaler.deadline.deadline_controller import DeadlineController, DeadlineSettings
from autoscaler.deadline.prior import blend
from autoscaler.report.build import build_report
from autoscaler.report.records import REPORT_JSON, REPORT_MD, DeadlineReport, read_report
from autoscaler.report.write import write_report
from autoscaler.run.live import status_lines
from tests.unit.deadline_runs import deadline_run, jobs
from tests.unit.test_deadline_control import _jobs, _types, finish_and_late, run

CV = 0.25
CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"


def runs_of(times: list[float]) -> list[float]:
    return [float(len(times)), sum(times), sum(t * t for t in times)]


def noisy(mean: float, n: int, noise: float, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [mean * rng.uniform(1 - noise, 1 + noise) for _ in range(n)]


def test_no_runs_is_the_declared_time() -> None:
    """Without runs the planning mean is what the job declares."""
    assert blend(60.0, None, CV).mean_s == 60.0
    assert blend(60.0, [0.0, 0.0, 0.0], CV).mean_s == 60.0


def test_a_slower_type_is_learned() -> None:
    """Runs 30 % slower than declared pull the mean up to them."""
    b = blend(60.0, runs_of(noisy(78.0, 10, 0.1)), CV)
    assert b.mean_s == pytest.approx(78.0, rel=0.05)
    assert b.deviates(0.2, 1.96, 3)


def test_a_faster_type_is_learned() -> None:
    """Runs 30 % faster than declared pull the mean down to them."""
    b = blend(60.0, runs_of(noisy(42.0, 10, 0.1)), CV)
    assert b.mean_s == pytest.approx(42.0, rel=0.05)
    assert b.deviates(0.2, 1.96, 3)


def test_one_run_weighs_as_much_as_the_declaration() -> None:
    """With one run the noise is unknown: the prior and the run count alike."""
    assert blend(60.0, runs_of([80.0]), CV).mean_s == pytest.approx(70.0)


def test_the_weight_of_evidence_grows_with_the_count() -> None:
    """The more runs at the same mean and spread, the closer the blend to their mean."""
    gaps = []
    for n in (2, 4, 8, 16, 32):
        times = [78.0 * (1.2 if i % 2 else 0.8) for i in range(n)]  # mean 78, sd ~ 0.2·78
        b = blend(60.0, runs_of(times), CV)
        gaps.append(abs(b.observed_s - b.mean_s))
    assert all(later < earlier for earlier, later in itertools.pairwise(gaps))


def test_noise_keeps_the_prior_longer() -> None:
    """Noisy runs move the mean less than quiet runs of the same mean and count."""
    quiet = [78.0 * (1.02 if i % 2 else 0.98) for i in range(4)]
    loud = [78.0 * (1.6 if i % 2 else 0.4) for i in range(4)]
    b_quiet, b_loud = blend(60.0, runs_of(quiet), CV), blend(60.0, runs_of(loud), CV)
    assert b_quiet.observed_s == pytest.approx(b_loud.observed_s)
    assert abs(b_quiet.mean_s - 78.0) < abs(b_loud.mean_s - 78.0)
    assert b_quiet.deviates(0.2, 1.96, 3)
    assert not b_loud.deviates(0.2, 1.96, 3)  # not confident: the runs' own spread is wide


def test_a_small_deviation_is_not_said() -> None:
    """Runs 5 % off the declaration are learned but not a large deviation."""
    b = blend(60.0, runs_of(noisy(63.0, 20, 0.02)), CV)
    assert b.mean_s == pytest.approx(63.0, rel=0.02)
    assert not b.deviates(0.2, 1.96, 3)


def _state(jobs: list[JobSpec]) -> RunState:
    types = [TypeSpec("m", 0.1, 5, 60.0), TypeSpec("l", 0.2, 5, 60.0)]
    n = sum(j.count for j in jobs)
    return RunState.new(types, BillingModel("fixed", 3600.0), None, n, list(range(n)), jobs=jobs)


def test_planning_means_learn_from_the_application() -> None:
    """A job's planning mean on a type learns from the runs of its own and of its
    application's other jobs there, not from another application's; other types and
    the declared-times-believed setting keep the declared time."""
    a1 = JobSpec("a1", 0, 10, 0.0, 900.0, None, {"m": 60.0, "l": 30.0}, app="A")
    a2 = JobSpec("a2", 10, 10, 300.0, 1200.0, None, {"m": 60.0, "l": 30.0}, app="A")
    b1 = JobSpec("b1", 20, 10, 0.0, 900.0, None, {"m": 60.0, "l": 30.0})
    state = _state([a1, a2, b1])
    state.observed.job_runs["a1", "m"] = runs_of(noisy(78.0, 8, 0.1))
    learn, believe = (
        DeadlineController(),
        DeadlineController(DeadlineSettings(learn_task_times=False)),
    )
    for job in (a1, a2):
        times = learn.task_times(state, job)
        assert times["m"] == pytest.approx(78.0, rel=0.05)
        assert times["l"] == 30.0
        assert believe.task_times(state, job) == {"m": 60.0, "l": 30.0}
    assert learn.task_times(state, b1) == {"m": 60.0, "l": 30.0}


def _second_batch_on_m(state: RunState) -> int:
    return sum(
        1
        for seg in state.tasks.segments
        if seg.outcome == "done"
        and state.work.job_of(seg.task).name.startswith("b1")
        and state.fleet.machines[seg.machine].type.name == "m"
    )


def test_a_slow_type_is_said_once_per_job_and_planned_on() -> None:
    """In a run where type m takes 1.5 × what the jobs declare, each job's deviation on
    m is said once (a ``Learned`` per job on m, none on the types as declared); the
    second batch, planned on the first's runs, puts fewer of its tasks on m than a run
    that believes the declaration, and none is late; the notes fold into a state fed
    the same steps."""
    jobs = _jobs([(0.0, 80, 1500.0), (900.0, 80, 1500.0)])
    truth = {j.name: {**j.task_s, "m": 1.5 * j.task_s["m"]} for j in jobs}
    state, steps = run(jobs, truth=truth, noise=0.1)
    said = [a for _, _, acts, _ in steps for a in acts if isinstance(a, Learned)]
    seen = {(a.job, a.type) for a in said}
    assert len(said) == len(seen) > 0
    assert {t for _, t in seen} == {"m"}
    assert all(a.learned_s > 1.3 * a.declared_s for a in said)
    assert set(state.work.learned) == seen
    believed, _ = run(
        jobs, truth=truth, noise=0.1, settings=DeadlineSettings(learn_task_times=False)
    )
    assert _second_batch_on_m(state) < _second_batch_on_m(believed)
    assert not finish_and_late(state)[1]
    n = sum(j.count for j in jobs)
    fresh = RunState.new(_types(), state.billing, None, n, list(range(n)), jobs=jobs)
    for now, events, acts, _ in steps:
        for e in events:
            fresh.apply(now, e)
        for a in acts:
            fresh.apply(now, a)
    assert set(fresh.work.learned) == seen


def test_learned_times_are_in_status_and_report(tmp_path: Path) -> None:
    """A run whose tasks take 1.3 × what its jobs declare says the learned times in
    ``autoscaler status`` and in the report (a note per job and type in report.json,
    valid against the report schema and read back, and a line each in report.md); a
    run as declared says none."""
    cfg = load_config(CONFIG_DIR / "examples" / "quickstart.yaml")
    slow = deadline_run(jobs(3, 20), slow=1.3)
    assert slow.work.learned
    lines = status_lines("d", cfg, slow, None)
    for job, tname in slow.work.learned:
        line = next(x for x in lines if f"job {job}:" in x)
        assert f"learned {tname} " in line
    report = build_report(cfg, slow, tasks=[], run_id="d", seed=1)
    assert isinstance(report, DeadlineReport)
    write_report(report, None, tmp_path)
    data = json.loads((tmp_path / REPORT_JSON).read_text(encoding="utf-8"))
    schema = json.loads((CONFIG_DIR / "report.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(data, schema)
    assert read_report(tmp_path) == report
    notes = {(j["name"], n["type"]): n for j in data["jobs"] for n in j["learned"]}
    assert set(notes) == set(slow.work.learned)
    for (job, tname), note in notes.items():
        declared = next(s for s in slow.work.jobs if s.name == job).task_s[tname]
        assert note["declared_s"] == declared
        assert note["learned_s"] > 1.2 * declared
    md = (tmp_path / REPORT_MD).read_text(encoding="utf-8")
    assert md.count("**Task times learned at") == len(notes)
    as_declared = deadline_run(jobs(3, 20), slow=1.0)
    assert not as_declared.work.learned
    report = build_report(cfg, as_declared, tasks=[], run_id="d", seed=1)
    assert isinstance(report, DeadlineReport)
    assert all(j.learned == () for j in report.jobs)
