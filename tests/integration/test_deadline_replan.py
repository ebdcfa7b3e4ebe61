"""A declared time that proves wrong, through the CLI (issue 38): the deadline example
as a dry run whose m3.medium tasks take 1.3 × what every job declares
(``emulator_task_s``); the run says what it learned, moves what it makes late at once,
and meets every deadline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.integration.daemon_helpers import ROOT, run_cli

pytestmark = pytest.mark.integration

EXAMPLE = ROOT / "config" / "examples" / "deadline.yaml"
SLOWER = 1.3


def journal(run_dir: Path) -> list[dict]:
    lines = (run_dir / "journal.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def test_a_wrong_declared_time_is_planned_again_and_every_deadline_met(tmp_path: Path) -> None:
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    for job in data["jobs"]:
        job["emulator_task_s"] = {
            **job["task_s"],
            "m3.medium": SLOWER * job["task_s"]["m3.medium"],
        }
    config = tmp_path / "slow_medium.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = tmp_path / "dry"
    done = run_cli("run", str(config), "--dry-run", "--out", str(out))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    n = sum(job["bag"]["synthetic"] for job in data["jobs"])
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["mode"] == "deadline"
    assert report["stop_reason"] is None
    records = journal(out)
    done = sorted(r["data"]["task"] for r in records if r["type"] == "TaskDone")
    assert done == list(range(n)), "a task never finished, or finished twice"
    assert all(j["met_deadline"] and j["tasks_late"] == 0 for j in report["jobs"]), report["jobs"]

    learned = [r for r in records if r["type"] == "Learned"]
    assert learned, "the slower medium was never learned"
    assert {r["data"]["type"] for r in learned} == {"m3.medium"}
    # The queues are checked at the step that learns the type, between ticks (every
    # 60 s): what the learned time makes late moves at that very time.
    at = {r["t"] for r in learned if r["t"] % 60}
    assert at, "every note came with a tick"
    moved = [r for r in records if r["type"] == "Move" and r["t"] in at]
    assert moved, f"nothing moved when the medium was learned at {sorted(at)}"
