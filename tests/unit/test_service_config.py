"""A service's config and the job files laid over it: what is taken, what is refused, and
how each refusal names the field."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.service_schema import (
    job_config,
    load_service_config,
    load_yaml,
    service_config,
)
from autoscaler.core.errors import ConfigError

EXAMPLES = Path(__file__).parents[2] / "config" / "examples"
NOW = 1_800_000_000.0


def service(**overrides: Any) -> Any:
    data = yaml.safe_load((EXAMPLES / "service.yaml").read_text())
    data.update(overrides)
    return service_config(data, source="service.yaml", base_dir=EXAMPLES)


def job(data: dict[str, Any], svc: Any = None) -> Any:
    return job_config(svc or service(), data, source="job.yaml", base_dir=EXAMPLES, now_wall=NOW)


def problems(data: dict[str, Any], svc: Any = None) -> list[str]:
    with pytest.raises(ConfigError) as refused:
        job(data, svc)
    return refused.value.problems


def test_the_examples_make_a_budget_job() -> None:
    svc = load_service_config(EXAMPLES / "service.yaml")
    assert svc.provider == "local"
    assert svc.settings.max_running_jobs == 4
    cfg, tasks = job(load_yaml(EXAMPLES / "job.yaml", "job"), svc)
    assert cfg.name == "sweep-a"
    assert cfg.constraint.budget == 40
    assert not cfg.deadline_mode
    assert len(tasks) == 120
    assert cfg.machine_types == [t for t in cfg.machine_types if t.name in ("small", "fast")]


def test_the_deadline_job_example_is_due_four_hours_after_submission() -> None:
    svc = load_service_config(EXAMPLES / "service.yaml")
    cfg, tasks = job(load_yaml(EXAMPLES / "job_deadline.yaml", "job"), svc)
    assert cfg.deadline_mode
    assert cfg.constraint.budget is None
    assert cfg.constraint.deadline_s == 4 * 3600
    assert len(tasks) == 60


@pytest.mark.parametrize("work", ["bag", "constraint", "jobs"])
def test_a_service_config_holds_no_work(work: str) -> None:
    with pytest.raises(ConfigError) as refused:
        service(**{work: {}})
    assert refused.value.problems[0].startswith(f"{work}: a service config holds no work")


def test_plots_at_the_top_of_a_service_config_points_to_the_service_section() -> None:
    with pytest.raises(ConfigError) as refused:
        service(plots=False)
    assert refused.value.problems == [
        "plots: a service sets its jobs' plots under `service:` (`service: {plots: false}`)"
    ]


def test_a_service_section_problem_names_its_field() -> None:
    with pytest.raises(ConfigError) as refused:
        service(service={"max_running_jobs": 0})
    assert refused.value.problems[0].startswith("service.max_running_jobs:")
    with pytest.raises(ConfigError) as refused:
        service(provider="sge")
    assert "give the sge section" in str(refused.value)


def test_a_deadline_at_becomes_run_seconds_from_now_at_the_time_scale() -> None:
    at = "2027-01-15T09:00:00Z"  # 3600 s after NOW
    assert NOW + 3600 == 1_800_003_600.0
    cfg, _ = job({"bag": {"synthetic": 3}, "constraint": {"deadline_at": "2027-01-15T09:00:00Z"}})
    # The example service runs at time_scale 360: an hour of wall time is 360 emulated hours.
    assert cfg.deadline_mode
    assert cfg.constraint.deadline_s == pytest.approx(3600 * 360)
    one = service(provider="local", local={"time_scale": 1})
    cfg, _ = job({"bag": {"synthetic": 3}, "constraint": {"deadline_at": at}}, one)
    assert cfg.constraint.deadline_s == pytest.approx(3600)


def test_known_task_times_make_a_deadline_job_of_the_jobs_form() -> None:
    cfg, tasks = job(
        {
            "name": "due",
            "bag": {"synthetic": 5},
            "constraint": {"deadline_s": "2h"},
            "task_s": {"small": 600},
        }
    )
    assert [j.name for j in cfg.jobs] == ["due"]
    assert cfg.jobs[0].task_s == {"small": 600}
    assert cfg.jobs[0].constraint.deadline_s == 7200
    assert len(tasks) == 5


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            {"bag": {"synthetic": 3}, "constraint": {"budget": -1}},
            "constraint.budget: must be greater than 0",
        ),
        (
            {"bag": {"synthetic": 3}, "constraint": {"deadline_at": "2020-01-01T00:00:00Z"}},
            "constraint.deadline_at: 2020-01-01T00:00:00Z is in the past",
        ),
        (
            {"bag": {"synthetic": 3}, "constraint": {"deadline_at": "soon"}},
            "constraint.deadline_at: ",
        ),
        (
            {"bag": {"synthetic": 3}, "constraint": {"deadline_s": 60}, "task_s": {"gpu": 1}},
            "task_s names unknown machine type 'gpu'",
        ),
        ({"bag": {"synthetic": 3}}, "constraint: missing"),
        ({"name": "a/b", "bag": {"synthetic": 3}, "constraint": {"budget": 5}}, "name: "),
        ({"bag": {"synthetic": 3}, "constraint": {"budget": 5}, "budjet": 3}, "budjet"),
        (
            {"bag": {"synthetic": 3}, "constraint": {"budget": 5}, "machine_types": []},
            "machine_types",
        ),
        (
            {"bag": {"file": "no-such-file.txt"}, "constraint": {"budget": 5}},
            "bag.file: no such file",
        ),
        (
            {"jobs": [], "bag": {"synthetic": 3}},
            "bag: give it in each of jobs",
        ),
    ],
)
def test_a_bad_job_is_refused_with_its_field_named(data: dict[str, Any], expected: str) -> None:
    found = problems(data)
    assert any(expected in p for p in found), found


def test_a_job_s_relative_bag_file_is_read_from_the_job_file_s_directory(tmp_path: Path) -> None:
    (tmp_path / "cmds.txt").write_text("echo a\necho b\n")
    cfg, tasks = job_config(
        service(),
        {"bag": {"file": "cmds.txt"}, "constraint": {"budget": 5}},
        source="job.yaml",
        base_dir=tmp_path,
        now_wall=time.time(),
    )
    assert [t.command for t in tasks] == ["echo a", "echo b"]
    assert cfg.bag is not None
    assert cfg.bag.file == tmp_path / "cmds.txt"


def test_run_dry_runs_a_service_config_with_jobs_arriving_over_time(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from autoscaler.cli.main import app

    due = tmp_path / "due.yaml"
    due.write_text(
        yaml.safe_dump(
            {
                "name": "due",
                "bag": {"synthetic": 30},
                "constraint": {"deadline_s": "3h"},
                "task_s": {"small": 600, "fast": 200},
            }
        )
    )
    out = tmp_path / "out"
    args = ["run", str(EXAMPLES / "service.yaml"), "--dry-run", "--out", str(out)]
    done = CliRunner().invoke(
        app, [*args, "--job", f"{due}@30m", "--job", str(EXAMPLES / "job.yaml")]
    )
    assert done.exit_code == 0, done.output
    # In order of arrival, each its own run directory with its report.
    budget_report = yaml.safe_load((out / "1-sweep-a" / "report.json").read_text())
    # The deadline job without a budget runs in the pool run, as the service runs it.
    pool_report = yaml.safe_load((out / "pool" / "report.json").read_text())
    assert budget_report["tasks_done"] == 120
    assert budget_report["cost"] <= 40
    assert pool_report["mode"] == "deadline"
    [due_outcome] = pool_report["jobs"]
    assert due_outcome["name"] == "due"
    assert due_outcome["at_s"] == 1800
    assert due_outcome["met_deadline"] is True
    rows = [line.split() for line in done.output.splitlines() if line.strip()]
    rows = [r for r in rows if r[0] in ("sweep-a", "due")]
    assert [r[0] for r in rows] == ["due", "sweep-a"]
    assert rows[0][1:4] == ["(pool)", "1800", "s"]
    bad = CliRunner().invoke(app, [*args, "--job", f"{due}@soon"])
    assert bad.exit_code == 2
    assert "the arrival after @ must be a duration" in bad.output


def test_a_service_section_that_is_no_mapping_is_named_with_its_value() -> None:
    """Before: `service: 5` said `service.must be a mapping`, with neither a field nor the
    value."""
    with pytest.raises(ConfigError) as refused:
        service(service=5)
    assert refused.value.problems == ["service: must be a mapping (got 5)"]


def test_the_platform_and_the_service_section_are_checked_as_one() -> None:
    """Every problem of a service config at once: the platform's and ``service:``'s."""
    with pytest.raises(ConfigError) as refused:
        service(service={"port": -1}, machine_types=[])
    assert refused.value.problems == [
        "machine_types: must have at least 1 item (got [])",
        "service.port: must be greater than or equal to 0 (got -1)",
    ]


def test_an_empty_service_section_takes_the_defaults() -> None:
    svc = service(service=None)
    assert svc.settings.max_running_jobs == 4
    assert svc.platform.name == "local-service"


def test_a_job_runs_on_the_service_s_platform() -> None:
    """A job's run config is the service's platform with the job's work: no field of the
    platform is the job's to change, and none is lost."""
    svc = service(monitoring_interval_s="2m", policy="round_robin")
    cfg, _ = job({"name": "j", "bag": {"synthetic": 3}, "constraint": {"budget": 9}}, svc)
    assert cfg.platform().model_dump(exclude={"name"}) == svc.platform.model_dump(exclude={"name"})
    assert (cfg.name, cfg.monitoring_interval_s, cfg.policy) == ("j", 120, "round_robin")


def test_cleanup_takes_a_service_config_s_platform(tmp_path: Path) -> None:
    """``cleanup SERVICE.yaml`` reads the service's platform (no work is made up for it)."""
    from typer.testing import CliRunner

    from autoscaler.cli.main import app

    data = yaml.safe_load((EXAMPLES / "service.yaml").read_text())
    data["provider"] = "sim"
    del data["local"]
    path = tmp_path / "service.yaml"
    path.write_text(yaml.safe_dump(data))
    done = CliRunner().invoke(app, ["cleanup", str(path), "--runs", str(tmp_path)])
    assert done.exit_code == 2
    assert "provider 'sim' starts no machines: nothing to clean up" in done.output


def test_a_job_names_the_project_its_money_is_charged_to_or_is_charged_to_default() -> None:
    given = load_yaml(EXAMPLES / "job.yaml", "job")
    cfg, _ = job({**given, "project": "lab-a"})
    assert (cfg.project, cfg.project_name) == ("lab-a", "lab-a")
    cfg, _ = job(given)
    assert (cfg.project, cfg.project_name) == (None, "default")
    (problem,) = problems({**given, "project": "lab a"})
    assert problem.startswith("project:"), problem
