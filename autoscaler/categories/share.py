"""Sharing the tasks left of each category among machine types, for the least makespan
(an LP; the budget mode's machine mix and assignment, issue 21 §3).

Given ``lanes[j]`` (machines of type j × its slots: tasks it runs at once), the tasks
left of each category ``left[k]`` and the mean time of a task of category k on type j
``T[k][j]``, find continuous shares ``x[k][j] >= 0`` and the makespan H that

    minimise   H + ε · Σ_k Σ_j x[k][j]·T[k][j] / Σ_j lanes[j]
    subject to Σ_k x[k][j]·T[k][j] <= H · lanes[j]     for each type j
               Σ_j x[k][j] = left[k]                     for each category k

The second term (at most ε·H, since the busy time of every type is at most H·lanes)
only picks, among the shares of one makespan, the one doing the least machine time:
types off the critical path take what they are best at. A category no type with lanes
has a time for is left out. Solved with HiGHS through PuLP (``core.solve``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulp

from autoscaler.categories.deployment import Key
from autoscaler.core.solve import SolveOutcome, solve_lp

_TIE = 1e-3  # ε above: the weight of the machine time against the makespan


@dataclass(frozen=True, slots=True)
class Share:
    """Tasks of each category per type (fractions), and the makespan they take."""

    outcome: SolveOutcome
    x: dict[Key, float] = field(default_factory=dict)
    makespan_s: float = 0.0
    note: str | None = None

    def given(self, type_name: str, at_least: float = 1e-6) -> dict[int, float]:
        """Category to tasks, for one type (those above ``at_least``)."""
        return {k: v for (k, j), v in self.x.items() if j == type_name and v > at_least}


def share_makespan(
    left: Mapping[int, int],
    times: Mapping[Key, float],
    lanes: Mapping[str, int],
    time_limit_s: float | None = 5.0,
) -> Share:
    """The shares of ``left`` among the types with ``lanes`` that end soonest."""
    keys = [
        (k, j)
        for (k, j) in sorted(times)
        if left.get(k, 0) > 0 and lanes.get(j, 0) > 0 and times[k, j] > 0
    ]
    if not keys:
        return Share("optimal")
    lp = pulp.LpProblem("category_share", pulp.LpMinimize)
    h = lp.add_variable("H", 0)
    x = {key: lp.add_variable(f"x_{i}", 0) for i, key in enumerate(keys)}
    total_lanes = sum(lanes[j] for j in {j for _, j in keys})
    lp += pulp.LpAffineExpression(
        [(h, 1.0), *((v, _TIE * times[key] / total_lanes) for key, v in x.items())]
    )
    for k in sorted({k for k, _ in keys}):
        lp += (
            pulp.LpAffineExpression([(v, 1.0) for key, v in x.items() if key[0] == k]) == left[k],
            f"tasks_{k}",
        )
    for i, j in enumerate(sorted({j for _, j in keys})):
        busy = pulp.LpAffineExpression(
            [*((v, times[key]) for key, v in x.items() if key[1] == j), (h, -float(lanes[j]))]
        )
        lp += busy <= 0, f"time_{i}"
    solved = solve_lp(lp, "highs", "category share", time_limit_s)
    if solved.outcome not in ("optimal", "feasible"):
        return Share(solved.outcome, note=solved.note)
    shares = {key: max(0.0, v.value() or 0.0) for key, v in x.items()}
    return Share(
        solved.outcome,
        {key: v for key, v in shares.items() if v > 0},
        makespan_s=max(0.0, h.value() or 0.0),
        note=solved.note,
    )
