"""The one-node Grid Engine of ``infra/sge/setup.sh``, as a fixture.

The daemons are services started once by the set-up script (root, apt), not by the
tests; the fixture only checks that the cluster answers and has the queues the tests
use, and fails (CI) or skips (elsewhere) with the command to run when it does not.

The cluster is one per host, with few slots, and cleanup's test needs it free of other
runs' jobs: under pytest-xdist (``--dist loadgroup``) every test that uses the fixture
carries ``XDIST_GROUP``, so they run one after another on one worker.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pytest

from autoscaler.providers.sge import (
    SGE_CELL,
    SGE_ROOT,
    CommandResult,
    delete_jobs,
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
