"""The deadline planners of paper 002 against brute force on small random cases."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.core.billing import BillingModel
from autoscaler.deadline import instance, milp, patterns
from autoscaler.deadline.assign import (
    assign,
    handle_multi,
    handle_single,
    solve_new,
)
from autoscaler.deadline.instance import (
    DeadlineJob,
    DeadlinePlan,
    DeadlineProblem,
    MachineType,
    RunningMachine,
    edf,
)

TOL = 1e-6
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def billings(draw: st.DrawFn) -> BillingModel:
    if draw(st.booleans()):
        return BillingModel("fixed", float(draw(st.sampled_from([600, 1000, 3600]))))
    return BillingModel("per_second", 3600.0, min_charge_s=float(draw(st.integers(0, 600))))


@st.composite
def machine_types(draw: st.DrawFn, count: int) -> list[MachineType]:
    return [
        MachineType(
            f"t{i}",
            price=float(draw(st.integers(1, 9))),
            boot_s=float(draw(st.integers(0, 200))),
            max_count=draw(st.integers(1, 2)),
        )
        for i in range(count)
    ]


@st.composite
def jobs_on(draw: st.DrawFn, types: Sequence[MachineType], count: int) -> list[DeadlineJob]:
    out = []
    for i in range(count):
        times = {}
        for t in types:
            if draw(st.integers(0, 5)):  # now and then a type without a task time
                times[t.name] = float(draw(st.integers(40, 900)))
        out.append(
            DeadlineJob(
                f"j{i}",
                tasks=draw(st.integers(1, 3)),
                deadline_s=float(draw(st.integers(150, 2500))),
                task_s=times,
            )
        )
    return out


@st.composite
def problems(draw: st.DrawFn, max_jobs: int = 2) -> DeadlineProblem:
    types = draw(machine_types(draw(st.integers(1, 2))))
    jobs = draw(jobs_on(types, draw(st.integers(1, max_jobs))))
    return DeadlineProblem(jobs, types, draw(billings()))


# --- brute force -----------------------------------------------------------------------------


def compositions(total: int, parts: int) -> Iterator[tuple[int, ...]]:
    """Every way to split ``total`` identical tasks over ``parts`` machines."""
    for cut in itertools.combinations(range(total + parts - 1), parts - 1):
        bounds = (-1, *cut, total + parts - 1)
        yield tuple(b - a - 1 for a, b in itertools.pairwise(bounds))


def machine_cost(
    t: MachineType, jobs: Sequence[DeadlineJob], tasks: Sequence[int], billing: BillingModel
) -> float | None:
    """Cost of a new machine running ``tasks`` (per job) in EDF order; None if late."""
    if not any(tasks):
        return 0.0
    clock = t.boot_s
    for job, n in sorted(zip(jobs, tasks, strict=True), key=lambda p: p[0].deadline_s):
        if n == 0:
            continue
        if t.name not in job.task_s:
            return None
        clock += n * job.task_s[t.name]
        if clock > job.deadline_s + 1e-9:
            return None
    return billing.cost(t.price, clock)


def brute_force(problem: DeadlineProblem) -> float | None:
    """The cheapest way to spread every job's tasks over every machine allowed."""
    machines = [t for t in problem.types for _ in range(t.max_count)]
    best: float | None = None
    per_job = [list(compositions(j.tasks, len(machines))) for j in problem.jobs]
    for split in itertools.product(*per_job):
        total = 0.0
        for k, t in enumerate(machines):
            cost = machine_cost(t, problem.jobs, [s[k] for s in split], problem.billing)
            if cost is None:
                break
            total += cost
        else:
            best = total if best is None else min(best, total)
    return best


def check_plan(problem: DeadlineProblem, plan: DeadlinePlan) -> None:
    """Every task placed once, every new machine on time and priced right."""
    types = {t.name: t for t in problem.types}
    placed = dict.fromkeys((j.name for j in problem.jobs), 0)
    for m in plan.new:
        tasks = [m.tasks.get(j.name, 0) for j in problem.jobs]
        cost = machine_cost(types[m.type], problem.jobs, tasks, problem.billing)
        assert cost is not None, f"{m} misses a deadline"
        assert math.isclose(m.cost, cost, abs_tol=TOL)
        assert m.paid_s + TOL >= m.busy_s
        for name, n in m.tasks.items():
            placed[name] += n
    for tasks in plan.existing.values():
        for name, n in tasks.items():
            placed[name] += n
    assert placed == {j.name: j.tasks for j in problem.jobs}
    assert math.isclose(plan.cost, sum(m.cost for m in plan.new), abs_tol=TOL)
    counts = plan.counts()
    assert all(counts.get(t.name, 0) <= t.max_count for t in problem.types)


