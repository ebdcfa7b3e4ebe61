"""Projects' money over a period (``service.projects``): periods, what a project has
spent and holds, admission, and the sums by project in the daily reports."""

from __future__ import annotations

import sqlite3
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.config.service_schema import Project, job_config, load_yaml, service_config
from autoscaler.core.errors import ConfigError
from autoscaler.run.start import dry_run
from autoscaler.service.daily import JobRun, daily_costs
from autoscaler.service.projects import Charge, cap, refusal, span_at, standings
from autoscaler.service.prometheus import render_metrics
from autoscaler.service.store import Store

EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"


def at(*when: int) -> float:
    return datetime(*when, tzinfo=UTC).timestamp()  # type: ignore[arg-type,misc]


LAB = Project(name="lab-a", budget=100.0)


def test_a_period_is_a_utc_calendar_month_an_iso_week_or_a_day() -> None:
    month = span_at("month", at(2026, 12, 31, 23, 59, 59))
    assert (month.label, month.first, month.last) == (
        "2026-12",
        date(2026, 12, 1),
        date(2026, 12, 31),
    )
    assert span_at("month", at(2027, 1, 1)).label == "2027-01"
    assert span_at("month", at(2028, 2, 10)).last == date(2028, 2, 29)
    week = span_at("week", at(2026, 12, 2, 12))  # a Wednesday
    assert (week.label, week.first, week.last) == (
        "2026-W49",
        date(2026, 11, 30),
        date(2026, 12, 6),
    )
    assert span_at("day", at(2026, 12, 2, 23)).label == "2026-12-02"
    assert month.start == at(2026, 12, 1)


def test_a_live_job_holds_its_budget_and_an_ended_job_counts_what_it_spent() -> None:
    charges = [
        Charge("j1", "lab-a", {date(2026, 12, 1): 7.5}),  # ended under its budget
        Charge("j2", "lab-a", {date(2026, 12, 2): 5.0}, hold=40.0),  # running
        Charge("j3", "lab-a", {}, hold=20.0),  # admitted, queued
    ]
    lab = standings([LAB], charges, at(2026, 12, 2, 12))["lab-a"]
    assert (lab.spent, lab.held) == (12.5, 55.0)
    assert lab.left == pytest.approx(32.5)
    assert lab.days == {"2026-12-01": 7.5, "2026-12-02": 5.0}


def test_a_job_across_the_start_of_a_month_is_charged_to_each_month_by_its_time() -> None:
    """It ran 3 in November and 2 so far in December, and may commit 10 in all: December
    bears its 2 and holds the 5 it may still spend; November's 3 are November's."""
    job = Charge("j1", "lab-a", {date(2026, 11, 30): 3.0, date(2026, 12, 1): 2.0}, hold=10.0)
    december = standings([LAB], [job], at(2026, 12, 1, 6))["lab-a"]
    assert (december.spent, december.held, december.left) == (2.0, 5.0, 93.0)
    ended = Charge("j1", "lab-a", {date(2026, 11, 30): 3.0, date(2026, 12, 1): 2.0})
    november = standings([LAB], [ended], at(2026, 11, 30, 23))["lab-a"]
    assert (november.spent, november.held, november.left) == (3.0, 0.0, 97.0)


def test_a_new_month_gives_the_project_its_whole_budget_again() -> None:
    spent = [Charge("j1", "lab-a", {date(2026, 12, 20): 95.0})]
    asks = 40.0
    december = standings([LAB], spent, at(2026, 12, 31, 23, 59))["lab-a"]
    assert refusal(december, asks) == (
        "project lab-a has $5.00 left of $100.00 this month (2026-12); job asks $40.00"
    )
    january = standings([LAB], spent, at(2027, 1, 1))["lab-a"]
    assert (january.spent, january.left) == (0.0, 100.0)
    assert refusal(january, asks) is None


def test_a_week_project_resets_on_monday() -> None:
    weekly = Project(name="w", budget=10.0, period="week")
    charges = [Charge("j1", "w", {date(2026, 12, 6): 10.0})]  # a Sunday
    assert standings([weekly], charges, at(2026, 12, 6, 23))["w"].left == 0.0
    assert standings([weekly], charges, at(2026, 12, 7))["w"].left == 10.0


