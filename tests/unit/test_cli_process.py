"""The ``autoscaler`` command as a user runs it: a process of its own, its stdout, its
stderr and its exit code (what a solver library writes to file descriptor 1 shows only
here, not under typer's ``CliRunner``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "config" / "examples"


def autoscaler(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autoscaler", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_plan_json_prints_nothing_but_json_on_stdout() -> None:
    """`plan --json | python3 -m json.tool` works: no solver banner on stdout."""
    done = autoscaler("plan", str(EXAMPLES / "quickstart.yaml"), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["options"]
    assert "HiGHS" not in done.stdout


def test_a_dry_run_prints_no_solver_banner(tmp_path: Path) -> None:
    done = autoscaler("run", str(EXAMPLES / "quickstart.yaml"), "--dry-run", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    assert "HiGHS" not in done.stdout
    assert "run directory:" in done.stdout


def _deadline_job(tmp_path: Path) -> Path:
    path = tmp_path / "dl.yaml"
    path.write_text(
        yaml.safe_dump(
            {"name": "dl-a", "bag": {"synthetic": 30}, "constraint": {"deadline_s": "3h"}}
        ),
        encoding="utf-8",
    )
    return path


def test_a_deadline_job_given_twice_dry_runs_as_two_jobs(tmp_path: Path) -> None:
    """`run SERVICE --dry-run --job dl.yaml --job dl.yaml@10m`: both jobs run in the pool,
    the second named by the id the service gives it, as the real service accepts them."""
    job = _deadline_job(tmp_path)
    out = tmp_path / "out"
    service = str(EXAMPLES / "service.yaml")
    args = ("run", service, "--dry-run", "--job", str(job), "--job", f"{job}@10m")
    done = autoscaler(*args, "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    pool = json.loads((out / "pool" / "report.json").read_text())
    names = [j["name"] for j in pool["jobs"]]
    assert names == ["dl-a", "dl-a-j2"]
    assert [j["at_s"] for j in pool["jobs"]] == [0, 600]
    assert "dl-a-j2 (pool)" in done.stdout


def test_validate_knows_a_service_config() -> None:
    done = autoscaler("validate", str(EXAMPLES / "service.yaml"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ok service local-service: provider local")


def test_validate_knows_a_job_file_and_checks_it_against_a_service() -> None:
    alone = autoscaler("validate", str(EXAMPLES / "job.yaml"))
    assert alone.returncode == 0, alone.stderr
    assert alone.stdout.startswith("ok job sweep-a")
    assert "--service" in alone.stdout
    against = autoscaler(
        "validate", str(EXAMPLES / "job.yaml"), "--service", str(EXAMPLES / "service.yaml")
    )
    assert against.returncode == 0, against.stderr
    assert "ok job for service local-service: sweep-a: 120 tasks" in against.stdout


def test_validate_names_a_bad_field_of_a_job_against_its_service(tmp_path: Path) -> None:
    job = tmp_path / "job.yaml"
    job.write_text(
        yaml.safe_dump({"name": "j", "bag": {"synthetic": 5}, "constraint": {"budget": -1}}),
        encoding="utf-8",
    )
    done = autoscaler("validate", str(job), "--service", str(EXAMPLES / "service.yaml"))
    assert done.returncode == 2
    assert "constraint.budget" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_service_config_run_without_jobs_says_to_give_one() -> None:
    done = autoscaler("run", str(EXAMPLES / "service.yaml"), "--dry-run")
    assert done.returncode == 2
    assert "is a service config: give the jobs it runs with --job JOB.yaml" in done.stderr


def _imported_after(statement: str, modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter holds after ``statement``."""
    probe = f"import sys; {statement}; print(','.join(m for m in {modules!r} if m in sys.modules))"
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [m for m in done.stdout.strip().split(",") if m]


def test_the_command_group_loads_no_config_models_numpy_or_boto3() -> None:
    """A service client's call (``wait``, ``jobs``) starts without the config models,
    numpy or boto3: each command imports what it needs (0.58 → 0.23 s of CPU for
    ``autoscaler jobs``)."""
    heavy = ("autoscaler.config.schema", "numpy", "pulp", "boto3", "matplotlib")
    assert _imported_after("import autoscaler.cli.main", heavy) == []


def test_a_daemon_without_s3_outputs_loads_no_boto3() -> None:
    """boto3 comes with the EC2 provider or S3 outputs, not with every daemon."""
    assert _imported_after("import autoscaler.run.daemon", ("boto3", "matplotlib")) == []
