"""The one check of a budget, wherever one is set: in a config, by ``run --budget``
(fresh or ``--resume``) and by the service's ``update --budget``."""

from __future__ import annotations

import math

from autoscaler.core.errors import AutoscalerError

_SLACK = 1e-9
"""Rounding room when a budget equals what is committed."""


def budget_problem(budget: float, *, committed: float = 0.0, holder: str = "the run") -> str | None:
    """Why ``budget`` cannot be set, or None: it must be a positive, finite amount, not
    below the ``committed`` money ``holder`` has committed already."""
    if not math.isfinite(budget):
        return f"must be a finite number (got {budget})"
    if budget <= 0:
        return f"must be positive (got {budget:g})"
    if budget < committed - _SLACK:
        return f"{budget:.2f} is below the {committed:.2f} {holder} has committed already"
    return None


def check_budget(
    budget: float, *, field: str = "budget", committed: float = 0.0, holder: str = "the run"
) -> float:
    """``budget`` if it may be set (see ``budget_problem``), else an ``AutoscalerError``
    naming ``field`` and the value."""
    problem = budget_problem(budget, committed=committed, holder=holder)
    if problem is None:
        return budget
    sep = " " if problem[0].isdigit() else ": "
    raise AutoscalerError(f"{field}{sep}{problem}")
