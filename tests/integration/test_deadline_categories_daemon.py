"""Categories in deadline mode for real (issue 21 §3): one job of two kinds of task on
local agents, time-scaled, each type four times faster at one kind. The tasks are real
commands that sleep by the machine's type (``AUTOSCALER_MACHINE``) and their label."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.integration.daemon_helpers import assert_deadline_end, journal_rows, outputs, run_cli

pytestmark = pytest.mark.integration

SCALE = 360  # one emulated hour in 10 real seconds
TASK = """#!/bin/sh
# $1: the task's label; a fast pair (cpu on a, io on b) takes 2.5 emulated minutes, 10 else.
case "${AUTOSCALER_MACHINE%%-*}:$1" in
  a:cpu|b:io) sleep FAST ;;
  *) sleep SLOW ;;
esac
"""


@pytest.mark.slow
@pytest.mark.alone  # time-scaled: the samples' real sleeps decide the plan
def test_a_job_of_two_categories_runs_each_where_it_is_fast_every_task_once(
    tmp_path: Path,
) -> None:
    script = tmp_path / "task.sh"
    script.write_text(
        TASK.replace("FAST", f"{150 / SCALE:.3f}").replace("SLOW", f"{600 / SCALE:.3f}")
    )
    labels = ["cpu"] * 30 + ["io"] * 30
    random.Random(1).shuffle(labels)
    rows = ["command,category", *(f"sh {script} {x},{x}" for x in labels)]
    (tmp_path / "bag.csv").write_text("\n".join(rows) + "\n")
    data = {
        "name": "it-dcat",
        "jobs": [
            {"name": "j", "bag": {"file": "bag.csv"}, "constraint": {"deadline_s": "75m"}},
        ],
        "categories": {"by": "label"},
        "machine_types": [
            {"name": "a", "price": 1, "max_count": 6, "boot_s": "2m"},
            {"name": "b", "price": 1, "max_count": 6, "boot_s": "2m"},
        ],
        "billing": {"mode": "fixed", "atu_s": "1h"},
        "provider": "local",
        "local": {"time_scale": SCALE},
        "monitoring_interval_s": "5m",
        "daemon": {"heartbeat_s": 0.5, "lost_after_s": 3, "orphan_after_s": 30},
    }
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    run_dir = tmp_path / "real"
    done = run_cli("run", str(config), "--out", str(run_dir), timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = assert_deadline_end(run_dir, len(labels))
    job = report["jobs"][0]
    late_said = [d for _, _, d in journal_rows(run_dir, "Late") if d["tasks"] > 0]
    assert job["met_deadline"] or late_said, "late without a word"
    where = Counter(
        (labels[line["task"]], line["machine"].split("-")[0])
        for line in outputs(run_dir)
        if line["exit_code"] == 0
    )
    fast = where["cpu", "a"] + where["io", "b"]
    print(
        f"\ndeadline categories on local agents: {dict(where)}, cost {report['cost']}, "
        f"met {job['met_deadline']}, late tasks {job['tasks_late']}"
    )
    assert fast >= 0.7 * len(labels)
