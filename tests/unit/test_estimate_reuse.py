"""What the estimates keep between events is what a computation from scratch gives.

* N_e's paid completions, the residuals of every running task asked per type at once
  (``tail_estimates``), equal the task-by-task reading (the loop as it was: each task's
  ``tail_estimate``, asked only where its lane still has time), after every step of
  random runs through the real controller: launches refused, machines lost, tasks that
  fail, replicas, slots, both billings.
* T_i and the survival curve a type keeps (the curve built from the Kaplan–Meier pass
  T_i made, when no run ended since) are those computed from scratch on the runs of
  the version they were built at, on random sequences of ends and failures and of
  questions, within the exact range and past it (where they lag a few runs behind).
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.budget.controller import Controller
from autoscaler.budget.outlook import paid_completions
from autoscaler.budget.settings import ControllerSettings
from autoscaler.core.journal import SqliteJournal
from autoscaler.core.model import Assign, Launch, MachineLaunched, MachineReady, MachineState
from autoscaler.core.state import RunState
from autoscaler.learn import stats as stats_module
from autoscaler.learn.curve import curve_arrays, km_pass
from autoscaler.learn.stats import RuntimeStats, tail_estimates
from tests.unit.test_replay_property import BILLINGS, TYPES, _launch_events, _machine_events

_EPS = 1e-6


def _task_by_task(state: RunState, now: float, means: dict[str, float]) -> float:
    """Σ ft_m as ``paid_completions`` read it before, one ``tail_estimate`` per task."""
    margin = state.billing.boundary_margin_s()
    total = 0.0
    for m in (m for m in state.fleet.alive_machines() if m.type.name in means):
        mean = means[m.type.name]
        boot_left = m.launched_at + m.type.boot_s - now
        booting = m.state is MachineState.BOOTING
        lanes = [m.paid_until - margin - now - (max(0.0, boot_left) if booting else 0.0)]
        lanes *= max(1, m.type.slots)
        for i, start in enumerate(m.running.values()):
            lane = i % len(lanes)
            age = now - start
            if lanes[lane] >= 0:  # a lane spent asks nothing more
                rest = max(0.0, state.observed.stats[m.type.name].tail_estimate(age) - age)
                fits = rest <= lanes[lane]
                total += fits
                lanes[lane] = lanes[lane] - rest if fits else -1.0
        whole = [math.floor(lane / mean + _EPS) for lane in lanes if lane > 0]
        total += sum(whole)
    first = state.billing.first_step_s - margin
    return total + sum(  # each launch in flight: its first step less the whole boot
        n
        * state.types[t].slots
        * max(0, math.floor((first - state.types[t].boot_s) / means[t] + _EPS))
        for t, n in state.fleet.pending_launches.values()
        if t in means
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_paid_completions_at_once_are_the_task_by_task_reading(data: st.DataObject) -> None:
    n_tasks = data.draw(st.integers(1, 30), label="tasks")
    billing = data.draw(st.sampled_from(BILLINGS), label="billing")
    budget = data.draw(st.sampled_from([4.0, 30.0, 200.0]), label="budget")
    state = RunState.new(TYPES, billing, budget, n_tasks, list(range(n_tasks)), 1, 2)
    controller = Controller(ControllerSettings())
    journal = SqliteJournal(Path(":memory:"))
    now = 0.0
    compared = 0
    for step in range(data.draw(st.integers(1, 40), label="steps")):
        events = [] if step == 0 else _launch_events(data, state, now)
        events += [] if step == 0 else _machine_events(data, state, now)
        journal.step(now, events, controller.step(state, events, now))
        means = {n: s.mean() for n, s in state.observed.stats.items() if s.done > 0}
        for at in (now, now + 30.0, now + 2000.0):
            at_once = paid_completions(
                state, at, means, lambda n, ages: tail_estimates(state.observed.stats[n], ages)
            )
            assert at_once == _task_by_task(state, at, means)
            compared += any(m.running for m in state.fleet.alive_machines()) and bool(means)
        if state.over:
            break
        now += data.draw(st.sampled_from([1.0, 60.0, 900.0, 1750.0]), label="dt")


def test_a_machine_whose_paid_time_is_over_is_not_asked() -> None:
    """A residual asked of a task whose lane is spent would build its type's curve where
    the task-by-task reading does not (and a lagging curve then lags differently)."""
    state = RunState.new(TYPES[:1], BILLINGS[0], 10.0, 2, [0, 1], 1, 2)
    state.apply(0.0, Launch("a", 1, "L"))
    state.apply(0.0, MachineLaunched("m", "a", "L", 0.0))
    state.apply(60.0, MachineReady("m"))
    state.apply(60.0, Assign(0, "m"))
    asked: list[str] = []

    def residuals(name: str, ages: np.ndarray) -> np.ndarray:
        asked.append(name)
        return ages

    assert paid_completions(state, 100.0, {"a": 100.0}, residuals) > 0
    assert asked == ["a"]
    asked.clear()
    assert paid_completions(state, 1e6, {"a": 100.0}, residuals) == 0
    assert asked == []


def _runs(seed: int, n: int) -> list[tuple[str, float]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        t = 60.0 * rng.paretovariate(2.5) if seed % 2 else max(1.0, rng.gauss(900.0, 134.0))
        out.append(("censor" if rng.random() < 0.15 else "record", t))
    return out


@pytest.mark.parametrize("exact_up_to", [stats_module.EXACT_UP_TO, 40])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_t_i_and_the_curve_are_those_of_the_runs_they_were_built_on(
    seed: int, exact_up_to: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Asked in any order (T_i alone, τ_e alone, both), the curve and T_i kept are
    ``curve_arrays`` and ``km_pass`` from scratch on the runs seen at the version they
    say they were built at: the pass T_i made is reused only for its own runs."""
    monkeypatch.setattr(stats_module, "EXACT_UP_TO", exact_up_to)
    s = RuntimeStats(30)
    done: list[float] = []
    censored: list[float] = []
    at_version: dict[int, tuple[int, int]] = {}
    rng = random.Random(seed)
    checked: set[tuple[int, bool]] = set()
    for i, (kind, t) in enumerate(_runs(seed, 1500)):
        getattr(s, kind)(t, i)
        (done if kind == "record" else censored).append(t)
        at_version[s.version] = (len(done), len(censored))
        if s.done == 0:
            continue
        pick = rng.random()
        if pick < 0.4:
            s.mean()
        if 0.2 < pick < 0.6:
            s.tail_estimate(rng.uniform(0.0, 2000.0))
        key = (s._built_version, s._curve is not None)
        if s._whole is None or key in checked:
            continue
        checked.add(key)
        n_done, n_censored = at_version[s._built_version]
        runs = (done[:n_done], censored[:n_censored])
        assert s._whole == km_pass(*runs)[4]
        if s._curve is not None:
            assert s._curve == curve_arrays(*runs)[0]
    assert sum(curve for _, curve in checked) > 20
