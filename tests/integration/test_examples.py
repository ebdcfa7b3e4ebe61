"""Every example config run as the README shows it: ``autoscaler run
config/examples/X.yaml`` from the repository root, with the default run directory
(``runs/<id>``, relative), as a user types it.

The repository root is mirrored in a temporary directory (its ``config/examples``
copied), so the runs land in ``<tmp>/runs`` and never in the checkout. Configs on the
emulator's ``sim`` provider, and those that rent from a cloud (their ``ec2`` section is
a template to fill), run with ``--dry-run``, as the README gives them; the others run for
real on local agents here, and the cluster examples run in their guides (docs/sge.md,
docs/slurm.md: ``test_doc_examples.py``) on the one-node Grid Engine and Slurm. Each run
must finish its bag within its budget and leave no machine.

The cloud examples run for real too, as docs/ec2.md has a user do it: copied to
``my-ec2.yaml`` (``my-hybrid.yaml``) at the root, the EC2 section filled from the
CloudFormation stack's outputs (deployed to moto), the user's script shipped with the
bag, then ``autoscaler run`` and ``autoscaler cleanup``; every instance is reached
through the test's sshd on loopback.

Before issue 34, Grid Engine's and Slurm's examples died this way from the root: every
job failed at once (a relative run directory joined twice: slurmd could not open
``runs/<id>/work/runs/<id>/agents/<m>.log``, Grid Engine could not chdir to
``runs/<id>/work``), and the run spent its whole budget on machines that never started.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from tests.integration import slurm as slurm_cluster
from tests.integration import test_doc_examples as doc_examples
from tests.integration.daemon_helpers import (
    ROOT,
    agents_of,
    committed_over_time,
    journal_rows,
    run_cli,
    run_id_of,
    wait_for,
)
from tests.integration.ec2_world import Ec2World
from tests.integration.test_ec2_daemon import AGENT_GONE_S
from tests.integration.test_infra import default_network, deploy

pytestmark = pytest.mark.integration

EXAMPLES = ROOT / "config" / "examples"


@dataclass(frozen=True)
class Example:
    config: str
    args: tuple[str, ...] = ()
    jobs: tuple[str, ...] = ()  # a service config's jobs (``--job``)
    timeout_s: float = 300.0


DRY = [
    Example(f"{name}.yaml", ("--dry-run",))
    for name in (
        "quickstart",
        "sweep",
        "commands",
        "bats_s1_1",
        "bats_s1_4",
        "bats_s3_4",
        "bats_s4_1",
        "bats_s4_3",
        "ec2",
        "hybrid",
        "spot_market",
        "rehearse",
    )
]
LOCAL = [Example("local.yaml"), Example("files.yaml"), Example("deadline.yaml")]


def test_every_example_config_is_run_here() -> None:
    """A new example config gets a run in this file (service configs and job files run
    together, ``service.yaml --job job.yaml``)."""
    covered = {e.config for e in [*DRY, *LOCAL]} | set(ON_CLUSTERS)
    covered |= {"service.yaml", "job.yaml", "job_deadline.yaml"}
    covered |= {"team.yaml", "job_lab_a.yaml", "job_lab_b.yaml"}
    assert {p.name for p in EXAMPLES.glob("*.yaml")} == covered


ON_CLUSTERS = {"sge.yaml": "sge", "slurm.yaml": "slurm"}
"""The cluster examples: their guides (docs/sge.md, docs/slurm.md) run them as written,
from the root with the default run directory, on the clusters the test command sets up;
test_doc_examples.py checks each such run did its bag within budget and left no job."""


def test_the_cluster_examples_run_in_their_guides() -> None:
    ran = {
        (b.where, line.split()[-1])
        for b in doc_examples.RUN
        for line in b.text.splitlines()
        if line.startswith("autoscaler run config/examples/") and "--dry-run" not in line
    }
    for config, where in ON_CLUSTERS.items():
        assert (where, f"config/examples/{config}") in ran, (config, sorted(ran))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A directory laid out as the repository root, with its example configs."""
    shutil.copytree(EXAMPLES, tmp_path / "config" / "examples")
    return tmp_path


