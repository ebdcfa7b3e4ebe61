"""Building a run's report from its state: costs recomputed from each machine's launch
and end under the billing model, so the report checks the controller's bookkeeping
rather than repeating it."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autoscaler.config.schema import RunConfig
from autoscaler.core.model import NOTICE_REASON, OUT_OF_MONEY, Risk, Shortfall, TaskSpec, TaskState
from autoscaler.core.state import RunState
from autoscaler.core.task_files import task_location
from autoscaler.report.attribution import job_outcomes
from autoscaler.report.category_lines import category_lines
from autoscaler.report.format import inside, rounded, rounded_pair
from autoscaler.report.outputs import OutputsSummary, TaskOutputs
from autoscaler.report.records import (
    EPS,
    BillingTerms,
    ConfigurationChoice,
    DeadlineReport,
    FailedTask,
    LaunchProblem,
    MachineSummary,
    Prediction,
    ProviderSummary,
    ReclaimHoldNote,
    Rehearsal,
    Report,
    ShortfallNote,
    SpotPrices,
    SpotTypeLine,
    TypeSummary,
    UnfinishedTask,
    UnfinishedWhy,
)

_DONE = TaskState.DONE  # an enum member read once: it is asked of every task


def makespan_s(state: RunState) -> float:
    """The last task's end if the bag is finished, else the run's time so far."""
    if not state.finished:
        return state.now
    return max((seg.end for seg in state.tasks.segments if seg.outcome == "done"), default=0.0)


def unfinished_tasks(state: RunState, tasks: Sequence[TaskSpec]) -> tuple[UnfinishedTask, ...]:
    """The tasks of ``state`` not done, by id, with their commands from ``tasks``.

    A task that ran at least once (a Gantt segment, of any outcome) and is neither done
    nor failed for good was cut off; one that never ran was not started.
    """
    left = [(tid, st) for tid, st in enumerate(state.tasks.task_state) if st is not _DONE]
    if not left:  # a finished bag: no pass over every task's command and run
        return ()
    commands = {t.id: t.command for t in tasks}
    ran = {seg.task for seg in state.tasks.segments}
    out = []
    for tid, st in left:
        why: UnfinishedWhy
        if st is TaskState.FAILED:
            why = "failed"
        elif st is TaskState.RUNNING or tid in ran:
            why = "cut_off"
        else:
            why = "not_started"
        out.append(
            UnfinishedTask(
                task=tid, command=commands.get(tid), why=why, error=state.tasks.task_errors.get(tid)
            )
        )
    return tuple(out)


def _first_note(
    warnings: Sequence[tuple[float, Shortfall | Risk]], borne_out: bool | None
) -> ShortfallNote | None:
    """The first of the run's shortfall (or risk) warnings, for the report."""
    if not warnings:
        return None
    at, w = warnings[0]
    return ShortfallNote(
        at_s=round(at, 3),
        tasks_left=w.tasks_left,
        needed_budget=rounded(w.needed_budget, 2),
        message=w.message,
        committed=rounded(w.committed, 2),
        borne_out=borne_out,
    )


def _out_of_money(state: RunState) -> bool | None:
    """What a warning that the budget may not finish the bag is checked against: True,
    the run ended with tasks left because the budget paid for no more machines; False,
    the bag was finished; None, the run ended otherwise or goes on."""
    if state.finished:
        return False
    if state.money.stopped and (state.money.stop_reason or "").startswith(OUT_OF_MONEY):
        return True
    return None