def assert_matches_brute(problem: DeadlineProblem, formulation: str) -> None:
    result = handle_multi(problem, formulation=formulation)  # type: ignore[arg-type]
    best = brute_force(problem)
    if best is None:
        assert result.plan is None
        assert result.reason is not None
        assert any(j.name in result.reason for j in problem.jobs)
        return
    assert result.plan is not None, result.reason
    check_plan(problem, result.plan)
    assert math.isclose(result.plan.cost, best, rel_tol=1e-6, abs_tol=TOL), (result, best)


# --- model (10) and model (7) against brute force --------------------------------------------


@FAST
@given(problems(max_jobs=1))
def test_single_job_model_is_the_brute_force_optimum(problem: DeadlineProblem) -> None:
    """Model (10): the cheapest machines for one job, ATU rounding and boot included."""
    assert_matches_brute(problem, "fast")


@FAST
@given(problems())
def test_fast_multi_job_model_is_the_brute_force_optimum(problem: DeadlineProblem) -> None:
    assert_matches_brute(problem, "fast")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_literal_multi_job_model_is_the_brute_force_optimum(problem: DeadlineProblem) -> None:
    assert_matches_brute(problem, "literal")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fast_and_literal_agree_on_three_jobs(data: st.DataObject) -> None:
    """Beyond brute force's reach: three jobs, up to 3 of each of two types."""
    types = [MachineType(f"t{i}", float(data.draw(st.integers(1, 9))), 60.0, 3) for i in range(2)]
    jobs = data.draw(jobs_on(types, 3))
    problem = DeadlineProblem(jobs, types, BillingModel("fixed", 1000.0))
    fast = handle_multi(problem, formulation="fast")
    literal = handle_multi(problem, formulation="literal")
    assert (fast.plan is None) == (literal.plan is None)
    if fast.plan is not None and literal.plan is not None:
        check_plan(problem, fast.plan)
        assert math.isclose(fast.plan.cost, literal.plan.cost, rel_tol=1e-6)


def test_aggregate_that_cannot_split_is_solved_by_patterns() -> None:
    """The aggregate fits a's two tasks, b and c on two machines (164 + 75 s of work
    by 2 × 150 s), but each machine that runs an a (82 s) has no room for b by 150 s:
    three machines are needed; the pattern model finds them and proves it."""
    t = MachineType("m", 1.0, 0.0, 4)
    jobs = [
        DeadlineJob("a", 2, 100.0, {"m": 82.0}),
        DeadlineJob("b", 1, 150.0, {"m": 75.0}),
        DeadlineJob("c", 1, 200.0, {"m": 77.0}),
    ]
    problem = DeadlineProblem(jobs, [t], BillingModel("fixed", 3600.0))
    result = handle_multi(problem, fallback_s=0.0)
    assert result.plan is not None
    check_plan(problem, result.plan)
    assert result.plan.cost == brute_force(problem) == 3.0
    assert result.proven


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_two_step_aggregate_has_the_whole_aggregates_optimum(data: st.DataObject) -> None:
    """Machines integer with tasks relaxed, then tasks integer with the machines fixed:
    the same optimum as the aggregate solved whole, and a solution that meets it."""
    types = data.draw(machine_types(data.draw(st.integers(1, 3))))
    types = [replace(t, max_count=data.draw(st.integers(1, 8))) for t in types]
    jobs = [
        replace(j, tasks=data.draw(st.integers(1, 40)))
        for j in data.draw(jobs_on(types, data.draw(st.integers(1, 4))))
    ]
    billing = data.draw(billings())
    inst = instance.make_instance(jobs, {j.name: j.tasks for j in jobs}, types, billing, 0.0)
    whole, whole_cost, whole_solution = milp.aggregate_lp(inst, "highs", None, "t", staged=False)
    two, two_cost, solution = milp.aggregate_lp(inst, "highs", None, "t")
    assert bool(solution) == bool(whole_solution)
    if not solution:
        return
    assert whole.proven
    assert two.proven
    assert math.isclose(two_cost, whole_cost, rel_tol=1e-7, abs_tol=TOL)
    for i, need in enumerate(inst.need):  # every task placed once
        placed = sum(
            n
            for group, _, tasks in solution
            for ln, n in zip(group.tp.lanes, tasks, strict=True)
            if ln.job == i
        )
        assert placed == need
    for group, count, tasks in solution:  # (2') and the caps, per group
        work = 0.0
        for ln, window, cap, n in zip(
            group.tp.lanes, group.windows, group.caps, tasks, strict=True
        ):
            work += n * ln.e
            assert n <= cap * count
            assert work <= window * count + 1e-6
    if billing.mode == "fixed":
        paid = sum(
            u * group.tp.t.price * count
            for (group, u), (_, count, _) in zip(patterns.groups(inst), solution, strict=True)
        )
        assert math.isclose(paid, two_cost, rel_tol=1e-7, abs_tol=TOL)


