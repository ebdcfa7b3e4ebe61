"""The deadline cloud benchmark's scenario: one seed runs to the end, every task done,
the money committed equal to the machines' billed hours, the noise fixed by the seed."""

from benchmarks.deadline_cloud import STRATEGIES, jobs, lateness, run_one, scenario


def test_one_seed_finishes_and_money_matches_billed_hours() -> None:
    state = scenario(STRATEGIES["multi.dyna"], 0.1, 0).run()
    assert state.tasks.done == state.n_tasks == sum(j.count for j in jobs())
    assert state.money.stop_reason is None
    assert abs(state.money.committed - state.actual_cost()) < 1e-9
    late, seconds, per = lateness(state)
    assert set(per) == {j.name for j in state.work.jobs}
    assert (late == 0) == (seconds == 0.0)


def test_homogeneous_baseline_uses_only_its_type() -> None:
    state = scenario(STRATEGIES["large.nodyna"], 0.3, 1).run()
    assert {m.type.name for m in state.fleet.machines.values()} == {"large"}
    assert state.tasks.done == state.n_tasks


def test_a_seed_repeats_and_another_differs() -> None:
    a = run_one(("single.nodyna", 0.3, 2, "ecu"))
    b = run_one(("single.nodyna", 0.3, 2, "ecu"))
    c = run_one(("single.nodyna", 0.3, 3, "ecu"))
    assert (a.cost, a.late_tasks, a.late_s) == (b.cost, b.late_tasks, b.late_s)
    assert (a.late_tasks, a.late_s) != (c.late_tasks, c.late_s)
