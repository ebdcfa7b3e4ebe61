"""``autoscaler cleanup`` (the CLI, in a subprocess) against the real one-node Slurm.

Jobs are made by hand the way a crashed run would leave them: named
``as.<run>.<machine>`` for a run with no live daemon (a stray), for a run whose daemon is
alive (its run directory's lock held), and a plain job that is not ours. Cleanup is
cluster-wide, so the test runs only when no job of another run is queued.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from autoscaler.providers.sge_output import job_name
from autoscaler.providers.slurm import list_tagged
from tests.integration.daemon_helpers import wait_for
from tests.integration.services import missing
from tests.integration.slurm import XDIST_GROUP, Slurm
from tests.integration.test_cleanup import LIVE, STRAY, cleanup, line_of, live_run, write_config

pytestmark = [pytest.mark.integration, XDIST_GROUP]


def test_cleanup_cancels_stray_slurm_jobs_only(slurm: Slurm, tmp_path: Path) -> None:
    """A job named for a dead run is cancelled; a live run's job and a plain job are not."""
    config = write_config(tmp_path, "slurm", slurm={"types": {"small": {"partition": "as_small"}}})
    runs = tmp_path / "runs"
    runs.mkdir()

    def submit(name: str) -> str:
        return slurm.sbatch(
            f"--job-name={name}", "--partition=as_small", "--time=2", "--wrap=sleep 60"
        )

    stray = submit(job_name(STRAY, "small-L0-0"))
    live = submit(job_name(LIVE, "small-L0-0"))
    plain = submit("plain-sleep")
    mine = {stray, live}

    def others() -> list[str]:
        return [j.job_id for j in list_tagged() if j.job_id not in mine]

    # Cleanup is cluster-wide: with another run's job queued it would cancel that too.
    deadline = time.monotonic() + 60
    while others():
        if time.monotonic() > deadline:
            missing(f"jobs of other runs on the cluster ({others()}): cleanup would end them")
        time.sleep(1)
    with live_run(runs, LIVE):
        listed = cleanup(config, runs)
        untouched = slurm.state(stray)
        done = cleanup(config, runs, "--yes")
    assert listed.returncode != 0  # without --yes it lists and asks for it
    assert "pass --yes" in listed.stderr
    assert line_of(listed.stdout, stray).endswith("stray")
    assert untouched in ("PENDING", "RUNNING"), "listing alone ended the stray"
    assert done.returncode == 0, done.stdout + done.stderr
    assert line_of(done.stdout, stray).endswith("stray")
    assert f"run {STRAY}" in line_of(done.stdout, stray)
    assert "live run (daemon pid" in line_of(done.stdout, live)
    assert plain not in done.stdout.split()
    assert f"terminated 1: {stray}" in done.stdout
    wait_for(lambda: slurm.state(stray) in ("", "CANCELLED"), 30, f"job {stray} to be cancelled")
    assert slurm.state(live) in ("PENDING", "RUNNING")
    assert slurm.state(plain) in ("PENDING", "RUNNING")