# --- Algorithm 1 -----------------------------------------------------------------------------


@FAST
@given(st.data())
def test_assign_never_extends_paid_time_nor_misses_a_deadline(data: st.DataObject) -> None:
    types = data.draw(machine_types(2))
    jobs = data.draw(jobs_on(types, data.draw(st.integers(1, 3))))
    now = float(data.draw(st.integers(0, 500)))
    machines = [
        RunningMachine(
            f"m{k}",
            data.draw(st.sampled_from([t.name for t in types])),
            paid_until=now + data.draw(st.integers(0, 3000)),
            free_at=now + data.draw(st.integers(-300, 2000)),
        )
        for k in range(data.draw(st.integers(0, 4)))
    ]
    done = assign(jobs, machines, now)
    placed = dict.fromkeys((j.name for j in jobs), 0)
    for m, after in zip(machines, done.machines, strict=True):
        clock = max(m.free_at, now)
        for job in edf(jobs):
            n = done.tasks.get(m.id, {}).get(job.name, 0)
            if n:
                clock += n * job.task_s[m.type]
                assert clock <= job.deadline_s + 1e-6, "a deadline violation was created"
                assert clock <= m.paid_until + 1e-6, "a machine's paid time was extended"
                placed[job.name] += n
        assert after.paid_until == m.paid_until
        assert math.isclose(after.free_at, max(clock, m.free_at))
    assert all(placed[j.name] + done.left[j.name] == j.tasks for j in jobs)
    assert all(n >= 0 for n in done.left.values())


def test_assign_fills_a_running_machine_up_to_its_paid_time() -> None:
    job = DeadlineJob("a", 10, 5000.0, {"m": 100.0})
    machine = RunningMachine("m1", "m", paid_until=3600.0, free_at=3000.0)
    done = assign([job], [machine], now=2950.0)
    assert done.tasks == {"m1": {"a": 6}}
    assert done.left == {"a": 4}


# --- Algorithms 2 and 3 ----------------------------------------------------------------------


@FAST
@given(problems(max_jobs=3))
def test_multi_job_costs_no_more_than_job_by_job(problem: DeadlineProblem) -> None:
    """Algorithm 3's machines, each running its jobs in EDF order, are a plan of model
    (7): so model (7) finds one whenever Algorithm 3 does, at no higher cost. (Not the
    converse: job by job may use up a type's max count, or under per-second billing a
    machine's paid time, that a later job needed.)"""
    multi = handle_multi(problem)
    single = handle_single(problem)
    if single.plan is None:
        assert single.reason
        return
    check_plan(problem, single.plan)
    assert multi.plan is not None, multi.reason
    check_plan(problem, multi.plan)
    assert multi.plan.cost <= single.plan.cost + TOL


@FAST
@given(st.data())
def test_running_machines_are_filled_before_buying(data: st.DataObject) -> None:
    problem = data.draw(problems(max_jobs=2))
    ids = [f"m{k}" for k in range(data.draw(st.integers(1, 3)))]
    machines = [
        RunningMachine(
            mid,
            data.draw(st.sampled_from([t.name for t in problem.types])),
            paid_until=float(data.draw(st.integers(0, 3000))),
            free_at=float(data.draw(st.integers(0, 1000))),
        )
        for mid in ids
    ]
    problem = DeadlineProblem(problem.jobs, problem.types, problem.billing, 0.0, machines)
    for result in (handle_multi(problem), handle_single(problem)):
        if result.plan is None:
            assert result.reason
            continue
        check_plan(problem, result.plan)
        done = assign(problem.jobs, machines, 0.0)
        if not any(done.left.values()):
            assert result.plan.new == ()


