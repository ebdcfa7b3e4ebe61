"""Kaplan–Meier, its moments and its tail with every weight one (``weights`` None, the
path T_i takes on every estimate) are the weighted path's numbers with a row of ones, to
the bit: the shortcut moves no decision."""

from __future__ import annotations

import random

import numpy as np
import pytest

from autoscaler.learn.survival import kaplan_meier, km_moments, merged, tail_moments
from tests.unit.draws import draw_runtime


def _runs(draw: str, seed: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = random.Random(seed)
    done: list[float] = []
    censored: list[float] = []
    for _ in range(n):
        t = draw_runtime(rng, draw)
        (censored if rng.random() < 0.2 else done).append(t)
    if not done:
        done.append(1.0)
    return merged(done, censored)


@pytest.mark.parametrize("draw", ["normal", "pareto", "lognormal"])
@pytest.mark.parametrize("n", [1, 2, 7, 130, 1025, 20_000])
def test_unit_weights_are_a_row_of_ones(draw: str, n: int) -> None:
    times, events = _runs(draw, n, n)
    ones = np.ones(len(times))
    for got, want in zip(
        kaplan_meier(times, events), kaplan_meier(times, events, ones), strict=True
    ):
        assert got.shape == want.shape
        assert got.tolist() == want.tolist()
    for got, want in zip(km_moments(times, events), km_moments(times, events, ones), strict=True):
        assert got.tolist() == want.tolist()
    restricted = np.array([float(np.mean(times))])
    got_t = tail_moments(times, events, None, restricted)
    want_t = tail_moments(times, events, ones, restricted)
    for got, want in zip(got_t, want_t, strict=True):
        assert np.asarray(got).tolist() == np.asarray(want).tolist()


def test_the_last_run_censored_leaves_survival_at_the_end() -> None:
    """A check that the comparison can fail: the curve does move with the data."""
    times, events = _runs("normal", 3, 50)
    events[-1] = False
    after, _ = kaplan_meier(times, events)
    assert after[0, -1] > 0.0
    events[-1] = True
    after_all, _ = kaplan_meier(times, events)
    assert after_all[0, -1] == 0.0
