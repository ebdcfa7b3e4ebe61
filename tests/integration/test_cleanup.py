"""``autoscaler cleanup`` through the CLI, against real machines of each provider.

The machines are made by hand the way a crashed run would leave them: EC2 instances in
a moto server carrying our run tag, agent processes carrying the run's environment
tags, Grid Engine jobs named ``as.<run>.<machine>``. Beside them sit machines that are
not ours (untagged, foreign tags, a plain job or process) and machines of a live run
(its run directory's lock held), which cleanup must list or ignore but never end; and
real runs started with ``--out`` away from where cleanup is started, which cleanup finds
through the run registry (each test has its own, ``$AUTOSCALER_STATE_DIR``).

Local agents and Grid Engine jobs are host- or cluster-wide: a cleanup run here would
also end other runs' agents on this host. The local test therefore runs its processes
and the cleanup inside a new PID namespace (``unshare``), where /proc shows only them;
the Grid Engine test runs only when no job of another run is on the cluster.
"""

from __future__ import annotations

import contextlib
import json
import os
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

from autoscaler.core.journal import JOURNAL_DB, SqliteJournal
from autoscaler.providers.ec2 import LAUNCH_TAG, RUN_TAG, TYPE_TAG
from autoscaler.providers.local import tagged_processes
from autoscaler.providers.sge import list_tagged
from autoscaler.providers.sge_output import job_name
from autoscaler.run.live_runs import RunEntry, read_entries, write_entry
from autoscaler.run.rundir import run_lock
from tests.integration.daemon_helpers import (
    ROOT,
    isolated,
    journal_rows,
    local_config,
    run_cleanup,
    run_id_of,
    wait_for,
)
from tests.integration.services import MotoServer, fake_aws_credentials, missing
from tests.integration.sge import XDIST_GROUP, GridEngine

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
    return run_cleanup(config, "--runs", str(runs), *extra)


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
# daemon (it keeps retrying), a plain process, and, given an --out directory, a real run
# (waiting until its agents run); then runs cleanup from the given directory, with
# --runs if given; prints what happened.
DRIVER = r"""
import json, os, socket, subprocess, sys, time
config, runs, agent, root, run_id, live_out, where = sys.argv[1:8]
from autoscaler.providers.local import RUN_TAG, tagged_processes
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
procs = [tagged, plain]
out = {"agent": tagged.pid, "plain": plain.pid}
def live_agents():
    return [pid for pid, t in tagged_processes() if t[RUN_TAG] != run_id]
try:
    if live_out:
        log = open(live_out + ".out", "w")
        daemon = subprocess.Popen(
            [sys.executable, "-m", "autoscaler", "run", config, "--out", live_out],
            cwd=root, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        procs.append(daemon)
        deadline = time.monotonic() + 60
        while not live_agents() and time.monotonic() < deadline and daemon.poll() is None:
            time.sleep(0.05)
        out["live_agents_before"] = live_agents()
    time.sleep(0.5)
    out["agent_alive_before"] = tagged.poll() is None
    done = subprocess.run(
        [sys.executable, "-m", "autoscaler", "cleanup", config, "--yes",
         *(["--runs", runs] if runs else [])],
        cwd=where, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    out.update(rc=done.returncode, stdout=done.stdout, stderr=done.stderr)
    if live_out:
        out["daemon_alive_after"] = daemon.poll() is None
    try:
        out["agent_rc"] = tagged.wait(20)
    except subprocess.TimeoutExpired:
        out["agent_rc"] = None
    out["plain_alive"] = plain.poll() is None
    if live_out:
        try:
            out["daemon_rc"] = daemon.wait(240)
        except subprocess.TimeoutExpired:
            out["daemon_rc"] = None
finally:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
print(json.dumps(out))
"""


def drive(config: Path, runs: Path | None, where: Path, live_out: Path | None) -> dict[str, Any]:
    """Run ``DRIVER`` in a PID namespace of its own; what it saw."""
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
            str(runs or ""),
            str(ROOT / "bootstrap" / "agent.py"),
            str(ROOT),
            STRAY,
            str(live_out or ""),
            str(where),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=360,
        check=False,
    )
    assert driver.returncode == 0, driver.stderr
    result: dict[str, Any] = json.loads(driver.stdout.splitlines()[-1])
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
    return result


def test_cleanup_terminates_stray_local_agents_only(tmp_path: Path) -> None:
    """A tagged agent of a run with no live daemon is ended; a plain process is not."""
    config = write_config(tmp_path, "local")
    runs = tmp_path / "runs"
    runs.mkdir()
    drive(config, runs, ROOT, None)


