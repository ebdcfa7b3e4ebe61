"""The virtual world of a dry run: machines that boot, run tasks at their type's speed,
and fail when told to. Time is whatever the emulator's clock says.

What goes wrong is told by the ``emulator`` section and reaches the run as it would from
the real provider: a launch refused in a window (``refusals``) raises the error EC2's
``RunInstances`` does, with its code; a spot machine taken back (``reclaim_per_hour``)
is lost with an interruption notice, as an agent reports EC2's.

Task runtimes are drawn once per run from the configured distribution with the run's
seed; a task takes ``runtime / speed`` on a machine of a type with that ``speed`` (its
``affine`` relation applied first, if it has one: ``type_runtime``), every time it runs
there (a replica of a task is as long as the task). A task of a deadline job that gives
mean task times per type takes, on a type, the job's mean there times its drawn runtime
over the distribution's mean: the distribution is then only the noise around the means.
A machine of several slots runs that many tasks at once; under ``share_slowdown`` a task
that starts beside others takes longer (``share_factor``).
"""

from __future__ import annotations

import functools
import math
import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from autoscaler.config.load import load_price_trace, load_trace
from autoscaler.config.schema import (
    BimodalRuntime,
    ConstantRuntime,
    Emulator,
    JobMeans,
    LognormalRuntime,
    NormalRuntime,
    ParetoRuntime,
    TraceRuntime,
    UniformRuntime,
    WeibullRuntime,
    weibull_mean_factor,
)
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import NOTICE_REASON
from autoscaler.providers.base import (
    Capabilities,
    MachineRecord,
    MachineStatus,
    PricePoint,
    ProviderState,
    check_launch,
)
from autoscaler.providers.kind import ProviderKind

_MIN_RUNTIME_S = 1.0
_HOUR_S = 3600.0
NOTICE_LEAD_S = 120.0
"""EC2 warns of a spot interruption this long before it takes the machine back."""


def draw_runtimes(model: Emulator, n_tasks: int, rng: random.Random) -> list[float]:
    """One runtime (seconds, on a machine of speed 1) per task."""
    runtime = model.runtime
    match runtime:
        case NormalRuntime(mean_s=mean, sd_s=sd):
            values = [rng.gauss(mean, sd) for _ in range(n_tasks)]
        case LognormalRuntime(mean_s=mean, sd_s=sd):
            sigma2 = math.log(1.0 + (sd / mean) ** 2)
            mu = math.log(mean) - sigma2 / 2
            values = [rng.lognormvariate(mu, math.sqrt(sigma2)) for _ in range(n_tasks)]
        case UniformRuntime(low_s=low, high_s=high):
            values = [rng.uniform(low, high) for _ in range(n_tasks)]
        case ConstantRuntime(value_s=value):
            values = [value] * n_tasks
        case BimodalRuntime(short_s=short, long_s=long, long_share=p, sd_share=share):
            values = []
            for _ in range(n_tasks):
                mode = long if rng.random() < p else short
                values.append(rng.gauss(mode, share * mode))
        case ParetoRuntime(mean_s=mean, alpha=alpha):
            x_m = mean * (alpha - 1) / alpha
            values = [x_m * rng.paretovariate(alpha) for _ in range(n_tasks)]
        case WeibullRuntime(mean_s=mean, shape=k):
            scale = mean / weibull_mean_factor(k)
            values = [rng.weibullvariate(scale, k) for _ in range(n_tasks)]
        case TraceRuntime(file=path):
            trace = load_trace(path)
            values = [trace[i % len(trace)] for i in range(n_tasks)]
    return [max(_MIN_RUNTIME_S, v) for v in values]


_MIN_NOISE_FACTOR = 0.05


def runtime_mean(model: Emulator) -> float:
    """The mean of the runtime distribution (a trace's: the mean of its runtimes)."""
    runtime = model.runtime
    match runtime:
        case UniformRuntime(low_s=low, high_s=high):
            return (low + high) / 2
        case ConstantRuntime(value_s=value):
            return value
        case BimodalRuntime(short_s=short, long_s=long, long_share=p):
            return (1 - p) * short + p * long
        case TraceRuntime(file=path):
            return _trace_mean(path)
        case _:
            return runtime.mean_s


@functools.lru_cache(maxsize=8)
def _trace_mean(path: Path) -> float:
    trace = load_trace(path)
    return sum(trace) / len(trace)


