"""`autoscaler plan`'s sampling: the run holds once the samples are in, commits nothing
more, and a budget set later carries it on from the samples (no second sampling)."""

from __future__ import annotations

from autoscaler.budget.controller import Controller
from autoscaler.config.bag import expand_bag
from autoscaler.core.model import Action, BudgetSet, Configure, Event, Extend, Hold, Launch
from autoscaler.core.state import RunState
from autoscaler.report.build import build_report
from autoscaler.report.markdown import render_head
from autoscaler.run.assemble import controller_settings, planning_settings
from autoscaler.run.start import make_emulator
from tests.conftest import make_config


def held_run(budget: float = 100.0) -> tuple[RunState, list[tuple[float, list[Action]]]]:
    """A dry run with the planning settings, to its end; the steps' actions."""
    cfg = make_config(bag={"synthetic": 300}, constraint={"budget": budget})
    steps: list[tuple[float, list[Action]]] = []

    def on_step(now: float, _: list[Event], actions: list[Action], __: RunState) -> None:
        steps.append((now, list(actions)))

    controller = Controller(planning_settings(cfg))
    emulator = make_emulator(cfg, 300, 1, on_step=on_step, controller=controller)
    return emulator.run(), steps


def test_a_planning_run_holds_once_sampled_and_commits_nothing_more() -> None:
    state, steps = held_run()
    holds = [(t, a) for t, actions in steps for a in actions if isinstance(a, Hold)]
    assert len(holds) == 1
    held_at = holds[0][0]
    after = [a for t, actions in steps if t >= held_at for a in actions]
    assert not [a for a in after if isinstance(a, Launch | Extend)]
    assert not [a for a in after if isinstance(a, Configure) and a.predicted_cost is not None]
    committed_at_hold = max(c for t, c in state.money.spend_log if t <= held_at)
    assert state.money.committed <= committed_at_hold + 1e-9
    # The machines worked on the bag in their paid time, then went; the run waits.
    assert state.money.awaiting_budget
    assert not state.money.stopped
    assert state.over
    assert any(seg.outcome == "done" and seg.start > held_at for seg in state.tasks.segments)
    for m in state.fleet.machines.values():
        assert m.ended_at is not None
        assert m.ended_at <= m.paid_until + 1e-9
    assert state.tasks_left > 0


def test_a_budget_set_on_a_held_run_plans_from_its_samples() -> None:
    state, _ = held_run()
    committed = state.money.committed
    budget = committed + 40.0
    controller = Controller(controller_settings(make_config()))
    actions = controller.step(state, [BudgetSet(budget, "option 2")], state.now + 60.0)
    configures = [a for a in actions if isinstance(a, Configure)]
    assert len(configures) == 1
    plan = configures[0]
    assert plan.predicted_cost is not None
    assert plan.predicted_cost <= budget + 1e-9
    assert plan.reason.startswith("plan after sampling")
    assert [a for a in actions if isinstance(a, Launch)]
    assert state.money.budget == budget
    assert not state.money.awaiting_budget
    assert state.money.committed <= budget + 1e-9
    # One sampling configuration in all: the samples were not taken again.
    sampling = [c for _, c in state.decisions.configurations if c.reason.startswith("sampling")]
    assert len(sampling) == 1


def test_a_budget_below_what_is_committed_buys_nothing() -> None:
    """A held run given less than it has committed launches nothing and says so."""
    state, _ = held_run()
    controller = Controller(controller_settings(make_config()))
    actions = controller.step(
        state, [BudgetSet(state.money.committed, "too little")], state.now + 60
    )
    assert not [a for a in actions if isinstance(a, Launch)]
    assert state.money.stopped or state.decisions.shortfalls


def test_the_report_of_a_held_run_says_it_waits_for_a_budget() -> None:
    cfg = make_config(bag={"synthetic": 300})
    state, _ = held_run()
    report = build_report(cfg, state, tasks=expand_bag(cfg), run_id="held", seed=1)
    assert report.stop_reason is not None
    assert "waits for a budget" in report.stop_reason
    assert "--option N" in render_head(report)


def test_a_held_run_keeps_its_estimates_and_a_later_risk_says_how_they_moved() -> None:
    """The Hold keeps the means the plan's options are made on; a budget set later that
    finishes the bag at the estimated means but not at the reserved runtimes is said at
    risk, with each estimate then and when the options were made. A budget of the
    plan's own minimum for these estimates is not (reserve_z 5: under fixed billing the
    two needs differ by a whole unit, 65 and 66)."""
    from dataclasses import replace

    from autoscaler.budget import plans, runtimes
    from autoscaler.budget.frontier import cents_up
    from autoscaler.budget.minimum import minimum_budget
    from autoscaler.budget.problem import BudgetProblem
    from autoscaler.core.model import Risk

    state, steps = held_run()
    held = [a for _, actions in steps for a in actions if isinstance(a, Hold)]
    assert state.money.held_means == dict(held[0].means)
    assert set(state.money.held_means) == {"slow", "fast"}
    settings = replace(controller_settings(make_config()), reserve_z=5.0)
    now = state.now + 60.0
    est, n_e = runtimes.outlook(settings, state, now)

    def least(problem: BudgetProblem) -> float:
        more = minimum_budget(problem, rel_tol=1e-6)
        assert more is not None
        return state.money.committed + more

    at_means = least(plans.bare_problem(settings, state, now, est, n_e, 0.0))
    reserved = least(plans.budget_problem(settings, state, now, est, n_e, 0.0))
    assert at_means + 0.5 < reserved

    def risks(budget: float) -> list[Risk]:
        run = held_run()[0]
        actions = Controller(settings).step(run, [BudgetSet(budget, "option 1")], now)
        return [a for a in actions if isinstance(a, Risk)]

    said = risks((at_means + reserved) / 2)
    assert len(said) == 1
    for name, mean in state.money.held_means.items():
        assert f"{mean:.0f} s when the plan's options were made" in said[0].message
        assert f"estimate {est[name].mean_s:.0f} s from" in said[0].message
    assert not risks(cents_up(reserved + runtimes.end_reserve(state, est)))
