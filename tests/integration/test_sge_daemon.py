"""Real runs on the one-node Grid Engine of ``infra/sge/setup.sh``, through the CLI.

The daemon runs as a process (``autoscaler run``); every machine is a Grid Engine job
on one of two queues running the worker agent, so ``qdel`` from outside is a machine
lost as a cloud would lose it. Synthetic tasks sleep a few real seconds (no time
scale: Grid Engine cannot be sped up), so a run takes tens of seconds.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import sqlite3
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.providers.sge import delete_jobs, run_command
from autoscaler.providers.sge_output import job_name
from tests.integration.daemon_helpers import (
    assert_deadline_end,
    assigned_rows,
    committed_over_time,
    journal_rows,
    setup_ran,
    start_daemon,
    successful_runs,
    wait_for,
    with_setup,
)
from tests.integration.sge import XDIST_GROUP, GridEngine, jobs_of, sge_config

pytestmark = [pytest.mark.integration, XDIST_GROUP]

RUN_TIMEOUT_S = 150.0


def run_id_or_none(run_dir: Path) -> str | None:
    """The run id once the daemon has written it to the journal."""
    db = run_dir / "journal.sqlite"
    if not db.exists():
        return None
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            row = con.execute("SELECT value FROM meta WHERE key = 'run_id'").fetchone()
        finally:
            con.close()
    except sqlite3.OperationalError:
        return None
    return None if row is None else str(json.loads(row[0]))


def wait_run_id(run_dir: Path, daemon: subprocess.Popen[str]) -> str:
    found: list[str] = []

    def started() -> bool:
        assert daemon.poll() is None, output_of(daemon)
        run_id = run_id_or_none(run_dir)
        if run_id is not None:
            found.append(run_id)
        return bool(found)

    wait_for(started, 30, "the daemon to create its journal")
    return found[0]


def accounted(run_id: str) -> dict[str, set[str]]:
    """Machine -> ids of the run's jobs that ended, from Grid Engine's accounting (qacct)."""
    prefix = job_name(run_id, "m")[:-1]
    result = run_command(["qacct", "-j", prefix + "*"])
    if result.rc != 0:  # "job name ... not found" until the first job of the run ended
        return {}
    out: dict[str, set[str]] = {}
    for block in result.stdout.split("=" * 20):
        name = re.search(r"^jobname\s+(\S+)", block, re.M)
        number = re.search(r"^jobnumber\s+(\d+)", block, re.M)
        if name and number and name.group(1).startswith(prefix):
            out.setdefault(name.group(1)[len(prefix) :], set()).add(number.group(1))
    return out


def output_of(daemon: subprocess.Popen[str]) -> str:
    if daemon.poll() is None or daemon.stdout is None:
        return ""
    return daemon.stdout.read()[-3000:]


def stop(daemon: subprocess.Popen[str], run_id: str | None) -> None:
    """End what a failed test left: the daemon, then any job of its run."""
    if daemon.poll() is None:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()
    if run_id is not None:
        with contextlib.suppress(Exception):
            delete_jobs([job for job, _ in jobs_of(run_id).values()])


def watch(daemon: subprocess.Popen[str], run_id: str, seen: dict[str, str]) -> int:
    """Record the run's jobs (machine -> job id) until the daemon exits; its exit code."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    while daemon.poll() is None:
        assert time.monotonic() < deadline, f"the run took over {RUN_TIMEOUT_S:g}s"
        for machine, (job, _) in jobs_of(run_id).items():
            seen.setdefault(machine, job)
        time.sleep(0.5)
    return daemon.wait()


def assert_clean_end(run_dir: Path, run_id: str, n_tasks: int) -> dict[str, Any]:
    """Every task done once, spend within budget at every step, no job left; the report."""
    report: dict[str, Any] = json.loads((run_dir / "report.json").read_text())
    assert report["stop_reason"] is None
    assert report["tasks_done"] == report["tasks_total"] == n_tasks
    assert report["within_budget"]
    done = Counter(d["task"] for _, _, d in journal_rows(run_dir, "TaskDone"))
    assert sorted(done) == list(range(n_tasks)), "some task never finished"
    assert max(done.values()) == 1, f"tasks counted twice: {[t for t, c in done.items() if c > 1]}"
    runs = successful_runs(run_dir)
    assert sorted(runs) == list(range(n_tasks))
    twice = {t: r for t, r in runs.items() if len(r) > 1}
    assert not twice, f"tasks that ran to success more than once: {twice}"
    assert max(committed_over_time(run_dir)) <= report["budget"] + 1e-6
    prices = {
        t["name"]: t["price"]
        for t in yaml.safe_load((run_dir / "config.yaml").read_text())["machine_types"]
    }
    paid = sum(m["units_paid"] * prices[m["type"]] for m in report["machines"])
    assert report["cost"] == pytest.approx(paid)
    assert report["cost"] <= report["budget"] + 1e-6
    # The daemon released or deleted every job: none of the run is left queued or running.
    wait_for(lambda: jobs_of(run_id) == {}, 30, "the run's jobs to leave qstat")
    return report


def assert_machines_are_the_jobs(report: dict[str, Any], run_id: str, seen: dict[str, str]) -> None:
    """The report's machines are exactly the jobs the run submitted, by name."""
    machines = {m["id"] for m in report["machines"]}
    ended: dict[str, set[str]] = {}

    def all_accounted() -> bool:
        ended.clear()
        ended.update(accounted(run_id))
        return set(ended) >= machines

    # Patience, not a check: an execd reports a job's end to the qmaster, which writes
    # its accounting record, at its own pace (its load reports: every 40 s by default);
    # a loaded host took more than 30 s (CI run 52).
    wait_for(all_accounted, 120, f"qacct to list the jobs of {sorted(machines)}")
    assert set(ended) == machines, f"jobs {sorted(ended)} vs machines {sorted(machines)}"
    for machine, job in seen.items():
        assert job in ended[machine], f"{machine}: job {job} not in accounting {ended[machine]}"