def type_runtime(
    model: Emulator,
    runtime_s: float,
    task: int,
    type_name: str,
    means: JobMeans | None = None,
) -> float:
    """How long ``task``, of drawn runtime ``runtime_s``, takes on ``type_name``.

    With ``means`` (its job's mean task times): the mean on the type times the drawn
    runtime over the distribution's mean. Otherwise the drawn runtime, mapped by the
    type's ``affine`` relation (a·x + b, times a noise factor fixed by the task and the
    type) if it has one, over the type's speed.
    """
    if means is not None:
        return means.of(type_name) * runtime_s / runtime_mean(model)
    value = runtime_s
    relation = model.affine.get(type_name)
    if relation is not None:
        value = relation.a * runtime_s + relation.b_s
        if relation.noise > 0:
            eps = random.Random(f"{runtime_s!r}:{task}:{type_name}").gauss(0.0, 1.0)
            value *= max(_MIN_NOISE_FACTOR, 1.0 + relation.noise * eps)
        value = max(_MIN_RUNTIME_S, value)
    return value / model.speed.get(type_name, 1.0)


def share_factor(slowdown: float, sharing: int, slots: int) -> float:
    """1 + slowdown·(n − 1)/(s − 1): how much longer a task takes that starts with n
    tasks running on a machine of s slots (itself included); 1 alone or on one slot."""
    if slowdown <= 0 or slots <= 1 or sharing <= 1:
        return 1.0
    return 1.0 + slowdown * (min(sharing, slots) - 1) / (slots - 1)


class Queues(Protocol):
    """Cluster queues the machines of some types wait in before they boot."""

    def wait(self, machine: str, type: str, now: float) -> float:
        """Seconds ``machine`` of ``type``, launched at ``now``, waits to start (0: none)."""
        ...

    def leave(self, machine: str, now: float) -> None:
        """``machine`` ended at ``now``: its place in the queue is freed."""
        ...


@dataclass(frozen=True, slots=True)
class Failure:
    """A machine's end the emulated world decided at its launch."""

    at_s: float  # run seconds
    reason: str  # as ``MachineLost`` says it


@dataclass
class SimMachine:
    id: str
    type: str
    token: str
    launched_at: float
    index: int  # launch order within its type
    terminated_at: float | None = None
    queued_s: float = 0.0  # waited in its cluster's queue before it booted


