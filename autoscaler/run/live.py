"""What a person sees of a real run: a live panel on a terminal, and ``status`` lines."""

from __future__ import annotations

import bisect
import contextlib
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from autoscaler.config.schema import RunConfig
from autoscaler.core.model import MachineState, TaskState
from autoscaler.core.state import RunState
from autoscaler.core.words import counted
from autoscaler.report.build import makespan_s
from autoscaler.report.format import hms

Update = Callable[[RunState, float | None], None]


def machine_counts(state: RunState) -> dict[str, dict[str, int]]:
    """Live machines per type: booting and ready."""
    out = {name: {"booting": 0, "ready": 0} for name in state.types}
    for m in state.fleet.alive_machines():
        key = "booting" if m.state is MachineState.BOOTING else "ready"
        out[m.type.name][key] += 1
    return out


def summary_rows(cfg: RunConfig, state: RunState, estimate: float | None) -> list[tuple[str, str]]:
    budget = state.money.budget_of(cfg.constraint.budget)
    money = f"{state.money.committed:.2f}" + ("" if budget is None else f" of {budget:g}")
    machines = ", ".join(
        f"{name} {c['ready']}" + (f" (+{c['booting']} booting)" if c["booting"] else "")
        for name, c in machine_counts(state).items()
    )
    rows = [
        (
            "tasks",
            f"{state.tasks.done} done, {state.tasks.failed} failed, "
            f"{len(state.tasks.running_on)} running, "
            f"{len(state.tasks.pending)} waiting, of {state.n_tasks}",
        ),
        ("machines", machines),
        ("committed", money),
        ("run time", hms(state.now)),
    ]
    # Once the run is over its finish is known: show it, not the last plan's estimate.
    over = state.money.stopped and not state.fleet.any_alive()
    if state.finished:
        rows.append(("finished at", hms(makespan_s(state))))
    elif over:
        rows.append(("stopped at", hms(state.now)))
    else:
        rows.append(("estimated finish", "not planned yet" if estimate is None else hms(estimate)))
        plan = state.decisions.plan()
        interval = None if plan is None else plan.makespan_interval_s
        if interval is not None:
            rows.append(("finish interval", f"{hms(interval[0])} – {hms(interval[1])}"))
    if state.decisions.risks:
        at, risk = state.decisions.risks[-1]
        rows.append(("risk", f"at {hms(at)}: {risk.message}"))
    if state.decisions.shortfalls:
        at, warning = state.decisions.shortfalls[-1]
        rows.append(("warning", f"at {hms(at)}: {warning.message}"))
    rows += job_rows(state)
    if len(cfg.provider_names()) > 1:
        per = state.fleet.by_provider()
        rows.append(
            (
                "providers",
                "; ".join(
                    f"{name} ({cfg.kind_of(name)}): "
                    f"{counted(per.get(name, (0, 0.0))[0], 'machine')}, "
                    f"{per.get(name, (0, 0.0))[1]:.2f} committed"
                    for name in cfg.provider_names()
                ),
            )
        )
    if state.money.stopped:
        rows.append(("ended" if over else "stopping", state.money.stop_reason or "bag finished"))
    return rows


def jobs_done(state: RunState) -> dict[str, int]:
    """Per job, its tasks done so far (``DoneByJob``, kept on the state's tasks)."""
    if not state.work.jobs:
        return {}
    kept = state.tasks.memo.get(_DONE_BY_JOB)
    if not isinstance(kept, DoneByJob):
        kept = state.tasks.memo[_DONE_BY_JOB] = DoneByJob()
    return kept.count(state)


_DONE_BY_JOB = "done by job"


