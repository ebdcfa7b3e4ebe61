"""A job's ``app:`` label and ``deadline.learn_task_times`` (issue 22 §1) at the config
edge: ``autoscaler validate`` names the field of a bad value, in a process of its own."""

from __future__ import annotations

from pathlib import Path

import yaml

from autoscaler.config.load import load_config
from tests.unit.test_cli_process import EXAMPLES, autoscaler


def _write(tmp_path: Path, name: str, data: dict[str, object]) -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _job(**fields: object) -> dict[str, object]:
    return {"name": "j", "bag": {"synthetic": 5}, "constraint": {"deadline_s": 3600}, **fields}


def test_a_job_file_s_app_is_checked_by_field(tmp_path: Path) -> None:
    """A bad label and a label on a job without a deadline are refused, naming app; a
    good one validates."""
    service = str(EXAMPLES / "service.yaml")
    bad = autoscaler(
        "validate", str(_write(tmp_path, "a.yaml", _job(app="no spaces"))), "--service", service
    )
    assert bad.returncode == 2
    assert "app: must match the pattern" in bad.stderr
    budget = _job(app="render", constraint={"budget": 5})
    done = autoscaler("validate", str(_write(tmp_path, "b.yaml", budget)), "--service", service)
    assert done.returncode == 2
    assert "app: names a deadline job's application" in done.stderr
    assert "Traceback" not in done.stderr
    good = autoscaler(
        "validate", str(_write(tmp_path, "c.yaml", _job(app="render"))), "--service", service
    )
    assert good.returncode == 0, good.stderr


def test_a_run_config_s_app_and_learn_task_times_are_checked_by_field(tmp_path: Path) -> None:
    """In a run config, jobs[i].app and deadline.learn_task_times name themselves; good
    values load (app on the job, learning on by default)."""
    data = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text(encoding="utf-8"))
    for key in ("bag", "constraint"):
        data.pop(key, None)
    job = {"name": "a1", "bag": {"synthetic": 4}, "constraint": {"deadline_s": 3600}}
    bad = {**data, "jobs": [{**job, "app": "x y"}], "deadline": {"learn_task_times": "sometimes"}}
    done = autoscaler("validate", str(_write(tmp_path, "bad.yaml", bad)))
    assert done.returncode == 2
    assert "jobs[0].app" in done.stderr
    assert "deadline.learn_task_times" in done.stderr
    assert "Traceback" not in done.stderr
    good = _write(tmp_path, "good.yaml", {**data, "jobs": [{**job, "app": "A"}]})
    cfg = load_config(good)
    assert cfg.jobs[0].app == "A"
    assert cfg.deadline.learn_task_times is True