def _followed_plan(
    configurations: Sequence[ConfigurationChoice],
) -> tuple[ConfigurationChoice | None, float | None, float | None]:
    """The plan whose prediction the report holds the run to, when a best-effort
    plan it replaced was made (None: it replaced none), and when a sampling after the
    first plan began (None: none came, or no plan after it).

    Sampling and round robin configurations predict nothing; the first that does is the
    first plan after sampling. On a knife-edge budget that plan can be a best-effort
    one (the planner found no mix the budget pays for, at the first estimates), soon
    replaced by a plan that meets the budget once the estimates firm up: the run
    follows that one, and its prediction is the one to check. Types refused through
    sampling are sampled after the first plan once they may be launched
    (``budget.sampling.late_sampling``): the run follows the plan made with them."""
    made = [c for c in configurations if c.predicted_cost is not None]
    if not made:
        return None, None, None
    start = configurations.index(made[0])
    late = [i for i, c in enumerate(configurations) if i > start and c.predicted_cost is None]
    after = (
        [c for c in configurations[late[-1] + 1 :] if c.predicted_cost is not None] if late else []
    )
    if after:
        return after[0], None, configurations[late[-1]].t_s
    first = made[0]
    if not first.best_effort:
        return first, None, None
    followed = next((c for c in made if not c.best_effort), None)
    return (first, None, None) if followed is None else (followed, first.t_s, None)


HELD = (
    "the samples are in and the run waits for a budget (`autoscaler plan`); carry it on "
    "with `autoscaler run --plan PLAN_DIR --option N`, or `--resume RUN_DIR --budget B`"
)


def build_report(
    cfg: RunConfig,
    state: RunState,
    *,
    tasks: Sequence[TaskSpec],
    run_id: str,
    seed: int,
    wall_s: float | None = None,
    time_scale: float | None = None,
    refused_agents: int | None = None,
) -> Report:
    """The report of ``state`` run under ``cfg`` on the bag ``tasks``; ``time_scale`` and
    ``refused_agents`` are a real run's (the daemon's) and left out of a dry run's report."""
    billing = state.billing
    budget = state.money.budget_of(cfg.constraint.budget)
    machines = []
    totals = {t.name: _TypeTotals(slots=t.slots or 1) for t in cfg.machine_types}
    for m in state.fleet.machines.values():
        end = m.ended_at if m.ended_at is not None else state.now
        life = end - m.launched_at
        boot = (m.ready_at if m.ready_at is not None else end) - m.launched_at
        cost = state.fleet.billed(m, end)
        units = billing.paid_units(life)
        idle = max(0.0, m.type.slots * (life - boot) - m.busy_s)
        machines.append(
            MachineSummary(
                id=m.id,
                type=m.type.name,
                start_s=round(m.launched_at, 3),
                ready_s=rounded(m.ready_at),
                end_s=round(end, 3),
                units_paid=round(units, 3),
                cost=round(cost, 4),
                tasks_run=m.tasks_done,
                busy_s=round(m.busy_s, 3),
                idle_s=round(idle, 3),
                end_reason=m.end_reason,
                provider=cfg.provider_of(m.type.name),
                slots=m.type.slots,
                zone=m.zone,
            )
        )
        totals[m.type.name].add(units, cost, m.tasks_done, m.busy_s, idle, boot)
    cost = sum(t.cost for t in totals.values())
    configurations = tuple(
        ConfigurationChoice(
            t_s=round(t, 3),
            counts=dict(c.counts),
            reason=c.reason,
            predicted_cost=rounded(c.predicted_cost, 2),
            predicted_makespan_s=rounded(c.predicted_makespan_s),
            cost_interval=rounded_pair(c.cost_interval, 2),
            makespan_interval_s=rounded_pair(c.makespan_interval_s, 3),
            best_effort=c.best_effort,
        )
        for t, c in state.decisions.configurations
    )
    makespan = round(makespan_s(state), 3)
    first_plan, replaced_at, resampled_at = _followed_plan(configurations)
    if state.work.deadline_mode:
        first_plan = None
    report = Report(
        run_id=run_id,
        mode="budget",
        policy=f"deadline ({cfg.deadline.planner}-job planner)"
        if cfg.deadline_mode
        else cfg.policy,
        provider=cfg.provider_label(),
        seed=seed,
        budget=budget,
        cost=round(cost, 4),
        committed=round(state.money.committed, 4),
        within_budget=budget is None or cost <= budget + EPS,
        makespan_s=makespan,
        tasks_total=state.n_tasks,
        tasks_done=state.tasks.done,
        tasks_failed=state.tasks.failed,
        stop_reason=HELD
        if state.money.awaiting_budget and not state.finished
        else state.money.stop_reason,
        predicted=None
        if first_plan is None
        else Prediction(
            cost=first_plan.predicted_cost,
            makespan_s=first_plan.predicted_makespan_s,
            at_s=first_plan.t_s,
            cost_interval=first_plan.cost_interval,
            makespan_interval_s=first_plan.makespan_interval_s,
            cost_inside=inside(cost, first_plan.cost_interval),
            makespan_inside=None
            if not state.finished
            else inside(makespan, first_plan.makespan_interval_s),
            best_effort=first_plan.best_effort,
            replaced_best_effort_at_s=replaced_at,
            resampled_at_s=resampled_at,
        ),
        shortfall=_first_note(state.decisions.shortfalls, _out_of_money(state)),
        risk=_first_note(state.decisions.risks, _out_of_money(state)),
        categories=category_lines(cfg, state),
        billing=BillingTerms(
            mode=billing.mode,
            atu_s=billing.atu_s,
            min_charge_s=billing.min_charge_s if billing.mode == "per_second" else None,
        ),
        configurations=configurations,
        machine_types={name: t.summary() for name, t in totals.items()},
        machines=tuple(machines),
        failed_tasks=tuple(
            FailedTask(
                task=tid,
                attempts=state.tasks.attempts[tid],
                error=state.tasks.task_errors.get(tid, ""),
            )
            for tid, st in enumerate(state.tasks.task_state)
            if st.value == "failed"
        ),
        launch_problems=tuple(
            LaunchProblem(t_s=round(t, 3), type=tname, kind=kind, reason=reason)
            for t, tname, kind, reason in state.capacity.launch_problems
        ),
        wall_s=rounded(wall_s),
        unfinished_tasks=unfinished_tasks(state, tasks),
        time_scale=time_scale,
        refused_agents=refused_agents,
        providers=provider_summaries(cfg, totals),
        outputs=None if time_scale is None else outputs_summary(state, tasks),
        spot_prices=spot_prices(state),
        reclaim_holds=reclaim_holds(state) or None,
    )
    if not state.work.deadline_mode:
        return report
    jobs, unattributed = job_outcomes(state)
    fields = {f.name: getattr(report, f.name) for f in dataclasses.fields(report)}
    fields["mode"] = "deadline"
    return DeadlineReport(
        **fields,
        jobs=jobs,
        jobs_met_deadline=sum(j.met_deadline for j in jobs),
        unattributed_cost=round(unattributed, 4),
    )


