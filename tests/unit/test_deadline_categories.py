"""Categories in deadline mode (issue 21 §3): a job whose tasks fall into several
categories is planned one part per category, each with its own time per type, so paper
002's model (7) gives each type the categories it is fast at.

Two types at the same price, each four times faster at one kind of task
(``emulator.category_speed``); one sampled job of a labelled bag file. Without
categories the planner sees one time per type, the mean of both kinds, and mixes them.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path

import pytest

from autoscaler.categories.of_config import categories_of_tasks
from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.core.errors import StateError
from autoscaler.core.model import JobSpec, Shutdown, TaskSpec
from autoscaler.core.state import RunState
from autoscaler.deadline.category_parts import category_times
from autoscaler.deadline.deadline_controller import DeadlineController
from autoscaler.report.build import build_report
from autoscaler.run.assemble import added_job, deadline_settings, new_state
from autoscaler.run.inbox import AddJob
from autoscaler.run.owner import pool_job
from autoscaler.run.start import DryRun, dry_run, make_emulator
from benchmarks.deadline_categories import write_scenario


def labels_of(n: int = 100) -> list[str]:
    labels = ["cpu"] * n + ["io"] * n
    random.Random(1).shuffle(labels)
    return labels


def run(
    tmp_path: Path,
    categories: str | None,
    *,
    seed: int = 2,
    deadline: str = "2h",
    count: int = 12,
    plain: bool = False,
    progress: Callable[[RunState], None] | None = None,
) -> DryRun:
    """A dry run of the job; ``plain``: by a controller built without the config's
    categories (the deadline controller as it was before them)."""
    path = write_scenario(
        tmp_path,
        labels_of(),
        deadline=deadline,
        count=count,
        seed=seed,
        categories=categories,
        name=f"run-{categories}-{seed}-{deadline}.yaml",
    )
    cfg = load_config(path)
    if not plain:
        return dry_run(cfg, expand_bag(cfg), plots=False, progress=progress)
    settings = deadline_settings(cfg)
    controller = DeadlineController(type(settings)(sample=settings.sample, z=settings.z))
    state = make_emulator(cfg, 200, controller=controller).run()
    report = build_report(cfg, state, tasks=expand_bag(cfg), run_id="plain", seed=seed, wall_s=0)
    return DryRun("plain", state, report, None, 0.0)


def placed(done: DryRun) -> Counter[tuple[str, str]]:
    labels = labels_of()
    state = done.state
    return Counter(
        (labels[s.task], state.fleet.machines[s.machine].type.name)
        for s in state.tasks.segments
        if s.outcome == "done"
    )


def done_once(done: DryRun) -> None:
    """Every task ended with a result exactly once."""
    ended = Counter(s.task for s in done.state.tasks.segments if s.outcome == "done")
    assert sorted(ended) == list(range(200))
    assert set(ended.values()) == {1}


@pytest.mark.parametrize("seed", [2, 3])
def test_with_categories_each_type_runs_what_it_is_fast_at_and_the_run_costs_less(
    tmp_path: Path, seed: int
) -> None:
    without = run(tmp_path, None, seed=seed)
    with_ = run(tmp_path, "{by: label}", seed=seed)
    for done in (without, with_):
        done_once(done)
        assert done.report.jobs_met_deadline == 1
    assert with_.report.cost <= 0.6 * without.report.cost
    where = placed(with_)
    assert where["cpu", "a"] >= 0.8 * 100
    assert where["io", "b"] >= 0.7 * 100
    assert placed(without)["cpu", "a"] < 0.7 * 100  # one time per type mixes them
    # The plan's forecast, its queues seen task by task at their category's time,
    # is what the run cost.
    first = next(c for _, c in with_.state.decisions.configurations if "planned" in c.reason)
    assert first.predicted_cost == pytest.approx(with_.report.cost, rel=0.1)


def test_sampling_measures_each_category_on_each_type_before_the_plan(tmp_path: Path) -> None:
    """The samples take the large category (here one of two, the paper's 20 %) on each
    type twice, and the rest of a type's samples the other category: when the job is
    planned, each category has run on each type."""
    seen: dict[tuple[int, str], float] = {}

    def progress(state: RunState) -> None:
        planned = any("planned" in c.reason for _, c in state.decisions.configurations)
        if planned and not seen:
            seen.update({key: runs[0] for key, runs in state.observed.category_runs.items()})

    done = run(tmp_path, "{by: label}", progress=progress)
    assert set(done.state.tasks.task_category) == {0, 1}
    assert seen, "the job was never planned"
    for key in ((0, "a"), (0, "b"), (1, "a"), (1, "b")):
        assert seen.get(key, 0) >= 1, key
    assert max(seen.get((0, t), 0) for t in "ab") >= 2  # the large category: 2 per type


def test_a_deadline_that_cannot_be_met_is_reported_late_and_no_task_is_lost(
    tmp_path: Path,
) -> None:
    done = run(tmp_path, "{by: label}", deadline="30m", count=3)
    done_once(done)
    job = done.report.jobs[0]
    assert job.tasks_late > 0
    assert not job.met_deadline
    said = [t for t, note in done.state.work.late_log if note.tasks > 0]
    assert said
    assert said[0] < 1800  # warned before the deadline


def test_without_categories_the_run_is_the_controller_s_without_them(tmp_path: Path) -> None:
    """No ``categories:``: the same run, action for action, as a controller that has
    none (the deadline controller as it was)."""
    built = run(tmp_path, None)
    plain = run(tmp_path, None, plain=True)
    assert built.state.tasks.task_category == ()
    assert built.state.tasks.segments == plain.state.tasks.segments
    assert built.report.cost == plain.report.cost
    # With categories in the state but not in the controller: still the same run.
    counted = run(tmp_path, "{by: label}", plain=True)
    assert counted.state.tasks.task_category != ()
    assert counted.state.tasks.segments == plain.state.tasks.segments


def test_a_category_s_time_is_measured_else_the_ratio_rule_else_the_declared_time_scaled(
    tmp_path: Path,
) -> None:
    """A job that declares 100 s per task on both types, its tasks estimated 60 s and
    180 s (two categories): before any run, each category is planned at 100 s scaled
    by its estimate over the job's mean (120 s); once the short category has run on
    ``a``, it is what it showed there, and the long one on ``a`` scales from it by the
    estimates (the paper's ratio rule); ``b`` keeps the declared, scaled times."""
    rows = ["command,estimate_s", *(f"true {i},{60 if i % 2 else 180}" for i in range(20))]
    (tmp_path / "bag.csv").write_text("\n".join(rows) + "\n")
    path = tmp_path / "run.yaml"
    path.write_text(
        "jobs:\n  - {name: j, bag: {file: bag.csv}, constraint: {deadline_s: 1h},"
        " task_s: {a: 100, b: 100}}\n"
        "categories: {estimate_s: 60}\n"
        "machine_types:\n  - {name: a, price: 1, max_count: 2, boot_s: 60}\n"
        "  - {name: b, price: 1, max_count: 2, boot_s: 60}\n"
    )
    cfg = load_config(path)
    settings = deadline_settings(cfg)
    state = new_state(cfg, 20, seed=1)
    job = state.work.job_named("j")
    short, long_ = state.tasks.task_category[1], state.tasks.task_category[0]
    assert short != long_
    assert category_times(settings, state, job, short) == pytest.approx({"a": 50, "b": 50})
    assert category_times(settings, state, job, long_) == pytest.approx({"a": 150, "b": 150})
    state.observed.category_runs[short, "a"] = [2.0, 80.0, 3200.0]  # two runs of 40 s
    assert category_times(settings, state, job, short) == pytest.approx({"a": 40, "b": 50})
    assert category_times(settings, state, job, long_) == pytest.approx({"a": 120, "b": 150})


# --- a job joining a pool (the service's deadline pool) ------------------------------------


def pool_run(tmp_path: Path, carry: bool, seed: int) -> tuple[RunState, Counter[tuple[str, str]]]:
    """The scenario's job as a keep-open pool; at 30 min a second job of 60 labelled
    tasks joins it (as ``Daemon.add_job`` makes the event), its tasks sorted into the
    pool's categories (``carry``) or not (as every pool job was before).
    Returns the pool's state and where the second job's tasks ran (label, type)."""
    path = write_scenario(
        tmp_path, labels_of(), deadline="2h", count=12, seed=seed, categories="{by: label}"
    )
    path.write_text(path.read_text() + "deadline: {keep_open: true}\n")
    cfg = load_config(path)
    em = make_emulator(cfg, 200)
    later = ["cpu"] * 30 + ["io"] * 30
    random.Random(seed).shuffle(later)
    specs = [TaskSpec(i, f"true {i}", category=x) for i, x in enumerate(later)]
    found = deadline_settings(cfg).categories
    cats = categories_of_tasks(cfg, found, specs) if carry else ()
    job = JobSpec("second", 0, 60, 0.0, 1800.0 + 7200.0, None, {})
    em.tell(1800.0, added_job(job, 200, 1800.0, seed, cats), later)
    em.tell(30000.0, Shutdown("the service stops"))
    state = em.run()
    second = state.work.job_named("second")
    ended = [s for s in state.tasks.segments if s.outcome == "done" and second.owns(s.task)]
    assert sorted(s.task for s in ended) == list(range(200, 260))  # each once
    assert max(s.end for s in ended) <= second.deadline
    where = Counter((later[s.task - 200], state.fleet.machines[s.machine].type.name) for s in ended)
    return state, where


@pytest.mark.parametrize("seed", [2, 3])
def test_a_job_joining_a_pool_is_planned_by_the_pool_s_categories(
    tmp_path: Path, seed: int
) -> None:
    """A pool's added job carried no categories (the service's store kept only each
    task's command): its tasks were planned as one job, at one time per type, and ran
    wherever (13–24 of 30 of each kind on the type four times faster at it). Sorted by
    the pool's labels, each kind runs where it is fast, in far less machine time."""
    state, where = pool_run(tmp_path, True, seed)
    labels = {c.key: c.id for c in deadline_settings(load_config(tmp_path / "run.yaml")).categories}
    assert set(state.tasks.task_category[200:]) == {labels["cpu"], labels["io"]}
    assert where["cpu", "a"] >= 27
    assert where["io", "b"] >= 27
    blind_state, blind = pool_run(tmp_path, False, seed)
    assert blind_state.tasks.task_category[200:] == (-1,) * 60
    assert blind["cpu", "a"] + blind["io", "b"] < where["cpu", "a"] + where["io", "b"]
    assert busy_s(state) < 0.75 * busy_s(blind_state)


def busy_s(state: RunState) -> float:
    """Machine time the second job's tasks took (each kind 4x faster where it fits)."""
    second = state.work.job_named("second")
    return sum(s.end - s.start for s in state.tasks.segments if second.owns(s.task))


def test_an_added_task_whose_label_the_pool_lacks_is_planned_with_its_job(tmp_path: Path) -> None:
    path = write_scenario(
        tmp_path, labels_of(), deadline="2h", count=12, seed=2, categories="{by: label}"
    )
    cfg = load_config(path)
    found = deadline_settings(cfg).categories
    ids = {c.key: c.id for c in found}
    specs = [TaskSpec(0, "x", category="io"), TaskSpec(1, "y", category="gpu"), TaskSpec(2, "z")]
    assert categories_of_tasks(cfg, found, specs) == (ids["io"], -1, -1)
    state = new_state(cfg, 200, 2)
    # The daemon's path (``Daemon.add_job``): the event carries them, and the state too.
    item = AddJob(JobSpec("b", 0, 3, 0.0, 9000.0), tuple(specs), Future())
    event = pool_job(cfg, state, DeadlineController(deadline_settings(cfg)), item, [], [], 0.0, 2)
    assert event is not None
    assert event.categories == (ids["io"], -1, -1)
    state.apply(0.0, event)
    assert state.tasks.task_category[200:] == (ids["io"], -1, -1)
    with pytest.raises(StateError):  # one category per task, or none
        state.apply(0.0, added_job(JobSpec("c", 0, 3, 0.0, 900.0), 203, 0.0, 2, (0, 1)))
