"""``paid_completions`` counts the one-slot machines of a type all at once (numpy); the
count must be the one a machine-by-machine reading gives, at every step of random runs
(booting machines, running tasks that outlast their paid time, failures, lost machines,
multi-slot types beside one-slot ones)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.budget.outlook import paid_completions
from autoscaler.config.schema import RunConfig
from autoscaler.core.model import Action, Event, MachineState
from autoscaler.core.state import RunState
from autoscaler.learn.stats import tail_estimates
from autoscaler.run.start import make_emulator
from tests.conftest import make_config
from tests.unit.test_money import run_configs

_EPS = 1e-6


def by_machine(state: RunState, now: float, means: dict[str, float]) -> float:
    """Σ ft_m machine by machine, lane by lane (the definition; launches in flight left
    out: they are counted apart)."""
    margin = state.billing.boundary_margin_s()
    total = 0.0
    for m in state.fleet.alive_machines():
        mean = means.get(m.type.name)
        if mean is None:
            continue
        left = m.paid_until - margin - now
        if m.state is MachineState.BOOTING:
            left -= max(0.0, m.launched_at + m.type.boot_s - now)
        lanes = [left] * max(1, m.type.slots)
        if left >= 0:
            for i, start in enumerate(m.running.values()):
                lane = i % len(lanes)
                if lanes[lane] < 0:
                    continue
                age = now - start
                done_at = float(
                    tail_estimates(state.observed.stats[m.type.name], np.array([age]))[0]
                )
                rest = max(0.0, done_at - age)
                if rest > lanes[lane]:
                    lanes[lane] = -1.0
                    continue
                total += 1
                lanes[lane] -= rest
        total += sum(math.floor(lane / mean + _EPS) for lane in lanes if lane > 0)
    return total


def _checked(cfg: RunConfig) -> int:
    """Runs ``cfg``, comparing at every step with machines alive; how many times."""
    compared = 0

    def check(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        nonlocal compared
        means = {n: s.mean() for n, s in state.observed.stats.items() if s.done > 0}
        if not means or not state.fleet.any_alive():
            return
        launches = dict(state.fleet.pending_launches)
        state.fleet.pending_launches.clear()  # counted apart: compared without them
        try:
            got = paid_completions(
                state, now, means, lambda n, ages: tail_estimates(state.observed.stats[n], ages)
            )
        finally:
            state.fleet.pending_launches.update(launches)
        assert got == by_machine(state, now, means)
        compared += 1

    n = cfg.bag.synthetic
    assert n is not None
    make_emulator(cfg, n, on_step=check).run()
    return compared


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run_configs(), st.integers(20, 120))
def test_the_count_is_the_machine_by_machine_count(cfg: RunConfig, n_tasks: int) -> None:
    cfg = cfg.model_copy(update={"bag": cfg.bag.model_copy(update={"synthetic": n_tasks})})
    _checked(cfg)


def test_the_comparison_is_made_on_one_slot_and_many_slot_types_at_once() -> None:
    failures = [{"type": "slow", "at_s": 2500.0 + 600.0 * i, "index": i} for i in range(6)]
    cfg = make_config(
        bag={"synthetic": 200},
        constraint={"budget": 400.0},
        machine_types=[
            {"name": "slow", "price": 1.0, "max_count": 12, "boot_s": 300},
            {"name": "wide", "price": 3.0, "max_count": 6, "boot_s": 300, "slots": 4},
        ],
        emulator={
            "seed": 5,
            "runtime": {"dist": "lognormal", "mean_s": 900, "sd_s": 900},
            "speed": {"slow": 1.0, "wide": 1.5},
            "task_failure_prob": 0.2,
            "machine_failures": failures,
        },
    )
    assert _checked(cfg) > 50