def spot_prices(state: RunState) -> SpotPrices | None:
    """The prices of ``state``'s market-priced types and what their machines cost at
    their caps and at the prices in force (None: the run has no such type)."""
    capped = {name: t.cap for name, t in state.types.items() if t.cap is not None}
    if not capped:
        return None
    market, fleet = state.fleet.market, state.fleet
    lines = {}
    for name, cap in capped.items():
        mine = [m for m in fleet.machines.values() if m.type.name == name]
        ends = [(m, m.ended_at if m.ended_at is not None else state.now) for m in mine]
        lines[name] = SpotTypeLine(
            cap=round(cap, 6),
            last_price=market.last(name),
            at_cap=round(sum(state.billing.cost(cap, e - m.launched_at) for m, e in ends), 4),
            billed=round(sum(fleet.billed(m, e) for m, e in ends), 4),
        )
    return SpotPrices(
        source=market.source if market.refreshes else "config",
        refreshed_at_s=rounded(market.known_until),
        refreshes=market.refreshes,
        types=lines,
    )


def outputs_summary(state: RunState, tasks: Sequence[TaskSpec]) -> OutputsSummary | None:
    """Where the task files that came back are (None: the run's tasks have none)."""
    stored = []
    for tid, st in sorted(state.tasks.stored.items()):
        spec = tasks[tid].files if tid < len(tasks) else None
        where = task_location(spec, tid) if spec is not None else f"outputs/{tid}/"
        stored.append(TaskOutputs(tid, where, st.files, st.bytes))
    if not stored and not any(t.files is not None for t in tasks):
        return None
    return OutputsSummary(
        tasks=len(stored),
        files=sum(s.files for s in stored),
        bytes=sum(s.bytes for s in stored),
        empty=tuple(s.task for s in stored if s.files == 0),
        stored=tuple(stored),
    )