class SimProvider:
    """A provider whose machines exist only in virtual time."""

    def __init__(
        self,
        capabilities: Capabilities,
        model: Emulator,
        n_tasks: int,
        clock: Callable[[], float],
        seed: int | None = None,
        task_means: Sequence[JobMeans | None] | None = None,
        task_labels: Sequence[str | None] | None = None,
        queues: Queues | None = None,
    ):
        """``task_means``: per task id, its job's mean task times (None: none given);
        ``task_labels``: per task id, its category label (``emulator.category_speed``);
        ``queues``: the clusters whose machines wait in a queue among their users' jobs
        before they boot (``emulator.local_load``; None: none)."""
        self._capabilities = capabilities
        self._model = model
        self._clock = clock
        self.seed = model.seed if seed is None else seed
        self.runtimes = draw_runtimes(model, n_tasks, random.Random(self.seed))
        self._means: list[JobMeans | None] = list(task_means or [None] * n_tasks)
        self._labels: list[str | None] = list(task_labels or [None] * n_tasks)
        self.machines: dict[str, SimMachine] = {}
        self._by_token: dict[str, list[str]] = {}
        self._launched: dict[str, int] = {}
        self._queues = queues

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    status_polling_interval = 0.0
    """The emulator learns of every end as an event: nothing to poll."""

    # --- the provider protocol ----------------------------------------------------------

    def launch(
        self,
        type: str,
        count: int,
        token: str,
        tags: Mapping[str, str],
        *,
        avoid_zones: Collection[str] = (),
    ) -> list[MachineRecord]:
        if token in self._by_token:  # idempotent: a repeated token returns its machines
            return [self._record(self.machines[i]) for i in self._by_token[token]]
        alive = sum(1 for m in self.machines.values() if m.type == type and m.terminated_at is None)
        check_launch(self._capabilities, type, alive, count)
        self._refuse(type, count, token)
        ids = []
        for _ in range(count):
            index = self._launched.get(type, 0)
            self._launched[type] = index + 1
            mid = f"{type}-{index}"
            now = self._clock()
            waits = 0.0 if self._queues is None else self._queues.wait(mid, type, now)
            self.machines[mid] = SimMachine(mid, type, token, now, index, queued_s=waits)
            ids.append(mid)
        self._by_token[token] = ids
        return [self._record(self.machines[i]) for i in ids]

    def describe(self, ids: Sequence[str] | None = None) -> list[MachineStatus]:
        chosen = self.machines.values() if ids is None else (self.machines[i] for i in ids)
        return [
            MachineStatus(
                m.id,
                m.type,
                ProviderState.TERMINATED if m.terminated_at is not None else ProviderState.RUNNING,
            )
            for m in chosen
        ]

    def terminate(self, ids: Sequence[str], *, now: bool = False) -> list[str]:
        """Virtual machines end at once, ``now`` or not."""
        done = []
        for mid in ids:
            m = self.machines.get(mid)
            if m is not None and m.terminated_at is None:
                m.terminated_at = self._clock()
                done.append(mid)
                if self._queues is not None:
                    self._queues.leave(mid, m.terminated_at)
        return done

    # --- the virtual world --------------------------------------------------------------

    def boot_time(self, machine: str) -> float:
        """Launch to ready: the wait in its cluster's queue, then its type's boot."""
        m = self.machines[machine]
        return m.queued_s + self._capabilities.boot_estimate_s.get(m.type, 0.0)

    def add_tasks(
        self, means: Sequence[JobMeans | None], labels: Sequence[str | None] | None = None
    ) -> None:
        """Tasks numbered on from the last (a job added to a running pool), with their
        job's mean task times and their category labels (``emulator.category_speed``);
        their runtimes are drawn as if they had been there from the start (the same seed
        gives the same runtimes)."""
        n = len(self.runtimes) + len(means)
        self.runtimes = draw_runtimes(self._model, n, random.Random(self.seed))
        self._labels.extend([None] * (len(self._means) - len(self._labels)))
        self._labels.extend(labels if labels is not None else [None] * len(means))
        self._means.extend(means)

    def run_time(self, task: int, machine: str) -> float:
        """``task``'s runtime on ``machine`` alone (``share_factor`` says how much longer
        beside others)."""
        machine_type = self.machines[machine].type
        value = type_runtime(
            self._model, self.runtimes[task], task, machine_type, self._means[task]
        )
        label = self._labels[task] if task < len(self._labels) else None
        if label is not None and label in self._model.category_speed:
            value /= self._model.category_speed[label].get(machine_type, 1.0)
        return value

    @property
    def share_slowdown(self) -> float:
        """The emulator's ``share_slowdown``."""
        return self._model.share_slowdown

    def run_fails(self, task: int, attempt: int) -> float | None:
        """If this run of ``task`` fails, the fraction of its runtime after which it does."""
        p = self._model.task_failure_prob
        if p <= 0:
            return None
        rng = random.Random(f"{self.seed}:{task}:{attempt}")
        return rng.random() if rng.random() < p else None

    def failure(self, machine: str) -> Failure | None:
        """How this machine ends by itself, if it does: told to die
        (``machine_failures``), or taken back first (``reclaim_per_hour``: an exponential
        time from its launch, drawn from the run's seed and the machine's name)."""
        m = self.machines[machine]
        ends: list[Failure] = []
        for failure in self._model.machine_failures:
            if (
                failure.type == m.type
                and failure.index == m.index
                and failure.at_s >= m.launched_at
            ):
                ends.append(Failure(failure.at_s, "emulated machine failure"))
                break
        rate = self._model.reclaim_per_hour.get(m.type, 0.0)
        if rate > 0:
            at = m.launched_at + random.Random(f"{self.seed}:reclaim:{m.id}").expovariate(
                rate / _HOUR_S
            )
            said = f"terminate at {at + NOTICE_LEAD_S:.0f} s, emulated"
            ends.append(Failure(at, f"{NOTICE_REASON} ({said})"))
        return min(ends, key=lambda f: f.at_s, default=None)

    def _refuse(self, type: str, count: int, token: str) -> None:
        """Raise what EC2 raises for a refused ``RunInstances`` (``providers.ec2``: the
        code, retryable only for ``InsufficientInstanceCapacity``) if a window of
        ``refusals`` covers this launch now; a ``share`` below 1 is drawn per launch."""
        now = self._clock()
        for r in self._model.refusals:
            if not r.refuses(type, now):
                continue
            if r.share < 1 and random.Random(f"{self.seed}:refuse:{token}").random() >= r.share:
                continue
            until = "" if r.until_s is None else f" until {r.until_s:.0f} s"
            raise AutoscalerError(
                f"launching {count} x {type} (type {type!r}): {r.code}: emulated refusal "
                f"(emulator.refusals, from {r.from_s:.0f} s{until})",
                retryable=r.code == "InsufficientInstanceCapacity",
                code=r.code,
            )

    # --- the spot market of a dry run: ``emulator.spot_prices`` ---------------------------

    def market_types(self) -> tuple[str, ...]:
        return tuple(self._model.spot_prices)

    def spot_prices(self, since: float | None, now: float) -> list[PricePoint]:
        """The traces' points after ``since`` up to ``now`` (per ATU, as written)."""
        out = []
        for name, trace in self._model.spot_prices.items():
            points = (
                load_price_trace(trace, str(trace), f"emulator.spot_prices.{name}")
                if isinstance(trace, Path)
                else trace
            )
            out += [
                PricePoint(name, at, price)
                for at, price in points
                if at <= now and (since is None or at > since)
            ]
        return sorted(out, key=lambda p: p.at)

    @staticmethod
    def _record(m: SimMachine) -> MachineRecord:
        return MachineRecord(m.id, m.type, m.token, m.launched_at)


KIND = ProviderKind("sim")
"""Machines of the emulator only: a dry run builds its ``SimProvider`` with the emulator."""