def run_example(root: Path, example: Example) -> tuple[int, Path, str]:
    """``autoscaler run config/examples/X.yaml ARGS`` from ``root``: its exit code, its
    run directory (the one under ``root/runs``) and its output."""
    argv = ["run", f"config/examples/{example.config}", *example.args]
    for job in example.jobs:
        argv += ["--job", f"config/examples/{job}"]
    proc = run_cli(*argv, cwd=root, timeout=example.timeout_s)
    output = proc.stdout + proc.stderr
    runs = sorted((root / "runs").iterdir()) if (root / "runs").is_dir() else []
    assert len(runs) == 1, f"run directories {runs}; output:\n{output}"
    return proc.returncode, runs[0], output


def report_of(run_dir: Path) -> dict[str, Any]:
    report: dict[str, Any] = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    return report


def bag_size(root: Path, config: str) -> int:
    cfg = load_config(root / "config" / "examples" / config)
    return len(expand_bag(cfg))


def assert_finished(root: Path, example: Example, code: int, run_dir: Path, out: str) -> None:
    """The bag done within the budget, exit 0, the run directory named as it is."""
    assert code == 0, out
    assert f"run directory: runs/{run_dir.name}" in out, out
    report = report_of(run_dir)
    assert report["stop_reason"] is None, out
    assert report["tasks_done"] == report["tasks_total"] == bag_size(root, example.config)
    assert report["tasks_failed"] == 0
    if report["budget"] is not None:
        assert report["cost"] <= report["budget"] + 1e-6


WARNINGS = ("budget at risk", "budget unlikely")


@pytest.mark.parametrize("example", DRY, ids=lambda e: e.config)
def test_a_dry_run_example_from_the_root(root: Path, example: Example) -> None:
    """Done within its budget and, as it is, warned of nothing: bats_s1_1 was said at
    risk (the mix's cost at the slow end of the estimates, 960.00, past 810.00) and
    finished at 810.00; bats_s4_3 was said unlikely to finish (one mix's forecast,
    1410.00) and finished at 1047.00 of 1062.00 (the local examples' dry runs:
    tests/unit/test_plan_minimum.py)."""
    code, run_dir, out = run_example(root, example)
    assert_finished(root, example, code, run_dir, out)
    report = report_of(run_dir)
    assert report["provider"] != "local"
    if report["budget"] is not None:
        printed = " ".join(out.split())
        assert not [w for w in WARNINGS if w in printed], printed
        assert report["risk"] is None
        assert report["shortfall"] is None


@pytest.mark.slow
@pytest.mark.parametrize("example", LOCAL, ids=lambda e: e.config)
def test_a_local_example_from_the_root(root: Path, example: Example) -> None:
    code, run_dir, out = run_example(root, example)
    assert_finished(root, example, code, run_dir, out)
    report = report_of(run_dir)
    assert report["provider"] == "local"
    assert agents_of(report["run_id"]) == []


@pytest.mark.slow
def test_the_service_example_runs_its_jobs_from_the_root(root: Path) -> None:
    example = Example("service.yaml", jobs=("job.yaml", "job_deadline.yaml"))
    code, run_dir, out = run_example(root, example)
    assert code == 0, out
    assert f"state directory: runs/{run_dir.name}/service" in out, out
    for job, config in (("j1", "job.yaml"), ("j2", "job_deadline.yaml")):
        report = report_of(run_dir / "service" / "jobs" / job)
        assert report.get("stop_reason") is None, out
        job_file = yaml.safe_load((root / "config" / "examples" / config).read_text())
        assert report["tasks_done"] == job_file["bag"]["synthetic"]
        assert report["cost"] <= job_file["constraint"].get("budget", float("inf")) + 1e-6
        if "run_id" in report:
            assert agents_of(report["run_id"]) == []
    assert agents_of(report_of(run_dir / "service" / "pool")["run_id"]) == []


