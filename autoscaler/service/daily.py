"""The service's cost per UTC calendar day, per job and per machine type
(``reports/daily/YYYY-MM-DD.json`` and ``.md`` in the service's state directory).

The rule: each machine's cost (``report.machine_cost``: its life under the billing model,
to ``state.now`` while it is alive) is split across the UTC days its life touches in
proportion to the wall-clock seconds of its life in each day; its machine-hours (its
life in run time, what is billed) are split the same way. A machine's wall-clock life
is ``start_wall + t / time_scale`` for its launch and end run times ``t``. A machine
whose life has no length is charged to the day of its launch.

A machine's day share then goes to the job that bought it: the whole run's job, or in
deadline mode (one run, several jobs sharing machines) to the jobs by
``report.job_shares`` (each billing step by the seconds it ran the jobs that were there
when it began). What no listed job bears (a machine that ran no task, or a job of the
run with no record) is the day's ``unattributed`` cost. A day's cost is the sum over its
machine types, which is its jobs' plus the unattributed; the days' costs add up to the
machines' costs. A day's jobs are also summed by group (``groups``: per grouping, e.g.
``project``, each job's group), so each grouping's costs add up to the jobs'.

Pure: records in, one ``DayReport`` per day out; ``write_daily_reports`` is the only I/O.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from autoscaler.core.atomic import write_atomic
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.state import RunState
from autoscaler.report.attribution import job_shares, machine_cost

_DAY_S = 86400.0


@dataclass(frozen=True)
class JobRun:
    """One job of the service and the run it is (or is part of)."""

    id: str
    """The service's job id."""
    name: str
    """The job's name."""
    state: RunState
    """The run's state; several records share one in deadline mode."""
    start_wall: float
    """Epoch seconds (UTC) at the run's time 0."""
    time_scale: float = 1.0
    """Run (emulated) seconds per real second."""
    job: str | None = None
    """Deadline mode: the run's job (``JobSpec.name``) this record is; None: the whole run."""

    def wall(self, t: float) -> float:
        """The epoch seconds of run time ``t``."""
        return self.start_wall + t / self.time_scale


@dataclass(frozen=True)
class JobDay:
    """One job's cost on one day."""

    id: str
    name: str
    cost: float
    machine_hours: float
    """Its share of the run-time hours of the machines it used that day."""


@dataclass(frozen=True)
class GroupDay:
    """One group's cost on one day (a project: its jobs' costs summed)."""

    name: str
    cost: float
    machine_hours: float


@dataclass(frozen=True)
class TypeDay:
    """One machine type's cost on one day."""

    type: str
    cost: float
    machine_hours: float
    machines: int
    """Machines of the type alive for some of the day."""


@dataclass(frozen=True)
class DayReport:
    """The cost of one UTC day."""

    day: str
    """YYYY-MM-DD (UTC)."""
    cost: float
    """The day's cost: its machine types' (its jobs' plus the unattributed)."""
    machine_hours: float
    jobs: tuple[JobDay, ...]
    """By job id, then name."""
    machine_types: tuple[TypeDay, ...]
    """By type name."""
    unattributed_cost: float
    """What no listed job bears: machines that ran no task, jobs without a record."""
    unattributed_machine_hours: float
    groups: Mapping[str, tuple[GroupDay, ...]] = field(default_factory=dict)
    """Per grouping (``project``), its groups' costs, by name."""

    def to_json(self) -> dict[str, object]:
        return asdict(self)


def day_fractions(start: float, end: float) -> dict[date, float]:
    """The UTC days the wall-clock interval [start, end] touches, each with the part of
    the interval's length in it (summing to 1); all of it on ``start``'s day if the
    interval has no length."""
    first = datetime.fromtimestamp(start, UTC).date()
    if end <= start:
        return {first: 1.0}
    out: dict[date, float] = {}
    day = first
    while True:
        lo = datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
        seconds = min(end, lo + _DAY_S) - max(start, lo)
        if seconds > 0:
            out[day] = seconds / (end - start)
        if lo + _DAY_S >= end:
            return out
        day += timedelta(days=1)


@dataclass
class _Sums:
    cost: float = 0.0
    hours: float = 0.0

    def add(self, cost: float, hours: float) -> None:
        self.cost += cost
        self.hours += hours


@dataclass
class _Day:
    jobs: dict[tuple[str, str], _Sums]
    types: dict[str, _Sums]
    machines: dict[str, set[tuple[int, str]]]
    unattributed: _Sums


def daily_costs(
    records: Iterable[JobRun], groups: Mapping[str, Mapping[str, str]] | None = None
) -> list[DayReport]:
    """The cost per UTC day of the runs of ``records``, oldest day first (see the module
    docstring for the rule); only days with a machine alive are listed. ``groups``: per
    grouping (``project``), each job id's group; a job it does not name is ``default``'s."""
    runs: dict[int, list[JobRun]] = {}
    for rec in records:
        runs.setdefault(id(rec.state), []).append(rec)
    days: dict[date, _Day] = {}
    for recs in runs.values():
        _add_run(recs, days)
    return [_summary(day, days[day], groups or {}) for day in sorted(days)]