def test_a_deadline_job_without_a_budget_needs_some_money_and_is_capped_at_what_is_left() -> None:
    lab = standings([LAB], [Charge("j1", "lab-a", {}, hold=100.0)], at(2026, 12, 2))["lab-a"]
    assert refusal(lab, None) == (
        "project lab-a has $0.00 left of $100.00 this month (2026-12); a deadline job needs some"
    )
    lab = standings([LAB], [Charge("j1", "lab-a", {}, hold=60.0)], at(2026, 12, 2))["lab-a"]
    assert refusal(lab, None) is None
    assert cap(lab) == 40.0


def test_without_projects_every_job_is_the_default_project_s_without_a_limit() -> None:
    found = standings([], [Charge("j1", "default", {date(2026, 12, 2): 1e6})], at(2026, 12, 2))
    (default,) = found.values()
    assert (default.project, default.budget, default.left, default.spent) == (
        "default",
        None,
        None,
        1e6,
    )
    assert refusal(default, 1e9) is None


def test_without_budgets_any_grouping_of_the_jobs_is_summed_by_group_this_month() -> None:
    """The same sums give another grouping's spend (a user's): each group this month,
    per day, without a limit; ``default`` is always there."""
    charges = [
        Charge("j1", "ann", {date(2026, 11, 30): 9.0, date(2026, 12, 1): 1.0}),
        Charge("j2", "ann", {date(2026, 12, 2): 2.0}),
        Charge("j3", "bob", {date(2026, 12, 2): 4.0}),
    ]
    found = standings([], charges, at(2026, 12, 2))
    assert {n: (s.spent, s.left, dict(s.days)) for n, s in found.items()} == {
        "ann": (3.0, None, {"2026-12-01": 1.0, "2026-12-02": 2.0}),
        "bob": (4.0, None, {"2026-12-02": 4.0}),
        "default": (0.0, None, {}),
    }


@given(
    asks=st.lists(st.floats(min_value=0.01, max_value=60.0), max_size=30),
    ends=st.lists(st.floats(min_value=0.0, max_value=1.0), max_size=30),
)
def test_the_admitted_jobs_never_hold_more_than_the_project_s_budget(
    asks: list[float], ends: list[float]
) -> None:
    """Jobs arrive and some end having spent a part of their budget; whatever is
    admitted, what is spent plus what is held stays within the budget."""
    now = at(2026, 12, 2)
    charges: list[Charge] = []
    for i, ask in enumerate(asks):
        lab = standings([LAB], charges, now)["lab-a"]
        if refusal(lab, ask) is None:
            charges.append(Charge(f"j{i}", "lab-a", {}, hold=ask))
        if i < len(ends) and charges:  # the oldest live job ends, spending a part
            live = next((c for c in charges if c.hold is not None), None)
            if live is not None:
                spent = {date(2026, 12, 2): live.hold * ends[i]}  # type: ignore[operator]
                charges[charges.index(live)] = Charge(live.job, "lab-a", spent)
        lab = standings([LAB], charges, now)["lab-a"]
        assert lab.spent + lab.held <= LAB.budget + 1e-6


# --- the config -------------------------------------------------------------------------


def service(projects: object) -> object:
    data = load_yaml(EXAMPLES / "service.yaml", "service")
    data["service"] = {**(data.get("service") or {}), "projects": projects}
    return service_config(data, source="service.yaml", base_dir=EXAMPLES)


@pytest.mark.parametrize(
    ("projects", "problem"),
    [
        ([{"name": "lab-a", "budget": -1}], "service.projects[0].budget"),
        ([{"name": "lab-a", "budget": 10, "period": "year"}], "service.projects[0].period"),
        ([{"name": "lab-a", "budget": 10, "when_over": "wait"}], "service.projects[0].when_over"),
        ([{"budget": 10}], "service.projects[0].name"),
        ([{"name": "a", "budget": 1}, {"name": "a", "budget": 2}], "service.projects"),
    ],
)
def test_a_bad_project_is_named_by_its_field(projects: object, problem: str) -> None:
    with pytest.raises(ConfigError) as err:
        service(projects)
    assert any(p.startswith(problem) for p in err.value.problems), err.value.problems


def test_a_job_of_a_project_the_service_does_not_list_is_refused_naming_the_known_ones() -> None:
    svc = service([{"name": "lab-a", "budget": 100}, {"name": "lab-b", "budget": 50}])
    job = load_yaml(EXAMPLES / "job.yaml", "job")
    for given_, said in (
        ({**job, "project": "lab-c"}, "project: 'lab-c' is not a project of this service"),
        (job, "project: the job names no project"),
    ):
        with pytest.raises(ConfigError) as err:
            job_config(svc, given_, source="job.yaml", base_dir=EXAMPLES, now_wall=0.0)  # type: ignore[arg-type]
        assert err.value.problems == [f"{said}; give one of: lab-a, lab-b"]
    cfg, _ = job_config(
        svc,  # type: ignore[arg-type]
        {**job, "project": "lab-b"},
        source="job.yaml",
        base_dir=EXAMPLES,
        now_wall=0.0,
    )
    assert cfg.project_name == "lab-b"


