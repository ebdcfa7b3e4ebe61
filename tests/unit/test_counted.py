"""Counts in text for people agree with their number: "1 task late", not "1 tasks late"
(issue 34 §6). ``counted`` says every count; a one-task deadline job that misses its
deadline shows it through the command line."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from autoscaler.cli.main import EXIT_STOPPED
from autoscaler.core.words import counted
from tests.unit.test_cli_process import autoscaler


@pytest.mark.parametrize(
    ("n", "noun", "said"),
    [
        (0, "task", "0 tasks"),
        (1, "task", "1 task"),
        (2, "task", "2 tasks"),
        (1.0, "run", "1.0 run"),
        (1, "category", "1 category"),
    ],
)
def test_a_count_agrees_with_its_number(n: float, noun: str, said: str) -> None:
    assert counted(n, noun) == said


def test_an_irregular_plural_and_a_format_are_given() -> None:
    assert counted(3, "category", "categories") == "3 categories"
    assert counted(1, "category", "categories") == "1 category"
    assert counted(12345, "byte", spec=",") == "12,345 bytes"


def one_job_run(
    tmp_path: Path, tasks: int, deadline_s: float, boot_s: float, task_s: float, **emulator: object
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``autoscaler run --dry-run`` of one deadline job of ``tasks`` tasks on one type
    (declared ``task_s``, runs within 3 % of it): the process and its run directory."""
    config = tmp_path / "one_job.yaml"
    job = {"name": "a1", "bag": {"synthetic": tasks}, "constraint": {"deadline_s": deadline_s}}
    runtime = {"dist": "uniform", "low_s": 0.97 * task_s, "high_s": 1.03 * task_s}
    data = {
        "name": "one-job",
        "jobs": [{**job, "task_s": {"small": 100}}],
        "machine_types": [{"name": "small", "price": 1, "max_count": 2, "boot_s": boot_s}],
        "billing": {"mode": "fixed", "atu_s": 3600},
        "emulator": {"seed": 1, "runtime": runtime, **emulator},
    }
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = tmp_path / "run"
    return autoscaler("run", str(config), "--dry-run", "--out", str(out)), out


def test_one_late_task_is_said_in_the_singular(tmp_path: Path) -> None:
    """A deadline job of one task that cannot meet its deadline (the machine boots for
    longer than the deadline allows): `run --dry-run` said "1 of 1 tasks done" and "late
    by 1 tasks in all"."""
    done, out = one_job_run(tmp_path, 1, deadline_s=150, boot_s=100, task_s=300)
    assert done.returncode == 0, done.stderr
    text = " ".join(done.stdout.split())  # the terminal's wrapping aside
    assert "1 of 1 task done" in text
    assert "late by 1 task in all" in text
    assert not re.search(r"\b1 tasks", text)
    report = (out / "report.md").read_text(encoding="utf-8")
    assert "late by 1 task in all" in report
    assert not re.search(r"\b1 tasks", report)


def test_a_job_whose_only_type_is_refused_did_not_finish(tmp_path: Path) -> None:
    """A deadline job whose one type is refused for good (a rehearsed outage): the run
    stops before the deadline, and the report says the job did not finish and how many
    of its tasks were never done (it said it was "late by 0 tasks in all")."""
    refusals = [{"type": "small", "from_s": 0}]
    done, out = one_job_run(tmp_path, 3, deadline_s=3600, boot_s=60, task_s=100, refusals=refusals)
    assert done.returncode == EXIT_STOPPED, done.stderr
    said = "met their deadline; a1 did not finish: 3 tasks were never done."
    assert f"0 of 1 job {said}" in " ".join(done.stdout.split())
    assert "late by" not in done.stdout
    report = " ".join((out / "report.md").read_text(encoding="utf-8").split())
    assert f"**0 of 1 job {said.replace(';', '**;')}" in report


def test_a_job_whose_task_failed_in_time_did_not_finish(tmp_path: Path) -> None:
    """A deadline job whose other tasks were done in time but one failed (all its
    tries): the report said "did not finish: 0 tasks were never done"."""
    done, out = one_job_run(
        tmp_path, 3, deadline_s=3600, boot_s=60, task_s=100, task_failure_prob=0.7
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    failed = report["tasks_failed"]
    assert failed > 0
    assert report["tasks_done"] + failed == 3
    said = f"a1 did not finish: {counted(failed, 'task')} failed."
    assert said in " ".join(done.stdout.split())
    assert said in " ".join((out / "report.md").read_text(encoding="utf-8").split())


@pytest.mark.parametrize(
    ("commands", "said"),
    [
        ([None], "The 1 task not done is synthetic: `unfinished.txt` lists its id, but it"),
        ([None, None], "The 2 tasks not done are synthetic: `unfinished.txt` lists their ids"),
        (["echo 1"], "The commands of the 1 task not done are in `unfinished.txt`"),
        (["echo 1", "echo 2"], "The commands of the 2 tasks not done are in"),
    ],
)
def test_the_report_counts_the_tasks_not_done(commands: list[str | None], said: str) -> None:
    """report.md's line on what is left said "The 1 tasks not done are synthetic"."""
    from autoscaler.report.markdown import _unfinished_sentence
    from autoscaler.report.records import UnfinishedTask

    tasks = [UnfinishedTask(i, c, "not_started", None) for i, c in enumerate(commands)]
    assert _unfinished_sentence(tasks).startswith(said)


def test_a_run_with_every_type_given_up_counts_the_tasks_left() -> None:
    from autoscaler.core.capacity import Capacity
    from autoscaler.core.model import NEVER

    capacity = Capacity(unavailable={"small": NEVER})
    assert (
        capacity.none_left(["small"], 1) == "every machine type was given up, 1 task left (small)"
    )