@pytest.mark.slow
def test_the_team_example_runs_each_project_s_job_within_its_budget(root: Path) -> None:
    example = Example("team.yaml", jobs=("job_lab_a.yaml", "job_lab_b.yaml", "job.yaml"))
    code, run_dir, out = run_example(root, example)
    assert code == 0, out
    for job, project, tasks, budget in (
        ("j1", "lab-a", 120, 40),
        ("j2", "lab-b", 60, 20),
        ("j3", "default", 120, 40),
    ):
        report = report_of(run_dir / "service" / "jobs" / job)
        assert report.get("stop_reason") is None, out
        assert report["tasks_done"] == tasks
        assert report["cost"] <= budget + 1e-6
        assert agents_of(report["run_id"]) == []
        db = sqlite3.connect(run_dir / "service" / "service.db")
        try:
            (kept,) = db.execute("SELECT project FROM jobs WHERE id = ?", (job,)).fetchone()
        finally:
            db.close()
        assert kept == project


SIMULATE = """\
import argparse
import random

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, required=True)
seed = parser.parse_args().seed
rng = random.Random(seed)
hits = sum(rng.random() ** 2 + rng.random() ** 2 <= 1 for _ in range(10_000))
print(f"seed {seed}: pi ~ {4 * hits / 10_000}")
"""
"""A user's script: what ``python3 simulate.py --seed {seed}`` runs."""

SEEDS = 6
"""The sweep, cut from the examples' hundreds of seeds."""


def deploy_stack(world: Ec2World) -> dict[str, str]:
    """What a user has before filling an ``ec2:`` section (docs/ec2.md, infra/README.md):
    their key pair imported (its private half is ``ec2.ssh.key_file``) and
    infra/cloudformation.yaml deployed, here to moto; the stack's outputs."""
    public = world.sshd.client_key.with_suffix(".pub").read_text(encoding="utf-8")
    world.ec2.import_key_pair(KeyName="autoscaler", PublicKeyMaterial=public.encode())
    vpc, subnets = default_network(world.ec2)
    # cloud-init lists the host keys an instance made on its console (host_keys: console)
    world.proxy.console(
        "-----BEGIN SSH HOST KEY KEYS-----\n"
        f"{world.sshd.host_key_public} root@ip-10-0-0-1\n"
        "-----END SSH HOST KEY KEYS-----\n"
    )
    return deploy(
        world.moto,
        "autoscaler",
        ControllerCidr="127.0.0.1/32",
        VpcId=vpc,
        SubnetIds=",".join(subnets),
        KeyName="autoscaler",
    )


def fill_ec2(section: dict[str, Any], world: Ec2World, stack: dict[str, str]) -> None:
    """An example's EC2 section filled in as docs/ec2.md says: from the stack's outputs
    and an AMI. Besides, only what the test's world forces: the EC2 API at moto, spot
    notices on loopback, every instance reached through the one sshd on loopback (agents
    in this test's directory, under this interpreter, never powering the host off)."""
    section["ami"] = world.ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    section["subnets"] = stack["Subnets"].split(",")
    section["security_groups"] = [stack["SecurityGroupId"]]
    section["key_name"] = stack["KeyName"]
    if "instance_profile" in section:
        section["instance_profile"] = stack["InstanceProfileName"]
    section["ssh"]["user"] = world.sshd.user
    section["ssh"]["key_file"] = str(world.sshd.client_key)
    section["endpoint_url"] = world.proxy.endpoint
    section["notice_url"] = world.notices.url
    section["ssh"] |= {
        "connect": f"127.0.0.1:{world.sshd.port}",
        "remote_dir": str(world.remote_dir),
        "python": sys.executable,
        "poweroff_on_exit": False,
    }


def ship_simulate(root: Path, bag: dict[str, Any]) -> None:
    """``simulate.py`` beside the config, shipped to each task's work directory as the
    examples' comments say, and a sweep of a few seeds."""
    (root / "simulate.py").write_text(SIMULATE, encoding="utf-8")
    bag["sweep"]["seed"]["stop"] = SEEDS
    bag["files"] = {"inputs": ["simulate.py"]}


def my_config(root: Path, example: str, data: dict[str, Any]) -> str:
    name = f"my-{example}"
    (root / name).write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return name


