"""``service.arrivals``: a service config's jobs run from the command line."""

from __future__ import annotations

from pathlib import Path

import yaml

from autoscaler.config.service_schema import load_service_config
from autoscaler.service.arrivals import JobLine, dry_run_jobs, exit_code, load_jobs, pool_names

EXAMPLES = Path(__file__).parents[2] / "config" / "examples"


def test_a_name_given_again_takes_the_id_the_service_gives_it() -> None:
    assert pool_names(["a", "b", "a", "a"]) == ["a", "b", "a-j3", "a-j4"]


def test_the_exit_code_is_the_first_job_not_done() -> None:
    def line(outcome: str) -> JobLine:
        return JobLine("j", 0.0, "budget", 1, 1, 1.0, None, outcome)

    assert exit_code([line("done"), line("done")]) == 0
    assert exit_code([line("done"), line("late"), line("stopped")]) == 4
    assert exit_code([line("stopped"), line("late")]) == 3
    assert line("failed").code == 7
    assert line("no such outcome").code == 1


def test_jobs_dry_run_in_order_of_arrival_each_in_its_own_directory(tmp_path: Path) -> None:
    svc = load_service_config(EXAMPLES / "service.yaml")
    job = EXAMPLES / "job.yaml"
    jobs = load_jobs(svc, [(job, 600.0), (job, 0.0)])
    assert [j.at for j in jobs] == [0.0, 600.0]
    lines = dry_run_jobs(svc, jobs, seed=None, out=tmp_path)
    assert [(line.at, line.mode, line.outcome) for line in lines] == [
        (0.0, "budget", "done"),
        (600.0, "budget", "done"),
    ]
    assert lines[1].finish_s is not None
    assert lines[1].finish_s > 600.0
    name = yaml.safe_load(job.read_text())["name"]
    assert (tmp_path / f"1-{name}" / "report.json").is_file()
    assert (tmp_path / f"2-{name}" / "report.json").is_file()
