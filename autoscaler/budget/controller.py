"""The decision core: ``Controller.step(state, events, now) -> actions``.

No clock, no I/O: the emulator and the daemon feed it events and carry out the actions
it returns. The controller never writes the state itself: a step applies its events
(``RunState.apply`` at the step's ``now``), then decides, applying each action as it is
decided. That is the order a driver journals them in (events, then actions), so a
replayed journal is the state the run had, and the state the next step sees. It reasons
at the step's ``now``, which is also the state's time once anything was applied.

Two policies share the machinery:

* ``bats`` (paper 000): sample every type with iw = min(N/10, n) machines, plan the
  fastest affordable mix once the samples are in, monitor N_e against N_p every
  monitoring interval and re-plan on a violation (or when a re-plan is clearly faster),
  release machines just before the end of a paid unit, and replicate slow tasks on idle
  paid machines once the bag is empty (slides 001, tail phase).
* ``round_robin`` (paper 000 §3): every machine from the start, tasks in FCFS order,
  oblivious of cost.

Money: a machine is committed one step (an ATU, or ``commit_s`` under per-second
billing) at a time, and only when ``committed + step ≤ budget``. The driver delivers
``BoundaryNear`` before the end of a machine's committed time; the controller either
extends it or releases it then.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Literal

from autoscaler.budget.estimate import (
    AffineFit,
    RuntimeEstimate,
    RuntimeStats,
    derived_estimate,
    fit_affine,
    initial_workers,
    mapped_stats,
    ragged_end,
    sample_size,
)
from autoscaler.budget.frontier import minimum_budget
from autoscaler.budget.outlook import expected_left, forecast, potential
from autoscaler.budget.planner import BudgetProblem, Plan, TypeEstimate, solve_budget
from autoscaler.core.model import (
    Action,
    Assign,
    BoundaryNear,
    BudgetSet,
    Cancel,
    Configure,
    Defer,
    Event,
    Extend,
    Hold,
    Launch,
    LaunchFailed,
    MachineLost,
    Mark,
    Release,
    Replicate,
    Resumed,
    Shortfall,
    Shutdown,
    Stop,
    TaskDone,
    TaskState,
    Tick,
)
from autoscaler.core.solve import Solver
from autoscaler.core.state import Machine, RunState
from autoscaler.core.step import Step

_EPS = 1e-6
_EARLY_CHECK = 5  # completions per type before an early "budget insufficient" is trusted


@dataclass(frozen=True, slots=True)
class ControllerSettings:
    policy: Literal["bats", "round_robin"] = "bats"
    z: float = 1.96
    delta: float = 0.25
    solver: Solver = "highs"
    cushion_z: float = 0.0  # spread cushion: plan m tasks per machine only if m·T + z·√m·σ fit
    final_loss: float = 0.25  # tasks per machine lost at the end of its last unit
    tail_replication: bool = True
    improve_ratio: float = 1.05  # adopt an unforced re-plan only if this much faster...
    improve_reserve: float = 0.1  # ...and still affordable with this share of money kept back
    leap_ratio: float = 1.5  # a re-plan this much faster is adopted on the full budget
    confidence_z: float = 1.96  # intervals of predictions; "the budget is too small" too
    on_shortfall: Literal["continue", "stop"] = "continue"  # when the budget cannot finish
    reserve_z: float = 1.0  # plan on T_i + z·σ_i/√n: money kept back for a slower bag
    reserve_cost: float = 0.1  # ...unless that reserve makes the plan this much slower
    hold_after_sampling: bool = False  # `autoscaler plan`: Hold once the samples are in
    sampling_mode: Literal["plain", "compact"] = "plain"  # compact: slides 001 (see below)


class Controller:
    """Budget-aware bag-of-tasks controller. Holds settings only; all state is passed in."""

    def __init__(self, settings: ControllerSettings | None = None):
        self.settings = settings or ControllerSettings()

    # --- the one entry point ----------------------------------------------------------

    def step(self, state: RunState, events: Iterable[Event], now: float) -> list[Action]:
        s = Step(state, now)
        touched: set[str] = set()
        boundaries: list[str] = []
        tick = False
        lost = False
        unavailable: list[str] = []
        budget_set: BudgetSet | None = None
        resumed: Resumed | None = None
        first: list[Action] = []  # decided while reading the events, applied after them
        for event in events:
            others: list[str] = []
            if isinstance(event, TaskDone) and event.task not in state.paired_runs:
                others = [m for m in state.running_on.get(event.task, {}) if m != event.machine]
            s.feed(event)
            match event:
                case Tick():
                    tick = True
                case BoundaryNear(machine=mid):
                    boundaries.append(mid)
                case TaskDone(task=tid, machine=mid):
                    touched.add(mid)
                    first.extend(Cancel(tid, m, "another run finished first") for m in others)
                case LaunchFailed(kind="capacity", type=tname):
                    lost = True
                    unavailable.append(tname)
                case MachineLost() | LaunchFailed():
                    lost = True
                case Shutdown(reason=reason):
                    if not state.stopped and not any(isinstance(a, Stop) for a in first):
                        first.append(Stop(reason))
                case BudgetSet():
                    budget_set = event
                case Resumed():  # after an interruption: every machine is gone
                    resumed = event
                    lost = True
                case _:
                    machine = getattr(event, "machine", None)
                    if isinstance(machine, str):
                        touched.add(machine)
        for action in first:
            s.do(action)

        if state.shutdown:
            for m in list(state.alive_machines()):
                s.do(Release(m.id, "shutdown"))
            return s.actions
        if not state.machines and not state.pending_launches and not state.configurations:
            self._start(s)
        for mid in boundaries:
            self._boundary(s, state.machines[mid])
        if self.settings.policy == "bats" and not state.stopped:
            replanned = self._monitor(s, tick)
            news = budget_set is not None or resumed is not None
            if news and not replanned and self._planned(state):
                est, n_e = self._outlook(s)
                if budget_set is not None:
                    why = f"budget set to {budget_set.budget:.2f}: {budget_set.reason}"
                else:
                    why = f"resumed: {resumed.reason}" if resumed else ""
                replanned = self._replan(s, est, n_e, why, force=True)
            if unavailable and not replanned and self._planned(state):
                est, n_e = self._outlook(s)
                why = f"{', '.join(sorted(set(unavailable)))} unavailable: plan without it"
                replanned = self._replan(s, est, n_e, why, force=True)
            if replanned or lost or (tick and state.deferred):
                self._meet_target(s)
        elif tick and state.deferred and not state.stopped:
            self._meet_target(s)
        requeued = bool(state.pending) and any(isinstance(a, Release) for a in s.actions)
        if tick or lost or requeued or any(isinstance(a, Configure | Launch) for a in s.actions):
            touched = {m.id for m in state.alive_machines()}
        else:
            touched.update(a.machine for a in s.actions if isinstance(a, Cancel | Extend))
        self._dispatch(s, touched)
        self._finish_or_stall(s)
        return s.actions

    # --- for ``autoscaler plan``: the outlook and a prediction, without deciding ------------

    def outlook(self, state: RunState, now: float) -> tuple[dict[str, TypeEstimate], float]:
        """T_i per sampled type and N_e at ``now``; changes nothing."""
        return self._outlook(Step(state, now))

    def budget_problem(
        self, state: RunState, now: float, est: dict[str, TypeEstimate], n_e: float, money: float
    ) -> BudgetProblem:
        """The budget problem the planner would solve at ``now`` with ``money`` left, on
        the reserved runtimes (``_reserved``)."""
        return BudgetProblem(
            tasks=n_e,
            budget=money,
            types=self._launchable(state, now, self._reserved(state, est)),
            billing=state.billing,
            cushion_z=self.settings.cushion_z,
            final_loss=self.settings.final_loss,
        )

    def predict(
        self,
        state: RunState,
        now: float,
        counts: dict[str, int],
        est: dict[str, TypeEstimate],
        budget: float | None = None,
    ) -> Configure:
        """The configuration ``counts`` with its prediction, as a plan would issue it,
        under ``budget`` (the run's whole budget; None: the state's)."""
        return self._configure(Step(state, now), counts, est, "a budget option", budget)

    # --- starting -----------------------------------------------------------------------

    def _start(self, s: Step) -> None:
        state = s.state
        if self.settings.policy == "round_robin":
            counts = {name: t.max_count for name, t in state.types.items()}
            s.do(Configure(counts, None, None, "round robin: every machine"))
            self._meet_target(s)
            return
        s.do(self.sampling(state))
        self._meet_target(s)

    def sampling(self, state: RunState) -> Configure:
        """The sampling configuration a fresh run starts with (pure)."""
        n = sample_size(state.n_tasks, self.settings.z, self.settings.delta)
        iw = initial_workers(state.n_tasks, n)
        aim = dict.fromkeys(state.types, iw)
        if self._compact(state):
            # Only the reference samples n tasks; the others run the replicated ones.
            ref = self.reference(state)
            aim = {name: iw if name == ref else min(iw, state.paired_target) for name in aim}
        wanted = {name: min(aim[name], t.max_count) for name, t in state.types.items()}
        short = any(wanted[name] < aim[name] for name in aim)
        counts = self._affordable_sampling(state, dict(wanted))
        caps = [
            why
            for why, capped in (
                ("max_count", short),
                ("budget", counts != wanted),
            )
            if capped
        ]
        reason = f"sampling: n={n}, iw={iw}"
        if self._compact(state):
            reason = (
                f"compact sampling: n={n} on {self.reference(state)}, iw={iw}; "
                f"{state.paired_target} tasks replicated on every type"
            )
        if caps:
            started = ", ".join(f"{name} {c}" for name, c in counts.items())
            reason += f", capped by {' and '.join(caps)}: {started}"
        return Configure(counts, None, None, reason)

    @staticmethod
    def _affordable_sampling(state: RunState, counts: dict[str, int]) -> dict[str, int]:
        """Shrink the sampling configuration until one step of it fits the budget."""
        if state.budget is None:
            return counts
        first = state.billing.first_step_s
        price = {n: state.billing.cost(t.price, first) for n, t in state.types.items()}

        def cost() -> float:
            return sum(c * price[n] for n, c in counts.items())

        while cost() > state.budget + _EPS:
            # Take one machine from the type with the most; drop the dearest types last.
            name = max(counts, key=lambda n: (counts[n] > 1, counts[n], price[n]))
            counts[name] -= 1
        return counts

    # --- compact sampling (slides 001) -----------------------------------------------------
    #
    # The first ``state.paired_target`` tasks assigned run on every type (their runs are
    # counted on each type and never cancelled when another ends: ``RunState``). The
    # reference type runs the rest of the sample set of n; each other type's runtimes
    # are the reference's mapped through g(x) = a·x + b, fitted by least squares on the
    # pairs, until the type has seen n runs of its own. Its machines (k of them) are
    # released at the end of their paid time once they have their replicated tasks,
    # unless the first plan wants them.

    def _compact(self, state: RunState) -> bool:
        return (
            self.settings.policy == "bats"
            and self.settings.sampling_mode == "compact"
            and state.paired_target > 0
            and len(state.types) > 1
        )

    def reference(self, state: RunState) -> str:
        """The type that samples the rest of the sample set: the one that can start the
        most of the iw sampling machines (the sample of n is in soonest), then the
        cheapest (iw machines of it are most of the sampling cost), then by name.
        Runtimes are unknown before sampling, so the price per task cannot choose."""
        n = sample_size(state.n_tasks, self.settings.z, self.settings.delta)
        iw = initial_workers(state.n_tasks, n)
        best = min(state.types.values(), key=lambda t: (-min(iw, t.max_count), t.price, t.name))
        return best.name

    def fit(self, state: RunState, name: str) -> AffineFit | None:
        """g for ``name`` against the reference, on the replicated tasks done on both."""
        ref = self.reference(state)
        runs = (state.paired_runs[tid] for tid in state.paired)
        return fit_affine((r[ref], r[name]) for r in runs if ref in r and name in r)

    def _derived(self, state: RunState, name: str) -> tuple[AffineFit, RuntimeStats] | None:
        """The fit and the mapped reference runs ``name``'s estimates come from, or None
        when they come from its own runs: plain sampling, the reference itself, a type
        with n runs of its own, or no fit yet."""
        if not self._compact(state):
            return None
        ref = self.reference(state)
        base = state.stats[ref]
        if name == ref or state.stats[name].done >= base.sample_target or base.done == 0:
            return None
        fit = self.fit(state, name)
        if fit is None:
            return None
        return fit, mapped_stats(base, fit)

    def _stats(self, state: RunState, name: str) -> RuntimeStats:
        """The runs ``name``'s runtimes are judged by: its own, or the reference's mapped."""
        derived = self._derived(state, name)
        return state.stats[name] if derived is None else derived[1]

    def _estimate(
        self,
        state: RunState,
        name: str,
        ages: dict[str, list[float]],
        z: float = 1.96,
        resamples: int | None = None,
    ) -> RuntimeEstimate:
        """T_i with its spread and interval; running tasks counted as censored at their
        age (for a derived type, the reference's running tasks at their mapped age)."""
        derived = self._derived(state, name)
        if derived is None:
            if resamples is None:
                return state.stats[name].estimate(ages.get(name, ()), z=z)
            return state.stats[name].estimate(ages.get(name, ()), z=z, resamples=resamples)
        fit, mapped = derived
        ref_ages = ages.get(self.reference(state), [])
        ref_mean = state.stats[self.reference(state)].estimate(ref_ages, resamples=0).mean_s
        mapped_ages = [max(1.0, fit(a)) for a in ref_ages]
        if resamples is None:
            return derived_estimate(mapped, fit, ref_mean, mapped_ages, z)
        return derived_estimate(mapped, fit, ref_mean, mapped_ages, z, resamples)

    def _n_eff(self, state: RunState, name: str, e: TypeEstimate) -> float:
        """The runs T_i's standard error σ_i/√n stands on: the runs seen to end, or for
        a derived type the n for which σ_i/√n is the error of a·T_ref + b (the
        reference's mean's error times a, and the fitted line's, in quadrature)."""
        derived = self._derived(state, name)
        if derived is None:
            return max(1, state.stats[name].done)
        fit, _ = derived
        base = state.stats[self.reference(state)]
        se_ref = base.stddev() / math.sqrt(max(1, base.done))
        var = (fit.a * se_ref) ** 2 + fit.line_var(base.mean())
        return max(1.0, e.sd_s**2 / var) if var > 0 else float(max(1, base.done))

    def _compact_progress(self, s: Step) -> tuple[bool, list[str]]:
        """Whether compact sampling is complete, and the types it samples: the reference
        has its sample set (as ``RuntimeStats.sampled``), every other type has ended its
        runs of the replicated tasks (or has no machine left to run them on)."""
        state = s.state
        ref = self.reference(state)
        first = state.configurations[0][1].counts
        sampling = [
            n
            for n, c in first.items()
            if c > 0 and (state.available(n, s.now) or state.count_alive(n) > 0)
        ]
        if ref not in sampling or not state.stats[ref].sampled:
            return False, sampling
        if len(state.paired) < state.paired_target:
            return False, sampling
        for name in sampling:
            stats = state.stats[name]
            open_ = any(t not in stats.sample or t in stats.sample_open for t in state.paired)
            if name != ref and open_ and state.count_alive(name) > 0:
                return False, sampling
        return True, sampling

    def _probe(self, s: Step, m: Machine) -> bool:
        """Compact sampling: give idle ``m`` a replicated task its type has not run yet
        (the first ``paired_target`` tasks assigned become them). A type other than the
        reference that has them all is sampled: its target drops to 0, so its machines
        go at the end of their paid time (draining meanwhile), unless a plan wants them."""
        state = s.state
        name = m.type.name
        ref = self.reference(state)
        queued = {t for x in state.alive_machines() if x.type.name == name for t in x.queue}
        for tid in state.paired:
            if tid in state.stats[name].sample or tid in queued:
                continue
            if state.task_state[tid] is TaskState.PENDING:
                s.do(Assign(tid, m.id))
                return True
            if state.task_state[tid] is TaskState.DONE or state.task_state[tid] is (
                TaskState.RUNNING
            ):
                s.do(Replicate(tid, m.id))
                return True
        if name == ref:
            return False
        if len(state.paired) < state.paired_target:
            if state.pending:
                s.do(Assign(state.pending[0], m.id))
                return True
            return False
        if state.target.get(name, 0) > 0:
            counts = {**state.target, name: 0}
            why = (
                f"compact sampling: {name} has its {state.paired_target} replicated tasks; "
                "its machines go at the end of their paid time"
            )
            s.do(Configure(counts, None, None, why))
            self._meet_target(s)
        return False

    # --- money at the end of a paid unit --------------------------------------------------

    def _can_extend(self, state: RunState, m: Machine) -> bool:
        if state.awaiting_budget:
            return False
        if state.budget is None:
            return True
        extra = state.billing.extension_cost(m.type.price, m.launched_at, m.paid_until)
        return state.committed + extra <= state.budget + _EPS

    def _probing(self, state: RunState, m: Machine) -> bool:
        """Whether ``m`` runs a replicated task's counted run during compact sampling."""
        return (
            bool(state.paired_runs)
            and not state.stopped
            and not self._planned(state)
            and any(
                t in state.paired_runs and m.type.name not in state.paired_runs[t]
                for t in m.running
            )
        )

    def _boundary(self, s: Step, m: Machine) -> None:
        state = s.state
        margin = state.billing.boundary_margin_s()
        if not m.alive or m.paid_until - s.now > margin + _EPS:
            return  # gone already, or extended since this event was scheduled
        has_work = bool(m.running or m.queue)
        only_replicas = has_work and all(
            len(state.running_on.get(t, {})) > 1 for t in (*m.running, *m.queue)
        )
        if self._probing(state, m) and self._can_extend(state, m):
            s.do(Extend(m.id, m.paid_until + state.billing.step_s))  # a pair is not cut off
        elif state.stopped or m.marked:
            s.do(
                Release(
                    m.id, "end of paid time: " + ("run stopping" if state.stopped else "marked")
                )
            )
        elif not has_work and not state.pending:
            s.do(Release(m.id, "end of paid time: no work left"))
        elif only_replicas and not state.pending:
            s.do(Release(m.id, "end of paid time: only replicas left"))
        elif self._can_extend(state, m):
            s.do(Extend(m.id, m.paid_until + state.billing.step_s))
        elif state.awaiting_budget:
            s.do(Release(m.id, "end of paid time: the run waits for a budget"))
        else:
            s.do(Release(m.id, "end of paid time: budget cannot pay another unit"))

    # --- monitoring and planning (paper 000 §2.2) ---------------------------------------------

    def _sampled_types(self, state: RunState) -> list[str]:
        return [
            name
            for name in state.types
            if state.stats[name].done > 0
            and any(m.type.name == name for m in state.machines.values())
        ]

    @staticmethod
    def _running_ages(state: RunState, now: float) -> dict[str, list[float]]:
        """Ages of the counted runs going on, per type (replicas are not counted)."""
        ages: dict[str, list[float]] = {}
        for m in state.alive_machines():
            for tid, start in m.running.items():
                if tid not in m.replicas:
                    ages.setdefault(m.type.name, []).append(now - start)
        return ages

    def _estimates(self, state: RunState, now: float) -> dict[str, TypeEstimate]:
        """T_i per type with samples: ended runs, and running ones censored at their age."""
        ages = self._running_ages(state, now)
        billing = state.billing
        usable = billing.first_step_s - billing.boundary_margin_s()
        out: dict[str, TypeEstimate] = {}
        for name in self._sampled_types(state):
            t = state.types[name]
            e = self._estimate(state, name, ages, resamples=0)
            out[name] = TypeEstimate(
                name=name,
                price=t.price,
                max_count=t.max_count,
                boot_s=t.boot_s,
                mean_s=e.mean_s,
                sd_s=e.sd_s,
                live=state.count_alive(name),
                first_cost=billing.cost(t.price, billing.first_step_s),
                first_tasks=max(0, math.floor((usable - t.boot_s) / e.mean_s)),
            )
        return out

    def _intervals(
        self, state: RunState, now: float, names: Iterable[str]
    ) -> dict[str, RuntimeEstimate]:
        """Each type's mean runtime with its bootstrap interval (only when a plan is made)."""
        ages = self._running_ages(state, now)
        z = self.settings.confidence_z
        return {n: self._estimate(state, n, ages, z=z) for n in names}

    def _monitor(self, s: Step, tick: bool) -> bool:
        """Check the plan; re-plan when needed. Returns True when the target changed."""
        state = s.state
        if state.awaiting_budget:
            return False
        if not self._planned(state):
            if self._compact(state):
                ready, sampling = self._compact_progress(s)
            else:
                sampling = [
                    n
                    for n, c in state.configurations[-1][1].counts.items()
                    if c > 0 and (state.available(n, s.now) or state.count_alive(n) > 0)
                ]
                ready = bool(sampling) and all(state.stats[n].sampled for n in sampling)
            if ready:
                if self.settings.hold_after_sampling:
                    s.do(Hold("samples complete: the run waits for a budget"))
                    return False
                est, n_e = self._outlook(s)
                return self._replan(s, est, n_e, "plan after sampling", force=True)
            if (
                tick
                and sampling
                and not self.settings.hold_after_sampling  # planning: any budget may come
                and not state.shortfalls
                and all(self._stats(state, n).done >= _EARLY_CHECK for n in sampling)
            ):
                # Before the samples are complete, warn only if even the optimistic
                # reading of what is known says the budget cannot finish the bag.
                est, n_e = self._outlook(s)
                self._shortfall(s, est, n_e, optimistic=True)
            return False
        if not tick or state.finished:
            return False
        est, n_e = self._outlook(s)
        if not est:
            return False
        n_p = potential(
            state,
            {n: e.mean_s for n, e in est.items()},
            {n: e.sd_s for n, e in est.items()},
            self.settings.cushion_z,
            self.settings.final_loss,
        )
        if n_p < n_e - self._noise(state, est, n_e):
            why = f"N_p={n_p:.0f} < N_e={n_e:.0f}"
            return self._replan(s, est, n_e, why, force=True, shrink=True)
        moved = self._left_assumed(state, est)
        if moved is not None and state.pending:
            return self._replan(s, est, n_e, moved, force=True, refresh=True)
        return self._replan(s, est, n_e, "faster mix affordable", force=False)

    def _noise(self, state: RunState, est: dict[str, TypeEstimate], n_e: float) -> float:
        """How far N_p may fall below N_e by the estimates' noise alone: N_e times the
        largest relative standard error of a mean runtime (σ_i/T_i/√n_i). A shortfall
        within it does not force a re-plan (that would trade a plan made to spend the
        budget exactly for a much slower one, over a few tasks the next estimate may
        give back); the end reserve pays for what is left of it."""
        worst = max(
            (e.sd_s / e.mean_s / math.sqrt(self._n_eff(state, n, e)) for n, e in est.items()),
            default=0.0,
        )
        return n_e * worst

    @staticmethod
    def _left_assumed(state: RunState, est: dict[str, TypeEstimate]) -> str | None:
        """Which estimate has left the interval the current plan assumed, if any."""
        plan = state.plan()
        if plan is None:
            return None
        for name, e in sorted(est.items()):
            lo, hi = plan.assumed_lo_s.get(name), plan.assumed_hi_s.get(name)
            if lo is not None and hi is not None and not lo <= e.mean_s <= hi:
                return (
                    f"estimate left the plan's interval: {name} {e.mean_s:.0f} s "
                    f"outside [{lo:.0f}, {hi:.0f}]"
                )
        return None

    def _outlook(self, s: Step) -> tuple[dict[str, TypeEstimate], float]:
        """T_i per type and N_e, the tasks left once the time already paid is used."""
        state = s.state
        est = self._estimates(state, s.now)
        n_e = expected_left(
            state,
            s.now,
            {n: e.mean_s for n, e in est.items()},
            lambda name, age: self._stats(state, name).tail_estimate(age),
        )
        return est, n_e

    @staticmethod
    def end_reserve(state: RunState, est: dict[str, TypeEstimate]) -> float:
        """Money a plan leaves unspent for the end of the bag: one more step for one
        machine of each type with an estimate. The last tasks of a skewed bag run long;
        the machine that has one may then extend, because the plan did not spend it."""
        if state.budget is None:
            return 0.0
        billing = state.billing
        return sum(billing.cost(e.price, billing.step_s) for e in est.values())

    def _reserved(self, state: RunState, est: dict[str, TypeEstimate]) -> dict[str, TypeEstimate]:
        """The estimates a plan is made on: each mean raised by ``reserve_z`` standard
        errors (σ_i/√n_i, n_i the runtimes seen to end). The plan then pays for a bag
        somewhat slower than the estimate, and what it does not need is the reserve for
        the end of the bag: it shrinks as the estimates firm up, and the monitor spends
        it (a faster mix) once it is clearly not needed."""
        z = self.settings.reserve_z
        if z <= 0:
            return est
        usable = state.billing.first_step_s - state.billing.boundary_margin_s()
        out = {}
        for name, e in est.items():
            mean = e.mean_s + z * e.sd_s / math.sqrt(self._n_eff(state, name, e))
            first = max(0, math.floor((usable - e.boot_s) / mean))
            out[name] = replace(e, mean_s=mean, first_tasks=first)
        return out

    @staticmethod
    def _money_left(state: RunState) -> float:
        return math.inf if state.budget is None else state.budget - state.committed

    def _replan(
        self,
        s: Step,
        est: dict[str, TypeEstimate],
        n_e: float,
        reason: str,
        force: bool,
        refresh: bool = False,
        shrink: bool = False,
    ) -> bool:
        """Solve the budget problem for what is left; adopt the result if it is needed.

        ``force`` (first plan, or N_p < N_e) adopts whatever the planner finds. Otherwise
        a plan is adopted when it is ``leap_ratio`` faster than the current mix (a plan
        made on pessimistic samples is left as soon as the estimates recover), or
        ``improve_ratio`` faster and still affordable with ``improve_reserve`` of the
        money kept back (small gains must not chase noise). ``refresh`` issues the
        configuration even when the counts stay, so its prediction is renewed.
        ``shrink`` (N_p < N_e: the machines kept cost more than the money left pays)
        first looks for a mix of the machines alive, launching none, and takes it if
        it finishes the bag within budget: a new machine pays a whole first step, and
        on types that differ by noise alone the planner would trade machines back and
        forth on every small move of the estimates.
        """
        state = s.state
        if not est:
            return False
        first = not self._planned(state)
        current = {name: state.count_alive(name, include_marked=False) for name in state.types}
        speed_now = sum(current[n] / e.mean_s for n, e in est.items())
        budget = self._money_left(state)
        plan: Plan | None
        notes: list[str] = []
        if n_e <= 0:
            plan = Plan(counts=current, units=0, speed=speed_now, cost=0.0)
            reason += "; time already paid covers the bag"
        else:
            plan = None
            if shrink:
                alive = {n: replace(e, max_count=min(e.max_count, e.live)) for n, e in est.items()}
                plan = self._plan(state, s.now, alive, n_e, budget, notes)
            if plan is None:
                wanted = 0.0 if force else speed_now * self.settings.improve_ratio
                plan = self._plan(state, s.now, est, n_e, budget, notes, wanted)
            if (
                not force
                and plan is not None
                and plan.speed < speed_now * self.settings.improve_ratio
            ):
                return False  # the full budget buys nothing clearly faster
            if not force and plan is not None and plan.speed < speed_now * self.settings.leap_ratio:
                # A small gain must hold with money to spare.
                spare = budget * (1 - self.settings.improve_reserve)
                plan = self._plan(state, s.now, est, n_e, spare, notes)
        if plan is None:
            if not force:
                return False
            if self._shortfall(s, est, n_e, optimistic=False):
                return True
            plan = self._best_effort(est)
            reason += "; budget tight: most profitable type only"
        elif not force and plan.speed < speed_now * self.settings.improve_ratio:
            return False
        counts = {name: plan.counts.get(name, 0) for name in state.types}
        if counts == state.target and not first and not refresh:
            return False
        if notes:
            reason += "; solver: " + "; ".join(notes)
        s.do(self._configure(s, counts, est, reason))
        if state.budget is not None and state.tasks_left > 0:
            # The plan fits the planner's model; if even its fluid cost at the estimated
            # means is more than the budget, the bag is unlikely to finish: say so now.
            means = {n: e.mean_s for n, e in est.items()}
            over = forecast(state, s.now, counts, means).fluid_cost
            if over > state.budget + _EPS:
                self._shortfall(s, est, n_e, optimistic=False, needed_at_least=over)
        return True

    def _configure(
        self,
        s: Step,
        counts: dict[str, int],
        est: dict[str, TypeEstimate],
        reason: str,
        budget: float | None = None,
    ) -> Configure:
        """The configuration with its prediction: cost and makespan at the estimated
        means, and their interval at the ends of each mean's interval, widened for the
        spread of the finite number of tasks left (``RuntimeEstimate.widened``)."""
        state = s.state
        intervals = self._intervals(state, s.now, est)
        z = self.settings.confidence_z
        rate = {n: counts.get(n, 0) / e.mean_s for n, e in est.items()}
        total = sum(rate.values()) or 1.0
        lo: dict[str, float] = {}
        hi: dict[str, float] = {}
        for name, e in intervals.items():
            share = state.tasks_left * rate.get(name, 0.0) / total
            lo[name], hi[name] = e.widened(share, z)
        up = max((hi[n] / e.mean_s for n, e in est.items() if counts.get(n)), default=1.0)
        down = min((lo[n] / e.mean_s for n, e in est.items() if counts.get(n)), default=1.0)
        means = {n: e.mean_s for n, e in est.items()}
        fluid = forecast(state, s.now, counts, means, 0.0, budget)
        ages = self._running_ages(state, s.now)
        running = sum(len(a) for a in ages.values())
        to_start = max(0, state.tasks_left - running)
        ragged = ragged_end(
            fluid.end_s - s.now,
            ((self._stats(state, n), to_start * rate.get(n, 0.0) / total) for n in est),
            ((self._stats(state, n), age) for n, a in ages.items() if n in est for age in a),
            self.settings.confidence_z,
        )
        point = forecast(state, s.now, counts, means, ragged.mean_s, budget)
        fast = forecast(state, s.now, counts, lo, ragged.lo_s * down, budget)
        slow = forecast(state, s.now, counts, hi, ragged.hi_s * up, budget)
        return Configure(
            counts,
            point.cost,
            point.end_s,
            reason,
            cost_interval=(min(fast.cost, point.cost), max(slow.cost, point.cost)),
            makespan_interval_s=(min(fast.end_s, point.end_s), max(slow.end_s, point.end_s)),
            assumed_lo_s={n: e.lo_s for n, e in intervals.items()},
            assumed_hi_s={n: e.hi_s for n, e in intervals.items()},
        )

    def _plan(
        self,
        state: RunState,
        now: float,
        est: dict[str, TypeEstimate],
        n_e: float,
        money: float,
        notes: list[str],
        wanted: float = 0.0,
    ) -> Plan | None:
        """The fastest mix ``money`` pays for, with the reserve for the end of the bag
        (``_reserved`` runtimes, ``end_reserve`` kept back) unless the reserve would
        cost more than ``reserve_cost`` of the speed: the fixed-ATU problem has cliffs,
        where a little less money buys a mix many times slower, and a reserve must not
        push a plan over one. Speeds are at the estimated means. When even the mix
        without a reserve is slower than ``wanted`` (the caller will not take it), the
        one with the reserve, no faster, is not solved for."""
        if money <= 0:
            return None
        bare = self._solve(self._problem(state, now, est, n_e, money), notes)
        if bare is not None and bare.speed < wanted:
            return bare
        kept = money - self.end_reserve(state, est)
        guarded = (
            self._solve(self.budget_problem(state, now, est, n_e, kept), notes)
            if kept > 0 and self.settings.reserve_z >= 0
            else None
        )
        if bare is None or guarded is None:
            return bare if guarded is None else self._at_means(guarded, est)
        bare, guarded = self._at_means(bare, est), self._at_means(guarded, est)
        if guarded.speed >= (1 - self.settings.reserve_cost) * bare.speed:
            return guarded
        return bare

    @staticmethod
    def _at_means(plan: Plan, est: dict[str, TypeEstimate]) -> Plan:
        speed = sum(c / est[n].mean_s for n, c in plan.counts.items() if n in est)
        return replace(plan, speed=speed)

    def _problem(
        self, state: RunState, now: float, est: dict[str, TypeEstimate], n_e: float, money: float
    ) -> BudgetProblem:
        """The budget problem on the estimated means, without a reserve."""
        return replace(
            self.budget_problem(state, now, est, n_e, money),
            types=self._launchable(state, now, est),
        )

    def _solve(self, problem: BudgetProblem, notes: list[str]) -> Plan | None:
        """The planner's answer; what it says of solver trouble goes into ``notes``."""
        if not any(t.mean_s > 0 and t.max_count > 0 for t in problem.types):
            notes.append("no machine type with an estimate can be launched")
            return None
        result = solve_budget(problem, self.settings.solver)
        notes.extend(result.notes)
        return result.plan

    @staticmethod
    def _launchable(
        state: RunState, now: float, est: dict[str, TypeEstimate]
    ) -> list[TypeEstimate]:
        """The types a plan may use: one the provider lacks capacity for keeps only the
        machines it has (none: left out), so the plan does not wait for it."""
        out = []
        for name, e in est.items():
            if state.available(name, now):
                out.append(e)
            elif e.live > 0:
                out.append(replace(e, max_count=e.live))
        return out

    @staticmethod
    def _planned(state: RunState) -> bool:
        """Whether a plan has been chosen: sampling configurations predict nothing."""
        return state.plan() is not None

    def _best_effort(self, est: dict[str, TypeEstimate]) -> Plan:
        """Keep going on the most profitable type while the budget pays for units."""
        best = min(est.values(), key=lambda e: e.price * e.mean_s)
        count = max(1, min(best.live, best.max_count))
        return Plan(counts={best.name: count}, units=0, speed=count / best.mean_s, cost=0.0)

    def _shortfall(
        self,
        s: Step,
        est: dict[str, TypeEstimate],
        n_e: float,
        optimistic: bool,
        needed_at_least: float = 0.0,
    ) -> bool:
        """Say that the budget is unlikely to finish the bag, once it is known; with
        ``on_shortfall: stop`` also stop the run. Returns True when it stopped.

        ``optimistic`` (before the samples are complete): only when even the cheapest
        conceivable way of doing N_e tasks does not fit, every type at the lower end
        of its mean's interval (each running task counted as ending now), all on the
        most profitable type at its fluid cost c_i·T_i/ATU. Otherwise the planner found
        no affordable mix at the estimated means, or the mix it found costs more than the
        budget in the forecast (``needed_at_least``). The budget needed is the planner's
        minimum at the estimated means plus the end reserve and what is committed, and
        at least ``needed_at_least``.
        """
        state = s.state
        if state.shortfalls:
            # Said already under this budget: the needed budget (a bisection of planner
            # solves) is worked out again, and said again, only once a tenth of the tasks
            # then left is done.
            said_at, last = state.shortfalls[-1]
            same_budget = state.budget_set_at is None or said_at >= state.budget_set_at
            if same_budget and state.tasks_left > 0.9 * last.tasks_left:
                return self.settings.on_shortfall == "stop" and self._stop(s, last.message)
        budget = self._money_left(state)
        if optimistic:
            z = self.settings.confidence_z
            atu = state.billing.atu_s
            ages = self._running_ages(state, s.now)
            per_task = math.inf
            for name, e in est.items():
                stats = self._stats(state, name)
                seen = [*stats.done_times, *stats.censored_times, *ages.get(name, ())]
                low = sum(seen) / len(seen) - z * e.sd_s / math.sqrt(len(seen))
                per_task = min(per_task, e.price * max(low, 1e-9) / atu)
            if per_task * n_e <= budget:
                return False
        problem = self.budget_problem(state, s.now, est, n_e, budget)
        more = minimum_budget(problem, self.settings.solver) if problem.types else None
        needed = None if more is None else state.committed + more + self.end_reserve(state, est)
        if needed is not None:
            needed = max(needed, needed_at_least)
        said = (
            f"about {n_e:.0f} of {state.tasks_left} tasks left need a budget of about "
            f"{needed:.2f} in all"
            if needed is not None
            else f"about {n_e:.0f} tasks left "
            "cannot be finished at any budget the planner can search"
        )
        message = (
            f"budget unlikely to finish the bag: {said}; the budget is "
            f"{state.budget if state.budget is not None else math.inf:.2f}"
        )
        s.do(Shortfall(state.tasks_left, needed, message))
        return self.settings.on_shortfall == "stop" and self._stop(s, message)

    @staticmethod
    def _stop(s: Step, message: str) -> bool:
        s.do(Stop(message + " (on_shortfall: stop)"))
        return True

    # --- carrying out the configuration --------------------------------------------------

    def _meet_target(self, s: Step) -> None:
        """Launch, keep and mark machines so each type moves towards ``state.target``.

        A launch that must wait (an outage of its type, an account hold) is deferred: the
        state learns which types wait (``Defer``) and a tick tries again.
        """
        state = s.state
        waiting = () if state.stopped or state.awaiting_budget else self._launch_or_mark(s)
        if waiting != s.state.deferred:
            s.do(Defer(waiting))

    def _launch_or_mark(self, s: Step) -> tuple[str, ...]:
        """The launches and marks towards the target; returns the types whose launch waits."""
        state = s.state
        waiting: list[str] = []
        for name, want in state.target.items():
            t = state.types[name]
            alive = [m for m in state.alive_machines() if m.type.name == name]
            in_flight = sum(c for tn, c in state.pending_launches.values() if tn == name)
            keep = [m for m in alive if not m.marked]
            have = len(keep) + in_flight
            if want > have:
                for m in sorted((m for m in alive if m.marked), key=lambda m: -m.paid_until):
                    if have >= want:
                        break
                    s.do(Mark(m.id, release=False))
                    have += 1
                room = t.max_count - len(alive) - in_flight
                count = min(want - have, room)
                if state.budget is not None:
                    unit = state.billing.cost(t.price, state.billing.first_step_s)
                    count = min(count, math.floor((state.budget - state.committed) / unit + _EPS))
                if count > 0 and (state.held(s.now) or not state.available(name, s.now)):
                    waiting.append(name)
                elif count > 0:
                    s.do(Launch(name, count, f"L{state.launch_seq}"))
            elif want < have:
                for m in sorted(keep, key=lambda m: m.paid_until)[: have - want]:
                    s.do(Mark(m.id, release=True))
        return tuple(waiting)

    # --- giving out work -----------------------------------------------------------------

    def _fits(self, s: Step, m: Machine) -> bool:
        """Whether a new task is likely (mean + one σ) to finish within ``m``'s paid time."""
        state = s.state
        stats = self._stats(state, m.type.name)
        if stats.done == 0:
            return True
        margin = state.billing.boundary_margin_s()
        return stats.mean() + stats.stddev() <= m.paid_until - margin - s.now

    def _dispatch(self, s: Step, machines: Iterable[str]) -> None:
        state = s.state
        for mid in sorted(machines):
            m = state.machines[mid]
            if not m.idle:
                continue
            if not self._planned(state) and self._compact(state) and self._probe(s, m):
                continue
            draining = state.stopped or m.marked or not self._can_extend(state, m)
            if state.pending:
                if not draining or self._fits(s, m):
                    s.do(Assign(state.pending[0], m.id))
                else:
                    s.do(Release(m.id, "idle: no task fits its paid time"))
            elif not self._replicate(s, m) and not self._standby(s, m):
                s.do(Release(m.id, "idle: bag empty"))

    @staticmethod
    def _standby(s: Step, m: Machine) -> bool:
        """Keep an idle machine to the end of its paid unit while tasks run elsewhere.

        Only under fixed billing and once the machine is inside the unit it paid for: an
        early release then saves nothing, and a machine kept can take over a task that
        fails, is cut off at another machine's boundary, or runs slow. (A machine just
        extended, whose new unit has not begun, is released: that saves the unit.)
        """
        state = s.state
        billing = state.billing
        return (
            billing.mode == "fixed"
            and bool(state.running_on)
            and not state.stopped
            and s.now >= m.paid_until - billing.step_s
        )

    def _replicate(self, s: Step, m: Machine) -> bool:
        """Tail phase: copy the running task expected to finish last, if ``m`` beats it."""
        state = s.state
        if self.settings.policy != "bats" or not self.settings.tail_replication:
            return False
        mine = self._stats(state, m.type.name)
        if mine.done == 0:
            return False
        margin = state.billing.boundary_margin_s()
        my_finish = s.now + mine.mean()
        # Only within time already paid: not into a unit committed but not yet begun.
        paid_end = m.paid_until
        if state.billing.mode == "fixed":
            paid_end = min(paid_end, state.billing.next_boundary(m.launched_at, s.now))
        if my_finish > paid_end - margin:
            return False
        best: tuple[float, int] | None = None
        for tid, runs in state.running_on.items():
            if len(runs) != 1 or state.task_state[tid] is not TaskState.RUNNING:
                continue
            ((other, start),) = runs.items()
            host = state.machines[other]
            stats = self._stats(state, host.type.name)
            finish = start + stats.tail_estimate(s.now - start)
            if finish > host.paid_until - margin and not self._can_extend(state, host):
                finish = math.inf  # its machine goes before it is done: it will be cut off
            if best is None or finish > best[0]:
                best = (finish, tid)
        if best is None or my_finish >= best[0]:
            return False
        s.do(Replicate(best[1], m.id))
        return True

    # --- the end --------------------------------------------------------------------------

    def _finish_or_stall(self, s: Step) -> None:
        state = s.state
        if state.finished and (not state.stopped or state.stop_reason is not None):
            # Also after a Stop for money: draining machines may have finished the bag.
            for m in list(state.alive_machines()):
                s.do(Release(m.id, "bag finished"))
            s.do(Stop(None))
            return
        if state.stopped or state.awaiting_budget or state.pending_launches or state.any_alive():
            return
        # Nothing runs and tasks are left: start again if the budget allows, else stop.
        self._meet_target(s)
        if not state.pending_launches and not state.deferred:
            left = self._money_left(state)
            s.do(
                Stop(
                    f"budget exhausted: {state.tasks_left} tasks left and {max(left, 0):.2f} "
                    "cannot pay a unit of any type wanted"
                )
            )
