"""Billing arithmetic: what a machine costs for how long, and how far money is committed.

A machine is paid from the moment it is launched. Under ``fixed`` billing it pays a
whole ATU as soon as it enters it; under ``per_second`` billing it pays
``price * seconds / ATU`` with a minimum charge. The controller commits money ahead
in steps (one ATU, or ``commit_s`` under per-second billing) and a machine never runs
past the end of its committed time: ``cost(committed time)`` is what the money
invariant bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

_EPS = 1e-9


@dataclass(frozen=True, slots=True)
class BillingModel:
    mode: Literal["fixed", "per_second"]
    atu_s: float  # the accountable time unit; prices are per ATU in both modes
    min_charge_s: float = 60.0  # per_second only
    commit_s: float = 300.0  # per_second only: how far ahead money is committed
    margin_s: float | None = None  # release this long before a boundary (None: the default)

    @property
    def step_s(self) -> float:
        """How much time one commitment buys: an ATU, or ``commit_s``."""
        return self.atu_s if self.mode == "fixed" else self.commit_s

    @property
    def first_step_s(self) -> float:
        """The first commitment of a new machine (at least the minimum charge)."""
        if self.mode == "fixed":
            return self.atu_s
        return max(self.commit_s, self.min_charge_s)

    def units(self, duration_s: float) -> int:
        """Paid ATUs for a machine that lived ``duration_s`` (fixed billing); at least 1."""
        return max(1, math.ceil(duration_s / self.atu_s - _EPS))

    def cost(self, price: float, duration_s: float) -> float:
        """What a machine that lived ``duration_s`` costs."""
        if self.mode == "fixed":
            return self.units(duration_s) * price
        return price * max(duration_s, self.min_charge_s) / self.atu_s

    def costs(self, prices: np.ndarray, durations_s: np.ndarray) -> np.ndarray:
        """``cost`` of many machines at once (a report's spend over time)."""
        out: np.ndarray
        if self.mode == "fixed":
            out = np.maximum(1.0, np.ceil(durations_s / self.atu_s - _EPS)) * prices
        else:
            out = prices * np.maximum(durations_s, self.min_charge_s) / self.atu_s
        return out

    def paid_units(self, duration_s: float) -> float:
        """ATUs paid for ``duration_s``: whole units, or a fraction under per-second."""
        if self.mode == "fixed":
            return float(self.units(duration_s))
        return max(duration_s, self.min_charge_s) / self.atu_s

    def next_boundary(self, launched_at: float, now: float) -> float:
        """The end of the ATU the machine is in at ``now`` (fixed billing)."""
        return launched_at + self.units(now - launched_at) * self.atu_s

    def extension_cost(self, price: float, launched_at: float, until: float) -> float:
        """Extra money committed by extending a machine's paid time by one step."""
        return self.cost(price, until - launched_at + self.step_s) - self.cost(
            price, until - launched_at
        )

    def boundary_margin_s(self) -> float:
        """How long before the end of its paid time a machine must be released."""
        if self.margin_s is not None:
            return self.margin_s
        return min(60.0, 0.02 * self.step_s)
