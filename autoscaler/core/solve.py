"""Solving a PuLP model: HiGHS in-process (highspy), CBC as PuLP's bundled fallback.

Both planners (budget, paper 000; deadline, paper 002) solve through ``solve_lp``, which
says what each solver status means to a planner (``classify_status``) and retries with
CBC when HiGHS gives no usable answer.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Literal

import pulp

from autoscaler.core.errors import AutoscalerError

Solver = Literal["highs", "cbc"]

SolveOutcome = Literal["optimal", "feasible", "infeasible", "failed"]
"""What one solve means to the planner (``classify_status``)."""


class PlannerError(AutoscalerError):
    code = "PlannerError"


def classify_status(status: int, sol_status: int) -> SolveOutcome:
    """What a PuLP solve's (status, solution status) pair means to the planner.

    PuLP's status alone is not enough: a solver stopped by a time or iteration limit
    with an incumbent reports status Optimal with solution status "Solution Found"
    (HiGHS's kTimeLimit, kIterationLimit, kInterrupt, kObjectiveBound and
    kObjectiveTarget in ``pulp.apis.highs_api``; CBC's "Stopped on time - objective
    value" in ``pulp.apis.coin_api``), and Not Solved when it found none. HiGHS's
    kUnboundedOrInfeasible comes back as Infeasible.

    * ``optimal``: proven optimal;
    * ``feasible``: a feasible solution not proven optimal: usable, and noted;
    * ``infeasible``: the normal answer for a k or horizon too short, or a budget too
      small;
    * ``failed``: no usable answer: Not Solved, Unbounded (every variable here is
      bounded, so it means a broken model), Undefined, or Optimal without a solution.
    """
    if status == pulp.LpStatusInfeasible:
        return "infeasible"
    if status == pulp.LpStatusOptimal:
        if sol_status == pulp.LpSolutionOptimal:
            return "optimal"
        if sol_status == pulp.LpSolutionIntegerFeasible:
            return "feasible"
    return "failed"


def describe_status(status: int, sol_status: int) -> str:
    """PuLP's names for both statuses, e.g. ``Optimal (Solution Found)``."""
    return f"{pulp.LpStatus.get(status, status)} ({pulp.LpSolution.get(sol_status, sol_status)})"


@dataclass(frozen=True, slots=True)
class Solved:
    outcome: SolveOutcome
    note: str | None = None  # set when some solve was neither Optimal nor Infeasible


def solve_lp(
    lp: pulp.LpProblem,
    name: Solver,
    label: str,
    time_limit_s: float | None,
    *,
    jump: bool = True,
    preprocess: bool = True,
) -> Solved:
    """Solve with the chosen solver; retry with CBC when HiGHS is missing or gives no
    usable answer (a HiGHS solution not proven optimal is kept: CBC under the same time
    limit is unlikely to do better, and the retry would overwrite it).

    ``jump=False``: HiGHS without its feasibility-jump heuristic, which it runs at the
    root of every MILP. The budget planner's MILPs (a few integer machine counts, solved
    by the thousand) are settled at the root without it, and it cost more than the rest
    of each solve: a 6-variable MILP 71 → 44 ms of CPU, the least-budget tests of
    ``category_mix`` 45.9 → 15.4 s, with the same plans (BaTS scenarios, 100k-task
    digest). The deadline planner's larger MILPs keep it: their equal-cost optima fell
    differently without it, and two tests of deadline runs moved.

    ``preprocess=False``: CBC without its integer preprocessing (CglPreProcess), which
    declares some feasible MILPs infeasible (coin-or/Cbc #466, #737, #740, #747): the
    budget planner's k=9 MILP of ``test_planner``'s HiGHS/CBC example, whose only mix
    costs exactly the budget, came back infeasible and CBC planned 13 units where HiGHS
    planned 9. The budget planner's MILPs are too small for preprocessing to help."""
    first = ""
    if name == "highs":
        try:
            lp.solve(_solver("highs", time_limit_s, jump))
        except pulp.PulpSolverError as error:
            first = f"HiGHS failed ({error})"
        else:
            outcome = classify_status(lp.status, lp.sol_status)
            status = describe_status(lp.status, lp.sol_status)
            if outcome in ("optimal", "infeasible"):
                return Solved(outcome)
            if outcome == "feasible":
                return Solved(outcome, f"{label}: HiGHS status {status}")
            first = f"HiGHS status {status}"
    try:
        _solve_cbc(lp, time_limit_s, preprocess)
    except pulp.PulpSolverError as error:
        raise PlannerError(
            f"{label}: {first + ', ' if first else ''}CBC failed: {error}"
        ) from error
    outcome = classify_status(lp.status, lp.sol_status)
    status = describe_status(lp.status, lp.sol_status)
    if first:
        return Solved(outcome, f"{label}: {first}, retried with CBC: {status}")
    if outcome in ("optimal", "infeasible"):
        return Solved(outcome)
    return Solved(outcome, f"{label}: CBC status {status}")


def _solve_cbc(lp: pulp.LpProblem, time_limit_s: float | None, preprocess: bool) -> None:
    """CBC, without preprocessing when asked, and with it when that run fails: the bundled
    CBC 2.10.3 without preprocessing crashes (SIGSEGV) writing the solution of a MILP it
    has proven infeasible by tightening bounds, which the run with it then reports. (PuLP
    leaves a crashed run's files in the temporary directory; this pure room opens no
    directory of its own to hold them.)"""
    if not preprocess:
        try:
            lp.solve(_solver("cbc", time_limit_s, preprocess=False))
        except pulp.PulpSolverError:
            pass
        else:
            return
    lp.solve(_solver("cbc", time_limit_s))


def _solver(
    name: Solver, time_limit_s: float | None, jump: bool = True, preprocess: bool = True
) -> pulp.LpSolver:
    # The default relative MIP gaps (1e-4) would let a slightly slower mix count as optimal.
    # One thread: the planners' MILPs are small (a few to a few thousand variables) and
    # solved by the thousand; HiGHS's default worker threads spin for work they rarely get
    # and cost about a quarter more CPU on the same answers. HiGHS fixes its thread count
    # at a process's first solve, so every solve asks for the same one.
    if name == "highs":
        return pulp.HiGHS(
            msg=False,
            gapRel=1e-9,
            timeLimit=time_limit_s,
            threads=1,
            mip_heuristic_run_feasibility_jump=jump,
        )
    with warnings.catch_warnings():  # PuLP 3.3 deprecates its bundled CBC for 4.0
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(
            msg=False,
            gapRel=1e-9,
            timeLimit=time_limit_s,
            options=[] if preprocess else ["preprocess off"],
        )
