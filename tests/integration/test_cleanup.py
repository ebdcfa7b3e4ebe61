"""``autoscaler cleanup`` through the CLI, against real machines of each provider.

The machines are made by hand the way a crashed run would leave them: EC2 instances in
a moto server carrying our run tag, agent processes carrying the run's environment
tags, Grid Engine jobs named ``as.<run>.<machine>``. Beside them sit machines that are
not ours (untagged, foreign tags, a plain job or process) and machines of a live run
(its run directory's lock held), which cleanup must list or ignore but never end.

Local agents and Grid Engine jobs are host- or cluster-wide: a cleanup run here would
also end other runs' agents on this host. The local test therefore runs its processes
and the cleanup inside a new PID namespace (``unshare``), where /proc shows only them;
the Grid Engine test runs only when no job of another run is on the cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from autoscaler.journal import JOURNAL_DB, SqliteJournal
from autoscaler.providers.ec2 import LAUNCH_TAG, RUN_TAG, TYPE_TAG
from autoscaler.providers.local import tagged_processes
from autoscaler.providers.sge import job_name, list_tagged
from autoscaler.rundir import run_lock
from tests.integration.daemon_helpers import ROOT, cli, wait_for
from tests.integration.services import MotoServer, fake_aws_credentials, missing
from tests.integration.sge import GridEngine, sge  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration

REGION = "us-east-1"
STRAY = "crashed-20260101T000000Z-dead"
LIVE = "live-20260101T000000Z-beef"


def write_config(tmp: Path, provider: str, **sections: Any) -> Path:
    data: dict[str, Any] = {
        "name": "cleanup",
        "bag": {"synthetic": 1},
        "constraint": {"budget": 10},
        "machine_types": [{"name": "small", "price": 1, "max_count": 2}],
        "provider": provider,
        **sections,
    }
    path = tmp / f"{provider}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def cleanup(config: Path, runs: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    """``autoscaler cleanup`` as a user would run it from a script: no terminal."""
    return subprocess.run(
        cli("cleanup", str(config), "--runs", str(runs), *extra),
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def line_of(output: str, machine_id: str) -> str:
    """The line cleanup printed for ``machine_id`` (it starts each line with the id)."""
    lines = [line for line in output.splitlines() if line.split()[:1] == [machine_id]]
    assert len(lines) == 1, f"{machine_id} listed {len(lines)} times in:\n{output}"
    return lines[0]


@contextlib.contextmanager
def live_run(runs: Path, run_id: str) -> Iterator[Path]:
    """A run whose daemon is alive: this process holds its run directory's lock.

    The directory is not named after the run (as with ``run --out DIR``): cleanup must
    read the run id from the journal.
    """
    run_dir = runs / "somewhere-else"
    run_dir.mkdir(parents=True)
    journal = SqliteJournal(run_dir / JOURNAL_DB)
    journal.set_meta(run_id=run_id)
    journal.close()
    with run_lock(run_dir):
        yield run_dir


# --- EC2 ----------------------------------------------------------------------------------


@dataclass
class Account:
    ec2: Any
    config: Path
    runs: Path
    stray: str  # tagged with a run that has no run directory
    untagged: str
    foreign: str  # tags of someone else only
    live: str  # tagged with the live run

    @property
    def all(self) -> list[str]:
        return [self.stray, self.untagged, self.foreign, self.live]

    def states(self) -> dict[str, str]:
        reply = self.ec2.describe_instances(InstanceIds=self.all)
        return {
            i["InstanceId"]: i["State"]["Name"]
            for r in reply["Reservations"]
            for i in r["Instances"]
        }


@pytest.fixture
def account(moto: MotoServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Account]:
    """A fresh moto account with the four kinds of instance; all terminated at the end."""
    fake_aws_credentials(monkeypatch)
    moto.reset()
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto.endpoint)
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    key = tmp_path / "id_test"
    key.write_text("not a real key\n", encoding="utf-8")
    key.chmod(0o600)
    config = write_config(
        tmp_path,
        "ec2",
        ec2={
            "region": REGION,
            "endpoint_url": moto.endpoint,
            "ami": ami,
            "types": {"small": {"instance_type": "t3.micro"}},
            "ssh": {"key_file": str(key)},
        },
    )

    def instance(tags: dict[str, str]) -> str:
        extra: dict[str, Any] = {}
        if tags:
            extra["TagSpecifications"] = [
                {
                    "ResourceType": "instance",
                    "Tags": [{"Key": k, "Value": v} for k, v in tags.items()],
                }
            ]
        reply = ec2.run_instances(
            ImageId=ami, InstanceType="t3.micro", MinCount=1, MaxCount=1, **extra
        )
        instance_id: str = reply["Instances"][0]["InstanceId"]
        return instance_id

    def ours(run_id: str) -> dict[str, str]:
        return {RUN_TAG: run_id, LAUNCH_TAG: "L0", TYPE_TAG: "small", "Name": run_id}

    acct = Account(
        ec2=ec2,
        config=config,
        runs=tmp_path / "runs",
        stray=instance(ours(STRAY)),
        untagged=instance({}),
        foreign=instance({"team": "physics", "Name": "x"}),
        live=instance(ours(LIVE)),
    )
    acct.runs.mkdir()
    try:
        wait_for(lambda: set(acct.states().values()) == {"running"}, 30, "the instances to run")
        yield acct
    finally:
        ec2.terminate_instances(InstanceIds=acct.all)


def test_cleanup_terminates_only_stray_ec2_instances(account: Account) -> None:
    """A run-tagged instance with no live run is ended; untagged, foreign and live ones stay."""
    with live_run(account.runs, LIVE):
        done = cleanup(account.config, account.runs, "--yes")
        assert done.returncode == 0, done.stdout + done.stderr
        out = done.stdout
        stray = line_of(out, account.stray)
        assert f"run {STRAY}" in stray
        assert stray.endswith("stray")
        live = line_of(out, account.live)
        assert f"run {LIVE}" in live
        assert f"live run (daemon pid {os.getpid()})" in live
        for other in (account.untagged, account.foreign):
            assert other not in out, f"{other} is not ours but was listed:\n{out}"
        assert f"terminated 1: {account.stray}" in out
        states = account.states()
    assert states[account.stray] in ("shutting-down", "terminated")
    for kept in (account.untagged, account.foreign, account.live):
        assert states[kept] == "running", f"{kept} is {states[kept]}"


def test_cleanup_without_yes_and_no_terminal_refuses(account: Account) -> None:
    """No --yes and no terminal to ask on: a nonzero exit that says --yes, nothing ended."""
    with live_run(account.runs, LIVE):
        refused = cleanup(account.config, account.runs)
    assert refused.returncode != 0
    assert "--yes" in refused.stdout + refused.stderr
    line_of(refused.stdout, account.stray)  # it still shows what it would terminate
    assert set(account.states().values()) == {"running"}


def test_a_finished_run_no_longer_protects_its_instances(account: Account) -> None:
    """The live run's directory stays but its daemon is gone (lock free): now a stray."""
    with live_run(account.runs, LIVE):
        pass
    done = cleanup(account.config, account.runs, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert line_of(done.stdout, account.live).endswith("stray")
    states = account.states()
    for gone in (account.stray, account.live):
        assert states[gone] in ("shutting-down", "terminated")
    for kept in (account.untagged, account.foreign):
        assert states[kept] == "running"


# --- local agents ---------------------------------------------------------------------------

# Run as PID 1 of a new PID namespace: starts a tagged agent that cannot reach any
# daemon (it keeps retrying), a plain process, and runs cleanup; prints what happened.
DRIVER = r"""
import json, os, socket, subprocess, sys, time
config, runs, agent, root, run_id = sys.argv[1:6]
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]  # closed once the block ends: nobody answers there
tags = {"AUTOSCALER_RUN": run_id, "AUTOSCALER_MACHINE": "small-L0-0",
        "AUTOSCALER_TOKEN": "t0ken"}
tagged = subprocess.Popen(
    [sys.executable, agent, "--url", f"http://127.0.0.1:{port}", "--machine", "small-L0-0",
     "--orphan-after-s", "60"],
    env={**os.environ, **tags}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
plain = subprocess.Popen(["sleep", "60"])
out = {"agent": tagged.pid, "plain": plain.pid}
try:
    time.sleep(0.5)
    out["agent_alive_before"] = tagged.poll() is None
    done = subprocess.run(
        [sys.executable, "-m", "autoscaler", "cleanup", config, "--runs", runs, "--yes"],
        cwd=root, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    out.update(rc=done.returncode, stdout=done.stdout, stderr=done.stderr)
    try:
        out["agent_rc"] = tagged.wait(20)
    except subprocess.TimeoutExpired:
        out["agent_rc"] = None
    out["plain_alive"] = plain.poll() is None
finally:
    for proc in (tagged, plain):
        if proc.poll() is None:
            proc.kill()
            proc.wait()
print(json.dumps(out))
"""


def isolated() -> list[str]:
    """The command prefix of a new PID namespace with its own /proc, if allowed here."""
    if shutil.which("unshare") is None:
        return []
    probe = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "true"],
        capture_output=True,
        check=False,
    )
    return ["unshare", "--pid", "--fork", "--mount-proc"] if probe.returncode == 0 else []


