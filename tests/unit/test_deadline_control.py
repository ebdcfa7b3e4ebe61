"""Deadline mode end to end in the emulator: DeadlineController driven by virtual time.

The emulated world (the remote side) runs each task for its job's mean time on the
machine's type, times a noise factor, or slower on machines the test makes slow.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence

import pytest

from autoscaler.config.schema import Emulator as EmulatorModel
from autoscaler.core.billing import BillingModel
from autoscaler.core.journal import Record, replay
from autoscaler.core.model import (
    Action,
    Assign,
    Event,
    Extend,
    JobSpec,
    Late,
    Launch,
    MachineLaunched,
    Move,
    TaskState,
    TypeSpec,
)
from autoscaler.core.state import RunState
from autoscaler.core.step import assignments
from autoscaler.deadline.deadline_controller import DeadlineController, DeadlineSettings
from autoscaler.providers.base import Capabilities
from autoscaler.providers.sim import SimProvider
from autoscaler.run.emulator import Emulator

HOURLY = BillingModel("fixed", 3600.0, 60.0, 300.0)
APPS = ({"m": 60.0, "l": 30.0, "x": 15.0}, {"m": 40.0, "l": 32.0, "x": 28.0})


def _types(max_count: int = 10) -> list[TypeSpec]:
    return [
        TypeSpec("m", 0.073, max_count, 100.0),
        TypeSpec("l", 0.146, max_count, 100.0),
        TypeSpec("x", 0.293, max_count, 100.0),
    ]


def _jobs(batches: Sequence[tuple[float, int, float]], apps=APPS, known=True) -> list[JobSpec]:
    """(arrival, tasks, deadline after arrival) per batch; one job per app per batch."""
    jobs, first = [], 0
    for b, (at, n, window) in enumerate(batches):
        for a, app in enumerate(apps):
            jobs.append(JobSpec(f"b{b}a{a}", first, n, at, at + window, None, app if known else {}))
            first += n
    return jobs


class _World(SimProvider):
    """Tasks take their job's true mean on the type, times U(1-ε, 1+ε); machines listed
    in ``slow`` (by launch order) take ``factor`` times as long."""

    def __init__(self, *args, state, truth, noise, seed, slow=(), factor=1.0, **kw):
        super().__init__(*args, **kw)
        self.state, self.truth, self.noise, self.rng_seed = state, truth, noise, seed
        self.slow, self.factor = set(slow), factor
        self.order: list[str] = []

    def launch(self, type_name, count, token, tags):
        records = super().launch(type_name, count, token, tags)
        self.order.extend(r.id for r in records)
        return records

    def run_time(self, task: int, machine: str) -> float:
        job = self.state.work.job_of(task)
        kind = self.machines[machine].type
        r = random.Random(f"{task}:{machine}:{self.rng_seed}")
        t = self.truth[job.name][kind] * (1 + r.uniform(-self.noise, self.noise))
        return t * (self.factor if self.order.index(machine) in self.slow else 1.0)


def run(
    jobs: Sequence[JobSpec],
    *,
    types: Sequence[TypeSpec] | None = None,
    truth: Mapping[str, Mapping[str, float]] | None = None,
    noise: float = 0.0,
    seed: int = 0,
    budget: float | None = None,
    settings: DeadlineSettings | None = None,
    slow: Sequence[int] = (),
    factor: float = 1.0,
    interval: float = 60.0,
) -> tuple[RunState, list[tuple[float, list[Event], list[Action], float]]]:
    types = list(types or _types())
    n = sum(j.count for j in jobs)
    state = RunState.new(types, HOURLY, budget, n, list(range(n)), jobs=jobs)
    truth = truth or {j.name: dict(j.task_s) for j in jobs}
    caps = Capabilities(
        billing=HOURLY,
        max_counts={t.name: t.max_count for t in types},
        boot_estimate_s={t.name: t.boot_s for t in types},
    )
    holder: list[Emulator] = []
    world = _World(
        caps,
        EmulatorModel(),
        n,
        clock=lambda: holder[0].now,
        state=state,
        truth=truth,
        noise=noise,
        seed=seed,
        slow=slow,
        factor=factor,
    )
    steps: list[tuple[float, list[Event], list[Action], float]] = []

    def hook(now, events, actions, st):
        steps.append((now, list(events), list(actions), st.money.committed))

    em = Emulator(DeadlineController(settings), state, world, interval, on_step=hook)
    holder.append(em)
    return em.run(), steps


def finish_and_late(state: RunState) -> tuple[dict[str, float], dict[str, int]]:
    finish: dict[str, float] = {}
    late: dict[str, int] = {}
    for seg in state.tasks.segments:
        if seg.outcome != "done":
            continue
        job = state.work.job_of(seg.task)
        finish[job.name] = max(finish.get(job.name, 0.0), seg.end)
        if seg.end > job.deadline + 1e-9:
            late[job.name] = late.get(job.name, 0) + 1
    return finish, late


def actions(steps, kind):
    return [(now, a) for now, _, acts, _ in steps for a in acts if isinstance(a, kind)]


def test_two_batches_finish_in_time_once_each_without_noise():
    jobs = _jobs(((0.0, 40, 1200.0), (300.0, 60, 1200.0)))
    state, steps = run(jobs)
    assert state.money.stop_reason is None
    assert state.tasks.done == state.n_tasks
    assert all(s is TaskState.DONE for s in state.tasks.task_state)
    done = [seg.task for seg in state.tasks.segments if seg.outcome == "done"]
    assert sorted(done) == list(range(state.n_tasks))  # each task once
    _, late = finish_and_late(state)
    assert late == {}
    assert not any(a.tasks > 0 for _, a in actions(steps, Late))
    assert not state.fleet.any_alive()
    # The second batch was planned when it arrived, not before.
    second = [j for j in jobs if j.at == 300.0]
    placed = [
        now
        for now, a in actions(steps, Launch)
        for q in a.queues
        for t in q
        if any(j.owns(t) for j in second)
    ] + [
        now
        for now, _, acts, _ in steps
        for task, _ in assignments(acts)
        if any(j.owns(task) for j in second)
    ]
    assert placed
    assert min(placed) >= 300.0


def test_cost_is_what_the_machines_billed_and_forecast_is_checked():
    jobs = _jobs(((0.0, 50, 1200.0),))
    state, _ = run(jobs)
    billed = sum(
        HOURLY.cost(m.type.price, m.paid_until - m.launched_at)
        for m in state.fleet.machines.values()
    )
    assert state.money.committed == pytest.approx(billed)
    # Without noise the plan's forecast of each job's finish holds (it is met, not beaten
    # by more than the plan's slack of one task).
    finish, _ = finish_and_late(state)
    for job in jobs:
        forecast = state.work.forecasts[job.name]
        assert finish[job.name] <= forecast.finish + 1e-6
        assert forecast.finish <= job.deadline + 1e-6


def test_an_unmeetable_deadline_is_said_before_it_passes():
    # 60 tasks of 60 s on at most 2 machines of one type, due in 600 s: about 1,900 s of work.
    types = [TypeSpec("m", 0.073, 2, 100.0)]
    jobs = [JobSpec("tight", 0, 60, 0.0, 600.0, None, {"m": 60.0})]
    state, steps = run(jobs, types=types)
    said = [(now, a) for now, a in actions(steps, Late) if a.tasks > 0]
    assert said
    assert said[0][0] < 600.0
    assert said[0][1].cause == "deadline"
    _, late = finish_and_late(state)
    assert late["tight"] > 0
    assert state.tasks.done == 60
    # What was said is what happened, within the task time.
    assert said[0][1].tasks == pytest.approx(late["tight"], abs=2)


def test_reassignment_moves_work_off_a_slow_machine_and_cuts_lateness():
    jobs = _jobs(((0.0, 60, 1500.0),), apps=(APPS[0],))
    kw = {"slow": (0,), "factor": 1.6, "noise": 0.05, "seed": 3}
    with_r, steps = run(jobs, settings=DeadlineSettings(buy_when_late=False), **kw)
    without, _ = run(jobs, settings=DeadlineSettings(reassign=False), **kw)
    moves = [a for _, a in actions(steps, Move)]
    assert moves
    slow_id = next(m for m in with_r.fleet.machines if m.endswith("-0"))
    assert all(m.source == slow_id for m in moves[:1])
    late_secs = lambda st: sum(  # noqa: E731
        max(0.0, f - st.work.job_named(j).deadline) for j, f in finish_and_late(st)[0].items()
    )
    assert late_secs(with_r) < late_secs(without)
    assert with_r.tasks.done == without.tasks.done == with_r.n_tasks


def test_a_budget_holds_and_says_it_gave_way():
    jobs = _jobs(((0.0, 100, 900.0),))
    unlimited, _ = run(jobs)
    budget = 0.5 * unlimited.money.committed
    state, steps = run(jobs, budget=budget)
    assert max(c for *_, c in steps) <= budget + 1e-9
    said = [a for _, a in actions(steps, Late) if a.tasks > 0]
    assert said
    assert said[0].cause == "budget"
    assert state.tasks.done + state.tasks_left == state.n_tasks
    assert state.money.stop_reason is None or "budget" in state.money.stop_reason


def test_a_job_without_known_times_is_sampled_then_planned():
    truth = {"b0a0": APPS[0], "b0a1": APPS[1]}
    jobs = _jobs(((0.0, 60, 2400.0),), known=False)
    state, _steps = run(jobs, truth=truth, noise=0.1, seed=1)
    assert state.tasks.done == state.n_tasks
    ctl = DeadlineController()
    for job in jobs:
        est = ctl.task_times(state, job)
        assert set(est) == {"m", "l", "x"}
        for name, e in est.items():
            assert e >= 0.85 * truth[job.name][name]  # mean + z·σ/√n: not below the mean much
    _, late = finish_and_late(state)
    assert late == {}


def test_never_extends_a_machine_for_nothing_and_releases_every_machine():
    jobs = _jobs(((0.0, 20, 1200.0), (4000.0, 20, 1200.0)))
    state, steps = run(jobs)
    for _, a in actions(steps, Extend):
        m = state.fleet.machines[a.machine]
        assert any(
            seg.machine == m.id and seg.start >= a.until - 3600 - 1 for seg in state.tasks.segments
        )
    assert not state.fleet.any_alive()
    assert state.tasks.done == state.n_tasks


def test_the_journal_replays_to_the_live_state():
    jobs = _jobs(((0.0, 30, 1200.0), (300.0, 30, 1200.0)))
    live, steps = run(jobs, noise=0.3, seed=5, slow=(1,), factor=1.5)
    n = live.n_tasks
    fresh = RunState.new(_types(), HOURLY, None, n, list(range(n)), jobs=jobs)
    records, seq = [], 0
    for now, events, acts, _ in steps:
        for item in [*events, *acts]:
            records.append(Record(seq, now, "event" if item in events else "action", item))
            seq += 1
    replay(fresh, records)
    assert fresh.money.committed == pytest.approx(live.money.committed)
    assert fresh.tasks.task_state == live.tasks.task_state
    assert {k: (m.state, m.paid_until) for k, m in fresh.fleet.machines.items()} == {
        k: (m.state, m.paid_until) for k, m in live.fleet.machines.items()
    }
    assert fresh.work.late == live.work.late
    assert fresh.work.forecasts == live.work.forecasts


def test_a_machine_queue_keeps_earliest_deadline_first_whatever_comes_in():
    """A task moved or assigned to a machine runs before queued tasks due later (the
    order reassignment's finish times assume): the state and the emulator agree."""
    jobs = [
        JobSpec("early", 0, 3, 0.0, 600.0, None, {"m": 60.0}),
        JobSpec("late", 3, 3, 0.0, 1800.0, None, {"m": 60.0}),
    ]
    state = RunState.new([TypeSpec("m", 1.0, 4, 0.0)], HOURLY, None, 6, list(range(6)), jobs=jobs)
    state.apply(0.0, Launch("m", 2, "L0", ((3, 4, 0), (5,))))
    state.apply(0.0, MachineLaunched("m-0", "m", "L0"))
    state.apply(0.0, MachineLaunched("m-1", "m", "L0"))
    assert list(state.fleet.machines["m-0"].queue) == [0, 3, 4]
    state.apply(1.0, Move((0,), "m-0", "m-1"))
    assert list(state.fleet.machines["m-1"].queue) == [0, 5]
    state.apply(2.0, Assign(1, "m-1"))
    state.apply(2.0, Assign(2, "m-0"))
    assert list(state.fleet.machines["m-1"].queue) == [0, 1, 5]
    assert list(state.fleet.machines["m-0"].queue) == [2, 3, 4]
