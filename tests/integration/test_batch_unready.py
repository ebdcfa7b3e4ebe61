"""Batch jobs that never get an agent going (issue 34 §2): a machine type whose jobs end
at once is given up after a few in a row, the report and the log say what the scheduler
said, and the run does not spend its budget on machines that never start.

Local agents that exit at once are the same hole on this host. Each run is
``autoscaler run run.yaml`` from a directory of its own with the default
run directory (``runs/<id>``, relative), as a user runs it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.run.giveup import UNREADY_MAX
from tests.integration import sge as sge_cluster
from tests.integration import slurm as slurm_cluster
from tests.integration.daemon_helpers import agents_of, journal_rows, local_config, run_cli

pytestmark = pytest.mark.integration

MEANING = "its machines ended before their agents were ready: not bought again"


def edit(path: Path, **changes: Any) -> None:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data.update(changes)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")


def run_from(cwd: Path) -> tuple[int, str, Path]:
    """``autoscaler run run.yaml`` in ``cwd``: exit code, output, the run directory."""
    proc = run_cli("run", "run.yaml", cwd=cwd, timeout=300)
    (run_dir,) = (cwd / "runs").iterdir()
    return proc.returncode, proc.stdout + proc.stderr, run_dir


def given_up(run_dir: Path) -> dict[str, str]:
    """Type -> the reason it was given up, from the journal."""
    rows = journal_rows(run_dir, "LaunchFailed")
    return {d["type"]: d["reason"] for _, _, d in rows if d["kind"] == "unready"}


def logged_give_ups(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "log.jsonl").read_text(encoding="utf-8").splitlines()
    return [d for d in map(json.loads, lines) if d.get("event") == "type given up"]


@slurm_cluster.XDIST_GROUP
def test_slurm_jobs_that_fail_at_once_give_every_type_up_and_stop_the_run(
    slurm: slurm_cluster.Slurm, tmp_path: Path
) -> None:
    """The agents' interpreter is missing on the node: every job FAILED at once."""
    config = slurm_cluster.slurm_config(tmp_path, 30)
    edit(config, slurm={**yaml.safe_load(config.read_text())["slurm"], "python": "/nonexistent/py"})
    code, out, run_dir = run_from(tmp_path)
    report = json.loads((run_dir / "report.json").read_text())
    assert slurm_cluster.jobs_of(report["run_id"]) == {}
    assert code == 3, out
    assert report["stop_reason"].startswith("every machine type was given up, 30 tasks left")
    assert "every machine type was given up" in out
    reasons = given_up(run_dir)
    assert set(reasons) == {"small", "large"}
    for reason in reasons.values():
        assert "in a row ended before their agent was ready" in reason
        # squeue's word: FAILED, or COMPLETING while the node still cleans the job up.
        assert re.search(r"(FAILED|COMPLETING) \(NonZeroExitCode\)", reason), reason
        assert "/nonexistent/py: not found" in reason  # the job's log tail
    text = (run_dir / "report.md").read_text()
    assert MEANING in text
    assert "/nonexistent/py: not found" in text
    assert {d["machine_type"] for d in logged_give_ups(run_dir)} == {"small", "large"}
    # The first machines of each type (the sampling's), then nothing more bought.
    launched = journal_rows(run_dir, "MachineLaunched")
    assert len(launched) <= 2 * (UNREADY_MAX + 2)
    # Each machine that never started paid its first unit and no other: how many were in
    # flight before the give-up depends on the host's load, not what each costs.
    prices = {t["name"]: t["price"] for t in yaml.safe_load(config.read_text())["machine_types"]}
    assert report["cost"] == sum(prices[d["type"]] for _, _, d in launched)
    assert report["cost"] < report["budget"]


@sge_cluster.XDIST_GROUP
def test_a_grid_engine_type_whose_jobs_cannot_start_is_given_up_the_other_finishes(
    sge: sge_cluster.GridEngine, tmp_path: Path
) -> None:
    """``large``'s jobs ask for a log Grid Engine cannot open: each waits in Eqw."""
    config = sge_cluster.sge_config(tmp_path, 20)
    types = {
        "small": {"queue": "as_small.q"},
        "large": {"queue": "as_large.q", "extra_args": ["-o", "/nonexistent/large.log"]},
    }
    edit(config, sge={"types": types})
    code, out, run_dir = run_from(tmp_path)
    report = json.loads((run_dir / "report.json").read_text())
    assert sge_cluster.jobs_of(report["run_id"]) == {}
    assert code == 0, out
    assert report["tasks_done"] == 20
    reasons = given_up(run_dir)
    assert set(reasons) == {"large"}
    assert 'Eqw, error: can\'t open output file "/nonexistent/large.log"' in reasons["large"]
    assert [d["machine_type"] for d in logged_give_ups(run_dir)] == ["large"]
    text = (run_dir / "report.md").read_text()
    assert MEANING in text
    lost = [d for _, _, d in journal_rows(run_dir, "MachineLost")]
    assert lost
    assert all(d["machine"].startswith("large") for d in lost)
    assert all("can't open output file" in d["reason"] for d in lost)
    at = next(t for t, _, d in journal_rows(run_dir, "LaunchFailed") if d["kind"] == "unready")
    later = [d for t, _, d in journal_rows(run_dir, "Launch") if t > at]
    assert all(d["type"] == "small" for d in later)
    done_by = {d["machine"].split("-")[0] for _, _, d in journal_rows(run_dir, "TaskDone")}
    assert done_by == {"small"}
    assert report["cost"] <= report["budget"] + 1e-6


def test_local_agents_that_exit_at_once_give_every_type_up(tmp_path: Path) -> None:
    """The same hole on this host: an interpreter that exits at once (``false``)."""
    local_config(tmp_path, local={"python": "false"}, bag={"synthetic": 40})
    code, out, run_dir = run_from(tmp_path)
    report = json.loads((run_dir / "report.json").read_text())
    assert code == 3, out
    assert report["stop_reason"].startswith("every machine type was given up, 40 tasks left")
    reasons = given_up(run_dir)
    assert set(reasons) == {"small", "fast"}
    assert all("exited with 1" in reason for reason in reasons.values())
    assert report["cost"] <= report["budget"] / 2
    assert agents_of(report["run_id"]) == []
