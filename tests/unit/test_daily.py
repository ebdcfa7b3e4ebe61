"""The service's cost per UTC day, on runs in the emulator: each machine's cost split at
midnight by its wall-clock seconds either side, counted here from the machines' lives."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.state import Machine, RunState
from autoscaler.run.start import dry_run
from autoscaler.service.daily import (
    DayReport,
    JobRun,
    daily_costs,
    day_fractions,
    write_daily_reports,
)
from tests.unit.deadline_runs import deadline_run, jobs, one_step_shares

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"
MIDNIGHT = datetime(2025, 3, 1, tzinfo=UTC).timestamp()


@pytest.fixture(scope="module")
def budget_state() -> RunState:
    """quickstart.yaml in the emulator: 20 machines, some living 6607 s."""
    cfg = load_config(CONFIG_DIR / "examples" / "quickstart.yaml")
    return dry_run(cfg, expand_bag(cfg), seed=1, run_id="r", plots=False).state


@pytest.fixture(scope="module")
def deadline_state() -> RunState:
    """Three jobs of a deadline-mode run, come at once, sharing its machines."""
    return deadline_run(jobs(3, 20, gap_s=0.0))


def life(m: Machine) -> tuple[float, float]:
    assert m.ended_at is not None
    return m.launched_at, m.ended_at


def cost(state: RunState, m: Machine) -> float:
    start, end = life(m)
    return state.billing.cost(m.type.price, end - start)


def before_midnight(m: Machine, start_wall: float, scale: float) -> float:
    """The part of ``m``'s wall-clock life before MIDNIGHT."""
    start, end = (start_wall + t / scale for t in life(m))
    return min(1.0, max(0.0, (MIDNIGHT - start) / (end - start)))


def on_day(before: float, first: bool) -> float:
    """The part on the first day or the second, of a life ``before`` of it before midnight."""
    return before if first else 1 - before


def total(days: list[DayReport]) -> float:
    return sum(d.cost for d in days)


def test_a_budget_run_across_midnight_is_split_by_wall_seconds(budget_state: RunState) -> None:
    """Half an hour before midnight at time scale 1: each machine's cost and hours go to
    the two days by its seconds either side of midnight, all to the one job."""
    start_wall = MIDNIGHT - 1800
    days = daily_costs([JobRun("j1", "quickstart", budget_state, start_wall)])
    assert [d.day for d in days] == ["2025-02-28", "2025-03-01"]
    machines = list(budget_state.fleet.machines.values())
    parts = [before_midnight(m, start_wall, 1.0) for m in machines]
    assert all(0 < p < 1 for p in parts), "every machine should span midnight"
    for day, first in zip(days, (True, False), strict=True):
        expected = sum(
            cost(budget_state, m) * on_day(p, first) for m, p in zip(machines, parts, strict=True)
        )
        hours = sum(
            (life(m)[1] - life(m)[0]) / 3600 * on_day(p, first)
            for m, p in zip(machines, parts, strict=True)
        )
        assert day.cost == pytest.approx(expected)
        assert day.machine_hours == pytest.approx(hours)
        assert [(j.id, j.name) for j in day.jobs] == [("j1", "quickstart")]
        assert day.jobs[0].cost == pytest.approx(expected)
        assert day.jobs[0].machine_hours == pytest.approx(hours)
        assert day.unattributed_cost == pytest.approx(0.0, abs=1e-9)
        for t in day.machine_types:
            of_type = [
                (m, p) for m, p in zip(machines, parts, strict=True) if m.type.name == t.type
            ]
            assert t.machines == len(of_type)
            assert t.cost == pytest.approx(
                sum(cost(budget_state, m) * on_day(p, first) for m, p in of_type)
            )
    assert total(days) == pytest.approx(budget_state.actual_cost())


def test_a_run_over_several_days_adds_up_to_its_machines_cost(budget_state: RunState) -> None:
    """At 20 run seconds per wall hour the 6607 s run lasts 13 days; the days' costs add
    up to the machines', and the machines that ended at 3083 s are gone after day 7."""
    scale = 20 / 3600
    days = daily_costs([JobRun("j1", "quickstart", budget_state, MIDNIGHT + 600, scale)])
    assert len(days) == 14
    assert days[0].day == "2025-03-01"
    assert total(days) == pytest.approx(budget_state.actual_cost())
    assert sum(d.machine_hours for d in days) == pytest.approx(
        sum((life(m)[1] - life(m)[0]) / 3600 for m in budget_state.fleet.machines.values())
    )
    alive = [sum(t.machines for t in d.machine_types) for d in days]
    early = sum(life(m)[1] < 3200 for m in budget_state.fleet.machines.values())
    assert alive[0] == len(budget_state.fleet.machines)
    assert alive[-1] == len(budget_state.fleet.machines) - early


