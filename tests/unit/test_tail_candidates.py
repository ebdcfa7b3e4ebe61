"""The tail's candidates (the tasks running once) are kept on the state from step to
step until a task joins them (``Tasks.solo_gains``), those that ended or were
replicated since dropped: the task ``last_to_finish`` picks must be the one a scan of
``running_on`` from scratch picks, at every step of random runs with tail replication,
failed tasks and lost machines (a replicated task back to one run)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.budget.boundaries import can_extend
from autoscaler.budget.settings import ControllerSettings
from autoscaler.budget.tail import last_to_finish
from autoscaler.config.schema import RunConfig
from autoscaler.core.model import Action, Event, MachineState, TaskState
from autoscaler.core.state import Machine, RunState
from autoscaler.core.step import Step
from autoscaler.learn.stats import tail_estimates
from autoscaler.run.emulator import Emulator
from autoscaler.run.start import make_emulator
from tests.conftest import make_config
from tests.unit.test_money import run_configs


def scratch(state: RunState, now: float, m: Machine) -> tuple[float, int] | None:
    """The running task (one run, not on ``m``) expected to finish last, task by task in
    ``running_on`` order: the first of the latest, a task whose machine goes before it
    ends counted as ending never."""
    margin = state.billing.boundary_margin_s()
    best: tuple[float, int] | None = None
    for tid, runs in state.tasks.running_on.items():
        if len(runs) != 1 or state.tasks.task_state[tid] is not TaskState.RUNNING:
            continue
        ((mid, start),) = runs.items()
        host = state.fleet.machines[mid]
        if host is m:
            continue
        age = np.array([now - start])
        finish = start + float(tail_estimates(state.observed.stats[host.type.name], age)[0])
        if finish > host.paid_until - margin and not can_extend(state, host):
            finish = math.inf
        if best is None or finish > best[0]:
            best = (finish, tid)
    return best


def _checked(cfg: RunConfig) -> tuple[int, int]:
    """Runs ``cfg``, comparing after every step once the bag is empty: how many times,
    and at how many of those steps a task had joined the candidates since the last."""
    em: Emulator | None = None
    rules = ControllerSettings()
    asked = joined = 0
    gains = -1

    def check(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        nonlocal asked, joined, gains
        assert em is not None
        if state.tasks.pending or not state.tasks.running_on:
            return
        joined += 0 <= gains != state.tasks.solo_gains
        gains = state.tasks.solo_gains
        for m in state.fleet.alive_machines():
            if m.state is MachineState.READY:
                got = last_to_finish(rules, Step(state, now), m)
                assert got == scratch(state, now, m)
                asked += 1

    n = cfg.bag.synthetic
    assert n is not None
    em = make_emulator(cfg, n, on_step=check)
    em.run()
    return asked, joined


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run_configs(), st.integers(20, 150))
def test_kept_candidates_pick_what_a_scan_picks(cfg: RunConfig, n_tasks: int) -> None:
    cfg = cfg.model_copy(update={"tail_replication": True})
    cfg = cfg.model_copy(update={"bag": cfg.bag.model_copy(update={"synthetic": n_tasks})})
    _checked(cfg)


def test_the_comparison_is_made() -> None:
    """A check that the comparison runs where it matters: a long tail on many machines,
    tasks that fail and start again in it, lost machines (their replicas' tasks back to
    one run)."""
    failures = [
        {"type": t, "at_s": 2500.0 + 400.0 * i, "index": i}
        for t in ("slow", "fast")
        for i in range(12)
    ]
    cfg = make_config(
        bag={"synthetic": 60},
        constraint={"budget": 2000.0},
        machine_types=[
            {"name": "slow", "price": 1.0, "max_count": 12, "boot_s": 60},
            {"name": "fast", "price": 3.0, "max_count": 12, "boot_s": 60},
        ],
        emulator={
            "seed": 3,
            "runtime": {"dist": "lognormal", "mean_s": 900, "sd_s": 900},
            "speed": {"slow": 1.0, "fast": 2.0},
            "task_failure_prob": 0.3,
            "machine_failures": failures,
        },
        tail_replication=True,
    )
    asked, joined = _checked(cfg)
    assert asked > 20
    assert joined > 3