def provider_summaries(
    cfg: RunConfig, totals: Mapping[str, _TypeTotals]
) -> dict[str, ProviderSummary]:
    """Per provider of ``cfg``: its types' machines and costs summed."""
    out = {}
    for name in cfg.provider_names():
        types = tuple(t.name for t in cfg.machine_types if cfg.provider_of(t.name) == name)
        mine = [totals[t] for t in types]
        out[name] = ProviderSummary(
            kind=cfg.kind_of(name),
            types=types,
            machines=sum(t.machines for t in mine),
            units_paid=round(sum(t.units_paid for t in mine), 4),
            cost=round(sum(t.cost for t in mine), 4),
            tasks_run=sum(t.tasks_run for t in mine),
        )
    return out


@dataclass
class _TypeTotals:
    """One machine type's sums while the report is built (rounded once, at the end)."""

    machines: int = 0
    units_paid: float = 0.0
    cost: float = 0.0
    tasks_run: int = 0
    busy_s: float = 0.0
    idle_s: float = 0.0
    boot_s: float = 0.0
    slots: int = 1

    def add(
        self, units: float, cost: float, tasks: int, busy_s: float, idle_s: float, boot_s: float
    ) -> None:
        self.machines += 1
        self.units_paid += units
        self.cost += cost
        self.tasks_run += tasks
        self.busy_s += busy_s
        self.idle_s += idle_s
        self.boot_s += boot_s

    def summary(self) -> TypeSummary:
        return TypeSummary(
            machines=self.machines,
            units_paid=round(self.units_paid, 4),
            cost=round(self.cost, 4),
            tasks_run=self.tasks_run,
            busy_s=round(self.busy_s, 4),
            idle_s=round(self.idle_s, 4),
            boot_s=round(self.boot_s, 4),
            slots=self.slots,
        )


def reclaim_holds(state: RunState) -> tuple[ReclaimHoldNote, ...]:
    """The types (or a type's zones) held after repeated reclaims, each with the other
    types launched meanwhile; a hold in force when the run ended, until then."""
    window = state.capacity.reclaims.policy.window_s
    out = []
    for h in state.capacity.reclaims.holds:
        moved = {
            m.type.name
            for m in state.fleet.machines.values()
            if h.start <= m.launched_at < h.until and m.type.name != h.type
        }
        out.append(
            ReclaimHoldNote(
                zone=h.zone,
                type=h.type,
                from_s=round(h.start, 3),
                until_s=round(min(h.until, max(h.start, state.now)), 3),
                reclaims=h.reclaims,
                window_s=window,
                moved_to=tuple(t for t in state.types if t in moved),
            )
        )
    return tuple(out)


def with_rehearsal(report: Report, state: RunState, calm: Report) -> Report:
    """``report`` of a dry run that rehearsed refusals and reclaims (``state``), with what
    they cost against ``calm``, the report of the same dry run without them."""
    taken = [m for m in report.machines if NOTICE_REASON in (m.end_reason or "")]
    ids = {m.id for m in taken}
    cut = [s for s in state.tasks.segments if s.outcome == "lost" and s.machine in ids]
    return dataclasses.replace(
        report,
        rehearsal=Rehearsal(
            refused=len(state.capacity.launch_problems),
            reclaimed=len(taken),
            reclaimed_cost=round(sum(m.cost for m in taken), 6),
            runs_cut=len(cut),
            cut_s=round(sum(s.end - s.start for s in cut), 3),
            calm_cost=calm.cost,
            calm_makespan_s=calm.makespan_s,
        ),
    )
