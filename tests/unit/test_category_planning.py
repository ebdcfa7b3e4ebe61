"""Paper 004's batch-resizing policies (Algorithm 2), its genetic algorithm (Algorithm 1's
fitness), and our MILP over (category, type) counts."""

from __future__ import annotations

import itertools

import pytest

from autoscaler.categories.counts import plan_categories, plan_max_tasks, plan_min_cost
from autoscaler.categories.deployment import Metrics
from autoscaler.categories.ga import GAProblem, evolve, fitness
from autoscaler.categories.resizing import Limits, group_size, machine_group_size

# One task of category 0: 10 s CPU, 12 s wall, 3 s transfer, 1 MB, 20 s turnaround, 7.
M = Metrics(cpu_s=10, wall_s=12, transfer_s=3, turnaround_s=20, cost=7, space_bytes=1e6)


@pytest.mark.parametrize(
    ("limits", "kwargs", "size", "policy"),
    [
        (Limits(max_cpu_s=35), {}, 3, 1),
        (Limits(max_wall_s=50), {}, 4, 2),
        (Limits(max_transfer_s=16), {}, 5, 3),
        (Limits(max_space_bytes=2.5e6), {}, 2, 4),
        (Limits(), {"deadline_s": 130}, 6, 5),
        (Limits(), {"budget": 50}, 7, 6),
        (Limits(), {}, 9, None),  # policy 7: the tasks left, nothing broken
    ],
)
def test_each_policy_alone_stops_the_group(
    limits: Limits, kwargs: dict[str, float], size: int, policy: int | None
) -> None:
    group = group_size({0: M}, limits, {0: 9}, **kwargs)  # type: ignore[arg-type]
    assert (group.size, group.stopped_by) == (size, policy)


def test_the_first_limit_reached_stops_it() -> None:
    """CPU allows 3 (35 s), wall 4 (50 s), the budget 7: the group is 3, by policy 1."""
    group = group_size({0: M}, Limits(max_cpu_s=35, max_wall_s=50), {0: 9}, budget=50)
    assert (group.size, group.stopped_by) == (3, 1)


def test_policies_not_chosen_are_not_checked() -> None:
    group = group_size({0: M}, Limits(max_cpu_s=35), {0: 9}, policies=frozenset({2, 7}))
    assert group.size == 9


def test_categories_in_order_within_the_allocation() -> None:
    """Algorithm 2: category 0 up to its allocation, then 1; a category that breaks a
    limit is left for the next, which may still fit."""
    big = Metrics(cpu_s=30, wall_s=30, transfer_s=0, turnaround_s=30, cost=1)
    small = Metrics(cpu_s=5, wall_s=5, transfer_s=0, turnaround_s=5, cost=1)
    group = group_size(
        {0: small, 1: big, 2: small},
        Limits(max_cpu_s=40),
        {0: 5, 1: 5, 2: 5},
        allocation={0: 2, 1: 3, 2: 9},
    )
    assert group.counts == {0: 2, 1: 1}  # 10 + 30 s; then 45 s > 40 s for category 2
    assert group.stopped_by == 1


def test_largest_first_packs_a_long_task_with_short_ones() -> None:
    """In id order short tasks fill the group and the long ones wait, to go one per group
    at the end; longest first, a long task goes with short ones in what it leaves."""
    big = Metrics(cpu_s=30, wall_s=30, transfer_s=0, turnaround_s=30, cost=1)
    small = Metrics(cpu_s=5, wall_s=5, transfer_s=0, turnaround_s=5, cost=1)
    metrics, limits, left = {0: small, 1: big}, Limits(max_cpu_s=40), {0: 20, 1: 4}
    assert group_size(metrics, limits, left).counts == {0: 8}
    group = group_size(metrics, limits, left, largest_first=True)
    assert group.counts == {1: 1, 0: 2}
    assert group.stopped_by == 1


def test_a_share_caps_the_whole_group() -> None:
    group = group_size({0: M, 1: M}, Limits(), {0: 3, 1: 3}, share=4)
    assert group.counts == {0: 3, 1: 1}
    assert group.stopped_by == 7


