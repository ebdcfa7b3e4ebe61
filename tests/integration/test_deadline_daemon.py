"""Deadline mode for real: the two-batch example on local worker processes, time-scaled,
and the same config as a dry run (issue 12). Grid Engine and EC2 run one deadline job
each in their own test files (test_sge_daemon.py, test_ec2_daemon.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.daemon_helpers import (
    ROOT,
    assert_deadline_end,
    journal_rows,
    run_cli,
)

pytestmark = pytest.mark.integration

EXAMPLE = ROOT / "config" / "examples" / "deadline.yaml"


def example(tmp: Path, time_scale: float) -> tuple[Path, dict[str, Any]]:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["local"]["time_scale"] = time_scale
    path = tmp / "deadline.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path, data


@pytest.mark.alone  # the real run's cost against the dry run's: a CI host loaded by the
# other workers once stalled the daemon for 14 real s (420 emulated s at 30x) before its
# first machines came up, and the run bought more to make up for it
def test_the_two_batch_example_runs_for_real_and_as_a_dry_run(tmp_path: Path) -> None:
    config, data = example(tmp_path, 60)
    n = sum(job["bag"]["synthetic"] for job in data["jobs"])
    real = run_cli("run", str(config), "--out", str(tmp_path / "real"), timeout=300)
    assert real.returncode == 0, real.stdout[-3000:] + real.stderr[-3000:]
    report = assert_deadline_end(tmp_path / "real", n)
    jobs = {j["name"]: j for j in report["jobs"]}
    assert set(jobs) == {j["name"] for j in data["jobs"]}
    # The second batch arrived together, at its time, and was planned then.
    arrivals = {d["job"]: t for t, _, d in journal_rows(tmp_path / "real", "JobArrived")}
    second = [j["name"] for j in data["jobs"] if j["at"] == 300]
    assert {arrivals[name] for name in second} == {arrivals[second[0]]}
    assert arrivals[second[0]] >= 300
    launches = journal_rows(tmp_path / "real", "Launch")
    assert any(t >= arrivals[second[0]] for t, _, _ in launches)

    dry = run_cli("run", str(config), "--dry-run", "--out", str(tmp_path / "dry"))
    assert dry.returncode == 0, dry.stdout[-3000:] + dry.stderr[-3000:]
    emulated = json.loads((tmp_path / "dry" / "report.json").read_text())
    assert emulated["mode"] == "deadline"
    assert emulated["tasks_done"] == n
    print(
        f"\ndeadline example: real cost {report['cost']:.3f}, dry run {emulated['cost']:.3f}; "
        f"late tasks real {sum(j['tasks_late'] for j in report['jobs'])}, "
        f"dry {sum(j['tasks_late'] for j in emulated['jobs'])}"
    )
    # The dry run predicts the real run's cost (same seed; real timing jitters).
    assert emulated["cost"] == pytest.approx(report["cost"], rel=0.25)
