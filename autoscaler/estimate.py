"""Learning task runtimes per machine type (paper 000 §2.1).

* sample size n = ⌈N·z² / (z² + 2(N−1)Δ²)⌉, bounded above by ⌈z² / (2Δ²)⌉;
* initial workers per type iw = min(N/10, n);
* T_i, a cumulative moving average of the runtimes seen on type i, where a running
  task with elapsed time τ counts as τ_e, the mean of the sample's runtimes above τ.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass, field


def sample_size(n_tasks: int, z: float = 1.96, delta: float = 0.25) -> int:
    """Sample size for sampling with replacement (paper 000 §2.1)."""
    if n_tasks <= 0:
        raise ValueError(f"n_tasks must be positive (got {n_tasks})")
    z2 = z * z
    n = math.ceil(n_tasks * z2 / (z2 + 2 * (n_tasks - 1) * delta * delta) - 1e-9)
    return min(n, math.ceil(z2 / (2 * delta * delta) - 1e-9))


def initial_workers(n_tasks: int, n_sample: int) -> int:
    """Machines to start per type for sampling: min(N/10, n), at least one."""
    return max(1, min(n_tasks // 10, n_sample))


@dataclass
class RuntimeStats:
    """What has been learnt about task runtimes on one machine type.

    The first ``sample_target`` completions form the sample (kept sorted, with prefix
    sums for the tail means); every completion feeds the moving average.
    """

    sample_target: int
    sample: list[float] = field(default_factory=list)
    _prefix: list[float] = field(default_factory=lambda: [0.0])
    done: int = 0
    done_total_s: float = 0.0
    done_sq_s: float = 0.0

    def record(self, runtime_s: float) -> None:
        self.done += 1
        self.done_total_s += runtime_s
        self.done_sq_s += runtime_s * runtime_s
        if len(self.sample) < self.sample_target:
            bisect.insort(self.sample, runtime_s)
            self._prefix = [0.0]
            for value in self.sample:
                self._prefix.append(self._prefix[-1] + value)

    @property
    def sampled(self) -> bool:
        """True once the sample is complete (T_i may be used for planning)."""
        return len(self.sample) >= self.sample_target

    def tail_estimate(self, elapsed_s: float) -> float:
        """τ_e: expected total runtime of a task already running for ``elapsed_s``.

        The mean of the sample's runtimes longer than ``elapsed_s``; a task that has
        outlived the whole sample is expected to finish about now.
        """
        k = bisect.bisect_right(self.sample, elapsed_s)
        longer = len(self.sample) - k
        if longer == 0:
            return elapsed_s
        return (self._prefix[-1] - self._prefix[k]) / longer

    def mean(self, running_elapsed: Iterable[float] = ()) -> float:
        """T_i: the moving average over done tasks and the running ones' τ_e."""
        total = self.done_total_s
        count = self.done
        for elapsed in running_elapsed:
            total += self.tail_estimate(elapsed)
            count += 1
        if count == 0:
            raise ValueError("no runtimes seen yet")
        return total / count

    def stddev(self) -> float:
        """Standard deviation of the completed runtimes (0 with fewer than two)."""
        if self.done < 2:
            return 0.0
        mean = self.done_total_s / self.done
        var = max(0.0, (self.done_sq_s - self.done * mean * mean) / (self.done - 1))
        return math.sqrt(var)


def tasks_within(
    horizon_s: float, mean_s: float, sd_s: float, z: float, loss: float = 0.5
) -> float:
    """Tasks one machine is expected to finish in ``horizon_s`` (the final-unit cushion).

    m = x² − loss where T·x² + z·σ·x = h: m tasks take m·T on average with standard
    deviation √m·σ, and the task in progress when the horizon ends is half done on
    average (``loss`` = ½), so it counts for nothing (slides 001, "fluid vs discrete").
    Continuous in h and T, so a small change of the estimate never flips a plan.
    """
    if horizon_s <= 0 or mean_s <= 0:
        return 0.0
    b = z * sd_s
    root = (-b + math.sqrt(b * b + 4 * mean_s * horizon_s)) / (2 * mean_s)
    return max(0.0, root * root - loss)
