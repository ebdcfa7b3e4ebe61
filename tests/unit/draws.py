"""Runtimes drawn for the estimator tests: the papers' normal, a Pareto tail, and a
rounded lognormal whose ties exercise the survival curve's equal times."""

from __future__ import annotations

import random


def draw_runtime(rng: random.Random, draw: str) -> float:
    """One runtime (seconds) of ``draw``: ``normal``, ``pareto``, else a rounded lognormal."""
    if draw == "normal":
        return max(1.0, rng.gauss(900.0, 134.0))
    if draw == "pareto":
        return 60.0 * rng.paretovariate(2.5)
    return round(rng.lognormvariate(6.0, 1.0), 0)  # ties, ends and censorings alike
