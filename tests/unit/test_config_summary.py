"""What a config file is and the one line ``validate`` says of it (config.summary)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.config.schema import RunConfig
from autoscaler.config.service_schema import load_service_config
from autoscaler.config.summary import (
    Checked,
    check_file,
    config_kind,
    duration,
    job_summary,
    run_summary,
    service_summary,
)
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.core.model import TaskSpec
from tests.conftest import make_config

EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"


def _write(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "file.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("example", "kind"),
    [("quickstart.yaml", "run"), ("service.yaml", "service"), ("job.yaml", "job")],
)
def test_an_examples_kind_is_what_it_holds(example: str, kind: str) -> None:
    assert config_kind(EXAMPLES / example) == kind


def test_machine_types_with_work_are_a_run_and_a_service_section_a_service(
    tmp_path: Path,
) -> None:
    types = [{"name": "a", "price": 1, "max_count": 1}]
    assert config_kind(_write(tmp_path, {"machine_types": types, "bag": {}})) == "run"
    assert config_kind(_write(tmp_path, {"service": {}, "bag": {}})) == "service"
    assert config_kind(_write(tmp_path, {"machine_types": types})) == "service"


def test_a_run_summary_names_tasks_types_slots_budget_and_billing() -> None:
    cfg = make_config(
        machine_types=[
            {"name": "slow", "price": 1.0, "max_count": 10, "boot_s": 60},
            {"name": "wide", "price": 2.5, "max_count": 3, "boot_s": 60, "slots": 4},
        ],
        emulator={
            "seed": 1,
            "runtime": {"dist": "normal", "mean_s": 600, "sd_s": 60},
            "speed": {"slow": 1.0, "wide": 3.0},
        },
    )
    assert run_summary(cfg, 1) == (
        "ok test: 1 task; types slow (1/ATU, max 10), wide (2.5/ATU, max 3, 4 slots); "
        "budget 100; billing fixed, ATU 1h"
    )


def test_a_run_without_a_budget_and_per_second_billing_says_so() -> None:
    cfg = make_config(
        constraint={"deadline_s": 7200},
        billing={"mode": "per_second", "atu_s": 3600, "min_charge_s": 60},
    )
    line = run_summary(cfg, 100)
    assert "100 tasks" in line
    assert line.endswith("; no budget; billing per second, ATU 1h, minimum 1m")


def test_a_service_summary_names_provider_types_billing_and_jobs_at_once() -> None:
    svc = load_service_config(EXAMPLES / "service.yaml")
    assert service_summary(svc) == (
        "ok service local-service: provider local; types small (1/ATU, max 6), "
        "fast (3/ATU, max 6); billing fixed, ATU 1h; 4 jobs at once"
    )


def test_a_job_file_alone_names_its_fields_and_asks_for_a_service() -> None:
    line = job_summary(EXAMPLES / "job.yaml", None, 0.0)
    assert line.startswith("ok job sweep-a: a job file (name, bag, constraint); give --service")


def test_a_job_file_alone_with_an_unknown_field_names_it(tmp_path: Path) -> None:
    job = _write(tmp_path, {"name": "j", "bag": {"synthetic": 3}, "budgett": 4})
    with pytest.raises(ConfigError) as caught:
        job_summary(job, None, 0.0)
    [problem] = caught.value.problems
    assert problem.startswith("budgett: unknown field of a job file (name, app, bag")


def test_a_job_file_against_its_service_is_summed_up_as_the_run_it_becomes() -> None:
    line = job_summary(EXAMPLES / "job.yaml", EXAMPLES / "service.yaml", 1.8e9)
    assert line == (
        "ok job for service local-service: sweep-a: 120 tasks; types small (1/ATU, max 6), "
        "fast (3/ATU, max 6); budget 40; billing fixed, ATU 1h"
    )


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(3600.0, "1h"), (7200.0, "2h"), (5400.0, "90m"), (60.0, "1m"), (90.5, "90.5s"), (30, "30s")],
)
def test_a_duration_is_in_its_largest_whole_unit(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def _load(path: Path) -> tuple[RunConfig, list[TaskSpec]]:
    cfg = load_config(path)
    return cfg, expand_bag(cfg, source=str(path))


def test_a_file_is_checked_as_what_it_holds() -> None:
    service = check_file(EXAMPLES / "service.yaml", None, 0.0, _load)
    assert service == Checked(service_summary(load_service_config(EXAMPLES / "service.yaml")))
    job = check_file(EXAMPLES / "job.yaml", EXAMPLES / "service.yaml", 1.8e9, _load)
    assert job.line.startswith("ok job for service local-service: sweep-a: 120 tasks")
    run = check_file(EXAMPLES / "quickstart.yaml", None, 0.0, _load)
    assert run == Checked(run_summary(*_summed(EXAMPLES / "quickstart.yaml")))


def _summed(path: Path) -> tuple[RunConfig, int]:
    cfg, tasks = _load(path)
    return cfg, len(tasks)


def test_a_run_config_missing_a_types_speed_is_valid_with_a_warning(tmp_path: Path) -> None:
    data = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text(encoding="utf-8"))
    speeds = data["emulator"]["speed"]
    missing = sorted(speeds)[0]
    del speeds[missing]
    checked = check_file(_write(tmp_path, data), None, 0.0, _load)
    assert checked.line.startswith("ok quickstart: 500 tasks")
    [warning] = checked.warnings
    assert warning.startswith(f"emulator.speed gives no speed for machine type {missing}:")


def test_a_service_config_given_to_check_a_run_config_is_refused_naming_both() -> None:
    run = EXAMPLES / "quickstart.yaml"
    with pytest.raises(AutoscalerError, match=f"a job file; {run} is a run config"):
        check_file(run, EXAMPLES / "service.yaml", 0.0, _load)
