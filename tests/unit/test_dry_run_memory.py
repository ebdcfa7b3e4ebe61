"""A service's dry run remembers applications as the service does (``service.memory``):
recurring jobs of one application, after the first has ended, are admitted with its
task times and do not sample; the dry run's memory is its own (``memory.db`` in its
directory), started from a real state directory's only with ``--memory``, which it
reads and never writes."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from autoscaler.config.schema import RunConfig
from autoscaler.config.service_schema import load_service_config
from autoscaler.run.start import make_emulator
from autoscaler.service.arrivals import MEMORY_FILE, dry_run_jobs, load_jobs
from autoscaler.service.memory import admitted
from autoscaler.service.store import DB_FILE, Store
from tests.unit.test_cli_process import autoscaler

ROOT = Path(__file__).resolve().parents[2]

SERVICE = {
    "name": "recurring",
    "machine_types": [
        {"name": "small", "price": 1.0, "max_count": 6, "boot_s": 120.0},
        {"name": "fast", "price": 3.0, "max_count": 6, "boot_s": 120.0},
    ],
    "billing": {"mode": "fixed", "atu_s": 3600.0},
    "provider": "local",
    "monitoring_interval_s": 300.0,
    "emulator": {
        "seed": 3,
        "runtime": {"dist": "normal", "mean_s": 120.0, "sd_s": 30.0},
        "speed": {"small": 1.0, "fast": 3.0},
    },
}


def _job(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "app": "sweep",
        "bag": {"synthetic": 40},
        "constraint": {"deadline_s": "25m"},
    }


def _files(tmp_path: Path) -> tuple[Path, list[Path]]:
    service = tmp_path / "service.yaml"
    service.write_text(yaml.safe_dump(SERVICE))
    jobs = []
    for n in "abc":
        path = tmp_path / f"{n}.yaml"
        path.write_text(yaml.safe_dump(_job(f"sweep-{n}")))
        jobs.append(path)
    return service, jobs


def _dry_run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return autoscaler("run", *args, "--dry-run", cwd=cwd)


def _pool(out: Path) -> dict[str, dict[str, Any]]:
    """Per job of the pool's journal: its task ids, the time and data of its first
    forecast, its known task times, and its tasks given to machines before the first
    forecast (its samples)."""
    records = [json.loads(line) for line in (out / "pool" / "journal.jsonl").open()]
    config = yaml.safe_load((out / "pool" / "config.yaml").read_text())
    [first] = config["jobs"]
    jobs = {
        first["name"]: {
            "tasks": range(0, first["bag"]["synthetic"]),
            "task_s": first.get("task_s") or {},
        }
    }
    given: list[tuple[float, int]] = []
    for r in records:
        data = r["data"]
        if r["type"] == "JobAdded":
            job = data["job"]
            jobs[job["name"]] = {
                "tasks": range(job["first"], job["first"] + job["count"]),
                "task_s": job["task_s"],
                "added_at": r["t"],
            }
        elif r["type"] == "Forecast":
            jobs[data["job"]].setdefault("forecast", (r["t"], data))
        elif r["type"] == "Launch":
            given += [(r["t"], t) for q in data["queues"] for t in q]
        elif r["type"] == "Assign":
            given.append((r["t"], data["task"]))
        elif r["type"] == "AssignGroup":
            given += [(r["t"], t) for t in data["tasks"]]
    for job in jobs.values():
        at = job["forecast"][0]
        job["sampled"] = len({t for when, t in given if t in job["tasks"] and when < at})
    return jobs


def _remembered(db: Path) -> dict[str, dict[str, list[float]]]:
    store = Store(db, read_only=True)
    try:
        return store.memory()
    finally:
        store.close()


def test_recurring_jobs_of_a_dry_run_start_from_what_the_first_one_took(tmp_path: Path) -> None:
    """Before: B and C sampled again (5 tasks on each type), their first forecasts some
    minutes after they arrived. Now A's runs are remembered when it ends (before B
    comes), B and C are admitted with them: no sample task, a forecast at arrival."""
    service, (a, b, c) = _files(tmp_path)
    out = tmp_path / "out"
    done = _dry_run(
        str(service),
        "--job",
        str(a),
        "--job",
        f"{b}@30m",
        "--job",
        f"{c}@60m",
        "--out",
        str(out),
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    jobs = _pool(out)
    assert list(jobs) == ["sweep-a", "sweep-b", "sweep-c"]
    assert jobs["sweep-a"]["task_s"] == {}
    assert jobs["sweep-a"]["sampled"] == 10  # 5 on each type: nothing remembered yet
    for name, at in (("sweep-b", 1800.0), ("sweep-c", 3600.0)):
        job = jobs[name]
        assert job["sampled"] == 0, name
        assert job["forecast"][0] == job["added_at"] == at
        assert set(job["task_s"]) == {"small", "fast"}
        said = f"{name} (pool): task times of application 'sweep' from earlier jobs, no sampling"
        assert said in done.stdout
    # B's times are the means of A's runs; C's those of A's and B's together.
    memory = _remembered(out / MEMORY_FILE)
    assert set(memory) == {"sweep"}
    assert sum(r[0] for r in memory["sweep"].values()) == 120
    assert jobs["sweep-b"]["task_s"] != jobs["sweep-c"]["task_s"]
    report = json.loads((out / "pool" / "report.json").read_text())
    assert [j["met_deadline"] for j in report["jobs"]] == [True, True, True]


def test_a_dry_run_reads_a_state_directory_s_memory_only_when_asked_and_never_writes_it(
    tmp_path: Path,
) -> None:
    service, (a, _, _) = _files(tmp_path)
    state = tmp_path / "state"
    state.mkdir()
    real = Store(state / DB_FILE)
    real.remember("sweep", {"small": [20.0, 2400.0, 300_000.0], "fast": [20.0, 800.0, 33_000.0]})
    real.close()
    before = hashlib.sha256((state / DB_FILE).read_bytes()).hexdigest()
    listed = sorted(p.name for p in state.iterdir())

    alone = _dry_run(str(service), "--job", str(a), "--out", str(tmp_path / "alone"), cwd=tmp_path)
    assert alone.returncode == 0, alone.stderr
    assert _pool(tmp_path / "alone")["sweep-a"]["sampled"] == 10

    seeded = tmp_path / "seeded"
    args = ("--job", str(a), "--memory", str(state), "--out", str(seeded))
    done = _dry_run(str(service), *args, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job = _pool(seeded)["sweep-a"]
    assert job["task_s"] == {"small": 120.0, "fast": 40.0}
    assert job["sampled"] == 0
    assert "small 120 s (20 runs), fast 40 s (20 runs)" in done.stdout
    # The dry run's memory grew by A's 40 runs; the state directory is as it was.
    grown = _remembered(seeded / MEMORY_FILE)["sweep"]
    assert grown["small"][0] + grown["fast"][0] == 80
    assert hashlib.sha256((state / DB_FILE).read_bytes()).hexdigest() == before
    assert sorted(p.name for p in state.iterdir()) == listed
    assert _remembered(state / DB_FILE)["sweep"]["small"] == [20.0, 2400.0, 300_000.0]


def test_memory_is_refused_without_a_service_dry_run_or_a_state_there(tmp_path: Path) -> None:
    service, (a, _, _) = _files(tmp_path)
    nowhere = tmp_path / "nowhere"
    done = _dry_run(str(service), "--job", str(a), "--memory", str(nowhere), cwd=tmp_path)
    assert done.returncode != 0
    assert f"--memory {nowhere}: no service state there" in done.stderr
    assert "Traceback" not in done.stderr
    memory = ("--memory", str(nowhere))
    real = subprocess.run(
        [sys.executable, "-m", "autoscaler", "run", str(service), "--job", str(a), *memory],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert real.returncode != 0
    assert "--memory STATE_DIR starts a service dry run's memory" in real.stderr


def test_a_dry_run_started_over_in_its_directory_starts_its_memory_empty(tmp_path: Path) -> None:
    """Unless asked to start from the memory there (an earlier dry run's): then it grows."""
    service, (a, _, _) = _files(tmp_path)
    svc = load_service_config(service)
    jobs = load_jobs(svc, [(a, 0.0)])
    out = tmp_path / "out"
    for _ in range(2):
        dry_run_jobs(svc, jobs, seed=None, out=out)
        assert sum(r[0] for r in _remembered(out / MEMORY_FILE)["sweep"].values()) == 40
    dry_run_jobs(svc, jobs, seed=None, out=out, memory_from=out)
    assert sum(r[0] for r in _remembered(out / MEMORY_FILE)["sweep"].values()) == 80


def test_a_job_is_admitted_from_memory_only_when_each_type_has_its_sample() -> None:
    cfg = RunConfig.model_validate(
        {
            **SERVICE,
            "provider": "sim",
            "jobs": [{**_job("x"), "constraint": {"deadline_s": 1500}}],
        }
    )
    n = float(cfg.deadline.sample)
    short = {"small": [n - 1, 100.0 * (n - 1), 0.0], "fast": [20.0, 800.0, 0.0]}
    assert admitted(cfg, lambda app: short) is None
    enough = {"small": [n, 100.0 * n, 0.0], "fast": [20.0, 800.0, 0.0]}
    found = admitted(cfg, lambda app: enough if app == "sweep" else {})
    assert found is not None
    planned, note = found
    assert dict(planned.jobs[0].task_s) == {"small": 100.0, "fast": 40.0}
    assert note["runs"] == {"small": n, "fast": 20}
    budget = RunConfig.model_validate(
        {**SERVICE, "provider": "sim", "bag": {"synthetic": 5}, "constraint": {"budget": 9}}
    )
    assert admitted(budget, lambda app: enough) is None


def test_an_emulator_run_in_pieces_ends_as_a_run_in_one() -> None:
    """``run(until)`` stops before ``until``; run on, it ends where one run does."""
    cfg = RunConfig.model_validate(
        {**SERVICE, "provider": "sim", "bag": {"synthetic": 50}, "constraint": {"budget": 30}}
    )
    whole = make_emulator(cfg, 50, seed=4).run()
    em = make_emulator(cfg, 50, seed=4)
    for until in (300.0, 1000.0, 1000.0, 2500.0):
        em.run(until=until)
        assert em.now < until
    pieces = em.run()
    assert pieces.tasks.segments == whole.tasks.segments
    assert pieces.money.committed == whole.money.committed


def test_a_job_arriving_before_the_first_has_ended_samples_as_in_the_service(
    tmp_path: Path,
) -> None:
    """The service remembers a job's runs when it ends: B, 5 min after A, finds nothing."""
    service, (a, b, c) = _files(tmp_path)
    svc = load_service_config(service)
    lines = dry_run_jobs(
        svc, load_jobs(svc, [(a, 0.0), (b, 300.0), (c, 3600.0)]), seed=None, out=tmp_path / "o"
    )
    assert [line.task_times is not None for line in lines] == [False, False, True]
    jobs = _pool(tmp_path / "o")
    assert jobs["sweep-b"]["task_s"] == {}
    assert jobs["sweep-b"]["sampled"] == 10
    assert jobs["sweep-c"]["sampled"] == 0


def test_jobs_on_their_own_machines_remember_and_are_admitted_in_run_time(
    tmp_path: Path,
) -> None:
    """Without the pool each job runs on its own machines; B, after A's run has ended,
    starts from A's runs; C, arriving while B runs, from A's alone."""
    _, (a, b, c) = _files(tmp_path)
    own = tmp_path / "own.yaml"
    own.write_text(yaml.safe_dump({**SERVICE, "service": {"share_deadline_jobs": False}}))
    svc = load_service_config(own)
    given = [(a, 0.0), (b, 1800.0), (c, 1900.0)]
    lines = dry_run_jobs(svc, load_jobs(svc, given), seed=None, out=tmp_path / "o")
    assert [line.name for line in lines] == ["sweep-a", "sweep-b", "sweep-c"]
    notes = [line.task_times for line in lines]
    assert notes[0] is None
    assert notes[1] is not None
    assert notes[2] is not None
    assert sum(notes[1]["runs"].values()) == sum(notes[2]["runs"].values()) == 40
    config = yaml.safe_load((tmp_path / "o" / "2-sweep-b" / "config.yaml").read_text())
    assert config["jobs"][0]["task_s"] == notes[1]["task_s"]
    assert sum(r[0] for r in _remembered(tmp_path / "o" / MEMORY_FILE)["sweep"].values()) == 120