def test_machine_group_fits_the_paid_time_and_the_slots() -> None:
    """4 slots, 100 s a task, 250 s paid: two rounds of 4 fit (ceil(k/4)·100 <= 250)."""
    common = {"slots": 4, "deadline_left_s": None, "budget_left": None, "cost_per_task": 0}
    assert machine_group_size(free_slots=4, mean_s=100, paid_left_s=250, tasks_left=100,
                              **common) == 8  # fmt: skip
    assert machine_group_size(free_slots=4, mean_s=None, paid_left_s=250, tasks_left=100,
                              **common) == 4  # fmt: skip
    assert machine_group_size(free_slots=4, mean_s=100, paid_left_s=250, tasks_left=3,
                              **common) == 3  # fmt: skip
    assert machine_group_size(free_slots=2, mean_s=100, paid_left_s=10, tasks_left=9,
                              **common) == 2  # fmt: skip


# --- the genetic algorithm ------------------------------------------------------------


def _problem(budget: float = 100, deadline_s: float = 100) -> GAProblem:
    left = {0: 10, 1: 10}
    tr = {(0, "a"): 10.0, (1, "a"): 10.0, (0, "b"): 20.0, (1, "b"): 20.0}
    cost = {(0, "a"): 2.0, (1, "a"): 2.0, (0, "b"): 1.0, (1, "b"): 1.0}
    return GAProblem.build(left, tr, cost, budget=budget, deadline_s=deadline_s)


def test_fitness_is_algorithm_1() -> None:
    p = _problem()  # genes: a0 a1 b0 b1
    assert p.best_fitness == 5
    # 20 of 20 tasks (1), cost 2·10 + 1·10 = 30 <= 100 (1), a: 100 s, b: 200 s > 100 (0),
    # each category 10/10 (1 + 1)
    assert fitness([5, 5, 5, 5], p) == 4
    # 18 tasks: 0.9 (1); cost 2·8 + 10 = 26 (1); a 80 s, b 200 s (0); 0.9 is not > 0.9
    assert fitness([4, 4, 5, 5], p) == 2
    # 10 tasks: 0.5 (0); cost 20 (1); a: 100 s (1); 10/10 and 0/10 (1 + 0)
    assert fitness([10, 0, 0, 0], p) == 3
    # over-allocated: 22 tasks (ratio 1.1: 0), cost 44 (1), time 110 s (0), 11/10 (0), 11/10
    assert fitness([11, 11, 0, 0], p) == 1
    assert fitness([5, 5, 2, 2], p) == 2  # 14/20 = 0.7 (0), cost 24 (1), 100 s (1), 7/10 (0)


def test_ga_is_reproducible_with_a_seed() -> None:
    p = _problem(budget=35, deadline_s=120)
    first, again = evolve(p, seed=7), evolve(p, seed=7)
    assert first == again
    assert first.fitness == fitness(first.chromosome, p)
    assert 0 < first.generations <= 500


def test_ga_stops_at_the_best_fitness() -> None:
    result = evolve(_problem(budget=1000, deadline_s=1000), seed=1)
    assert result.fitness == 5
    assert result.generations < 500


# --- the MILP ---------------------------------------------------------------------------


def _brute_force(
    left: dict[int, int], tr: dict[tuple[int, str], float], cost: dict[tuple[int, str], float],
    budget: float, deadline_s: float,
) -> tuple[int, float]:  # fmt: skip
    keys = sorted(tr)
    best = (0, 0.0)
    for xs in itertools.product(*(range(left[k] + 1) for k, _ in keys)):
        x = dict(zip(keys, xs, strict=True))
        if any(sum(n for (kk, _), n in x.items() if kk == k) > left[k] for k in left):
            continue
        money = sum(cost[key] * n for key, n in x.items())
        if money > budget:
            continue
        if any(sum(tr[key] * n for key, n in x.items() if key[1] == j) > deadline_s
               for j in {j for _, j in keys}):  # fmt: skip
            continue
        tasks = sum(xs)
        if tasks > best[0] or (tasks == best[0] and money < best[1]):
            best = (tasks, money)
    return best


SMALL = (
    {0: 3, 1: 2},
    {(0, "a"): 4.0, (1, "a"): 7.0, (0, "b"): 6.0, (1, "b"): 3.0},
    {(0, "a"): 5.0, (1, "a"): 9.0, (0, "b"): 2.0, (1, "b"): 6.0},
)