class DoneByJob:
    """Each job's tasks done, counted from the runs that ended since it last looked
    (``segments``, in order): a task is done once one of its runs ended done, in the
    same record that made it so. The live view and the gauges ask five times a second:
    a pass over every task of every job each time was a pass over the whole bag."""

    def __init__(self) -> None:
        self._read = 0  # segments read so far
        self._counted = bytearray()  # per task: counted already (a pair's second run)
        self._done: dict[str, int] = {}
        self._firsts: list[int] = []  # the jobs' first tasks, ascending
        self._names: list[str] = []
        self._jobs = 0  # jobs when ``_firsts`` was made

    def count(self, state: RunState) -> dict[str, int]:
        jobs = state.work.jobs
        if len(jobs) != self._jobs:
            order = sorted(jobs, key=lambda j: j.first)
            self._firsts, self._names = [j.first for j in order], [j.name for j in order]
            self._jobs = len(jobs)
        task_state, segments = state.tasks.task_state, state.tasks.segments
        if len(self._counted) < len(task_state):
            self._counted.extend(bytes(len(task_state) - len(self._counted)))
        counted_, done = self._counted, self._done
        for seg in itertools.islice(segments, self._read, None):
            tid = seg.task
            if seg.outcome == "done" and not counted_[tid] and task_state[tid] is _DONE:
                counted_[tid] = 1
                at = bisect.bisect_right(self._firsts, tid) - 1
                if at >= 0:
                    done[self._names[at]] = done.get(self._names[at], 0) + 1
        self._read = len(segments)
        return {j.name: done.get(j.name, 0) for j in jobs}


_DONE = TaskState.DONE


def job_rows(state: RunState) -> list[tuple[str, str]]:
    """Deadline mode: per job, its tasks done of all, its deadline, and the lateness last
    said of it (none in budget mode)."""
    rows = []
    done = jobs_done(state)
    for job in state.work.jobs:
        text = f"{done[job.name]}/{job.count} done, due at {hms(job.deadline)}"
        if job.name not in state.work.arrived:
            text += f", arrives at {hms(job.at)}"
        late = state.work.late.get(job.name)
        if late is not None and late.tasks > 0:
            text += (
                f"; expected late: {counted(late.tasks, 'task')}, by {late.seconds:.0f} s "
                f"({late.cause})"
            )
        learned = [
            n for (name, _), (_, n) in sorted(state.work.learned.items()) if name == job.name
        ]
        for n in learned:
            text += f"; learned {n.type} {n.learned_s:.1f} s (declared {n.declared_s:g} s)"
        rows.append((f"job {job.name}", text))
    return rows


@contextlib.contextmanager
def live_view(console: Console, cfg: RunConfig, total: int) -> Iterator[Update]:
    """A panel redrawn as the run goes, on a terminal; elsewhere nothing."""
    if not console.is_terminal:
        yield lambda state, estimate: None
        return

    def render(state: RunState | None, estimate: float | None) -> Table:
        table = Table(title=f"{cfg.name}: {counted(total, 'task')}", show_header=False, box=None)
        table.add_column(style="bold")
        table.add_column()
        if state is not None:
            for key, value in summary_rows(cfg, state, estimate):
                table.add_row(key, value)
        return table

    with Live(render(None, None), console=console, refresh_per_second=4, transient=True) as live:

        def update(state: RunState, estimate: float | None) -> None:
            live.update(render(state, estimate))

        yield update


def status_lines(
    run_id: str, cfg: RunConfig, state: RunState, pid: int | None, service: Path | None = None
) -> list[str]:
    """``autoscaler status``: the run as its journal says, whether a daemon holds it, and
    how to carry it on as what it is: a job of the service whose state directory is
    ``service``, a held plan's run, or a plain run."""
    daemon = f"running (pid {pid})" if pid else "not running"
    lines = [f"run {run_id}: daemon {daemon}; journal up to run time {hms(state.now)}"]
    lines += [f"  {key}: {value}" for key, value in summary_rows(cfg, state, planned_finish(state))]
    over = state.finished or (state.money.stopped and not state.fleet.any_alive())
    if service is not None:
        if not pid and not over:
            lines.append(
                f"  a job of the service in {service}: it carries on when the service starts "
                f"again: autoscaler serve <its service config> --state-dir {service}"
            )
    elif state.money.awaiting_budget and not state.money.interrupted:
        lines.append(
            "  the samples are in and the run waits for a budget: "
            "autoscaler run --plan <plan dir> --option N (or --resume <run dir> --budget B)"
        )
    elif not pid and not over:
        lines.append("  carry on with: autoscaler run --resume <run dir>")
    return lines


def planned_finish(state: RunState) -> float | None:
    plan = state.decisions.plan()
    return None if plan is None else plan.predicted_makespan_s