# --- the daily reports, by project ------------------------------------------------------


def test_a_day_s_cost_is_summed_by_project_and_the_projects_add_up_to_the_jobs() -> None:
    cfg = load_config(EXAMPLES / "quickstart.yaml")
    a, b = (dry_run(cfg, expand_bag(cfg), seed=s, run_id="r", plots=False).state for s in (1, 2))
    start = at(2025, 3, 1) - 3000  # across midnight
    records = [JobRun("j1", "a", a, start), JobRun("j2", "b", b, start + 10)]
    days = daily_costs(records, {"project": {"j1": "lab-a"}})  # j2 names none: default
    assert len(days) == 2
    for day in days:
        by = {g.name: g.cost for g in day.groups["project"]}
        jobs = {j.id: j.cost for j in day.jobs}
        assert by == {"lab-a": jobs["j1"], "default": jobs["j2"]}
        assert day.to_json()["groups"]["project"][0]["name"] == "default"  # type: ignore[index]


def test_each_project_s_money_is_a_gauge_and_one_without_a_limit_has_no_budget_or_left() -> None:
    charges = [
        Charge("j1", "lab-a", {date(2026, 12, 1): 7.5}),
        Charge("j2", "lab-a", {date(2026, 12, 2): 5.0}, hold=40.0),
    ]
    found = standings([LAB], charges, at(2026, 12, 2, 12))
    unlimited = standings([], [Charge("j9", "default", {date(2026, 12, 2): 2.0})], at(2026, 12, 2))
    body, _ = render_metrics([], (), projects=[*found.values(), *unlimited.values()])
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body.decode())
        for s in family.samples
        if s.name.startswith("autoscaler_project_")
    }
    lab = (("period", "2026-12"), ("project", "lab-a"))
    default = (("period", "2026-12"), ("project", "default"))
    assert got == {
        ("autoscaler_project_spent", lab): 12.5,
        ("autoscaler_project_budget", lab): 100.0,
        ("autoscaler_project_left", lab): 100.0 - 12.5 - 35.0,
        ("autoscaler_project_spent", default): 2.0,
    }


def test_the_example_service_has_projects_and_its_job_names_one() -> None:
    path = EXAMPLES / "team.yaml"
    svc = service_config(load_yaml(path, "service"), source=str(path), base_dir=EXAMPLES)
    assert [(p.name, p.period, p.when_over) for p in svc.settings.projects] == [
        ("lab-a", "month", "refuse"),
        ("lab-b", "week", "queue"),
        ("default", "month", "refuse"),
    ]
    job = load_yaml(EXAMPLES / "job_lab_a.yaml", "job")
    cfg, _ = job_config(svc, job, source="job_lab_a.yaml", base_dir=EXAMPLES, now_wall=0.0)
    assert (cfg.project_name, cfg.constraint.budget) == ("lab-a", 40.0)


def test_a_store_from_before_projects_keeps_its_jobs_as_the_default_project_s(
    tmp_path: Path,
) -> None:
    """A state directory from before the ``project`` column: its jobs are read, by a
    service not running and by one that opens it (which adds the column), as
    ``default``'s; a new job keeps its own project."""
    svc = service([{"name": "lab-a", "budget": 10}])
    job = {**load_yaml(EXAMPLES / "job.yaml", "job"), "project": "lab-a"}
    cfg, tasks = job_config(svc, job, source="job.yaml", base_dir=EXAMPLES, now_wall=0.0)  # type: ignore[arg-type]
    db = tmp_path / "service.db"
    store = Store(db)
    old = store.add("old", cfg, tasks, 0.0, lambda j: tmp_path / j)
    store.close()
    with sqlite3.connect(db) as raw:
        raw.execute("ALTER TABLE jobs DROP COLUMN project")
    assert Store(db, read_only=True).row(old).project == "default"
    store = Store(db)
    new = store.add("new", cfg, tasks, 0.0, lambda j: tmp_path / j)
    assert [(r.id, r.project) for r in store.rows()] == [(old, "default"), (new, "lab-a")]
