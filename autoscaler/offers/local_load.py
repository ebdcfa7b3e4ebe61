"""A cluster's own users, for a dry run: the local jobs of paper 003's emulated clusters
(§5, Table 2: rigid jobs, sizes and runtimes log-uniform in a site's ranges, arriving
uniformly until they make up the site's load), queued in ``cluster.Cluster`` up to the
time a bag's part is offered, so an offer waits for what the cluster already has.

A dry run draws a cluster provider's jobs from its ``emulator.local_load`` as the offers
benchmark (``benchmarks/offers.py``, ``trace``) draws its sites'.
"""

from __future__ import annotations

import math
import random
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


def loaded_cluster(name: str, load: LocalLoad, now: float, seed: str) -> Cluster:
    """Cluster ``name`` at ``now`` with its users' jobs of the last ``max_job_s`` +
    ``slack_s`` before it admitted (in arrival order, each held to its runtime plus
    ``slack_s``): what is running and queued there when a part is offered. The same
    ``seed`` gives the same jobs."""
    cluster = Cluster(name, load.processors)
    if load.utilisation <= 0:
        return cluster
    since = now - load.max_job_s - load.slack_s
    arrivals = local_arrivals(
        random.Random(seed),
        load.processors,
        load.utilisation,
        since,
        now,
        min(load.max_procs or load.processors, load.processors),
        (load.min_job_s, load.max_job_s),
    )
    for n, a in enumerate(sorted(arrivals, key=lambda a: a.submit)):
        job = Job(f"local{n}", a.procs, a.runtime, a.submit, a.submit + a.runtime + load.slack_s)
        cluster.admit(job, a.submit)
    return cluster
