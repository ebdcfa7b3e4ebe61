"""The budget planner against brute-force enumeration on small random instances."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.billing import BillingModel
from autoscaler.estimate import tasks_within
from autoscaler.planner import (
    BudgetProblem,
    TypeEstimate,
    plan_budget,
    plan_clairvoyant,
)

HOURLY = BillingModel("fixed", 3600.0)


@st.composite
def type_estimates(draw: st.DrawFn, name: str) -> TypeEstimate:
    max_count = draw(st.integers(1, 3))
    price = float(draw(st.integers(1, 12)))
    mean = float(draw(st.integers(300, 4000)))
    boot = float(draw(st.integers(0, 300)))
    return TypeEstimate(
        name=name,
        price=price,
        max_count=max_count,
        boot_s=boot,
        mean_s=mean,
        sd_s=float(draw(st.integers(0, 400))),
        live=draw(st.integers(0, max_count)),
        first_cost=price,
        first_tasks=max(0, math.floor((3600.0 - 60.0 - boot) / mean)),
    )


@st.composite
def budget_problems(draw: st.DrawFn) -> BudgetProblem:
    n_types = draw(st.integers(1, 3))
    types = [draw(type_estimates(f"t{i}")) for i in range(n_types)]
    return BudgetProblem(
        tasks=float(draw(st.integers(1, 120))),
        budget=float(draw(st.integers(1, 400))),
        types=types,
        billing=HOURLY,
        cushion_z=draw(st.sampled_from([0.0, 1.0])),
        final_loss=draw(st.sampled_from([0.0, 0.5])),
    )


def brute_force(problem: BudgetProblem) -> tuple[int, float] | None:
    """Smallest k any (keep, new) mix can finish N in within B, and the best speed at it."""
    choices = [
        [(keep, new) for keep in range(t.live + 1) for new in range(t.max_count - t.live + 1)]
        for t in problem.types
    ]
    best: tuple[int, float] | None = None
    cheapest = min(t.price for t in problem.types)
    for mix in itertools.product(*choices):
        speed = sum((k + n) / t.mean_s for (k, n), t in zip(mix, problem.types, strict=True))
        k = 1  # k = 0 would keep live machines for free beyond their paid time
        while k * cheapest <= problem.budget:
            cost = sum(
                (keep + new) * k * t.price + new * t.first_cost
                for (keep, new), t in zip(mix, problem.types, strict=True)
            )
            if cost > problem.budget + 1e-9:
                break
            capacity = sum(
                (keep + new)
                * tasks_within(k * 3600.0, t.mean_s, t.sd_s, problem.cushion_z, problem.final_loss)
                + new * t.first_tasks
                for (keep, new), t in zip(mix, problem.types, strict=True)
            )
            if capacity >= problem.tasks - 1e-9:
                if best is None or k < best[0] or (k == best[0] and speed > best[1]):
                    best = (k, speed)
                break
            k += 1
    return best


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budget_problems())
def test_planner_matches_brute_force(problem: BudgetProblem) -> None:
    """The first feasible k and the fastest mix at it, as exhaustive search finds them."""
    expected = brute_force(problem)
    plan = plan_budget(problem)
    if expected is None:
        assert plan is None
        return
    assert plan is not None
    assert plan.units == expected[0]
    min_speed = min(1 / t.mean_s for t in problem.types)
    # Ties in speed are broken towards cheaper mixes by a term worth < 0.1 % of a machine.
    assert plan.speed == pytest.approx(expected[1], abs=1e-3 * min_speed)
    for t in problem.types:
        assert 0 <= plan.counts[t.name] <= t.max_count


@settings(max_examples=40, deadline=None)
@given(budget_problems())
def test_highs_and_cbc_agree(problem: BudgetProblem) -> None:
    highs = plan_budget(problem, "highs")
    cbc = plan_budget(problem, "cbc")
    assert (highs is None) == (cbc is None)
    if highs is not None and cbc is not None:
        assert highs.units == cbc.units
        min_speed = min(1 / t.mean_s for t in problem.types)
        assert highs.speed == pytest.approx(cbc.speed, abs=1e-3 * min_speed)


def clairvoyant_brute_force(tasks: int, budget: float, types: list[TypeEstimate]) -> float | None:
    best: float | None = None
    for mix in itertools.product(*(range(t.max_count + 1) for t in types)):
        speed = sum(a / t.mean_s for a, t in zip(mix, types, strict=True))
        if speed == 0:
            continue
        makespan = tasks / speed
        units = math.ceil(makespan / 3600.0 - 1e-9)
        if units * sum(a * t.price for a, t in zip(mix, types, strict=True)) <= budget + 1e-9:
            best = makespan if best is None else min(best, makespan)
    return best


@settings(max_examples=100, deadline=None)
@given(budget_problems())
def test_clairvoyant_bound_matches_brute_force(problem: BudgetProblem) -> None:
    """T* = min N/Σ a_i/μ_i subject to ⌈T/ATU⌉·Σ a_i·c_i ≤ B."""
    types = list(problem.types)
    expected = clairvoyant_brute_force(int(problem.tasks), problem.budget, types)
    plan = plan_clairvoyant(int(problem.tasks), problem.budget, types, HOURLY)
    if expected is None:
        assert plan is None
    else:
        assert plan is not None
        assert plan.makespan_s(problem.tasks) == pytest.approx(expected)


def test_the_papers_s4_1_plan_prefers_the_profitable_type() -> None:
    """$1584 left for ~780 tasks (S4-1 after sampling): every cheap machine, some dear."""
    types = [
        TypeEstimate("cluster0", 3.0, 32, 120.0, 900.0, live=30, first_cost=3.0, first_tasks=3),
        TypeEstimate("cluster1", 12.0, 32, 120.0, 900.0, live=30, first_cost=12.0, first_tasks=3),
    ]
    plan = plan_budget(BudgetProblem(780.0, 1584.0, types, HOURLY))
    assert plan is not None
    assert plan.counts["cluster0"] == 32
    assert 0 < plan.counts["cluster1"] < 32
    assert plan.cost <= 1584.0


def test_no_plan_when_the_budget_cannot_pay_for_the_work() -> None:
    types = [TypeEstimate("only", 3.0, 10, 0.0, 900.0, live=0, first_cost=3.0, first_tasks=3)]
    assert plan_budget(BudgetProblem(1000.0, 30.0, types, HOURLY)) is None


def test_per_second_plan_keeps_cost_rate_times_time_within_budget() -> None:
    """N·Σ a_i·c_i ≤ B·ATU·Σ a_i/T_i: the mix's cost to finish N tasks fits B."""
    billing = BillingModel("per_second", 3600.0)
    types = [
        TypeEstimate("cheap", 1.0, 10, 0.0, 1000.0),
        TypeEstimate("dear", 10.0, 10, 0.0, 500.0),
    ]
    plan = plan_budget(BudgetProblem(100.0, 60.0, types, billing))
    assert plan is not None
    rate = sum(plan.counts[t.name] * t.price for t in types) / 3600.0
    assert rate * plan.makespan_s(100.0) <= 60.0 + 1e-6
    # All cheap machines (cost/task 0.28) fit; dear ones (1.39/task) cannot all be added.
    assert plan.counts["cheap"] == 10