@pytest.mark.parametrize(
    ("budget", "deadline_s"), [(100, 100), (20, 12), (13, 9), (9, 30), (30, 6)]
)
def test_milp_is_optimal_on_small_cases(budget: float, deadline_s: float) -> None:
    left, tr, cost = SMALL
    plan = plan_max_tasks(left, tr, cost, budget=budget, deadline_s=deadline_s)
    assert plan.outcome == "optimal"
    assert (plan.tasks, plan.cost) == pytest.approx(
        _brute_force(left, tr, cost, budget, deadline_s)
    )
    assert plan.cost <= budget
    any_plan = plan_max_tasks(left, tr, cost, budget=budget, deadline_s=deadline_s, cheapest=False)
    assert any_plan.tasks == plan.tasks
    assert any_plan.cost >= plan.cost
    assert all(busy <= deadline_s for busy in plan.busy_s.values())


def test_milp_plans_nothing_when_nothing_fits() -> None:
    left, tr, cost = SMALL
    assert plan_max_tasks(left, tr, cost, budget=1, deadline_s=100).tasks == 0
    assert plan_max_tasks(left, tr, cost, budget=100, deadline_s=2).tasks == 0
    assert plan_max_tasks(left, tr, cost, budget=-5, deadline_s=100).tasks == 0


def test_min_cost_does_every_task_or_says_infeasible() -> None:
    left, tr, cost = SMALL
    plan = plan_min_cost(left, tr, cost, deadline_s=100)
    assert plan.outcome == "optimal"
    assert plan.tasks == 5
    assert plan.counts == {(0, "b"): 3, (1, "b"): 2}  # the cheaper type for each
    tight = plan_min_cost(left, tr, cost, deadline_s=12)  # a: 2 x 4 s, b: 6 s + 2 x 3 s
    assert tight.outcome == "optimal"
    assert tight.counts == {(0, "a"): 2, (0, "b"): 1, (1, "b"): 2}  # 24, not 27 (a: 3)
    impossible = plan_min_cost(left, tr, cost, deadline_s=10)
    assert impossible.outcome == "infeasible"
    assert impossible.counts == {}


def test_lanes_multiply_a_types_time() -> None:
    left, tr, cost = SMALL
    one = plan_max_tasks(left, tr, cost, budget=1000, deadline_s=6)
    four = plan_max_tasks(left, tr, cost, budget=1000, deadline_s=6, lanes={"a": 4, "b": 4})
    assert one.tasks < four.tasks == 5


def test_plan_categories_entry_point() -> None:
    means = {(0, "a"): 10.0, (0, "b"): 20.0}
    prices = {"a": 1.0, "b": 0.25}  # per second: a task costs 10 on a, 5 on b
    assert plan_categories({0: 4}, means, prices, budget=None, deadline_s=40) == {
        (0, "b"): 2,
        (0, "a"): 2,
    }
    assert plan_categories({0: 4}, means, prices, budget=15, deadline_s=100) == {(0, "b"): 3}


def test_stopped_by_its_time_limit_the_plan_still_fits_and_is_near_the_best() -> None:
    """A limit too short to prove anything: the LP relaxation rounded and filled is
    kept, within the budget and the deadline, a few tasks at most below the optimum."""
    sizes = [330, 64, 20, 6, 22, 12, 12, 10, 10, 10, 8, 10, 16, 12, 8, 10, 8]
    left = dict(enumerate(sizes))
    types = ["R0", "R1", "R2", "R3", "R4"]
    tr = {(k, t): 20.0 + (7 * k + 13 * j) % 60 for k in left for j, t in enumerate(types)}
    cost = {(k, t): tr[k, t] * (3 + j) for k in left for j, t in enumerate(types)}
    best = plan_max_tasks(left, tr, cost, budget=60_000, deadline_s=4500)
    quick = plan_max_tasks(left, tr, cost, budget=60_000, deadline_s=4500, time_limit_s=1e-6)
    assert best.outcome == "optimal"
    assert quick.cost <= 60_000
    assert all(busy <= 4500 for busy in quick.busy_s.values())
    assert best.tasks - len(types) - len(sizes) <= quick.tasks <= best.tasks
