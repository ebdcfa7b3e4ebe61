"""The one check of a budget, wherever one is set: in a config, by ``run --budget``
(fresh or ``--resume``) and by the service's ``update --budget``."""

from __future__ import annotations

import math

from autoscaler.core.errors import AutoscalerError

_SLACK = 1e-9
"""Rounding room when a budget equals what is committed."""


def budget_problem(budget: float) -> str | None:
    """Why ``budget`` is no amount of money (it must be positive and finite), or None."""
    if not math.isfinite(budget):
        return "must be a finite number"
    if budget <= 0:
        return "must be positive"
    return None


def check_budget(
    budget: float, *, field: str = "budget", committed: float = 0.0, holder: str = "the run"
) -> float:
    """``budget`` if it may be set: a positive, finite amount, not below the
    ``committed`` money ``holder`` has committed already. Otherwise an
    ``AutoscalerError`` naming ``field`` and the value."""
    problem = budget_problem(budget)
    if problem is not None:
        raise AutoscalerError(f"{field}: {problem} (got {budget:g})")
    if budget < committed - _SLACK:
        raise AutoscalerError(
            f"{field} {budget:.2f} is below the {committed:.2f} {holder} has committed already"
        )
    return budget
