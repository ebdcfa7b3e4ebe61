"""The one-node Grid Engine of ``infra/sge/setup.sh``, as a fixture.

The daemons are services started once by the set-up script (root, apt), not by the
tests; the fixture only checks that the cluster answers and has the queues the tests
use, and fails (CI) or skips (elsewhere) with the command to run when it does not.
Beside it, what the tests of runs on it share: their run config and a look at qstat.

The cluster is one per host, with few slots, and cleanup's test needs it free of other
runs' jobs: under pytest-xdist (``--dist loadgroup``) every test that uses the fixture
carries ``XDIST_GROUP``, so they run one after another on one worker.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.providers.sge import (
    SGE_CELL,
    SGE_ROOT,
    CommandResult,
    delete_jobs,
    list_tagged,
    run_command,
)
from autoscaler.providers.sge_output import parse_qsub
from tests.integration.services import missing

QUEUES = ("as_small.q", "as_large.q")
SETUP = "Grid Engine not running: run infra/sge/setup.sh"
XDIST_GROUP = pytest.mark.xdist_group("grid-engine")
"""The mark of every test that uses the ``sge`` fixture."""


@dataclass
class GridEngine:
    """Client commands against the cluster; jobs submitted here are deleted at the end."""

    submitted: list[str] = field(default_factory=list)

    def run(self, *argv: str) -> CommandResult:
        return run_command(argv)

    def qsub(self, *argv: str) -> str:
        """Submit a job as any user of the cluster would; its id."""
        result = run_command(["qsub", *argv])
        assert result.rc == 0, result.stderr
        job_id = parse_qsub(result.stdout)
        self.submitted.append(job_id)
        return job_id

    def qdel(self, job_ids: Sequence[str]) -> list[str]:
        return delete_jobs(job_ids)


@pytest.fixture
def sge(monkeypatch: pytest.MonkeyPatch) -> Iterator[GridEngine]:
    monkeypatch.setenv("SGE_ROOT", os.environ.get("SGE_ROOT", SGE_ROOT))
    monkeypatch.setenv("SGE_CELL", os.environ.get("SGE_CELL", SGE_CELL))
    if shutil.which("qstat") is None:
        missing(f"{SETUP} (no qstat on PATH)")
    probe = run_command(["qstat"])
    if probe.rc != 0:
        missing(f"{SETUP} (qstat: {probe.stderr.strip() or probe.stdout.strip()})")
    for queue in QUEUES:
        if run_command(["qconf", "-sq", queue]).rc != 0:
            missing(f"{SETUP} (no queue {queue})")
    cluster = GridEngine()
    yield cluster
    if cluster.submitted:
        delete_jobs(cluster.submitted)


def sge_config(tmp: Path, tasks: int) -> Path:
    """Two machine types on the two queues; tasks of ~4 s, one-minute ATUs."""
    data: dict[str, Any] = {
        "name": "sge-it",
        "bag": {"synthetic": tasks},
        "plots": False,  # as daemon_helpers.local_config
        "constraint": {"budget": 20},
        "machine_types": [
            {"name": "small", "price": 1, "max_count": 3, "boot_s": "5s"},
            {"name": "large", "price": 2, "max_count": 3, "boot_s": "5s"},
        ],
        "billing": {"mode": "fixed", "atu_s": "1m"},
        "provider": "sge",
        "sge": {"types": {"small": {"queue": "as_small.q"}, "large": {"queue": "as_large.q"}}},
        "monitoring_interval_s": "10s",
        "tail_replication": False,
        "daemon": {"heartbeat_s": 0.5, "lost_after_s": 5, "orphan_after_s": 30},
        "emulator": {
            "seed": 2,
            "runtime": {"dist": "normal", "mean_s": "4s", "sd_s": "1s"},
            "speed": {"small": 1, "large": 2},
        },
    }
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def jobs_of(run_id: str) -> dict[str, tuple[str, str]]:
    """Machine -> (job id, Grid Engine state) of the run's jobs qstat lists now."""
    return {j.machine: (j.job_id, j.state) for j in list_tagged() if j.run_id == run_id}
