"""``infra/slurm/setup.sh`` run again on a cluster it set up: it changes nothing and
restarts nothing (tests/run.sh runs it before every test run)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.integration.daemon_helpers import ROOT
from tests.integration.slurm import XDIST_GROUP, Slurm

pytestmark = [pytest.mark.integration, XDIST_GROUP]

PIDS = Path("/run/slurm-autoscaler")


def pids() -> dict[str, str]:
    return {name: (PIDS / f"{name}.pid").read_text().strip() for name in ("slurmctld", "slurmd")}


def test_setup_again_keeps_the_running_daemons(slurm: Slurm) -> None:
    if os.geteuid() != 0:
        pytest.skip("setup.sh runs as root")
    if not all((PIDS / f"{name}.pid").exists() for name in ("slurmctld", "slurmd")):
        pytest.skip("this Slurm was not started by infra/slurm/setup.sh")
    before = pids()
    done = subprocess.run(
        ["bash", str(ROOT / "infra" / "slurm" / "setup.sh")],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for daemon in ("munged", "slurmctld", "slurmd"):
        assert f"{daemon} already running" in done.stdout
    assert "wrote /etc/slurm/slurm.conf" not in done.stdout
    assert "ready: node" in done.stdout
    assert pids() == before