def test_a_deadline_run_is_shared_by_its_jobs_each_day(deadline_state: RunState) -> None:
    """A record per job of the run: each machine's day share split among the jobs it ran
    that had come by its launch, by their seconds; a job without a record is charged to
    no one."""
    start_wall = MIDNIGHT - 600
    names = [j.name for j in deadline_state.work.jobs]
    recs = [
        JobRun(f"j{i}", name, deadline_state, start_wall, job=name)
        for i, name in enumerate(names[:2])
    ]
    days = daily_costs(recs)
    assert [d.day for d in days] == ["2025-02-28", "2025-03-01"]
    machines = list(deadline_state.fleet.machines.values())
    for day, first in zip(days, (True, False), strict=True):
        expected = dict.fromkeys(names, 0.0)
        for m in machines:
            part = cost(deadline_state, m) * on_day(before_midnight(m, start_wall, 1.0), first)
            for name, share in one_step_shares(deadline_state, m).items():
                expected[name] += part * share
        assert [(j.id, j.name) for j in day.jobs] == [("j0", names[0]), ("j1", names[1])]
        for j in day.jobs:
            assert j.cost == pytest.approx(expected[j.name])
            assert j.cost > 0
        assert day.unattributed_cost == pytest.approx(expected[names[2]])
        assert day.cost == pytest.approx(sum(expected.values()))
    assert total(days) == pytest.approx(deadline_state.actual_cost())


def test_runs_together_add_up(budget_state: RunState, deadline_state: RunState) -> None:
    """A budget run and a deadline run with a record per job, at different time scales:
    one machine-type line per type with both runs' machines, the totals the machines'."""
    recs = [JobRun("b", "quickstart", budget_state, MIDNIGHT - 60, 60.0)]
    recs += [
        JobRun(f"d{i}", j.name, deadline_state, MIDNIGHT - 3600, 1.0, job=j.name)
        for i, j in enumerate(deadline_state.work.jobs)
    ]
    days = daily_costs(recs)
    assert total(days) == pytest.approx(budget_state.actual_cost() + deadline_state.actual_cost())
    first = days[0]
    assert first.unattributed_cost == pytest.approx(0.0, abs=1e-9)
    assert sum(j.cost for j in first.jobs) == pytest.approx(first.cost)
    small = next(t for t in first.machine_types if t.type == "small")
    assert small.machines == sum(
        m.type.name == "small"
        for s in (budget_state, deadline_state)
        for m in s.fleet.machines.values()
    )


def test_one_run_with_two_clocks_is_refused(deadline_state: RunState) -> None:
    a, b = (j.name for j in deadline_state.work.jobs[:2])
    with pytest.raises(AutoscalerError, match="clocks"):
        daily_costs(
            [
                JobRun("x", a, deadline_state, MIDNIGHT, job=a),
                JobRun("y", b, deadline_state, MIDNIGHT + 1, job=b),
            ]
        )


def test_written_reports_read_back(budget_state: RunState, tmp_path: Path) -> None:
    """A JSON and a Markdown file per day; the JSON is the day's record, the Markdown has
    the total and a row per job and per type; no temporary file is left."""
    days = daily_costs([JobRun("j1", "quickstart", budget_state, MIDNIGHT - 1800)])
    out = tmp_path / "reports" / "daily"
    written = write_daily_reports(days, out)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in written)
    assert sorted(p.name for p in written) == [
        "2025-02-28.json",
        "2025-02-28.md",
        "2025-03-01.json",
        "2025-03-01.md",
    ]
    for day in days:
        data = json.loads((out / f"{day.day}.json").read_text(encoding="utf-8"))
        assert data["cost"] == pytest.approx(day.cost)
        assert data["jobs"][0]["id"] == "j1"
        assert {t["type"]: t["machines"] for t in data["machine_types"]} == {
            t.type: t.machines for t in day.machine_types
        }
        md = (out / f"{day.day}.md").read_text(encoding="utf-8")
        assert f"{day.cost:,.4f}" in md
        assert "| j1 | quickstart |" in md
        assert md.count("| small |") == md.count("| fast |") == 1


def test_day_fractions_at_the_edges() -> None:
    """A life with no length is its launch day's; one ending at midnight touches one day;
    one across a midnight is split by its seconds either side."""
    first, second = (datetime.fromtimestamp(MIDNIGHT + d, UTC).date() for d in (-1, 1))
    assert day_fractions(MIDNIGHT - 5, MIDNIGHT - 5) == {first: 1.0}
    assert day_fractions(MIDNIGHT - 100, MIDNIGHT) == {first: 1.0}
    split = day_fractions(MIDNIGHT - 100, MIDNIGHT + 300)
    assert split == {first: pytest.approx(0.25), second: pytest.approx(0.75)}