def test_a_live_run_started_elsewhere_keeps_its_local_agents(
    tmp_path: Path, autoscaler_state: Path
) -> None:
    """A real run with --out in a directory of its own, cleanup started from another one
    (no runs/ there): the run's agents are its live run's and are kept, and the run ends
    cleanly, no machine lost. The same cleanup ends a dead run's agent, although that run
    left its registry entry behind (stale: nothing holds its lock), and removes the entry."""
    config = local_config(tmp_path)
    live_out = tmp_path / "somewhere" / "run"
    live_out.parent.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dead_dir = tmp_path / "dead-run"
    dead_dir.mkdir()
    write_entry(autoscaler_state, RunEntry(STRAY, dead_dir, 1, "2026-01-01T00:00:00+00:00"))
    result = drive(config, None, elsewhere, live_out)
    daemon_out = (live_out.parent / "run.out").read_text()
    assert result["live_agents_before"], f"the run started no agent:\n{daemon_out[-3000:]}"
    assert result["daemon_alive_after"], "the run was over before cleanup looked"
    run_id = run_id_of(live_out)
    ours = [row for row in result["stdout"].splitlines() if f" run {run_id} " in row]
    assert ours, f"none of the run's agents was listed:\n{result['stdout']}"
    for row in ours:
        assert "live run (daemon pid " in row, row
    assert f"run {STRAY}: removed its stale registry entry" in result["stderr"]
    assert result["daemon_rc"] == 0, daemon_out[-3000:]
    assert journal_rows(live_out, "MachineLost") == [], "cleanup ended a machine of the run"
    report = json.loads((live_out / "report.json").read_text())
    assert report["tasks_done"] == 200
    assert read_entries(autoscaler_state) == [], "an entry outlived its run"


# --- Grid Engine ----------------------------------------------------------------------------


@XDIST_GROUP
def test_cleanup_deletes_stray_sge_jobs_only(sge: GridEngine, tmp_path: Path) -> None:
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


# --- several providers ----------------------------------------------------------------------


@XDIST_GROUP
def test_cleanup_of_a_multi_provider_config_ends_strays_in_every_provider(
    sge: GridEngine, account: Account, tmp_path: Path
) -> None:
    """A config of two providers (a Grid Engine cluster and EC2 in moto): one cleanup
    lists the strays of both, ends both, and keeps the live run's instance and the plain
    job and untagged instances."""
    ec2 = yaml.safe_load(account.config.read_text(encoding="utf-8"))["ec2"]
    data: dict[str, Any] = {
        "name": "hybrid-cleanup",
        "bag": {"synthetic": 1},
        "constraint": {"budget": 10},
        "machine_types": [
            {"name": "node", "price": 0, "max_count": 2, "provider": "cluster"},
            {"name": "small", "price": 1, "max_count": 2, "provider": "cloud"},
        ],
        "providers": {
            "cluster": {"kind": "sge", "types": {"node": {"queue": "as_small.q"}}},
            "cloud": {"kind": "ec2", **ec2},
        },
    }
    config = tmp_path / "hybrid.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    job = sge.qsub(
        "-b", "y", "-N", job_name(STRAY, "node-L0-0"), "-q", "as_small.q", "-o", "/dev/null",
        "-j", "y", "sleep", "60",
    )  # fmt: skip
    plain = sge.qsub("-b", "y", "-N", "plain-sleep", "-q", "as_small.q", "sleep", "60")
    deadline = time.monotonic() + 60
    while [j.job_id for j in list_tagged() if j.job_id != job]:
        if time.monotonic() > deadline:
            missing("jobs of other runs on the cluster: cleanup would end them")
        time.sleep(1)
    with live_run(account.runs, LIVE):
        done = cleanup(config, account.runs, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert line_of(done.stdout, job).endswith("stray")
    assert line_of(done.stdout, account.stray).endswith("stray")
    assert "live run (daemon pid" in line_of(done.stdout, account.live)
    ended = next(line for line in done.stdout.splitlines() if line.startswith("terminated 2:"))
    assert job in ended
    assert account.stray in ended
    wait_for(lambda: job not in {j.job_id for j in list_tagged()}, 30, f"job {job} to go")
    states = account.states()
    assert states[account.stray] in ("shutting-down", "terminated")
    assert states[account.live] == states[account.untagged] == "running"
    assert sge.run("qstat", "-j", plain).rc == 0
