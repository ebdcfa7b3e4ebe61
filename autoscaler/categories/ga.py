"""Paper 004's genetic algorithm (§5, §7.1), kept as the baseline the MILP (``milp``)
is measured against.

A chromosome is the task-resource allocation ``TRA[G x C]`` in one dimension: gene
``j·C + k`` is the tasks of category k given to resource j. Its fitness is Algorithm 1:
one point each when 0.75 < allocated / remaining tasks <= 1, when the cost fits the
remaining budget, when the slowest resource's turnaround (Σ_k TRA[j][k]·AvgTRTime[j][k])
fits the remaining deadline, and, per category, when 0.9 < allocated / remaining <= 1;
3 + C at most.

The evolution (the paper used JGAP; these are our choices, stated):

* population 80; genes are integers in [0, tasks left in k];
* the first generation draws each gene uniformly from [0, ceil(2·left[k] / G)], so a
  category's expected total is about its tasks left;
* selection: truncation, the best 90 % survive (ties keep the older), the best always;
* crossover: the population is refilled with children of two survivors drawn
  uniformly, cut at one uniform point;
* mutation: each gene of a child, with probability 1/12, is drawn again as in the
  first generation;
* it stops at fitness 3 + C or after 500 generations, and returns the best
  chromosome found (the first of the highest fitness).

Seeded by ``random.Random(seed)``: the same problem and seed give the same plan.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import mul

import numpy as np

from autoscaler.categories.deployment import Key

POPULATION = 80
GENERATIONS = 500
SURVIVE = 0.9
MUTATION = 1 / 12


@dataclass(frozen=True, slots=True)
class GAProblem:
    """Algorithm 1's inputs: ``types`` (G) and ``categories`` (C) in gene order, the
    tasks left per category, ``turnaround[j][k]`` and ``cost[j][k]`` (a pair with no
    metrics: the type cannot run the category; its gene stays 0)."""

    types: tuple[str, ...]
    categories: tuple[int, ...]
    left: tuple[int, ...]
    turnaround: tuple[tuple[float, ...], ...]
    cost: tuple[tuple[float, ...], ...]
    budget: float
    deadline_s: float

    @classmethod
    def build(
        cls,
        left: Mapping[int, int],
        turnaround: Mapping[Key, float],
        cost: Mapping[Key, float],
        *,
        budget: float,
        deadline_s: float,
    ) -> GAProblem:
        categories = tuple(sorted(k for k, n in left.items() if n > 0))
        types = tuple(sorted({j for _, j in turnaround}))
        return cls(
            types,
            categories,
            tuple(left[k] for k in categories),
            tuple(tuple(turnaround.get((k, j), math.inf) for k in categories) for j in types),
            tuple(tuple(cost.get((k, j), math.inf) for k in categories) for j in types),
            budget,
            deadline_s,
        )

    @property
    def best_fitness(self) -> int:
        return 3 + len(self.categories)


@dataclass(frozen=True, slots=True)
class GAResult:
    chromosome: tuple[int, ...]
    fitness: int
    generations: int
    counts: dict[Key, int]  # (category, type) to tasks, the genes above 0

    @property
    def tasks(self) -> int:
        return sum(self.counts.values())

    def allocation(self, type_name: str) -> dict[int, int]:
        return {k: n for (k, t), n in self.counts.items() if t == type_name}


def fitness(chromosome: Sequence[int], p: GAProblem) -> int:
    """Algorithm 1 of paper 004 (its line 15 reads 0.75 < ratio < 1, its text "within
    0.75 to 1.0": we take the text, as for the categories' 0.9 < ratio <= 1)."""
    c = len(p.categories)
    value = 0
    total = sum(chromosome)
    remaining = sum(p.left)
    if remaining and 0.75 < total / remaining <= 1.0:
        value += 1
    rows = [chromosome[j * c : (j + 1) * c] for j in range(len(p.types))]
    cost = sum(_dot(row, p.cost[j]) for j, row in enumerate(rows))
    if cost <= p.budget:
        value += 1
    if max((_dot(row, p.turnaround[j]) for j, row in enumerate(rows)), default=0.0) <= (
        p.deadline_s
    ):
        value += 1
    for k, left in enumerate(p.left):
        if 0.9 < sum(chromosome[k::c]) / left <= 1.0:
            value += 1
    return value


def _dot(genes: Sequence[int], weights: Sequence[float]) -> float:
    """Σ genes·weights, where a gene of 0 costs nothing even at an infinite weight."""
    return (
        sum(map(mul, genes, weights))
        if all(map(math.isfinite, weights))
        else sum(g * w for g, w in zip(genes, weights, strict=True) if g)
    )


class _Scorer:
    """Algorithm 1 over a whole population at once (numpy), as ``fitness`` computes it
    for one chromosome; a gene a type cannot run is always 0, so its weight is too."""

    def __init__(self, p: GAProblem) -> None:
        self.c = len(p.categories)
        self.remaining = sum(p.left)
        self.left = np.array(p.left, dtype=float)
        self.cost = np.nan_to_num(np.array(p.cost, dtype=float).ravel(), posinf=0.0)
        self.tr = np.nan_to_num(np.array(p.turnaround, dtype=float), posinf=0.0)
        self.budget, self.deadline_s = p.budget, p.deadline_s

    def __call__(self, pop: list[list[int]]) -> list[tuple[int, int, list[int]]]:
        """(fitness, -index, chromosome), best first; ties keep the lower index."""
        x = np.array(pop, dtype=float)
        n = len(pop)
        by_type = x.reshape(n, -1, self.c)
        ratio = x.sum(axis=1) / self.remaining if self.remaining else np.zeros(n)
        value = ((ratio > 0.75) & (ratio <= 1.0)).astype(int)
        value += (x @ self.cost <= self.budget).astype(int)
        value += ((by_type * self.tr).sum(axis=2).max(axis=1) <= self.deadline_s).astype(int)
        share = by_type.sum(axis=1) / self.left
        value += ((share > 0.9) & (share <= 1.0)).sum(axis=1)
        return sorted(zip(value.tolist(), range(0, -n, -1), pop, strict=True), reverse=True)


def evolve(
    p: GAProblem, seed: int, *, population: int = POPULATION, generations: int = GENERATIONS
) -> GAResult:
    """The best allocation the evolution finds (see the module's docstring)."""
    rnd = random.Random(seed)
    c, g = len(p.categories), len(p.types)
    if not c or not g:
        return GAResult((), p.best_fitness if not c else 3, 0, {})
    runnable = [
        math.isfinite(p.turnaround[j][k]) and math.isfinite(p.cost[j][k])
        for j in range(g)
        for k in range(c)
    ]
    tops = [
        math.ceil(2 * p.left[k] / g) if runnable[j * c + k] else 0
        for j in range(g)
        for k in range(c)
    ]

    def draw(i: int) -> int:
        return rnd.randint(0, tops[i]) if tops[i] else 0

    score = _Scorer(p)
    pop = [[draw(i) for i in range(g * c)] for _ in range(population)]
    scored = score(pop)
    best_fit, _, best = scored[0]
    skip = math.log(1.0 - MUTATION)
    generation = 0
    while best_fit < p.best_fitness and generation < generations:
        generation += 1
        keep = [ch for _, _, ch in scored[: max(2, int(SURVIVE * population))]]
        children: list[list[int]] = []
        while len(keep) + len(children) < population:
            a, b = rnd.choice(keep), rnd.choice(keep)
            cut = rnd.randint(1, g * c - 1) if g * c > 1 else 1
            child = a[:cut] + b[cut:]
            # each gene mutates with probability MUTATION: jump to the next one mutated
            i = int(math.log(1.0 - rnd.random()) / skip)
            while i < g * c:
                child[i] = draw(i)
                i += 1 + int(math.log(1.0 - rnd.random()) / skip)
            children.append(child)
        scored = score(keep + children)
        if scored[0][0] > best_fit:
            best_fit, best = scored[0][0], scored[0][2]
    counts = {(p.categories[i % c], p.types[i // c]): n for i, n in enumerate(best) if n > 0}
    return GAResult(tuple(best), best_fit, generation, counts)