def test_multi_job_shares_a_machine_that_job_by_job_does_not() -> None:
    """Two jobs that each half-fill a machine: Algorithm 3 buys a machine for the first
    and fills it with the second only if it fits; model (7) puts both on one."""
    t = MachineType("m", 1.0, 0.0, 5)
    jobs = [
        DeadlineJob("a", 1, 500.0, {"m": 300.0}),
        DeadlineJob("b", 1, 600.0, {"m": 300.0}),
    ]
    problem = DeadlineProblem(jobs, [t], BillingModel("fixed", 3600.0))
    multi = handle_multi(problem)
    assert multi.plan is not None
    assert multi.plan.cost == 1.0
    assert multi.plan.new[0].tasks == {"a": 1, "b": 1}


# --- infeasible deadlines --------------------------------------------------------------------


def test_deadline_shorter_than_boot_and_one_task_is_reported_with_the_job() -> None:
    t = MachineType("m", 1.0, 100.0, 10)
    jobs = [
        DeadlineJob("easy", 5, 2000.0, {"m": 60.0}),
        DeadlineJob("urgent", 5, 150.0, {"m": 60.0}),
    ]
    problem = DeadlineProblem(jobs, [t], BillingModel("fixed", 3600.0))
    for result in (
        handle_multi(problem),
        handle_multi(problem, formulation="literal"),
        handle_single(problem),
    ):
        assert result.plan is None
        assert result.reason is not None
        assert "urgent" in result.reason
        assert "easy" not in result.reason


def test_too_few_machines_allowed_is_reported_with_the_job() -> None:
    t = MachineType("m", 1.0, 0.0, 2)
    jobs = [DeadlineJob("big", 50, 1000.0, {"m": 100.0})]
    result = handle_multi(DeadlineProblem(jobs, [t], BillingModel("fixed", 3600.0)))
    assert result.plan is None
    assert result.reason is not None
    assert "big" in result.reason
    assert "20" in result.reason  # the most two machines finish


def test_jobs_that_fit_alone_but_not_together_are_reported() -> None:
    t = MachineType("m", 1.0, 0.0, 1)
    jobs = [DeadlineJob("a", 1, 100.0, {"m": 100.0}), DeadlineJob("b", 1, 100.0, {"m": 100.0})]
    result = handle_multi(DeadlineProblem(jobs, [t], BillingModel("fixed", 3600.0)))
    assert result.plan is None
    assert result.reason is not None
    assert "'a'" in result.reason
    assert "'b'" in result.reason


def test_nothing_to_buy_when_no_tasks_are_left() -> None:
    t = MachineType("m", 1.0, 0.0, 1)
    jobs = [DeadlineJob("a", 2, 1000.0, {"m": 100.0})]
    running = [RunningMachine("r", "m", paid_until=3600.0, free_at=0.0)]
    result = handle_multi(DeadlineProblem(jobs, [t], BillingModel("fixed", 3600.0), 0.0, running))
    assert result.plan is not None
    assert result.plan.new == ()
    assert result.plan.cost == 0.0
    assert result.plan.existing == {"r": {"a": 2}}


def test_solve_new_for_one_job_uses_cheaper_per_task_type() -> None:
    """Model (10) by hand: 99 tasks by 1,000 s (β 100 s): small does 9 for $1, big 30
    for $2: 3 big + 1 small (90 + 9) = $7 beats 11 small ($11) and 4 big ($8)."""
    types = [MachineType("small", 1.0, 100.0, 20), MachineType("big", 2.0, 100.0, 20)]
    job = DeadlineJob("a", 99, 1000.0, {"small": 100.0, "big": 30.0})
    result = solve_new([job], types, BillingModel("fixed", 3600.0))
    assert result.plan is not None
    assert result.plan.cost == 7.0
    assert result.plan.counts() == {"big": 3, "small": 1}
