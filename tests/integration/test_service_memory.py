"""The service remembers what an application's tasks took (issue 22 §1): a later
deadline job of the same application without ``task_s`` starts from that instead of
sampling, and says so (job view, service log, report)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon_helpers import agents_of, journal_rows, run_id_of
from tests.integration.service_helpers import ServiceProcess, service_config

TRUE_S = {"small": 600.0, "fast": 200.0}


def _job(name: str, tasks: int, app: str | None = None) -> dict[str, Any]:
    """A deadline job without task_s (sampled unless remembered); its synthetic tasks
    take ``TRUE_S`` on each type."""
    return {
        "name": name,
        **({"app": app} if app else {}),
        "bag": {"synthetic": tasks},
        "constraint": {"deadline_s": "4h"},
        "emulator_task_s": TRUE_S,
    }


def _added(pool: Path, job_id: str) -> dict[str, Any]:
    (job,) = [d["job"] for _, kind, d in journal_rows(pool) if kind == "JobAdded"]
    assert job["name"] == job_id
    return dict(job)


def test_a_second_job_of_an_application_starts_from_what_the_first_took(tmp_path: Path) -> None:
    """Job one (app ``render``, no task_s) samples every type in the pool; once it has
    ended, job two of the same app starts with task_s = what one's tasks took (the
    pool's JobAdded carries them, so it is planned at once, no sampling), and its view,
    report and the service log say so. Job three of another app remembers nothing."""
    state_dir = tmp_path / "state"
    svc = ServiceProcess(service_config(tmp_path), state_dir)
    pool = state_dir / "pool"
    try:
        one = svc.submit(_job("one", 12, app="render"))
        assert svc.cli("wait", one, timeout=240).returncode == 0, svc.events()
        assert "task_times_from" not in svc.view(one)
        two = svc.submit(_job("two", 6, app="render"))
        assert svc.cli("wait", two, timeout=240).returncode == 0, svc.events()
        view = svc.view(two)
        note = view["task_times_from"]
        assert note["app"] == "render"
        assert set(note["task_s"]) == set(TRUE_S)
        for t, s in note["task_s"].items():
            assert s == pytest.approx(TRUE_S[t], rel=0.25)
            assert note["runs"][t] >= 5  # sample: 5 (the default) on every type
        added = _added(pool, two)
        assert added["task_s"] == note["task_s"]
        assert added["app"] == "render"
        report = json.loads((Path(view["run_dir"]) / "report.json").read_text())
        assert report["task_times_from"] == note
        assert "from earlier jobs, no sampling" in (Path(view["run_dir"]) / "report.md").read_text()
        logged = [
            json.loads(line)
            for line in (state_dir / "service.log.jsonl").read_text().splitlines()
            if '"task times from memory"' in line
        ]
        assert [e["job"] for e in logged] == [two]
        three = svc.submit(_job("three", 2))
        assert svc.cli("wait", three, timeout=240).returncode == 0, svc.events()
        assert "task_times_from" not in svc.view(three)
        added = [d["job"] for _, kind, d in journal_rows(pool) if kind == "JobAdded"]
        assert [j["task_s"] for j in added if j["name"] == three] == [{}]
    finally:
        assert svc.stop() == 0
    assert agents_of(run_id_of(pool)) == []
