"""A budget run whose types may have no machine at the moment (a service's other jobs
hold every machine the shared limit allows): the monitor's checks that solve a plan
(``risk.affords``, the shortfall's ``_finishes_at_means``) answer "no" instead of
letting the planner refuse the problem. Before, they checked only that the problem
had types, and ``solve_budget`` raised ``PlannerError('no machine type has a runtime
estimate')``, which ended a service job's daemon (CI run 55,
``test_service_restart``'s budget job, beside another job holding the machines)."""

from __future__ import annotations

from autoscaler.budget.planner import plannable
from autoscaler.budget.problem import BudgetProblem, TypeEstimate
from autoscaler.budget.risk import affords
from autoscaler.budget.settings import ControllerSettings
from autoscaler.core.billing import BillingModel
from autoscaler.core.model import TypeSpec
from autoscaler.core.state import RunState

HOURLY = BillingModel("fixed", 3600.0, 60.0, 300.0)


def estimates(max_count: int) -> dict[str, TypeEstimate]:
    return {
        "small": TypeEstimate("small", 1.0, max_count, 120.0, 600.0, 120.0),
        "fast": TypeEstimate("fast", 3.0, max_count, 120.0, 200.0, 40.0),
    }


def state() -> RunState:
    types = [TypeSpec("small", 1.0, 4, 120.0), TypeSpec("fast", 3.0, 4, 120.0)]
    return RunState.new(types, HOURLY, 100.0, 600, list(range(600)))


def test_a_problem_whose_types_may_have_no_machine_is_not_plannable() -> None:
    none = BudgetProblem(100, 50.0, list(estimates(0).values()), HOURLY)
    assert not plannable(none)
    assert plannable(BudgetProblem(100, 50.0, list(estimates(2).values()), HOURLY))


def test_affords_says_no_when_no_type_may_have_a_machine() -> None:
    s = state()
    settings = ControllerSettings()
    assert affords(settings, s, 0.0, estimates(4), 100.0, 90.0)
    assert not affords(settings, s, 0.0, estimates(0), 100.0, 90.0)
