"""N_e, N_p and the forecast against cases computed by hand (paper 000 §2.2)."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.budget.outlook import expected_left, forecast, paid_completions, potential
from autoscaler.core.billing import BillingModel
from autoscaler.core.model import (
    Assign,
    Extend,
    Launch,
    MachineLaunched,
    MachineReady,
    Mark,
    TypeSpec,
)
from autoscaler.core.state import RunState

SLOW = TypeSpec("slow", price=1.0, max_count=10, boot_s=100.0)
FAST = TypeSpec("fast", price=4.0, max_count=10, boot_s=100.0)
HOURLY = BillingModel("fixed", 3600.0, margin_s=0.0)


def fresh(budget: float = 20.0, n_tasks: int = 100) -> RunState:
    return RunState.new([SLOW, FAST], HOURLY, budget, n_tasks, list(range(n_tasks)))


def up(state: RunState, name: str, mid: str, at: float) -> None:
    """One machine of type ``name`` launched at ``at`` and ready after its boot."""
    token = f"L-{mid}"
    state.apply(at, Launch(name, 1, token))
    state.apply(at, MachineLaunched(mid, name, token, at))
    state.apply(at + state.types[name].boot_s, MachineReady(mid))


def no_rest(_: str, ages: np.ndarray) -> np.ndarray:
    """Every running task is expected to end just now."""
    return ages


def test_paid_completions_count_running_tasks_free_time_and_launches_in_flight() -> None:
    """At t = 1000, T_slow = 600, T_fast = 200, no margin:

    * slow machine a (launched at 0, paid to 3600), running a task started at 700
      expected to take 900 in all: it ends at 1600 (1 task), then (3600−1600)/600 →
      3 whole tasks: 4;
    * fast machine b (launched at 900, booting until 1000+… ready at 1000): paid to
      4500, free at 1000: 3500/200 → 17;
    * a launch in flight of 2 fast machines: each does ⌊(3600 − 100)/200⌋ = 17: 34.
    Total 55; with 100 tasks left, N_e = 45.
    """
    state = fresh()
    up(state, "slow", "a", 0.0)
    state.apply(700.0, Assign(0, "a"))
    up(state, "fast", "b", 900.0)
    state.apply(1000.0, Launch("fast", 2, "L2"))
    means = {"slow": 600.0, "fast": 200.0}

    def rest(name: str, ages: np.ndarray) -> np.ndarray:
        return np.full(len(ages), 900.0) if name == "slow" else ages

    assert paid_completions(state, 1000.0, means, rest) == 4 + 17 + 34
    assert expected_left(state, 1000.0, means, rest) == 100 - 55


def test_a_running_task_that_outlasts_the_paid_time_counts_for_nothing() -> None:
    """Expected to take 5000 s in all, it cannot end before the machine's time is up."""
    state = fresh()
    up(state, "slow", "a", 0.0)
    state.apply(200.0, Assign(0, "a"))

    def long_rest(_: str, ages: np.ndarray) -> np.ndarray:
        return np.full(len(ages), 5000.0)

    assert paid_completions(state, 1000.0, {"slow": 600.0}, long_rest) == 0


def test_types_without_an_estimate_count_for_nothing() -> None:
    state = fresh()
    up(state, "slow", "a", 0.0)
    assert paid_completions(state, 1000.0, {"fast": 200.0}, no_rest) == 0


def test_potential_counts_whole_units_the_money_left_pays_for() -> None:
    """Committed: slow a (1) + fast b, c (4 each) + a launch of 1 fast (4) = 13.

    Budget 20, c marked: the mix kept (a, b, the launch) costs 9 per unit and 7 is left:
    no whole unit of the mix, but a and b's paid time ends at 3600, before the launch's
    (launched at 10: 3610), and 7 pays their next units (1 + 4), not the launch's too:
    N_p = 5.75 + 17.75. Budget 34, c kept: 13 per unit, 21 left: one unit of 3600 s,
    in which each machine does 3600/T − ¼ (the final-unit loss, no spread): 5.75 on
    slow, 17.75 on each of the three fast; the 8 over pays no second unit of a, b and
    c together (9), which end together. Budget 35: 9 over pays it (they end before the
    launch): 11.75 on a and 35.75 on b and c.
    """
    state = fresh(budget=20.0)
    up(state, "slow", "a", 0.0)
    up(state, "fast", "b", 0.0)
    up(state, "fast", "c", 0.0)
    state.apply(10.0, Mark("c", release=True))
    state.apply(10.0, Launch("fast", 1, "L3"))
    assert state.money.committed == pytest.approx(13.0)
    means, sds = {"slow": 600.0, "fast": 200.0}, {"slow": 0.0, "fast": 0.0}
    # left 7 < 9 per unit: a and b's next units only
    assert potential(state, means, sds) == pytest.approx(5.75 + 17.75)
    state.apply(10.0, Mark("c", release=False))  # kept again: 13 per unit, still none
    state.money.budget = 34.0  # left 21: one whole unit of the 13-per-unit mix
    assert potential(state, means, sds) == pytest.approx(5.75 + 3 * 17.75)
    state.money.budget = 35.0
    assert potential(state, means, sds) == pytest.approx(11.75 + 2 * 35.75 + 17.75)


