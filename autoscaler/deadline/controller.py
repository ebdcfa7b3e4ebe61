"""Deadline mode's decision core: ``DeadlineController.step(state, events, now) -> actions``.

Paper 002 (Thai, Varghese, Barker) as a controller. Jobs (``state.jobs``) arrive over
time (``JobArrived``), each with a deadline. Whenever tasks of arrived jobs are in the
bag (a job arrives, a machine is lost, a task fails), the controller plans them: it
fills the machines that run already without extending their paid time (Algorithm 1),
then buys the cheapest new machines that finish the rest in time (Algorithm 2 with the
multi-job model (7), or Algorithm 3 with the single-job model (10); ``deadline.py``).
Tasks are queued on machines at once (``Assign``; a new machine's queue travels with
its ``Launch``), and a machine runs its queue earliest deadline first.

Every monitoring interval (``Tick``) it estimates each machine's finish times from its
queue and its observed speed and moves queued tasks off machines that would miss a
deadline onto machines with room (Algorithm 4, ``reassign.py``; ``Move``). Beyond the
paper: tasks still late after the moves are given to new machines when the deadline
(and the budget, if one is set) allows; otherwise the controller says so at once
(``Late``: the job, the tasks and seconds it expects to be late, and what gave way).

A job without known task times is sampled first: each type runs ``sample`` of its
tasks, and the plan uses mean + z·σ/√n of what they took (the estimate with its
uncertainty). Machines are released at the end of a paid unit once they have no work
and no job arriving within their next unit could use them. Money: nothing is launched
or extended that the budget (the sum of the jobs' budgets, when every job has one)
cannot pay; a plan the budget cannot pay is bought in part, the rest queued where it
finishes first, and the lateness said with ``budget`` as what gave way.

A pool (``keep_open``: the service's deadline jobs) takes new jobs while it runs
(``JobAdded``: new tasks, planned at once like an arrival) and does not stop when its
work is done: its machines go as idle machines do, and it ends on ``Shutdown`` (or waits
after ``Interrupted``) only.

No clock, no I/O: the emulator and the daemon drive it exactly as the budget
controller (``budget.controller``), with whom it shares ``core.step.Step``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from autoscaler.core.model import (
    Action,
    Assign,
    BoundaryNear,
    BudgetSet,
    Cancel,
    Configure,
    DeadlineSet,
    Event,
    Extend,
    Forecast,
    JobAdded,
    JobArrived,
    JobSpec,
    Late,
    Launch,
    LaunchFailed,
    MachineLost,
    MachineState,
    Release,
    Resumed,
    Shutdown,
    Stop,
    TaskDone,
    TaskFailed,
    Tick,
)
from autoscaler.core.solve import Solver
from autoscaler.core.state import Machine, RunState
from autoscaler.core.step import Step
from autoscaler.deadline.assign import (
    handle_multi,
    handle_single,
    solve_new,
)
from autoscaler.deadline.instance import (
    DeadlineJob,
    DeadlinePlan,
    DeadlineProblem,
    DeadlineResult,
    MachineType,
    RunningMachine,
)
from autoscaler.deadline.reassign import (
    Lateness,
    Queue,
    finish_times,
    late_tasks,
    lateness,
    reassign,
)

_EPS = 1e-6
_CAUSES = {
    "budget": "the budget cannot pay for machines that would finish it in time",
    "deadline": "no machines the provider allows finish it in time",
}
_RELAX = (1.5, 2.0, 4.0, 8.0, 32.0)  # deadline windows tried when no plan meets them


@dataclass(frozen=True, slots=True)
class DeadlineSettings:
    planner: Literal["multi", "single"] = "multi"  # Algorithm 2 (model 7) or 3 (model 10)
    reassign: bool = True  # Algorithm 4 every monitoring interval
    buy_when_late: bool = True  # beyond the paper: new machines for what is still late
    solver: Solver = "highs"
    sample: int = 5  # runs per type of a job without known times before it is planned
    z: float = 1.96  # a sampled job is planned on mean + z·σ/√n
    late_change: float = 0.1  # a lateness is said again when it changes by this share
    guard_z: float = 2.0  # plans and moves aim this many task-time sds before a deadline
    keep_open: bool = False  # a pool: no Stop when the work is done; jobs join (JobAdded)


class _DStep(Step):
    """A step, and the jobs whose machines the budget could not pay for in it."""

    def __init__(self, state: RunState, now: float):
        super().__init__(state, now)
        self.unpaid: set[str] = set()


class DeadlineController:
    """Deadline-aware controller for jobs with deadlines. Holds settings only."""

    def __init__(self, settings: DeadlineSettings | None = None):
        self.settings = settings or DeadlineSettings()

    # --- the one entry point ----------------------------------------------------------

    def step(self, state: RunState, events: Iterable[Event], now: float) -> list[Action]:
        s = _DStep(state, now)
        boundaries: list[str] = []
        tick = False
        done = False
        news = False  # something that changes the plan's premises
        for event in events:
            s.feed(event)
            match event:
                case Tick():
                    tick = True
                case TaskDone():
                    done = True
                case BoundaryNear(machine=mid):
                    boundaries.append(mid)
                case (
                    JobArrived()
                    | JobAdded()
                    | MachineLost()
                    | LaunchFailed()
                    | TaskFailed()
                    | BudgetSet()
                    | DeadlineSet()
                    | Resumed()
                ):
                    news = True
                case Shutdown(reason=reason):
                    if not state.stopped:
                        s.do(Stop(reason))
        if state.shutdown:
            for m in list(state.alive_machines()):
                s.do(Release(m.id, "shutdown"))
            return s.actions
        for mid in boundaries:
            self._boundary(s, state.machines[mid])
        # The bag changes only with news, at a boundary (a released machine's queue goes
        # back), or when a sampled job's samples come in; ticks re-plan what is left.
        sampled = done and any(not j.task_s for j in state.jobs if j.name in state.arrived)
        wake = news or tick or bool(boundaries) or sampled or not state.configurations
        if not state.stopped:
            self._sample(s)
            planned = self._plan(s) if wake else False
            if tick and self.settings.reassign:
                self._reassign(s)
            if tick or planned or news:
                self._watch(s, buy=tick and self.settings.reassign and self.settings.buy_when_late)
            self._idle(s)
        self._finish(s)
        return s.actions

    # --- what the jobs take ---------------------------------------------------------------

    def task_times(self, state: RunState, job: JobSpec) -> dict[str, float]:
        """The planned time per task of ``job`` per type: known, else sampled (mean +
        z·σ/√n, once ``sample`` runs ended there); types missing cannot run it (yet)."""
        if job.task_s:
            return {t: e for t, e in job.task_s.items() if t in state.types}
        out: dict[str, float] = {}
        for name in state.types:
            runs = state.job_runs.get((job.name, name))
            if runs is None or runs[0] < min(self.settings.sample, job.count):
                continue
            mean, sd = _mean_sd(runs)
            out[name] = mean + self.settings.z * sd / math.sqrt(runs[0])
        return out

    def _machine_s(self, state: RunState, m: Machine, job: JobSpec) -> float | None:
        """``m``'s time per task of ``job``: what it showed, else its type's, else planned."""
        for runs in (
            state.machine_job_runs.get((m.id, job.name)),
            state.job_runs.get((job.name, m.type.name)),
        ):
            if runs is not None and runs[0] > 0:
                return runs[1] / runs[0]
        known = job.task_s.get(m.type.name)
        if known is not None:
            return known
        return None

    def _sampling(self, state: RunState, job: JobSpec) -> bool:
        """Whether ``job`` still waits for samples (no known times, some type short)."""
        if job.task_s:
            return False
        return any(
            self._launchable(state, name)
            and (state.job_runs.get((job.name, name)) or [0])[0]
            < min(self.settings.sample, job.count)
            for name in state.types
        ) or not self.task_times(state, job)

    @staticmethod
    def _launchable(state: RunState, name: str) -> bool:
        return state.types[name].max_count > 0 and state.available(name, state.now)

    # --- sampling (a job without known task times) ----------------------------------------

    def _sample(self, s: Step) -> None:
        state = s.state
        for job in state.jobs:
            if job.name not in state.arrived or not self._sampling(state, job):
                continue
            pending = [t for t in state.pending if job.owns(t)]
            for name in state.types:
                if not pending or not self._launchable(state, name):
                    continue
                want = min(self.settings.sample, job.count)
                have = (state.job_runs.get((job.name, name)) or [0])[0]
                have += sum(
                    1
                    for m in state.alive_machines()
                    if m.type.name == name
                    for t in (*m.running, *m.queue)
                    if job.owns(t)
                )
                have += sum(
                    1
                    for token, queues in state.launch_queues.items()
                    if state.pending_launches.get(token, ("", 0))[0] == name
                    for q in queues
                    for t in q
                    if job.owns(t)
                )
                give = min(want - int(have), len(pending))
                if give <= 0:
                    continue
                chosen, pending = pending[:give], pending[give:]
                self._spread_sample(s, name, chosen)

    def _spread_sample(self, s: Step, name: str, tasks: list[int]) -> None:
        """Run sample ``tasks`` on type ``name`` side by side, the deadline running: one
        each on its idle machines, then one each on new machines the limits and the
        budget allow, the rest queued on the least loaded machine of the type."""
        state = s.state
        mine = [m for m in state.alive_machines() if m.type.name == name and not m.marked]
        for m in mine:
            if tasks and m.idle:
                s.do(Assign(tasks.pop(0), m.id))
        room = state.types[name].max_count - state.count_alive(name)
        if state.budget is not None:
            unit = state.billing.cost(state.types[name].price, state.billing.first_step_s)
            room = min(room, math.floor((state.budget - state.committed) / unit + _EPS))
        count = min(room, len(tasks))
        if count > 0 and state.available(name, s.now) and not state.held(s.now):
            queues = tuple((tid,) for tid in tasks[:count])
            s.do(Launch(name, count, f"L{state.launch_seq}", queues))
            tasks = tasks[count:]
        host = min(mine, key=lambda m: len(m.queue) + len(m.running), default=None)
        if host is not None:
            for tid in tasks:
                s.do(Assign(tid, host.id))

    # --- planning (Algorithms 1–3) ----------------------------------------------------------

    def _ready_jobs(self, state: RunState) -> dict[str, list[int]]:
        """Tasks in the bag per arrived job that can be planned (sampled or known)."""
        ready = {
            j.name: j
            for j in state.jobs
            if j.name in state.arrived and not self._sampling(state, j)
        }
        out: dict[str, list[int]] = {}
        if not ready:
            return out
        for tid in state.pending:
            job = state.job_of(tid)
            if job.name in ready:
                out.setdefault(job.name, []).append(tid)
        return out

    def _running(self, state: RunState, now: float) -> list[RunningMachine]:
        margin = state.billing.boundary_margin_s()
        out = []
        for m in state.alive_machines():
            if m.marked:
                continue
            q = self._queue(state, m, now)
            free = q.busy_until + sum(q.task_s.get(j, 0.0) for _, j in q.tasks)
            out.append(RunningMachine(m.id, m.type.name, m.paid_until - margin, free))
        return out

    def _types(self, state: RunState) -> list[MachineType]:
        return [
            MachineType(
                t.name,
                t.price,
                t.boot_s,
                max(0, t.max_count - state.count_alive(t.name))
                if state.available(t.name, state.now) and not state.held(state.now)
                else 0,
            )
            for t in state.types.values()
        ]

    def _solve(self, problem: DeadlineProblem) -> DeadlineResult:
        if self.settings.planner == "single":
            return handle_single(problem, solver=self.settings.solver)
        return handle_multi(problem, solver=self.settings.solver)

    def _plan(self, s: _DStep) -> bool:
        """Plan every task of an arrived job in the bag; True if anything was planned."""
        state = s.state
        tasks = self._ready_jobs(state)
        if not tasks:
            return False
        guarded = self._deadlines(state, guarded=True)
        jobs = []
        for name, tids in tasks.items():
            job = state.job_named(name)
            times = self.task_times(state, job)
            if not times:
                continue
            jobs.append(DeadlineJob(name, len(tids), guarded[name], times))
        if not jobs:
            return False
        machines = self._running(state, s.now)
        types = self._types(state)
        result: DeadlineResult | None = None
        for factor in (1.0, *_RELAX):
            relaxed = [self._relaxed(j, s.now, factor, types) for j in jobs]
            result = self._solve(DeadlineProblem(relaxed, types, state.billing, s.now, machines))
            if result.plan is not None:
                break
        if result is None or result.plan is None:
            self._crowd(s, tasks, machines)
        else:
            self._carry_out(s, result.plan, tasks)
        self._forecast(s, set(tasks), "planned: " + ", ".join(sorted(tasks)))
        return True

    def _forecast(self, s: Step, jobs: set[str], why: str) -> None:
        """What the plan in force expects: per job (``Forecast``) and for the run
        (``Configure``: machines per type, whole cost and last finish)."""
        state = s.state
        deadlines = self._deadlines(state)
        # Each machine, alive or being launched: (queue, launched, paid until, type).
        queues: list[tuple[Queue, float, float, str]] = []
        for m in state.alive_machines():
            queues.append((self._queue(state, m, s.now), m.launched_at, m.paid_until, m.type.name))
        for token, planned in state.launch_queues.items():
            tname = state.pending_launches.get(token, ("", 0))[0]
            if not tname:
                continue
            t = state.types[tname]
            for tasks in planned:
                named = [(tid, state.job_of(tid).name) for tid in tasks]
                times = {
                    name: state.job_named(name).task_s.get(tname)
                    or self.task_times(state, state.job_named(name)).get(tname, 0.0)
                    for _, name in named
                }
                paid = s.now + state.billing.first_step_s
                margin = state.billing.boundary_margin_s()
                q = Queue(f"{token}?", s.now + t.boot_s, paid - margin, named, times)
                queues.append((q, s.now, paid, tname))
        finish: dict[str, float] = {}
        cost: dict[str, float] = {}
        total = (
            state.committed
            - sum(  # committed money of machines not counted below
                state.billing.cost(m.type.price, m.paid_until - m.launched_at)
                for m in state.alive_machines()
            )
            - sum(
                c * state.billing.cost(state.types[tn].price, state.billing.first_step_s)
                for tn, c in state.pending_launches.values()
            )
        )
        counts: dict[str, int] = {}
        for q, launched, paid_until, tname in queues:
            counts[tname] = counts.get(tname, 0) + 1
            ends = finish_times(q, deadlines)
            end = max([q.busy_until, *ends.values()])
            paid = max(paid_until, end) - launched
            machine_cost = state.billing.cost(state.types[tname].price, paid)
            total += machine_cost
            seconds: dict[str, float] = {}
            for _, name in q.tasks:
                seconds[name] = seconds.get(name, 0.0) + q.task_s.get(name, 0.0)
            busy = sum(seconds.values())
            for name, sec in seconds.items():
                if busy > 0:
                    cost[name] = cost.get(name, 0.0) + machine_cost * sec / busy
            for name, end_j in ends.items():
                finish[name] = max(finish.get(name, 0.0), end_j)
        for name in sorted(jobs):
            if name in finish:
                s.do(Forecast(name, finish[name], cost.get(name, 0.0)))
        last = max(finish.values(), default=s.now)
        s.do(Configure(counts, total, last, f"deadline plan ({why})"))

    @staticmethod
    def _relaxed(
        job: DeadlineJob, now: float, factor: float, types: Sequence[MachineType]
    ) -> DeadlineJob:
        """``job`` with its window from ``now`` stretched ``factor`` times (at least one
        task on a new machine of its slowest-booting type): a plan when none is in time."""
        if factor == 1.0:
            return job
        least = max(
            (t.boot_s + job.task_s[t.name] for t in types if t.name in job.task_s), default=0.0
        )
        window = max(job.deadline_s - now, least)
        return DeadlineJob(job.name, job.tasks, now + factor * window, job.task_s)

    def _carry_out(self, s: _DStep, plan: DeadlinePlan, tasks: dict[str, list[int]]) -> None:
        """Queue the plan's tasks: on running machines (``Assign``), and on the new machines
        the budget pays for (``Launch`` with their queues); what it cannot pay for is
        queued where it finishes first."""
        state = s.state
        left = {name: list(tids) for name, tids in tasks.items()}

        def take(name: str, n: int) -> list[int]:
            got, left[name] = left[name][:n], left[name][n:]
            return got

        for mid, per_job in plan.existing.items():
            for name in self._edf_names(state, per_job):
                for tid in take(name, per_job[name]):
                    s.do(Assign(tid, mid))
        money = math.inf if state.budget is None else state.budget - state.committed
        bought: dict[str, list[tuple[int, ...]]] = {}
        # The machines doing the most per unit of money first, when money is short.
        for new in sorted(plan.new, key=lambda m: -sum(m.tasks.values()) / max(m.cost, _EPS)):
            first = state.billing.cost(state.types[new.type].price, state.billing.first_step_s)
            if first > money + _EPS:
                s.unpaid.update(n for n, k in new.tasks.items() if k > 0)
                continue
            money -= max(first, min(new.cost, money))
            queue: list[int] = []
            for name in self._edf_names(state, new.tasks):
                queue.extend(take(name, new.tasks[name]))
            bought.setdefault(new.type, []).append(tuple(queue))
        for name, queues in bought.items():
            s.do(Launch(name, len(queues), f"L{state.launch_seq}", tuple(queues)))
        rest = {name: tids for name, tids in left.items() if tids}
        if rest:
            self._crowd(s, rest, self._running(state, s.now))

    @staticmethod
    def _edf_names(state: RunState, per_job: Mapping[str, int]) -> list[str]:
        return sorted(per_job, key=lambda name: (state.job_named(name).deadline, name))

    def _crowd(
        self, s: Step, tasks: Mapping[str, Sequence[int]], machines: Sequence[RunningMachine]
    ) -> None:
        """No machines can be bought for ``tasks``: queue each where it finishes first
        (list scheduling over the machines alive); they will be late, and ``_watch`` says
        so. Without a machine that can run a job, its tasks stay in the bag."""
        state = s.state
        free = {m.id: m.free_at for m in machines}
        for name in sorted(tasks, key=lambda n: state.job_named(n).deadline):
            job = state.job_named(name)
            for tid in tasks[name]:
                best: tuple[float, str] | None = None
                for m in machines:
                    e = self._machine_s(state, state.machines[m.id], job)
                    if e is None:
                        continue
                    if best is None or free[m.id] + e < best[0]:
                        best = (free[m.id] + e, m.id)
                if best is None:
                    break
                free[best[1]] = best[0]
                s.do(Assign(tid, best[1]))

    # --- monitoring (Algorithm 4) -------------------------------------------------------------

    def _queue(self, state: RunState, m: Machine, now: float) -> Queue:
        """``m`` as the reassignment sees it: when its current task ends (by its observed
        speed), its queue, and its time per task of each job it can run."""
        times: dict[str, float] = {}
        for job in state.jobs:
            e = self._machine_s(state, m, job)
            if e is not None:
                times[job.name] = e
        booting = m.state is MachineState.BOOTING
        busy = max(now, m.launched_at + m.type.boot_s) if booting else now
        for tid, start in m.running.items():
            e = times.get(state.job_of(tid).name, 0.0)
            busy = max(busy, start + e, now)
        tasks = [(tid, state.job_of(tid).name) for tid in m.queue]
        for _, name in tasks:
            times.setdefault(name, state.job_named(name).task_s.get(m.type.name, 0.0))
        return Queue(m.id, busy, m.paid_until - state.billing.boundary_margin_s(), tasks, times)

    def _queues(self, state: RunState, now: float) -> list[Queue]:
        return [self._queue(state, m, now) for m in state.alive_machines()]

    def _deadlines(self, state: RunState, guarded: bool = False) -> dict[str, float]:
        """Each job's deadline; ``guarded``: less ``guard_z`` times the spread of one of
        its tasks (the largest sd seen on a type), what plans and moves aim for, so the
        last task's own noise does not carry it past the deadline."""
        return {
            j.name: j.deadline - (self._guard(state, j) if guarded else 0.0) for j in state.jobs
        }

    def _guard(self, state: RunState, job: JobSpec) -> float:
        worst = 0.0
        for name in state.types:
            runs = state.job_runs.get((job.name, name))
            if runs is not None and runs[0] >= 2:
                worst = max(worst, _mean_sd(runs)[1])
        return self.settings.guard_z * worst

    def _reassign(self, s: Step) -> None:
        state = s.state
        result = reassign(self._queues(state, s.now), self._deadlines(state, guarded=True))
        for move in result.moves:
            s.do(move)

    def _watch(self, s: _DStep, buy: bool) -> None:
        """Say what will be late; first, if ``buy``, give late tasks to new machines that
        finish them in time, when the budget pays for them."""
        state = s.state
        deadlines = self._deadlines(state)
        cause: str | None = None
        if buy:
            guarded = self._deadlines(state, guarded=True)
            at_risk = lateness(self._queues(state, s.now), guarded)
            if at_risk:
                _, cause = self._buy_for_late(s, at_risk, guarded)
        late = lateness(self._queues(state, s.now), deadlines)
        late_by_job = {item.job: item for item in late}
        for job in state.jobs:
            item = late_by_job.get(job.name)
            said = state.late.get(job.name)
            if item is None:
                if said is not None and said.tasks > 0:
                    s.do(Late(job.name, 0, 0.0, "", f"job {job.name}: expected on time again"))
                continue
            if said is not None and said.tasks > 0 and not self._changed(said, item):
                continue
            why = cause or ("budget" if job.name in s.unpaid else None)
            if why is None:
                why = said.cause if said is not None and said.cause else "deadline"
            s.do(
                Late(
                    job.name,
                    item.tasks,
                    item.seconds,
                    why,
                    f"job {job.name} is expected to miss its deadline: {item.tasks} tasks "
                    f"late, the last by {item.seconds:.0f} s ({_CAUSES[why]})",
                )
            )

    def _changed(self, said: Late, now: Lateness) -> bool:
        share = self.settings.late_change
        return abs(now.tasks - said.tasks) > share * max(said.tasks, 1) or abs(
            now.seconds - said.seconds
        ) > share * max(said.seconds, 1.0)

    def _buy_for_late(
        self, s: _DStep, late: Sequence[Lateness], deadlines: Mapping[str, float]
    ) -> tuple[bool, str]:
        """New machines for the tasks expected late (by ``deadlines``), if they finish
        them in time and the budget pays; returns (whether any were bought, what gave
        way otherwise)."""
        state = s.state
        late_jobs = {item.job for item in late}
        # The late tasks: from the end of each violating machine's queue of the job.
        taken: dict[str, list[tuple[int, str]]] = {}
        for q in self._queues(state, s.now):
            for name, (n, _) in late_tasks(q, deadlines).items():
                if name not in late_jobs or n <= 0:
                    continue
                queued = [tid for tid, j in q.tasks if j == name]
                for tid in queued[len(queued) - n :]:
                    taken.setdefault(name, []).append((tid, q.machine))
        if not taken:
            return False, "deadline"
        jobs = []
        for name, items in taken.items():
            job = state.job_named(name)
            times = self.task_times(state, job) or dict(job.task_s)
            if times:
                jobs.append(DeadlineJob(name, len(items), deadlines[name], times))
        types = self._types(state)
        result = solve_new(jobs, types, state.billing, s.now, solver=self.settings.solver)
        if result.plan is None:
            return False, "deadline"
        money = math.inf if state.budget is None else state.budget - state.committed
        if result.plan.cost > money + _EPS:
            return False, "budget"
        for items in taken.values():
            for tid, mid in items:
                s.do(Cancel(tid, mid, "late here: moved to a new machine"))
        tasks = {name: [tid for tid, _ in items] for name, items in taken.items()}
        self._carry_out(s, result.plan, tasks)
        return True, "deadline"

    # --- money at the end of a paid unit, and idle machines --------------------------------

    def _can_extend(self, state: RunState, m: Machine) -> bool:
        if state.budget is None:
            return True
        extra = state.billing.extension_cost(m.type.price, m.launched_at, m.paid_until)
        return state.committed + extra <= state.budget + _EPS

    def _wanted_soon(self, state: RunState, m: Machine, until: float) -> bool:
        """Whether a job that has not arrived yet arrives before ``until`` and can run on
        ``m``'s type."""
        return any(
            job.name not in state.arrived
            and job.at < until
            and (not job.task_s or m.type.name in job.task_s)
            for job in state.jobs
        )

    def _boundary(self, s: Step, m: Machine) -> None:
        state = s.state
        margin = state.billing.boundary_margin_s()
        if not m.alive or m.paid_until - s.now > margin + _EPS:
            return
        work = bool(m.running or m.queue)
        if state.stopped:
            s.do(Release(m.id, "end of paid time: run stopping"))
        elif not work and not self._wanted_soon(state, m, m.paid_until + state.billing.step_s):
            s.do(Release(m.id, "end of paid time: no work left"))
        elif self._can_extend(state, m):
            s.do(Extend(m.id, m.paid_until + state.billing.step_s))
        else:
            s.do(Release(m.id, "end of paid time: budget cannot pay another unit"))

    def _idle(self, s: Step) -> None:
        """Per-second billing: an idle machine no arriving job can use goes now (fixed
        ATUs: it stays to its boundary, a recipient for late work at no cost)."""
        state = s.state
        if state.billing.mode == "fixed":
            return
        idle = [m for m in state.alive_machines() if m.idle]
        if not idle or self._ready_jobs(state):
            return
        for m in idle:
            if not self._wanted_soon(state, m, m.paid_until):
                s.do(Release(m.id, "idle: no work left"))

    # --- the end --------------------------------------------------------------------------

    def _finish(self, s: Step) -> None:
        state = s.state
        if self.settings.keep_open:
            return  # a pool ends on Shutdown or Interrupted only; idle machines go as above
        if state.finished:
            for m in list(state.alive_machines()):
                s.do(Release(m.id, "every job finished"))
            if not state.stopped:
                s.do(Stop(None))
            return
        if state.stopped or state.pending_launches or state.any_alive():
            return
        if len(state.arrived) < len(state.jobs):
            return  # waiting for jobs to arrive
        left = state.budget - state.committed if state.budget is not None else math.inf
        s.do(
            Stop(
                f"{state.tasks_left} tasks left and no machine can be bought for them "
                + (
                    f"({max(left, 0):.2f} of the budget left cannot pay a unit)"
                    if state.budget is not None
                    else "(no type can run them, or none is available)"
                )
            )
        )


def _mean_sd(runs: Sequence[float]) -> tuple[float, float]:
    """Mean and sample sd of runs kept as (count, sum, sum of squares)."""
    n, total, squares = runs
    mean = total / n
    return mean, math.sqrt(max(0.0, squares / n - mean * mean) * n / max(n - 1, 1))