def run_filled(root: Path, config: str) -> Path:
    """``autoscaler run CONFIG`` from the root with the default run directory: it ends
    with exit 0, every seed run once, its output in outputs.jsonl, report.md written."""
    proc = run_cli("run", config, cwd=root, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    (run_dir,) = sorted((root / "runs").iterdir())
    assert f"run directory: runs/{run_dir.name}" in out, out
    done = Counter(data["task"] for _, _, data in journal_rows(run_dir, "TaskDone"))
    assert done == dict.fromkeys(range(SEEDS), 1), done
    lines = (run_dir / "outputs.jsonl").read_text(encoding="utf-8").splitlines()
    said = {json.loads(line)["task"]: json.loads(line)["stdout"] for line in lines}
    assert {t: s.split(":")[0] for t, s in said.items()} == {s: f"seed {s}" for s in range(SEEDS)}
    assert (run_dir / "report.md").is_file()
    return run_dir


def assert_nothing_left(root: Path, world: Ec2World, config: str, run_id: str) -> None:
    """No instance of the run running, no agent alive, nothing for cleanup to end."""
    assert not world.running(run_id), "an instance of the run is still running"
    wait_for(lambda: not world.agent_pids(), AGENT_GONE_S, "every agent of the run to exit")
    cleanup = run_cli("cleanup", config, cwd=root)
    assert cleanup.returncode == 0, cleanup.stdout + cleanup.stderr
    assert "no stray machines of ours in " in cleanup.stdout, cleanup.stdout
    assert not world.running(run_id)


@pytest.mark.slow
def test_the_ec2_example_filled_in_as_the_docs_say(root: Path, world: Ec2World) -> None:
    """docs/ec2.md: copy config/examples/ec2.yaml to my-ec2.yaml, fill its ``ec2:``
    section, ``autoscaler run my-ec2.yaml`` from the root, then ``autoscaler cleanup
    my-ec2.yaml``. On moto, every instance reached through the test's sshd."""
    stack = deploy_stack(world)
    data = yaml.safe_load((EXAMPLES / "ec2.yaml").read_text(encoding="utf-8"))
    fill_ec2(data["ec2"], world, stack)
    ship_simulate(root, data["bag"])
    config = my_config(root, "ec2.yaml", data)
    run_dir = run_filled(root, config)
    report = report_of(run_dir)
    assert max(committed_over_time(run_dir)) <= report["budget"] + 1e-9
    assert report["cost"] <= report["budget"]
    run_id = run_id_of(run_dir)
    instances = world.instances(run_id)
    assert {i["InstanceId"] for i in instances} == {m["id"] for m in report["machines"]}
    launches = world.proxy.requests("RunInstances")
    assert launches
    for seen in launches:  # asked for as the filled-in section says
        params = seen.params
        assert params["KeyName"] == [stack["KeyName"]]
        assert params["SecurityGroupId.1"] == [stack["SecurityGroupId"]]
        assert params["IamInstanceProfile.Name"] == [stack["InstanceProfileName"]]
        assert params["SubnetId"][0] in stack["Subnets"].split(",")
    # host_keys: console: each instance's key was checked against its console
    assert world.proxy.counts["GetConsoleOutput"] >= len(instances)
    assert_nothing_left(root, world, config, run_id)


@pytest.mark.slow
@slurm_cluster.XDIST_GROUP
def test_the_hybrid_example_filled_in_as_the_docs_say(
    root: Path, world: Ec2World, slurm: slurm_cluster.Slurm
) -> None:
    """config/examples/hybrid.yaml with its ``aws`` provider filled in as ec2.yaml's
    section, run from the root: its Slurm part on the test cluster, EC2 on moto."""
    stack = deploy_stack(world)
    data = yaml.safe_load((EXAMPLES / "hybrid.yaml").read_text(encoding="utf-8"))
    fill_ec2(data["providers"]["aws"], world, stack)
    (job,) = data["jobs"]
    ship_simulate(root, job["bag"])
    config = my_config(root, "hybrid.yaml", data)
    run_dir = run_filled(root, config)
    report = report_of(run_dir)
    assert max(committed_over_time(run_dir)) <= job["constraint"]["budget"] + 1e-9
    run_id = run_id_of(run_dir)
    wait_for(lambda: slurm_cluster.jobs_of(run_id) == {}, 30, "the run's Slurm jobs to end")
    print(f"\nhybrid from the root: {report['providers']}")
    assert_nothing_left(root, world, config, run_id)