def test_potential_of_machines_paid_to_the_same_end_counts_whole_units_of_the_mix() -> None:
    """a (slow, $1) and b (fast, $4) paid to 3600; budget 13, 5 committed: 8 pays one
    unit of both (5) and 3 of the next (1 of a, not b's 4): they end together, so
    neither gets a second (paper 000 §2.2's whole units): 5.75 + 17.75."""
    state = fresh(budget=13.0)
    up(state, "slow", "a", 0.0)
    up(state, "fast", "b", 0.0)
    means, sds = {"slow": 600.0, "fast": 200.0}, {"slow": 0.0, "fast": 0.0}
    assert potential(state, means, sds) == pytest.approx(5.75 + 17.75)
    state.money.budget = 9.0  # 4 left: no unit of both
    assert potential(state, means, sds) == 0.0


def test_potential_pays_first_the_next_units_of_machines_whose_paid_time_ends_first() -> None:
    """The issue 38 case: sampling machines paid to 3600 and extended to 7200, machines
    launched after sampling (booting) paid to their first step's end, 3600 after launch.
    a (fast) launched at 0 and extended to 7200 ($8 committed), b (fast) launched at
    2000 (to 5600, $4); budget 16: 4 left pays b's next unit, not a whole unit of both
    (8): b does 3600/200 − ¼ = 17.75 more. Before, N_p was 0 and the monitor let b go
    at the end of a first step its boot had half eaten."""
    state = fresh(budget=16.0)
    up(state, "fast", "a", 0.0)
    up(state, "fast", "b", 2000.0)
    state.apply(3500.0, Extend("a", 7200.0))
    assert state.money.committed == pytest.approx(12.0)
    means, sds = {"slow": 600.0, "fast": 200.0}, {"slow": 0.0, "fast": 0.0}
    assert potential(state, means, sds) == pytest.approx(17.75)


def test_potential_under_per_second_billing_uses_fractional_units() -> None:
    state = RunState.new(
        [SLOW], BillingModel("per_second", 3600.0, min_charge_s=60.0, commit_s=300.0), 2.0, 10,
        list(range(10)),
    )  # fmt: skip
    up(state, "slow", "a", 0.0)
    left = 2.0 - state.money.committed  # 2 − 300/3600
    expected = left * 3600 / 600 - 0.25
    assert potential(state, {"slow": 600.0}, {"slow": 0.0}) == pytest.approx(expected)


def test_forecast_of_one_machine_is_the_work_left_and_its_paid_units() -> None:
    """One slow machine ready at 100 with 10 tasks of 600 s: the fluid end is
    100 + 6000 = 6100 (with no ragged end); it lives 6100 s: 2 units of 1 = 2."""
    state = fresh(budget=50.0, n_tasks=10)
    up(state, "slow", "a", 0.0)
    f = forecast(state, 100.0, {"slow": 1}, {"slow": 600.0})
    assert f.end_s == pytest.approx(6100.0)
    assert f.cost == pytest.approx(2.0)


def test_forecast_counts_the_work_of_machines_that_leave_and_caps_cost_at_the_budget() -> None:
    """Two slow machines, one marked (paid to 3600, it does (3600 − 100)/600 tasks'
    worth before it goes); 10 tasks of 600 s: the one kept does the rest."""
    state = fresh(budget=3.0, n_tasks=10)
    up(state, "slow", "a", 0.0)
    up(state, "slow", "b", 0.0)
    state.apply(100.0, Mark("b", release=True))
    f = forecast(state, 100.0, {"slow": 1}, {"slow": 600.0})
    leaving = 3500.0 / 600.0
    assert f.end_s == pytest.approx(100.0 + (10 - leaving) * 600.0)
    # a lives to ~2600 s: 1 unit; b its one paid unit: 2 in all
    assert f.cost == pytest.approx(2.0)
    state.apply(100.0, Extend("a", 7200.0))
    assert forecast(state, 100.0, {"slow": 1}, {"slow": 60000.0}).cost == pytest.approx(3.0)
