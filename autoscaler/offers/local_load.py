"""A cluster's own users, for a dry run: the local jobs of paper 003's emulated clusters
(§5, Table 2: rigid jobs, sizes and runtimes log-uniform in a site's ranges, arriving
uniformly until they make up the site's load), queued in ``cluster.Cluster`` as time
goes on, so a part offered there, or a machine started there, waits for them.

A dry run draws a cluster provider's jobs from its ``emulator.local_load`` as the offers
benchmark (``benchmarks/offers.py``, ``trace``) draws its sites'.
"""

from __future__ import annotations

import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from autoscaler.offers.cluster import Cluster, Job


class LocalLoad(Protocol):
    """A cluster's users' jobs as ``emulator.local_load`` gives them (its fields)."""

    @property
    def processors(self) -> int: ...
    @property
    def utilisation(self) -> float: ...
    @property
    def max_procs(self) -> int | None: ...
    @property
    def min_job_s(self) -> float: ...
    @property
    def max_job_s(self) -> float: ...
    @property
    def slack_s(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Arrival:
    """A local job before its deadline: when it comes, its processors and runtime."""

    submit: float
    procs: int
    runtime: float


def log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def local_arrivals(
    rng: random.Random,
    processors: int,
    load: float,
    start: float,
    end: float,
    max_procs: int,
    runtime_s: tuple[float, float],
) -> list[Arrival]:
    """Jobs arriving uniformly over [``start``, ``end``) until their work is ``load`` of
    ``processors`` over that time; each of 1 to ``max_procs`` processors and a runtime
    in ``runtime_s``, both log-uniform; in the order drawn (processors, runtime, arrival
    of each job in turn)."""
    out: list[Arrival] = []
    work = 0.0
    while work < load * processors * (end - start):
        procs = round(log_uniform(rng, 1, max_procs))
        runtime = log_uniform(rng, *runtime_s)
        out.append(Arrival(rng.uniform(start, end), procs, runtime))
        work += procs * runtime
    return out


class Users:
    """A cluster's users' jobs (``LocalLoad``) in its queue as time goes on, and ours among
    them. Their jobs are drawn in windows of ``max_job_s + slack_s`` from the one before
    the run's start on, each window's from ``seed`` and its number, and admitted in
    arrival order up to the time asked: an offer made at the start and the machines
    launched later meet the same users."""

    def __init__(self, name: str, load: LocalLoad, seed: str) -> None:
        self.cluster = Cluster(name, load.processors)
        self._load = load
        self._seed = seed
        self._width = load.max_job_s + load.slack_s
        self._window = -1  # the next window to draw
        self._waiting: deque[Arrival] = deque()
        self._admitted = 0

    def finish(self, job: Job, now: float) -> float:
        """When ``job`` submitted at ``now`` would be held to end (``Cluster.finish``)."""
        self._admit_until(now)
        return self.cluster.finish(job, now)

    def start(self, job: Job, now: float) -> float:
        """Admit ``job`` at ``now``; when it is planned to start."""
        self._admit_until(now)
        return self.cluster.admit(job, now).start

    def leave(self, job: Job, now: float) -> None:
        """``job`` ends at ``now`` (cancelled): queued, it never starts."""
        self._admit_until(now)
        self.cluster.cancel(job, now)

    def _admit_until(self, now: float) -> None:
        load = self._load
        while self._window * self._width <= now and load.utilisation > 0:
            start = self._window * self._width
            drawn = local_arrivals(
                random.Random(f"{self._seed}:{self._window}"),
                load.processors,
                load.utilisation,
                start,
                start + self._width,
                min(load.max_procs or load.processors, load.processors),
                (load.min_job_s, load.max_job_s),
            )
            self._waiting.extend(sorted(drawn, key=lambda a: a.submit))
            self._window += 1
        while self._waiting and self._waiting[0].submit <= now:
            a = self._waiting.popleft()
            deadline = a.submit + a.runtime + load.slack_s
            self.cluster.admit(
                Job(f"local{self._admitted}", a.procs, a.runtime, a.submit, deadline), a.submit
            )
            self._admitted += 1