def test_cleanup_terminates_stray_local_agents_only(tmp_path: Path) -> None:
    """A tagged agent of a run with no live daemon is ended; a plain process is not."""
    config = write_config(tmp_path, "local")
    runs = tmp_path / "runs"
    runs.mkdir()
    prefix = isolated()
    if not prefix and tagged_processes():
        missing("no PID namespace here, and other runs' agents run on this host")
    driver = subprocess.run(
        [
            *prefix,
            sys.executable,
            "-c",
            DRIVER,
            str(config),
            str(runs),
            str(ROOT / "bootstrap" / "agent.py"),
            str(ROOT),
            STRAY,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert driver.returncode == 0, driver.stderr
    result = json.loads(driver.stdout.splitlines()[-1])
    assert result["agent_alive_before"], "the agent exited before cleanup ran"
    assert result["rc"] == 0, result["stdout"] + result["stderr"]
    line = line_of(result["stdout"], str(result["agent"]))
    assert f"run {STRAY}" in line
    assert "type small " in line
    assert line.endswith("stray")
    assert f"terminated 1: {result['agent']}" in result["stdout"]
    listed = [row.split()[0] for row in result["stdout"].splitlines() if row.strip()]
    assert str(result["plain"]) not in listed
    assert result["agent_rc"] == 0, "the agent did not exit as on SIGTERM"
    assert result["plain_alive"], "cleanup killed a process that carries no run tag"


# --- Grid Engine ----------------------------------------------------------------------------


def test_cleanup_deletes_stray_sge_jobs_only(sge: GridEngine, tmp_path: Path) -> None:  # noqa: F811
    """A job named for a dead run is deleted; a live run's job and a plain job are not."""
    config = write_config(tmp_path, "sge", sge={"types": {"small": {"queue": "as_small.q"}}})
    runs = tmp_path / "runs"
    runs.mkdir()

    def submit(name: str) -> str:
        return sge.qsub(
            "-b", "y", "-N", name, "-q", "as_small.q", "-o", "/dev/null", "-j", "y", "sleep", "60"
        )

    stray = submit(job_name(STRAY, "small-L0-0"))
    live = submit(job_name(LIVE, "small-L0-0"))
    plain = submit("plain-sleep")
    mine = {stray, live}

    def others() -> list[str]:
        return [j.job_id for j in list_tagged() if j.job_id not in mine]

    # Cleanup is cluster-wide: with another run's job queued it would delete that too.
    deadline = time.monotonic() + 60
    while others():
        if time.monotonic() > deadline:
            missing(f"jobs of other runs on the cluster ({others()}): cleanup would end them")
        time.sleep(1)
    with live_run(runs, LIVE):
        done = cleanup(config, runs, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert line_of(done.stdout, stray).endswith("stray")
    assert f"run {STRAY}" in line_of(done.stdout, stray)
    assert "live run (daemon pid" in line_of(done.stdout, live)
    assert plain not in done.stdout.split()
    assert f"terminated 1: {stray}" in done.stdout
    wait_for(
        lambda: stray not in {j.job_id for j in list_tagged()}, 30, f"job {stray} to leave qstat"
    )
    assert live in {j.job_id for j in list_tagged()}
    plain_there = sge.run("qstat", "-j", plain)
    assert plain_there.rc == 0, f"the plain job {plain} is gone: {plain_there.stderr}"
