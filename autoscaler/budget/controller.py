"""The decision core: ``Controller.step(state, events, now) -> actions``.

No clock, no I/O: the emulator and the daemon feed it events and carry out the actions
it returns. The controller never writes the state itself: a step applies its events
(``RunState.apply`` at the step's ``now``), then decides, applying each action as it is
decided. That is the order a driver journals them in (events, then actions), so a
replayed journal is the state the run had, and the state the next step sees. It reasons
at the step's ``now``, which is also the state's time once anything was applied.

Two policies share the machinery:

* ``bats`` (paper 000): sample every type with iw = min(N/10, n) machines
  (``budget.sampling``), plan the fastest affordable mix once the samples are in,
  monitor N_e against N_p every monitoring interval and re-plan on a violation (or when
  a re-plan is clearly faster: ``budget.monitor``), release machines just before the
  end of a paid unit (``budget.boundaries``), and replicate slow tasks on idle paid
  machines once the bag is empty (slides 001, tail phase: ``budget.tail``).
* ``round_robin`` (paper 000 §3): every machine from the start, tasks in FCFS order,
  oblivious of cost.

Money: a machine is committed one step (an ATU, or ``commit_s`` under per-second
billing) at a time, and only when ``committed + step ≤ budget``. The driver delivers
``BoundaryNear`` before the end of a machine's committed time; the controller either
extends it or releases it then.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass

from autoscaler.budget import monitor, plans, runtimes
from autoscaler.budget import sampling as sampling_
from autoscaler.budget.boundaries import boundary, can_extend, standby
from autoscaler.budget.category_means import aware
from autoscaler.budget.category_mix import least_money, plan_mix
from autoscaler.budget.category_order import CategoryChoice
from autoscaler.budget.fleet import meet_target
from autoscaler.budget.problem import BudgetProblem, Plan, TypeEstimate
from autoscaler.budget.settings import ControllerSettings, money_left, planned
from autoscaler.budget.tail import replicate, take_back
from autoscaler.core.groups import GroupLimits, ahead, fair_share, group_size, stretched
from autoscaler.core.limits import quota_grew
from autoscaler.core.model import (
    NOTICE_REASON,
    OUT_OF_MONEY,
    Action,
    Assign,
    AssignGroup,
    BoundaryNear,
    BudgetSet,
    Cancel,
    Configure,
    Event,
    Extend,
    Launch,
    LaunchFailed,
    MachineLost,
    MachineState,
    QuotaSet,
    RebalanceRecommended,
    Release,
    Resumed,
    Shutdown,
    Stop,
    TaskDone,
    Tick,
    TypeSpec,
)
from autoscaler.core.reclaims import drain
from autoscaler.core.state import Machine, RunState
from autoscaler.core.step import Step
from autoscaler.core.words import counted
from autoscaler.learn.affine import AffineFit

# Enum members looked up once: reading ``MachineState.READY`` calls a descriptor.
_READY = MachineState.READY

__all__ = ["Controller"]


@dataclass(slots=True)
class _News:
    """What a step's events tell the controller (not frozen: made every step, and a
    frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``)."""

    touched: frozenset[str]  # machines whose work changed
    boundaries: tuple[str, ...]  # machines near the end of their paid time
    tick: bool
    lost: bool  # a machine or a launch was lost
    unavailable: tuple[str, ...]  # types a launch found no capacity for
    held: tuple[str, ...]  # types whose provider refused a launch for a limit
    budget_set: BudgetSet | None
    resumed: Resumed | None
    more_room: bool  # the service's quota leaves the run more machines than it did


def _read(s: Step, events: Iterable[Event]) -> _News:
    """Apply ``events`` to the state; then the actions they call for at once (cancel the
    other runs of a task done, stop on a shutdown)."""
    state = s.state
    touched: set[str] = set()
    boundaries: list[str] = []
    tick = False
    lost = False
    unavailable: list[str] = []
    held: list[str] = []
    budget_set: BudgetSet | None = None
    resumed: Resumed | None = None
    more_room = False
    first: list[Action] = []  # decided while reading the events, applied after them
    paired_runs, running_on = state.observed.paired_runs, state.tasks.running_on
    for event in events:
        if type(event) is TaskDone:  # the most common by far: as the match below has it
            tid, mid = event.task, event.machine
            runs = None if tid in paired_runs else running_on.get(tid)
            others = [m for m in runs if m != mid] if runs else []
            s.feed(event)
            touched.add(mid)
            if others:
                first.extend(Cancel(tid, m, "another run finished first") for m in others)
            continue
        others = []
        if isinstance(event, TaskDone) and event.task not in state.observed.paired_runs:
            others = [m for m in state.tasks.running_on.get(event.task, {}) if m != event.machine]
        quota = state.capacity.quota
        s.feed(event)
        match event:
            case Tick():
                tick = True
            case BoundaryNear(machine=mid):
                boundaries.append(mid)
            case TaskDone(task=tid, machine=mid):
                touched.add(mid)
                first.extend(Cancel(tid, m, "another run finished first") for m in others)
            case LaunchFailed(kind="capacity" | "setup" | "unready", type=tname):
                lost = True
                unavailable.append(tname)
            case LaunchFailed(kind="limit", types=types):
                lost = True
                held.extend(types)
            case MachineLost(machine=mid, reason=reason) if NOTICE_REASON in reason:
                lost = True
                tname = state.fleet.machines[mid].type.name
                if not state.capacity.available(tname, s.now):  # held after reclaims
                    unavailable.append(tname)
            case MachineLost() | LaunchFailed():
                lost = True
            case RebalanceRecommended(machine=mid):  # drains: replaced as a lost one is
                lost = True
                first.extend(drain(state.fleet.machines[mid]))
            case Shutdown(reason=reason):
                if not state.money.stopped and not any(isinstance(a, Stop) for a in first):
                    first.append(Stop(reason))
            case BudgetSet():
                budget_set = event
            case Resumed():  # after an interruption: every machine is gone
                resumed = event
                lost = True
            case QuotaSet():  # launches held back by the quota may go now
                lost = True
                more_room = more_room or quota_grew(state, quota, event)
            case _:
                machine = getattr(event, "machine", None)
                if isinstance(machine, str):
                    touched.add(machine)
    for action in first:
        s.do(action)
    return _News(
        frozenset(touched),
        tuple(boundaries),
        tick,
        lost,
        tuple(unavailable),
        tuple(held),
        budget_set,
        resumed,
        more_room,
    )


def _to_serve(s: Step, news: _News) -> set[str]:
    """The machines that may be idle with work to take: every one alive after a tick, a
    loss, a release that re-queued tasks or a new configuration or launch; else those
    the events touched and those the step cancelled a run on or extended."""
    state = s.state
    actions = s.actions  # most steps decided nothing yet: a task's result, read
    requeued = bool(actions and state.tasks.pending) and any(
        isinstance(a, Release) for a in actions
    )
    if (
        news.tick
        or news.lost
        or requeued
        or (actions and any(isinstance(a, _PLANS) for a in actions))
    ):
        return {m.id for m in state.fleet.alive_machines()}
    if not actions:
        return set(news.touched)
    return {*news.touched, *(a.machine for a in actions if isinstance(a, _CARRIED))}


_PLANS = (Configure, Launch)  # a tuple: ``Configure | Launch`` would be built every call
_CARRIED = (Cancel, Extend)


class Controller:
    """Budget-aware bag-of-tasks controller. Holds settings only; all state is passed in."""

    def __init__(
        self, settings: ControllerSettings | None = None, categories: CategoryChoice | None = None
    ):
        self.settings = settings or ControllerSettings()
        self.categories = categories  # paper 004: which tasks a machine takes first
        # ...and the means the mix is planned on (category_mix), unless asked not to
        self._mix = categories.categories if categories is not None and categories.mix else None
        self._group_limits: dict[str, tuple[TypeSpec, GroupLimits]] = {}

    # --- the one entry point ----------------------------------------------------------

    def step(self, state: RunState, events: Iterable[Event], now: float) -> list[Action]:
        s = Step(state, now)
        news = _read(s, events)
        if state.money.shutdown:
            for m in list(state.fleet.alive_machines()):
                s.do(Release(m.id, "shutdown"))
            return s.decided()
        if (
            not state.fleet.machines
            and not state.fleet.pending_launches
            and not state.decisions.configurations
        ):
            self._start(s)
        for mid in news.boundaries:
            boundary(s, state.fleet.machines[mid])
        if self.settings.policy == "bats" and not state.money.stopped:
            self._monitor(s, news)
        elif news.tick and state.decisions.deferred and not state.money.stopped:
            meet_target(s)
        self._dispatch(s, _to_serve(s, news))
        self._finish_or_stall(s)
        return s.decided()

    # --- for ``autoscaler plan``: the outlook and a prediction, without deciding ------------

    def outlook(self, state: RunState, now: float) -> tuple[dict[str, TypeEstimate], float]:
        """T_i per sampled type and N_e at ``now``; changes nothing."""
        return runtimes.outlook(self.settings, state, now, self._mix)

    def budget_problem(
        self, state: RunState, now: float, est: dict[str, TypeEstimate], n_e: float, money: float
    ) -> BudgetProblem:
        """The budget problem the planner would solve at ``now`` with ``money`` left, on
        the reserved runtimes (``runtimes.reserved``)."""
        return plans.budget_problem(self.settings, state, now, est, n_e, money)

    @property
    def mixes_categories(self) -> bool:
        """Whether the mix is planned on the means its categories give each type."""
        return self._mix is not None

    def mix_plan(
        self, state: RunState, now: float, est: dict[str, TypeEstimate], n_e: float, money: float
    ) -> Plan | None:
        """The mix a re-plan would choose with ``money`` left (its reserve included), on
        the means that mix would show (``category_mix``); changes nothing."""
        found, _ = plan_mix(self.settings, state, now, est, n_e, money, [], categories=self._mix)
        return found

    def least_money(
        self,
        state: RunState,
        now: float,
        est: dict[str, TypeEstimate],
        n_e: float,
        start: float,
    ) -> float | None:
        """With categories, the least money left (its reserve included) whose mix is
        forecast to finish the bag at the means it would show (``category_mix``)."""
        if self._mix is None:
            raise ValueError("least_money is for a mix planned with categories")
        return least_money(self.settings, state, now, est, n_e, self._mix, start)

    def predict(
        self,
        state: RunState,
        now: float,
        counts: dict[str, int],
        est: dict[str, TypeEstimate],
        budget: float | None = None,
    ) -> Configure:
        """The configuration ``counts`` with its prediction, as a plan would issue it,
        under ``budget`` (the run's whole budget; None: the state's); with categories, at
        the means ``counts`` would show (``category_means``)."""
        seen = aware(state, est, self._mix, counts)
        return plans.configure(
            self.settings, Step(state, now), counts, seen, "a budget option", budget
        )

    @staticmethod
    def end_reserve(state: RunState, est: dict[str, TypeEstimate]) -> float:
        """Money a plan leaves unspent for the end of the bag (``runtimes.end_reserve``)."""
        return runtimes.end_reserve(state, est)

    def sampling(self, state: RunState) -> Configure:
        """The sampling configuration a fresh run starts with (pure)."""
        return sampling_.sampling(self.settings, state)

    def reference(self, state: RunState) -> str:
        """The type compact sampling samples the rest of the sample set on."""
        return sampling_.reference(self.settings, state)

    def fit(self, state: RunState, name: str) -> AffineFit | None:
        """g for ``name`` against the reference, on the replicated tasks done on both."""
        return sampling_.fit(self.settings, state, name)

    # --- the parts of a step ------------------------------------------------------------

    def _start(self, s: Step) -> None:
        state = s.state
        if self.settings.policy == "round_robin":
            counts = {name: t.max_count for name, t in state.types.items()}
            s.do(Configure(counts, None, None, "round robin: every machine"))
            meet_target(s)
            return
        sampling = self.sampling(state)
        s.do(sampling)
        meet_target(s)

    def _monitor(self, s: Step, news: _News) -> None:
        """Monitor the plan; re-plan on a new budget, a resumption, a type without
        capacity or a provider held by its limit (within the step that hears of it);
        then move the machines towards the target if it (or the fleet) moved."""
        state = s.state
        settings = self.settings
        if (
            not (news.tick or news.lost or news.unavailable or news.held)
            and news.budget_set is None
            and news.resumed is None
            and (state.money.awaiting_budget or planned(state.decisions))
            and not sampling_.resampling(state.decisions)
        ):
            return  # most steps (a task's result under a plan): nothing below would act
        replanned = monitor.check(settings, s, news.tick, self._mix)
        told = news.budget_set is not None or news.resumed is not None or news.more_room
        if told and not replanned and planned(state.decisions):
            est, n_e = runtimes.outlook(settings, state, s.now, self._mix)
            if news.budget_set is not None:
                why = f"budget set to {news.budget_set.budget:.2f}: {news.budget_set.reason}"
            elif news.resumed is not None:
                why = f"resumed: {news.resumed.reason}"
            else:
                why = "other jobs of the service freed machines"
            replanned = monitor.replan(settings, s, est, n_e, why, force=True, categories=self._mix)
        # A provider held by a limit: plan onto the others' types, if any can launch.
        lacking = sorted(set(news.unavailable))
        others = bool(news.held) and any(state.capacity.launchable(n, s.now) for n in state.types)
        held = sorted(set(news.held) - set(lacking)) if others else []
        if (lacking or held) and not replanned and planned(state.decisions):
            est, n_e = runtimes.outlook(settings, state, s.now, self._mix)
            holds = [h for t in lacking for h in (state.capacity.reclaims.holding(t, s.now),) if h]
            lacking = [t for t in lacking if not any(h.type == t for h in holds)]
            said = [f"{', '.join(lacking)} unavailable"] if lacking else []
            said += [f"{h.type} held after {counted(h.reclaims, 'reclaim')}" for h in holds]
            said += [f"{', '.join(held)} held by their provider's limit"] if held else []
            why = "; ".join(said) + ": plan without them"
            replanned = monitor.replan(settings, s, est, n_e, why, force=True, categories=self._mix)
        if replanned or news.lost or (news.tick and state.decisions.deferred):
            meet_target(s)

    def _group(self, s: Step, m: Machine, draining: bool, share: int, topped: bool) -> int:
        """Tasks to hand ``m`` now (``core.groups``): one per free slot until BaTS's plan
        (sampling hands out tasks one by one, and ``plan`` holds after it with the bag
        left; round robin has no sampling); then a group whose expected time fits the
        horizon, the type's limits and, when ``m`` is not to be extended, its paid time
        (a task likely, mean + one σ, to finish within it)."""
        state = s.state
        stats = sampling_.stats(self.settings, state, m.type.name)
        known = stats.done > 0
        window = None
        if draining and known:
            margin = state.billing.boundary_margin_s()
            window = m.paid_until - margin - s.now - stats.stddev()
        t = m.type
        if self.settings.policy == "bats" and not planned(
            state.decisions
        ):  # round robin: no sampling
            if window is not None and window < stats.mean():
                return 0
            return min(len(state.tasks.pending), max(0, t.slots - len(m.running) - len(m.queue)))
        return group_size(
            slots=t.slots,
            in_flight=len(m.running) + len(m.queue),
            pending=len(state.tasks.pending),
            share=share,
            mean_s=stats.mean() if known else None,
            window_s=window,
            limits=self._limits(t, len(state.fleet.alive)),
            ahead=topped,
        )

    def _limits(self, t: TypeSpec, machines: int) -> GroupLimits:
        """The group limits of type ``t`` in a fleet of ``machines`` (made once per type
        and horizon: a dispatch asks for them for every group)."""
        horizon = stretched(self.settings.group_s, self.settings.group_fleet, machines)
        kept = self._group_limits.get(t.name)
        if kept is None or kept[0] is not t or kept[1].horizon_s != horizon:
            kept = (t, GroupLimits(horizon, t.group_max_s, t.group_max_tasks))
            self._group_limits[t.name] = kept
        return kept[1]

    def _dispatch(self, s: Step, machines: Iterable[str]) -> None:
        """Give each machine of ``machines`` with a free slot a task group (past the
        stretch, also each busy one whose queue runs short: ``core.groups.ahead``), or
        release it when it is idle and has nothing to do."""
        state = s.state
        by_id, tasks, money = state.fleet.machines, state.tasks, state.money
        slots = state.fleet.alive_slots
        share = fair_share(len(tasks.pending), 1, slots)
        compact = sampling_.is_compact(self.settings, state)  # fixed for the run
        topped = ahead(self.settings.group_fleet, len(state.fleet.alive))
        for mid in sorted(machines):
            m = by_id[mid]
            if m.state is not _READY or m.draining:
                continue
            if len(m.running) >= m.type.slots and not (topped and tasks.pending):
                continue
            if (
                compact
                and (m.idle or m.type.slots > 1)
                and not planned(state.decisions)
                and self._probe(s, m)
            ):
                continue
            draining = money.stopped or m.marked or not can_extend(state, m)
            if tasks.pending:
                k = self._group(s, m, draining, share * m.type.slots, topped)
                tids = (
                    self.categories.pick(state, m.type.name, k, planned(state.decisions), m.marked)
                    if self.categories is not None
                    else list(itertools.islice(tasks.pending, k))
                )
                if len(tids) == 1:
                    s.do(Assign(tids[0], m.id))
                elif tids:
                    s.do(AssignGroup(tuple(tids), m.id))
                elif m.idle and draining:
                    s.do(Release(m.id, "idle: no task fits its paid time"))
            elif not (m.idle and take_back(s, m)):
                # the bag is empty: each free slot copies a task expected to end late
                free = m.type.slots - len(m.running) - len(m.queue)
                copied = 0
                while copied < free and replicate(self.settings, s, m):
                    copied += 1
                if m.idle and not copied and not standby(s, m):
                    s.do(Release(m.id, "idle: bag empty"))

    def _probe(self, s: Step, m: Machine) -> bool:
        """Compact sampling: a replicated task on each free slot of ``m`` while there are
        any (``sampling.probe``); whether ``m`` was given one."""
        free = m.type.slots - len(m.running) - len(m.queue)
        probed = 0
        while probed < free and sampling_.probe(self.settings, s, m):
            probed += 1
        return probed > 0

    def _finish_or_stall(self, s: Step) -> None:
        state = s.state
        if state.finished and (not state.money.stopped or state.money.stop_reason is not None):
            # Also after a Stop for money: draining machines may have finished the bag.
            for m in list(state.fleet.alive_machines()):
                s.do(Release(m.id, "bag finished"))
            s.do(Stop(None))
            return
        if (
            state.money.stopped
            or state.money.awaiting_budget
            or state.fleet.pending_launches
            or state.fleet.any_alive()
        ):
            return
        # Nothing runs and tasks are left: start again if the budget allows, else stop.
        none_left = state.none_left()
        if none_left is not None:
            s.do(Stop(none_left))
            return
        meet_target(s)
        if not state.fleet.pending_launches and not state.decisions.deferred:
            left = money_left(state.money)
            s.do(
                Stop(
                    f"{OUT_OF_MONEY}: {counted(state.tasks_left, 'task')} left and "
                    f"{max(left, 0):.2f} cannot pay a unit of any type wanted"
                )
            )
