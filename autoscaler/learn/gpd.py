"""The tail of runtimes past a threshold as a generalized Pareto distribution (peaks
over threshold, Pickands 1975): what the longest of many runs is made of.

Runtimes past a high threshold u exceed it by Y with P(Y > y) = (1 + ξy/σ)^(−1/ξ):
ξ > 0 is a heavy tail (Pareto; lognormal and Weibull k < 1 runtimes at the
thresholds a sample of tens reaches), ξ = 0 the exponential, ξ < 0 a tail with an end
(normal runtimes, the long mode of a bimodal bag). The exponential alone cuts heavy
tails short (the longest of a thousand lognormal σ 1 runs comes out at half its size
from thirty runs) and draws bounded ones out far too long (bimodal, about twice).

* ``fit_gpd``: Zhang & Stephens' (2009) empirical-Bayes estimate, with runs still
  going past the threshold counted as right-censored exceedances. It is the posterior
  mean of θ = −ξ/σ on a grid, weighted by the profile likelihood, and stays sensible
  on the handful of exceedances a first plan has (the maximum-likelihood estimate
  does not exist for some samples, and moments need ξ < 1/2);
* ``anderson_darling``: how well a fitted tail fits its exceedances, to choose the
  threshold (a bimodal bag's tail starts in its long mode, not below it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

XI_MAX = 1 / 2.2
"""The heaviest tail believed (a Pareto index of 2.2, finite variance)."""

XI_MIN = -1.0
"""The lightest: a uniform tail. Lighter fits put all their mass at the endpoint."""


@dataclass(frozen=True, slots=True)
class Gpd:
    """P(Y > y) = (1 + ξy/σ)^(−1/ξ) for y ≥ 0 (exp(−y/σ) at ξ = 0)."""

    xi: float
    sigma: float

    @property
    def mrl(self) -> float:
        """Mean excess over the threshold, σ/(1 − ξ)."""
        return self.sigma / (1.0 - self.xi)

    def endpoint(self) -> float:
        """The largest excess possible (inf unless ξ < 0)."""
        return -self.sigma / self.xi if self.xi < 0 else math.inf

    def survival(self, y: np.ndarray) -> np.ndarray:
        """P(Y > y), y ≥ 0."""
        y = np.maximum(y, 0.0)
        if abs(self.xi) < 1e-9:
            return np.exp(-y / self.sigma)
        z = 1.0 + self.xi * y / self.sigma
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            return np.where(z > 0, np.maximum(z, 1e-300) ** (-1.0 / self.xi), 0.0)

    def area(self, y: np.ndarray) -> np.ndarray:
        """∫_0^y P(Y > v) dv, y ≥ 0: the mean excess less what lies past y."""
        y = np.maximum(y, 0.0)
        if abs(self.xi) < 1e-9:
            return self.sigma * -np.expm1(-y / self.sigma)
        z = np.maximum(1.0 + self.xi * y / self.sigma, 0.0)
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            rest = np.where(z > 0, np.maximum(z, 1e-300) ** (1.0 - 1.0 / self.xi), 0.0)
        return self.mrl * (1.0 - rest)

    def quantile_excess(self, p: float) -> float:
        """The excess exceeded with probability ``p``."""
        if abs(self.xi) < 1e-9:
            return -self.sigma * math.log(p)
        return float(self.sigma / self.xi * (p ** (-self.xi) - 1.0))


def fit_gpd(excess: np.ndarray, censored: np.ndarray | None = None) -> Gpd:
    """ξ and σ from ``excess`` (seen to end this far past the threshold, all > 0) and
    ``censored`` (still going, or cut off, this far past it).

    Zhang & Stephens' grid of m = 30 + ⌊√d⌋ values θ_j < 1/max(y); for each, the
    profile maximum-likelihood ξ(θ) = Σ log(1 − θy)/d over all exceedances (d of
    them ended) and its log-likelihood d·(log(−θ/ξ) − 1) − Σ_ended log(1 − θy); θ̂ is
    the likelihood-weighted mean of the grid (their prior: the grid's spacing), and
    ξ = ξ(θ̂), σ = −ξ/θ̂. Without censoring this is their estimator exactly. ξ is kept
    within [``XI_MIN``, ``XI_MAX``].
    """
    return fit_gpd_heavy(excess, censored)[0]


def fit_gpd_heavy(
    excess: np.ndarray, censored: np.ndarray | None = None, p: float = 0.025
) -> tuple[Gpd, Gpd]:
    """``fit_gpd``'s tail, and a heavier one: at the θ below which the grid's
    likelihood weights put ``p`` of their mass (ξ(θ) falls as θ grows, so that is the
    heavy end of the tails the exceedances allow). A handful of exceedances says little
    of the shape: the first plan's tail is a guess, and the high end of a bag's end
    must allow for a heavier one (``ragged.ragged_end``). Where the shapes are no
    heavier there (both at ``XI_MAX``, or the likelihood all on one), the fitted tail
    is given twice."""
    ended = np.asarray(excess, dtype=float)
    going = np.zeros(0) if censored is None else np.asarray(censored, dtype=float)
    d = len(ended)
    if d == 0 or ended.max() <= 0:
        raise ValueError("a tail needs exceedances seen to end")
    every = np.sort(np.concatenate([ended, going]))
    m = 30 + math.isqrt(d)
    star = float(every[max(0, math.floor(len(every) / 4 + 0.5) - 1)])
    star = star if star > 0 else float(every[every > 0][0])
    j = np.arange(1, m + 1)
    theta = 1.0 / every[-1] + (1.0 - np.sqrt(m / (j - 0.5))) / (3.0 * star)
    theta = theta[np.abs(theta) > 1e-12 / star]
    logs = np.log1p(-np.outer(theta, every))
    xi = logs.sum(axis=1) / d
    ended_logs = np.log1p(-np.outer(theta, ended)).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        loglik = d * (np.log(-theta / xi) - 1.0) - ended_logs
    ok = np.isfinite(loglik)
    flat = Gpd(0.0, float(every.sum()) / d)  # no spread to speak of: the mean excess
    if not ok.any():
        return flat, flat
    w = np.exp(loglik[ok] - loglik[ok].max())
    w /= w.sum()
    t_hat = float(np.sum(theta[ok] * w))
    order = np.argsort(theta[ok])
    at = min(int(np.searchsorted(np.cumsum(w[order]), p)), len(order) - 1)
    t_heavy = min(float(theta[ok][order][at]), t_hat)
    point = _at_theta(t_hat, every, d, star) or flat
    heavy = _at_theta(t_heavy, every, d, star)
    return point, heavy if heavy is not None and heavy.xi > point.xi else point


def _at_theta(t: float, every: np.ndarray, d: int, star: float) -> Gpd | None:
    """The profile fit at θ = ``t``: ξ(θ), σ = −ξ/θ (exponential with the mean excess
    at θ = 0), ξ kept within its bounds; None where σ is not positive."""
    if abs(t) < 1e-12 / star:
        return Gpd(0.0, float(every.sum()) / d)
    xi_hat = float(np.log1p(-t * every).sum()) / d
    sigma = -xi_hat / t
    if not math.isfinite(sigma) or sigma <= 0:
        return None
    if xi_hat > XI_MAX or xi_hat < XI_MIN:  # σ kept, so the body of the tail stays
        xi_hat = min(XI_MAX, max(XI_MIN, xi_hat))
    return Gpd(xi_hat, sigma)


def unbounded(g: Gpd, excess: np.ndarray, censored: np.ndarray | None = None) -> Gpd:
    """``g``, or where it has an end (ξ < 0), the exponential tail (ξ = 0, the lightest
    without one) that fits the exceedances best: σ = (Σ ended + Σ going) / ended, the
    maximum-likelihood scale with the runs still going counted as censored.

    For a tail fitted while runs still go past the longest run seen to end
    (``curve.threshold_curve``): nothing there has shown where the runtimes stop,
    and an end fitted to a handful of exceedances cuts the bag's longest task short
    (a third of first-plan samples of lognormal σ 1 runtimes fitted one, predicting
    the longest of 200 runs at a fifth to a third of its size)."""
    if g.xi >= 0:
        return g
    ended = np.asarray(excess, dtype=float)
    going = np.zeros(0) if censored is None else np.asarray(censored, dtype=float)
    if len(ended) == 0:
        raise ValueError("a tail needs exceedances seen to end")
    return Gpd(0.0, (float(ended.sum()) + float(going.sum())) / len(ended))


def anderson_darling(excess: np.ndarray, g: Gpd) -> float:
    """Anderson–Darling's A² of ``excess`` (ended ones) against ``g``: small where the
    tail fits them, large where they crowd where it puts little mass (exceedances
    from two modes, a threshold below the tail's start)."""
    y = np.sort(np.asarray(excess, dtype=float))
    k = len(y)
    cdf = np.clip(1.0 - g.survival(y), 1e-12, 1.0 - 1e-12)
    i = np.arange(1, k + 1)
    return float(-k - np.mean((2 * i - 1) * (np.log(cdf) + np.log1p(-cdf[::-1]))))