def run_to_its_end(config: Path, run_dir: Path) -> tuple[str, dict[str, str]]:
    """``autoscaler run CONFIG`` to its end, recording the run's jobs (machine -> job id);
    the run id and those jobs. Whatever fails, no daemon or job of the run is left."""
    daemon = start_daemon(str(config), "--out", str(run_dir))
    run_id: str | None = None
    seen: dict[str, str] = {}
    try:
        run_id = wait_run_id(run_dir, daemon)
        code = watch(daemon, run_id, seen)
        assert code == 0, output_of(daemon)
    finally:
        stop(daemon, run_id)
    return run_id, seen


def test_a_bag_runs_on_two_queues_within_budget(sge: GridEngine, tmp_path: Path) -> None:
    """A synthetic bag on two queue-backed types: all done once, within budget, no job left."""
    marker = tmp_path / "setup.log"
    config = with_setup(sge_config(tmp_path, 30), marker)
    run_dir = tmp_path / "run"
    started = time.monotonic()
    run_id, seen = run_to_its_end(config, run_dir)
    wall = time.monotonic() - started
    report = assert_clean_end(run_dir, run_id, 30)
    setup_ran(run_dir, marker)  # each job ran the run's set-up once (issue 23 §1)
    print(f"\nsge, 30 tasks: wall {wall:.1f}s, cost {report['cost']:.2f} of {report['budget']:g}")
    used = {m["type"] for m in report["machines"] if m["tasks_run"] > 0}
    assert used == {"small", "large"}
    assert seen, "qstat never listed a job of the run"
    assert_machines_are_the_jobs(report, run_id, seen)


@pytest.mark.alone  # a job deleted before it started has no accounting record
def test_a_deadline_job_runs_on_grid_engine(sge: GridEngine, tmp_path: Path) -> None:
    """Deadline mode on Grid Engine: one job with known task times, planned on the two
    queues, finished once each; every machine a job of the run, none left."""
    config = sge_config(tmp_path, 1)
    data = yaml.safe_load(config.read_text())
    del data["bag"], data["constraint"]
    data["jobs"] = [
        {
            "name": "sweep",
            "bag": {"synthetic": 16},
            "constraint": {"deadline_s": 25},
            "task_s": {"small": 4, "large": 2},
        }
    ]
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    run_dir = tmp_path / "run"
    run_id, seen = run_to_its_end(config, run_dir)
    report = assert_deadline_end(run_dir, 16)
    (job,) = report["jobs"]
    print(
        f"\nsge deadline job: finish {job['finish_s']:.0f}s of {job['deadline_s']:.0f}s, "
        f"{job['tasks_late']} late, cost {report['cost']:.2f}"
    )
    assert journal_rows(run_dir, "Launch"), "nothing was launched"
    wait_for(lambda: jobs_of(run_id) == {}, 30, "the run's jobs to leave qstat")
    assert_machines_are_the_jobs(report, run_id, seen)


def test_a_qdeleted_job_is_a_lost_machine(sge: GridEngine, tmp_path: Path) -> None:
    """qdel of a running job from outside: MachineLost, its task re-runs, the run completes."""
    config = sge_config(tmp_path, 60)
    run_dir = tmp_path / "run"
    started = time.monotonic()
    daemon = start_daemon(str(config), "--out", str(run_dir))
    run_id: str | None = None
    seen: dict[str, str] = {}
    victim: str | None = None
    try:
        run_id = wait_run_id(run_dir, daemon)
        wait_for(lambda: len(journal_rows(run_dir, "TaskDone")) >= 5, 60, "5 tasks done")

        def pick() -> bool:
            """A running job whose machine has a task in hand (assigned, not done)."""
            nonlocal victim
            assert run_id is not None
            done = {d["task"] for _, _, d in journal_rows(run_dir, "TaskDone")}
            busy = {d["machine"] for _, _, d in assigned_rows(run_dir) if d["task"] not in done}
            for machine, (job, state) in jobs_of(run_id).items():
                if state == "r" and machine in busy:
                    victim = machine
                    seen[machine] = job
                    assert delete_jobs([job]) == [job]
                    return True
            return False

        wait_for(pick, 30, "a running job with a task in hand")
        code = watch(daemon, run_id, seen)
        assert code == 0, output_of(daemon)
    finally:
        stop(daemon, run_id)
    wall = time.monotonic() - started
    lost = [d for _, _, d in journal_rows(run_dir, "MachineLost") if d["machine"] == victim]
    assert lost, f"{victim} was not noticed as lost"
    report = assert_clean_end(run_dir, run_id, 60)
    print(f"\nsge, 60 tasks, one job qdel'd: wall {wall:.1f}s, cost {report['cost']:.2f}")
    # The tasks it held when deleted were given to another machine and done there, once.
    assigns = assigned_rows(run_dir)
    finished_there = {
        d["task"] for _, _, d in journal_rows(run_dir, "TaskDone") if d["machine"] == victim
    }
    cut = {d["task"] for _, _, d in assigns if d["machine"] == victim} - finished_there
    assert cut, f"the deleted {victim} had no task in hand"
    for task in sorted(cut):
        elsewhere = {d["machine"] for _, _, d in assigns if d["task"] == task} - {victim}
        assert elsewhere, f"task {task}, cut off by the qdel, was never re-assigned"
    assert_machines_are_the_jobs(report, run_id, seen)
