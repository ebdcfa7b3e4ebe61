"""A declared time per task as a prior (issue 22 §1): the planning mean of a job on a
type blends what the job declares (``task_s``) with the runs that ended there.

The model is the conjugate normal update with known variances. A task's time on a type
is normal with mean μ and variance σ²; the declaration is a prior on μ, normal around
the declared μ₀ with sd τ = ``prior_cv``·μ₀ (how far users' own estimates are off:
paper 004 starts from them for that reason). After n runs of mean x̄ the posterior
mean is

    μ_n = (k·μ₀ + n·x̄) / (k + n),   k = σ² / τ²,

the declaration worth k pseudo-observations. k is not a constant: σ² is the runs' own
sample variance (n ≥ 2; with one run, σ = τ, so that run weighs as much as the
declaration), so on quiet runs a few observations outweigh the prior and on noisy ones
the prior holds longer, which a fixed k could not do. The weight of the evidence, n/k,
grows with the count, and with no runs μ_n = μ₀: a job whose runs match its declaration
plans as before.

Plans use μ_n plus z times the posterior sd of μ, σ/√(n + k), once the runs give σ
(n ≥ 2): the estimate with its uncertainty, as a sampled job's mean + z·σ/√n (k = 0
there). It matters: the runs that end first are the short ones, so an early mean is
low, and a plan on it alone packed the last task of a job a second past its deadline
(issue 22's benchmark, slow medium at ±10 %, seed 10). Without runs the declared time is
planned on as it is, as before.

A deviation is "large and confident" when μ_n is off μ₀ by at least ``note_share`` of
μ₀ and x̄ is off μ₀ by at least z standard errors (z·s/√n, n ≥ ``note_runs``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

SIGMA_FLOOR = 0.01  # σ at least this share of μ₀: identical runs do not make k zero


@dataclass(frozen=True, slots=True)
class Blend:
    """A planning mean: the declared ``declared_s``, the runs' ``runs`` and mean
    ``observed_s``, their sd ``sd_s``, the posterior mean ``mean_s`` and what plans
    use, ``planned_s`` (the mean with its uncertainty)."""

    declared_s: float
    runs: int
    observed_s: float
    sd_s: float
    mean_s: float
    planned_s: float

    def deviates(self, share: float, z: float, least: int) -> bool:
        """A large, confident deviation from the declared time (module docstring)."""
        if self.runs < least or self.runs < 2:
            return False
        large = abs(self.mean_s - self.declared_s) >= share * self.declared_s
        confident = abs(self.observed_s - self.declared_s) >= z * self.sd_s / math.sqrt(self.runs)
        return large and confident


def blend(
    declared_s: float, runs: Sequence[float] | None, prior_cv: float, z: float = 1.96
) -> Blend:
    """The posterior mean of a declared ``declared_s`` after ``runs`` (count, sum, sum
    of squares; None: none), and the time plans use (+ ``z`` posterior sds)."""
    if runs is None or runs[0] <= 0:
        return Blend(declared_s, 0, declared_s, 0.0, declared_s, declared_s)
    n = int(runs[0])
    observed, sd = mean_sd(runs)
    tau = max(prior_cv, SIGMA_FLOOR) * declared_s
    sigma = max(sd if n >= 2 else tau, SIGMA_FLOOR * declared_s)
    k = (sigma / tau) ** 2
    mean = (k * declared_s + n * observed) / (k + n)
    margin = z * sigma / math.sqrt(n + k) if n >= 2 else 0.0
    return Blend(declared_s, n, observed, sd, mean, mean + margin)


def pooled(tables: Sequence[Sequence[float]]) -> list[float] | None:
    """Runs kept as (count, sum, sum of squares), added up (None: none)."""
    if not tables:
        return None
    return [sum(t[i] for t in tables) for i in range(3)]


def mean_sd(runs: Sequence[float]) -> tuple[float, float]:
    """Mean and sample sd of runs kept as (count, sum, sum of squares)."""
    n, total, squares = runs
    mean = total / n
    return mean, math.sqrt(max(0.0, squares / n - mean * mean) * n / max(n - 1, 1))
