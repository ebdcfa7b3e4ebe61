"""The ``autoscaler`` command as a user runs it: a process of its own, its stdout, its
stderr and its exit code (what a solver library writes to file descriptor 1 shows only
here, not under typer's ``CliRunner``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
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


# --- bad input on the command line: one line naming what is wrong, never a traceback ----


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The error a refused command printed: exit code 2, one line on stderr."""
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert "Usage:" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


def _write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_bag_too_big_for_memory_is_refused_at_once_naming_field_value_and_limit(
    tmp_path: Path,
) -> None:
    """50,000,000,000 synthetic tasks died of MemoryError in validate and run."""
    config = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text(encoding="utf-8"))
    huge = _write(tmp_path / "huge.yaml", {**config, "bag": {"synthetic": 50_000_000_000}})
    for args in (("validate", str(huge)), ("run", str(huge), "--dry-run")):
        done = autoscaler(*args, cwd=tmp_path)
        assert "MemoryError" not in done.stderr
        assert done.returncode == 2, done.stderr
        assert done.stderr.splitlines() == [
            f"error: {huge}",
            "  bag.synthetic: 50,000,000,000 tasks: a run takes at most 10,000,000",
        ]
    assert not (tmp_path / "runs").exists()


def test_the_task_limit_holds_for_a_runs_jobs_together(tmp_path: Path) -> None:
    """Two jobs of 6,000,000 tasks each make a run of 12,000,000: the second is named."""
    config = yaml.safe_load((EXAMPLES / "deadline.yaml").read_text(encoding="utf-8"))
    jobs = [{**config["jobs"][0], "name": n, "bag": {"synthetic": 6_000_000}} for n in "ab"]
    path = _write(tmp_path / "jobs.yaml", {**config, "jobs": jobs})
    done = autoscaler("validate", str(path), cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert "jobs[1].bag.synthetic: 6,000,000 tasks: a run takes at most 10,000,000" in done.stderr


@pytest.mark.parametrize(
    ("where", "problem"),
    [("a-file", "a-file is a file"), ("a-file/run", "a-file/run: a-file is a file")],
)
def test_out_where_a_file_stands_is_refused_naming_the_path(
    tmp_path: Path, where: str, problem: str
) -> None:
    """``--out`` naming a file, or a path under one, gave FileExistsError and
    NotADirectoryError tracebacks with exit code 1."""
    (tmp_path / "a-file").write_text("mine\n", encoding="utf-8")
    quickstart = str(EXAMPLES / "quickstart.yaml")
    service = str(EXAMPLES / "service.yaml")
    for command in (
        ("run", quickstart, "--dry-run"),
        ("plan", quickstart, "--dry-run"),
        ("run", service, "--dry-run", "--job", str(EXAMPLES / "job.yaml")),
    ):
        line = _one_error_line(autoscaler(*command, "--out", where, cwd=tmp_path))
        assert line == f"error: --out: {problem}, not a directory"
    assert (tmp_path / "a-file").read_text(encoding="utf-8") == "mine\n"


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("run", "--budget", "abc"), "error: --budget 'abc': not a number"),
        (("run", "--option", "first"), "error: --option 'first': not a whole number"),
        (("run", "--seed", "1.5"), "error: --seed '1.5': not a whole number"),
        (("plan", "--seed", "x"), "error: --seed 'x': not a whole number"),
        (("update", "j1", "--budget", "lots"), "error: --budget 'lots': not a number"),
        (("wait", "j1", "--timeout", "soon"), "error: --timeout 'soon': not a number"),
    ],
)
def test_a_bad_number_is_one_line_naming_the_flag_and_the_value(
    args: tuple[str, ...], expected: str
) -> None:
    """``--budget abc`` printed the usage and a boxed error."""
    command, *rest = args
    config = [str(EXAMPLES / "quickstart.yaml")] if command in {"run", "plan"} else []
    assert _one_error_line(autoscaler(command, *config, *rest)) == expected


def test_a_sim_run_without_dry_run_names_every_provider_that_rents_machines() -> None:
    """The advice listed local, sge and ec2, and not slurm."""
    from autoscaler.providers import registry

    line = _one_error_line(autoscaler("run", str(EXAMPLES / "quickstart.yaml")))
    assert "add --dry-run" in line
    for kind in registry.real_kinds():
        assert kind in line
    assert "slurm" in line


@pytest.mark.parametrize("report", [False, True])
def test_schema_out_says_what_it_wrote(tmp_path: Path, report: bool) -> None:
    """``schema --report --out FILE`` printed nothing."""
    flags = ["--report"] if report else []
    done = autoscaler("schema", *flags, "--out", "schemas/s.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("written: schemas/s.json")
    printed = autoscaler("schema", *flags, cwd=tmp_path).stdout
    assert (tmp_path / "schemas" / "s.json").read_text(encoding="utf-8") == printed


@pytest.mark.parametrize("token", ["abc.def\nsecond line", "abc.d€f"])
def test_a_token_that_cannot_be_sent_is_one_line_naming_where_it_came_from(
    tmp_path: Path, token: str
) -> None:
    """A token file of two lines, or with a character a header cannot carry, is refused
    naming the file (not its text) before any request: http.client raised a traceback."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "api.json").write_text(json.dumps({"url": "http://127.0.0.1:9", "pid": 1}))
    token_file = tmp_path / "alice.token"
    token_file.write_text(token + "\n", encoding="utf-8")
    done = autoscaler("jobs", "--state-dir", str(state), "--token-file", str(token_file))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: --token-file {token_file}: not a token (")
    assert len(done.stderr.strip().splitlines()) == 1
    assert "abc" not in done.stderr
