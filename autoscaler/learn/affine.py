"""Compact sampling (slides 001): one type's runtimes from another's, through an affine
map g(x) = a·x + b fitted on the tasks both ran."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class AffineFit:
    """g(x) = a·x + b between two types' runtimes of the same tasks (slides 001, compact
    sampling), fitted by least squares on ``pairs`` pairs (x on the reference type).

    ``resid_sd`` is the residuals' standard deviation (k − 2 degrees of freedom): the
    part of a task's runtime the reference does not predict. A mean runtime T on the
    reference maps to a·T + b with the variance of the fitted line at T,
    σ²·(1/k + (T − x̄)²/Sxx) (the regression's own error, which a larger sample on the
    reference does not remove).
    """

    a: float
    b: float
    pairs: int
    x_mean: float
    sxx: float
    resid_sd: float

    def __call__(self, x: float) -> float:
        return self.a * x + self.b

    def line_var(self, x: float) -> float:
        """Variance of the fitted line's value at ``x``."""
        return self.resid_sd**2 * (1.0 / self.pairs + (x - self.x_mean) ** 2 / self.sxx)


def fit_affine(pairs: Iterable[tuple[float, float]]) -> AffineFit | None:
    """Least-squares g(x) = a·x + b through (reference runtime, other runtime) pairs;
    None with fewer than three pairs, no spread in x, or a slope that is not positive
    (runtimes that fall as the reference's rise cannot be mapped)."""
    xy = np.asarray(list(pairs), dtype=float).reshape(-1, 2)
    k = len(xy)
    if k < 3:
        return None
    x, y = xy[:, 0], xy[:, 1]
    x_mean, y_mean = float(x.mean()), float(y.mean())
    sxx = float(((x - x_mean) ** 2).sum())
    if sxx <= 0:
        return None
    a = float(((x - x_mean) * (y - y_mean)).sum()) / sxx
    if a <= 0:
        return None
    b = y_mean - a * x_mean
    resid = y - (a * x + b)
    resid_sd = math.sqrt(float((resid**2).sum()) / (k - 2)) if k > 2 else 0.0
    return AffineFit(a, b, k, x_mean, sxx, resid_sd)