def _add_run(recs: Sequence[JobRun], days: dict[date, _Day]) -> None:
    state, first = recs[0].state, recs[0]
    if any((r.start_wall, r.time_scale) != (first.start_wall, first.time_scale) for r in recs):
        raise AutoscalerError(f"job {first.id}: records of one run with different clocks")
    whole = [r for r in recs if r.job is None]
    if whole and len(recs) > 1:
        raise AutoscalerError(f"job {first.id}: a run has one record, or one per job of it")
    by_job = {r.job: (r.id, r.name) for r in recs if r.job is not None}
    shares = job_shares(state) if by_job else {}
    for m in state.fleet.machines.values():
        cost = machine_cost(state, m)
        end = m.ended_at if m.ended_at is not None else state.now
        hours = (end - m.launched_at) / 3600
        if whole:
            owners = {(whole[0].id, whole[0].name): 1.0}
        else:
            owners = {by_job[j]: s for j, s in shares.get(m.id, {}).items() if j in by_job}
        for day, frac in day_fractions(first.wall(m.launched_at), first.wall(end)).items():
            d = days.setdefault(day, _Day({}, {}, {}, _Sums()))
            d.types.setdefault(m.type.name, _Sums()).add(cost * frac, hours * frac)
            d.machines.setdefault(m.type.name, set()).add((id(state), m.id))
            owned = 0.0
            for key, share in owners.items():
                d.jobs.setdefault(key, _Sums()).add(cost * frac * share, hours * frac * share)
                owned += share
            d.unattributed.add(cost * frac * (1 - owned), hours * frac * (1 - owned))


def _summary(day: date, d: _Day, groups: Mapping[str, Mapping[str, str]]) -> DayReport:
    types = tuple(
        TypeDay(name, s.cost, s.hours, len(d.machines[name])) for name, s in sorted(d.types.items())
    )
    by: dict[str, tuple[GroupDay, ...]] = {}
    for grouping, group_of in groups.items():
        sums: dict[str, _Sums] = {}
        for (job_id, _), s in d.jobs.items():
            sums.setdefault(group_of.get(job_id, "default"), _Sums()).add(s.cost, s.hours)
        by[grouping] = tuple(GroupDay(n, s.cost, s.hours) for n, s in sorted(sums.items()))
    return DayReport(
        day=day.isoformat(),
        cost=sum(t.cost for t in types),
        machine_hours=sum(t.machine_hours for t in types),
        jobs=tuple(JobDay(i, n, s.cost, s.hours) for (i, n), s in sorted(d.jobs.items())),
        machine_types=types,
        unattributed_cost=max(0.0, d.unattributed.cost),
        unattributed_machine_hours=max(0.0, d.unattributed.hours),
        groups=by,
    )


def render_day(report: DayReport) -> str:
    """A day's report in Markdown: the total, then a table of jobs and one of types."""
    lines = [
        f"# Cost on {report.day} (UTC)",
        "",
        f"Total **{report.cost:,.4f}** for {report.machine_hours:,.2f} machine-hours"
        + (
            f", {report.unattributed_cost:,.4f} of it charged to no job."
            if report.unattributed_cost > 0
            else "."
        ),
        "",
        "| job | name | cost | machine-hours |",
        "| --- | --- | ---: | ---: |",
    ]
    lines += [
        f"| {j.id} | {j.name} | {j.cost:,.4f} | {j.machine_hours:,.2f} |" for j in report.jobs
    ]
    for grouping, rows in report.groups.items():
        lines += ["", f"| {grouping} | cost | machine-hours |", "| --- | ---: | ---: |"]
        lines += [f"| {g.name} | {g.cost:,.4f} | {g.machine_hours:,.2f} |" for g in rows]
    lines += [
        "",
        "| machine type | machines | cost | machine-hours |",
        "| --- | ---: | ---: | ---: |",
    ]
    lines += [
        f"| {t.type} | {t.machines} | {t.cost:,.4f} | {t.machine_hours:,.2f} |"
        for t in report.machine_types
    ]
    return "\n".join(lines) + "\n"


def write_daily_reports(days: Iterable[DayReport], out_dir: Path) -> list[Path]:
    """Write ``out_dir/YYYY-MM-DD.json`` and ``.md`` for each day, each file replaced
    atomically; the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for report in days:
        json_path = out_dir / f"{report.day}.json"
        md_path = out_dir / f"{report.day}.md"
        write_atomic(json_path, json.dumps(report.to_json(), indent=2) + "\n")
        write_atomic(md_path, render_day(report))
        written += [json_path, md_path]
    return written
