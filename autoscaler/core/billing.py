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
from statistics import NormalDist
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

    def expected_cost(self, price: float, mean_s: float, sd_s: float, paid_s: float = 0.0) -> float:
        """What a machine costs on average when it lives a normally distributed time
        (``mean_s``, ``sd_s``) and at least ``paid_s`` (time already paid). Under fixed
        billing the cost is a step in the duration, so a plan that ends a machine near
        the end of a unit pays the next one about half the time: the cost at the mean
        time is not the mean cost."""
        if sd_s <= 0:
            return self.cost(price, max(mean_s, paid_s))
        dist = NormalDist(mean_s, sd_s)
        if self.mode == "fixed":
            k = self.units(paid_s)
            units = float(k)
            while (beyond := 1.0 - dist.cdf(k * self.atu_s)) > 1e-9:
                units += beyond
                k += 1
            return units * price
        least = max(self.min_charge_s, paid_s)
        d = (mean_s - least) / sd_s
        std = NormalDist()
        above = (mean_s - least) * std.cdf(d) + sd_s * std.pdf(d)
        return price * (least + above) / self.atu_s

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

    def spend_at(
        self, times: np.ndarray, prices: np.ndarray, launched: np.ndarray, ended: np.ndarray
    ) -> np.ndarray:
        """What the machines cost at each instant of ``times`` (ascending): the sum of
        ``cost(price, min(t, end) - launched)`` over the machines launched by ``t`` (a
        report's spend over time).

        One sweep over the instants at which the sum changes, not a sum over every
        machine at every instant: under ``fixed`` billing the start of each unit a
        machine paid for (found among ``times`` with ``cost``'s own arithmetic), under
        ``per_second`` each machine's launch, the end of its minimum charge and its end
        (between them the sum is linear in ``t``)."""
        if len(times) == 0 or len(prices) == 0:
            return np.zeros(len(times))
        if self.mode == "fixed":
            return self._fixed_spend_at(times, prices, launched, ended)
        return self._per_second_spend_at(times, prices, launched, ended)

    def _fixed_spend_at(
        self, times: np.ndarray, prices: np.ndarray, launched: np.ndarray, ended: np.ndarray
    ) -> np.ndarray:
        n = len(times)
        units = np.maximum(1, np.ceil((ended - launched) / self.atu_s - _EPS)).astype(np.int64)
        total = int(units.sum())
        if total > n * len(prices):  # units shorter than the instants apart: sum per instant
            return self._spend_per_instant(times, prices, launched, ended)
        which = np.repeat(np.arange(len(prices)), units)
        unit = np.arange(total) - np.repeat(np.cumsum(units) - units, units) + 1  # 1, 2, ...
        start, end = launched[which], ended[which]
        at = np.searchsorted(times, start + (unit - 1) * self.atu_s, side="left")

        def paid(k: np.ndarray, i: np.ndarray) -> np.ndarray:
            """Whether units ``k`` are paid at instants ``i`` (< n), as ``costs`` has it."""
            t, begun = times[i], start[k]
            held = np.maximum(1.0, np.ceil((np.minimum(t, end[k]) - begun) / self.atu_s - _EPS))
            out: np.ndarray = (t >= begun) & (held >= unit[k])
            return out

        while True:  # the first instant each unit is paid at: float noise moves it by one
            late = np.flatnonzero(at > 0)
            late = late[paid(late, at[late] - 1)]
            early = np.flatnonzero(at < n)
            early = early[~paid(early, at[early])]
            if len(late) == 0 and len(early) == 0:
                break
            at[late] -= 1
            at[early] += 1
        return np.cumsum(np.bincount(at, weights=prices[which], minlength=n + 1))[:n]

    def _per_second_spend_at(
        self, times: np.ndarray, prices: np.ndarray, launched: np.ndarray, ended: np.ndarray
    ) -> np.ndarray:
        n, rate = len(times), prices / self.atu_s
        on = np.searchsorted(times, launched, side="left")
        off = np.searchsorted(times, ended, side="left")
        linear = np.minimum(np.searchsorted(times, launched + self.min_charge_s, "right"), off)
        least = rate * self.min_charge_s
        flat = np.zeros(n + 1)  # the machines on their minimum charge, or ended
        np.add.at(flat, on, least)
        np.add.at(flat, linear, -least)
        np.add.at(flat, off, rate * np.maximum(ended - launched, self.min_charge_s))
        slope = np.zeros(n + 1)  # the machines paying by the second: rate * (t - launched)
        np.add.at(slope, linear, rate)
        np.add.at(slope, off, -rate)
        offset = np.zeros(n + 1)
        np.add.at(offset, linear, rate * launched)
        np.add.at(offset, off, -rate * launched)
        return np.cumsum(flat)[:n] + times * np.cumsum(slope)[:n] - np.cumsum(offset)[:n]

    def _spend_per_instant(
        self, times: np.ndarray, prices: np.ndarray, launched: np.ndarray, ended: np.ndarray
    ) -> np.ndarray:
        out = np.empty(len(times))
        for i, t in enumerate(times.tolist()):
            on = launched <= t
            out[i] = self.costs(prices[on], np.minimum(t, ended[on]) - launched[on]).sum()
        return out