PER_SECOND = BillingModel("per_second", 3600.0)


def per_second_brute_force(problem: BudgetProblem) -> float | None:
    """The fastest mix of at least one machine whose cost rate times N/speed fits B."""
    best: float | None = None
    for mix in itertools.product(*(range(t.max_count + 1) for t in problem.types)):
        speed = sum(a / t.mean_s for a, t in zip(mix, problem.types, strict=True))
        rate = sum(a * t.price for a, t in zip(mix, problem.types, strict=True))
        if speed > 0 and problem.tasks * rate <= problem.budget * 3600.0 * speed + 1e-9:
            best = speed if best is None else max(best, speed)
    return best


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budget_problems())
def test_per_second_plan_matches_brute_force_and_is_none_when_unaffordable(
    problem: BudgetProblem,
) -> None:
    problem = BudgetProblem(problem.tasks, problem.budget, problem.types, PER_SECOND)
    expected = per_second_brute_force(problem)
    plan = plan_budget(problem)
    assert (plan is None) == (expected is None), (plan, expected)
    if plan is not None:
        assert sum(plan.counts.values()) >= 1
        assert plan.speed == pytest.approx(expected, rel=1e-6)
        assert plan.cost <= problem.budget * (1 + 1e-9)


def test_a_per_second_budget_too_small_for_any_machine_gives_no_plan() -> None:
    """100 tasks of 1000 s at $1/h cost at least $27.8 on the cheapest type: $20 pays none."""
    types = [
        TypeEstimate("cheap", 1.0, 10, 0.0, 1000.0),
        TypeEstimate("dear", 10.0, 10, 0.0, 500.0),
    ]
    assert plan_budget(BudgetProblem(100.0, 20.0, types, PER_SECOND)) is None
    assert plan_budget(BudgetProblem(100.0, 20.0, types, PER_SECOND), "cbc") is None
