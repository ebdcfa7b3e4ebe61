"""Every example config run as the README shows it: ``autoscaler run
config/examples/X.yaml`` from the repository root, with the default run directory
(``runs/<id>``, relative), as a user types it.

The repository root is mirrored in a temporary directory (its ``config/examples``
copied), so the runs land in ``<tmp>/runs`` and never in the checkout. Configs on the
emulator's ``sim`` provider, and those that rent from a cloud (their ``ec2`` section is
a template to fill), run with ``--dry-run``, as the README gives them; the others run for
real on local agents here, and the cluster examples run in their guides (docs/sge.md,
docs/slurm.md: ``test_doc_examples.py``) on the one-node Grid Engine and Slurm. Each run must finish its bag within its budget and leave no machine.

Before issue 34, Grid Engine's and Slurm's examples died this way from the root: every
job failed at once (a relative run directory joined twice: slurmd could not open
``runs/<id>/work/runs/<id>/agents/<m>.log``, Grid Engine could not chdir to
``runs/<id>/work``), and the run spent its whole budget on machines that never started.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.load import expand_bag, load_config
from tests.integration import test_doc_examples as doc_examples
from tests.integration.daemon_helpers import ROOT, agents_of, run_cli

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
    )
]
LOCAL = [Example("local.yaml"), Example("files.yaml"), Example("deadline.yaml")]


def test_every_example_config_is_run_here() -> None:
    """A new example config gets a run in this file (service configs and job files run
    together, ``service.yaml --job job.yaml``)."""
    covered = {e.config for e in [*DRY, *LOCAL]} | set(ON_CLUSTERS)
    covered |= {"service.yaml", "job.yaml", "job_deadline.yaml"}
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


@pytest.mark.parametrize("example", DRY, ids=lambda e: e.config)
def test_a_dry_run_example_from_the_root(root: Path, example: Example) -> None:
    code, run_dir, out = run_example(root, example)
    assert_finished(root, example, code, run_dir, out)
    report = report_of(run_dir)
    assert report["provider"] != "local"


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
