"""τ_e of many ages at once (``learn.stats.tail_estimates``, the tail phase's) is the
scalar ``RuntimeStats.tail_estimate`` of each, to the bit."""

from __future__ import annotations

import random

import numpy as np
import pytest

from autoscaler.learn.stats import RuntimeStats, tail_estimates
from tests.unit.draws import draw_runtime


def _stats(draw: str, seed: int, n: int) -> RuntimeStats:
    rng = random.Random(seed)
    stats = RuntimeStats(sample_target=30)
    for _ in range(n):
        t = draw_runtime(rng, draw)
        if rng.random() < 0.1:
            stats.censor(t)
        else:
            stats.record(t)
    return stats


@pytest.mark.parametrize("draw", ["normal", "pareto", "lognormal"])
@pytest.mark.parametrize("n", [1, 5, 300, 3000])
def test_many_ages_at_once_are_each_age_alone(draw: str, n: int) -> None:
    stats = _stats(draw, n, n)
    times = stats.done_times
    ages = [0.0, 0.5, 10.0, 300.0, 900.0, 2500.0, 1e5, times[0], times[-1], *times[:50]]
    ages += [random.Random(n).uniform(0.0, 2 * times[-1]) for _ in range(200)]
    got = tail_estimates(stats, np.array(ages)).tolist()
    assert got == [stats.tail_estimate(a) for a in ages]


def test_before_any_end_a_task_is_expected_to_end_now() -> None:
    stats = RuntimeStats(sample_target=3)
    assert tail_estimates(stats, np.array([0.0, 7.5])).tolist() == [0.0, 7.5]
