"""The one-node Slurm of ``infra/slurm/setup.sh``, as a fixture.

The daemons (munged, slurmctld, slurmd) are services started once by the set-up script
(root, apt), not by the tests; the fixture only checks that the controller answers and
has the partitions the tests use, and fails (CI) or skips (elsewhere) with the command to
run when it does not. Beside it, what the tests of runs on it share: their run config and
a look at squeue.

The cluster is one node, and the offers and cleanup tests need it free of other runs'
jobs: under pytest-xdist (``--dist loadgroup``) every test that uses the fixture carries
``XDIST_GROUP``, so they run one after another on one worker.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.providers.batch import CommandResult
from autoscaler.providers.slurm import cancel_jobs, list_tagged, run_command
from autoscaler.providers.slurm_output import parse_sbatch
from tests.integration.services import missing
from tests.integration.sge import sge_config

PARTITIONS = ("as_small", "as_large")
SETUP = "Slurm not running: run infra/slurm/setup.sh (as root)"
XDIST_GROUP = pytest.mark.xdist_group("slurm")
"""The mark of every test that uses the ``slurm`` fixture."""


@dataclass
class Slurm:
    """Client commands against the cluster; jobs submitted here are cancelled at the end."""

    submitted: list[str] = field(default_factory=list)

    def run(self, *argv: str) -> CommandResult:
        return run_command(argv)

    def sbatch(self, *argv: str) -> str:
        """Submit a job as any user of the cluster would; its id."""
        result = run_command(["sbatch", "--parsable", "--output=/dev/null", *argv])
        assert result.rc == 0, result.stderr
        job_id = parse_sbatch(result.stdout)
        self.submitted.append(job_id)
        return job_id

    def state(self, job_id: str) -> str:
        """The job's state in squeue ('' once it has left)."""
        return self.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T").stdout.strip()

    def scancel(self, job_ids: Sequence[str]) -> list[str]:
        return cancel_jobs(job_ids)


@pytest.fixture
def slurm() -> Iterator[Slurm]:
    if shutil.which("squeue") is None:
        missing(f"{SETUP} (no squeue on PATH)")
    ping = run_command(["scontrol", "ping"])
    if ping.rc != 0 or "is UP" not in ping.stdout:
        missing(f"{SETUP} (scontrol ping: {(ping.stdout + ping.stderr).strip()})")
    partitions = run_command(["sinfo", "-h", "-o", "%R"]).stdout.split()
    for partition in PARTITIONS:
        if partition not in partitions:
            missing(f"{SETUP} (no partition {partition})")
    cluster = Slurm()
    yield cluster
    if cluster.submitted:
        cancel_jobs(cluster.submitted)


def slurm_config(tmp: Path, tasks: int) -> Path:
    """The Grid Engine tests' run (two types, tasks of ~4 s) on the two partitions, with
    two-minute ATUs (a job's time limit)."""
    path = sge_config(tmp, tasks)
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    del data["sge"]
    data["name"] = "slurm-it"
    data["provider"] = "slurm"
    data["slurm"] = {
        "types": {"small": {"partition": "as_small"}, "large": {"partition": "as_large", "cpus": 2}}
    }
    data["billing"]["atu_s"] = "2m"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def jobs_of(run_id: str) -> dict[str, tuple[str, str]]:
    """Machine -> (job id, Slurm state) of the run's queued or running jobs now."""
    return {j.machine: (j.job_id, j.state) for j in list_tagged() if j.run_id == run_id}
