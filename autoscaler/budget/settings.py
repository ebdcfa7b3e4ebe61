"""The budget controller's settings, and the facts of a run every part of it reads."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from autoscaler.core.decisions import Decisions
from autoscaler.core.money_ledger import Money
from autoscaler.core.solve import Solver

EPS = 1e-6


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    """How the budget controller samples, plans, re-plans and spends (``config`` maps a
    run's ``controller:`` section onto it)."""

    policy: Literal["bats", "round_robin"] = "bats"
    z: float = 1.96
    delta: float = 0.25
    solver: Solver = "highs"
    cushion_z: float = 0.0  # spread cushion: plan m tasks per machine only if m·T + z·√m·σ fit
    final_loss: float = 0.25  # tasks per machine lost at the end of its last unit
    tail_replication: bool = True
    improve_ratio: float = 1.05  # adopt an unforced re-plan only if this much faster...
    improve_reserve: float = 0.1  # ...and still affordable with this share of money kept back
    leap_ratio: float = 1.5  # a re-plan this much faster is adopted on the full budget
    confidence_z: float = 1.96  # intervals of predictions; "the budget is too small" too
    on_shortfall: Literal["continue", "stop"] = "continue"  # when the budget cannot finish
    reserve_z: float = 1.0  # plan on T_i + z·σ_i/√n: money kept back for a slower bag
    reserve_cost: float = 0.1  # ...unless that reserve makes the plan this much slower
    hold_after_sampling: bool = False  # `autoscaler plan`: Hold once the samples are in
    sampling_mode: Literal["plain", "compact"] = "plain"  # compact: slides 001 (budget.sampling)
    group_s: float = 0.0  # task groups: expected work handed to a machine at once (run s)
    group_fleet: float = 0.0  # past this many machines alive group_s grows in proportion; 0: never


def planned(decisions: Decisions) -> bool:
    """Whether a plan has been chosen: sampling configurations predict nothing."""
    return decisions.plan() is not None


def money_left(money: Money) -> float:
    """The budget not yet committed (infinite without a budget)."""
    return math.inf if money.budget is None else money.budget - money.committed
