"""Task files in and out (issue 23 §2) on real local agents and the real daemon: inputs
put in each task's own work directory, outputs (globs, nested folders) streamed back
through the agents' HTTP connection into ``runs/<id>/outputs/<task>/``, a task past the
size limit failed with a clear line, an agent killed mid-upload, a replica that loses
the race. Each test reads the run directory, the journal and the report as a user would.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.providers.local import MACHINE_TAG, run_processes
from autoscaler.run.rundir import read_run
from tests.integration.daemon_helpers import (
    ROOT,
    journal_rows,
    kill_agents,
    local_fields,
    run_cli,
    run_id_of,
    start_daemon,
    successful_runs,
    wait_for,
)

pytestmark = pytest.mark.integration


def files_config(tmp_path: Path, bag: dict[str, Any], **more: Any) -> Path:
    """A time-scaled local run of a command bag with files."""
    fields = local_fields(max_count=2)
    data = {"name": "files", "constraint": {"budget": 30}, **fields, "bag": bag, **more}
    data["daemon"] = {**fields["daemon"], **more.get("daemon", {})}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def run(config: Path, run_dir: Path, timeout: float = 240) -> dict[str, Any]:
    done = run_cli("run", str(config), "--out", str(run_dir), timeout=timeout)
    assert "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
    report: dict[str, Any] = json.loads((run_dir / "report.json").read_text())
    report["_stdout"] = done.stdout
    return report


def stored_rows(run_dir: Path) -> list[dict[str, Any]]:
    return [d for _, _, d in journal_rows(run_dir, "TaskDone") if d.get("stored")]


def test_outputs_come_back_to_the_run_directory(tmp_path: Path) -> None:
    """Each task reads its own input and the shared one in its own work directory and
    writes files at the top and in nested folders; they come back whole under
    outputs/<task>/, a pattern that matches nothing is no error but reported, the
    report counts the bytes, the journal holds each commit, and nothing is left staged
    or in the agents' work directories."""
    (tmp_path / "in").mkdir()
    for i in range(4):
        (tmp_path / "in" / f"seed-{i}.txt").write_text(f"seed {i}\n")
    (tmp_path / "common.txt").write_text("common\n")
    command = (
        "[ {i} = 3 ] && exit 0; mkdir -p deep/er; cat common.txt seed.txt > result.txt; "
        "head -c {i}000 /dev/zero | tr '\\0' {i} > deep/er/blob-{i}.bin; ls > listing.log"
    )
    config = files_config(
        tmp_path,
        {
            "command": command,
            "sweep": {"i": [0, 1, 2, 3]},
            "files": {
                "inputs": ["common.txt", {"path": "in/seed-{i}.txt", "as": "seed.txt"}],
                "outputs": ["result.txt", "deep/**/*.bin", "nothing-*.csv"],
            },
        },
    )
    run_dir = tmp_path / "run"
    report = run(config, run_dir)
    assert report["tasks_done"] == 4, report["_stdout"]
    outputs = run_dir / "outputs"
    for i in range(3):
        task = outputs / str(i)
        assert (task / "result.txt").read_text() == f"common\nseed {i}\n"
        blob = task / "deep" / "er" / f"blob-{i}.bin"
        assert blob.read_bytes() == str(i).encode() * (i * 1000)
        assert not (task / "listing.log").exists()  # not an output
        assert not (task / "seed.txt").exists()  # an input, not an output
    assert list((outputs / "3").iterdir()) == []  # its patterns matched nothing
    assert sorted(p.name for p in outputs.iterdir()) == ["0", "1", "2", "3"]  # no .attempts
    leftovers = list((run_dir / "work" / "files").iterdir())
    assert leftovers == [], "the agents left work directories behind"
    sizes = [len(f"common\nseed {i}\n") + i * 1000 for i in range(3)]
    summary = report["outputs"]
    assert summary["tasks"] == 4
    assert summary["bytes"] == sum(sizes)
    assert summary["files"] == 6
    assert summary["empty"] == [3]
    assert [s["where"] for s in summary["stored"]] == [f"outputs/{i}/" for i in range(4)]
    assert f"Outputs: {sum(sizes):,} bytes in 6 files of 4 tasks" in report["_stdout"]
    assert "matched no file (tasks 3)" in report["_stdout"]
    # The journal's commits are the state a replay rebuilds.
    rows = stored_rows(run_dir)
    assert sorted(r["task"] for r in rows) == [0, 1, 2, 3]
    _, state = read_run(run_dir)
    assert {t: s.attempt for t, s in state.tasks.stored.items()} == {
        r["task"]: r["stored"]["attempt"] for r in rows
    }


def test_the_files_example_runs_for_real_on_local_agents(tmp_path: Path) -> None:
    """config/examples/files.yaml, as the README shows it: every task read its inputs and
    its outputs came back."""
    run_dir = tmp_path / "run"
    report = run(ROOT / "config" / "examples" / "files.yaml", run_dir)
    assert report["tasks_done"] == 8, report["_stdout"]
    assert report["outputs"]["files"] == 16
    task = run_dir / "outputs" / "3"
    assert (task / "result.txt").read_text() == "alpha 0.4\nbeta 10\ngamma 28\n"
    assert (task / "plots" / "cumulative.csv").read_text().splitlines()[-1] == "5,30"


def test_a_task_past_the_size_limit_fails_with_a_clear_line(tmp_path: Path) -> None:
    """Outputs over ``max_bytes``: the task fails with "outputs 2 MB exceed limit 1 MB"
    (in the CLI's report, once per attempt), nothing is stored, no traceback."""
    config = files_config(
        tmp_path,
        {
            "command": "head -c 2000000 /dev/zero > big.bin",
            "max_retries": 1,
            "files": {"outputs": ["*.bin"], "max_bytes": "1MB"},
        },
    )
    run_dir = tmp_path / "run"
    report = run(config, run_dir)
    assert report["tasks_failed"] == 1
    assert report["failed_tasks"][0]["error"] == "outputs 2 MB exceed limit 1 MB"
    assert "outputs 2 MB exceed limit 1 MB" in (run_dir / "report.md").read_text()
    shown = run_cli("report", str(run_dir))
    assert "1 failed" in shown.stdout
    assert not list(run_dir.rglob("*.bin"))
    assert report["outputs"]["tasks"] == 0


def test_an_agent_killed_mid_upload_leaves_one_whole_copy(tmp_path: Path) -> None:
    """The agent uploading a 400 MB output is SIGKILLed once part of it has arrived: the
    machine is lost, the task runs once more elsewhere, and the run directory ends with
    one whole copy, no half file, nothing staged."""
    size = 400_000_000
    config = files_config(
        tmp_path,
        {
            "command": f"truncate -s {size} big.bin",
            "files": {"outputs": ["big.bin"], "max_bytes": "1GB"},
        },
        daemon={"lost_after_s": 3},
    )
    run_dir = tmp_path / "run"
    killed: list[str] = []

    def kill_mid_upload() -> None:
        staged = run_dir / "outputs" / ".attempts"

        def partial() -> bool:
            parts = list(staged.glob("*/big.bin.part")) if staged.exists() else []
            return any(0 < p.stat().st_size < size for p in parts if p.exists())

        wait_for(partial, 180, "a partial upload")
        attempt = next(staged.glob("*/big.bin.part")).parent.name  # <task>.<machine>-<run>
        machine = attempt.split(".", 1)[1].rsplit("-", 1)[0]
        for pid, tags in run_processes(run_id_of(run_dir)):
            if tags.get(MACHINE_TAG) == machine:
                os.kill(pid, signal.SIGKILL)
                killed.append(machine)

    killer = threading.Thread(target=kill_mid_upload, daemon=True)
    killer.start()
    report = run(config, run_dir, timeout=300)
    killer.join(5)
    assert killed, "no agent was killed mid-upload"
    assert report["tasks_done"] == 1
    lost = [m for m in report["machines"] if m["id"] == killed[0]]
    assert lost[0]["end_reason"].startswith("lost"), lost
    outputs = run_dir / "outputs"
    assert (outputs / "0" / "big.bin").stat().st_size == size
    assert sorted(str(p.relative_to(outputs)) for p in outputs.rglob("*")) == ["0", "0/big.bin"]
    rows = stored_rows(run_dir)
    assert len(rows) == 1
    assert killed[0] not in rows[0]["stored"]["attempt"]


def test_a_replica_that_loses_the_race_leaves_nothing(tmp_path: Path) -> None:
    """Compact sampling runs the first tasks on both types, to success on each: the
    second result of each such task stored its outputs too, but only the first counts;
    each task ends with one copy, the losers' are gone."""
    config = files_config(
        tmp_path,
        {
            "command": "sleep 2; echo $AUTOSCALER_MACHINE {i} > who.txt",
            "sweep": {"i": list(range(6))},
            "files": {"outputs": ["who.txt"]},
        },
        sampling={"mode": "compact", "replicated": 3},
        daemon={"lost_after_s": 30},  # a loaded host starts agents slowly: none is lost
    )
    run_dir = tmp_path / "run"
    report = run(config, run_dir)
    assert report["tasks_done"] == 6, report["_stdout"]
    done = [d for _, _, d in journal_rows(run_dir, "TaskDone")]
    twice = {d["task"] for d in done if sum(e["task"] == d["task"] for e in done) > 1}
    assert twice, "no task ran to success twice: the race never happened"
    outputs = run_dir / "outputs"
    assert sorted(p.name for p in outputs.iterdir()) == [str(i) for i in range(6)]
    _, state = read_run(run_dir)
    for task in twice:
        assert [p.name for p in (outputs / str(task)).iterdir()] == ["who.txt"]
        winner = state.tasks.stored[task].attempt.split(".", 1)[1].rsplit("-", 1)[0]
        assert (outputs / str(task) / "who.txt").read_text().split()[-1] == str(task)
        first = next(d for d in done if d["task"] == task)
        assert first["machine"] == winner  # the first result counted, its copy was kept


def test_a_daemon_killed_mid_run_keeps_committed_outputs(tmp_path: Path) -> None:
    """kill -9 of the daemon mid-run, then --resume: outputs committed before stay as they
    were, an attempt staged but never committed is dropped, every task ends with one
    copy."""
    n = 30
    config = files_config(
        tmp_path,
        {
            "command": "sleep 0.2; echo {i} > r.txt",
            "sweep": {"i": list(range(n))},
            "files": {"outputs": ["r.txt"]},
        },
        constraint={"budget": 80},
    )
    run_dir = tmp_path / "run"
    daemon = start_daemon(str(config), "--out", str(run_dir))
    try:
        wait_for(lambda: len(stored_rows(run_dir)) >= 5, 120, "5 tasks' outputs committed")
        os.kill(daemon.pid, signal.SIGKILL)
        daemon.wait(10)
        committed = {r["task"] for r in stored_rows(run_dir)}
        # A commit is journaled, then its attempt renamed into place (staging.py): a kill
        # between the two leaves a journaled commit the resume renames (checked below,
        # with every task's file); those already in place must stay the very same files.
        placed = [t for t in committed if (run_dir / "outputs" / str(t) / "r.txt").exists()]
        assert placed
        kept = {t: (run_dir / "outputs" / str(t) / "r.txt").stat().st_ino for t in placed}
        # An attempt a machine had staged when the daemon died, which nothing committed:
        stray = run_dir / "outputs" / ".attempts" / f"{n - 1}.small-L9-0-7"
        stray.mkdir(parents=True, exist_ok=True)
        (stray / "r.txt").write_text("half\n")
        resumed = run_cli("run", "--resume", str(run_dir), timeout=180)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    finally:
        if daemon.poll() is None:
            daemon.kill()
        kill_agents(run_id_of(run_dir))
    report = json.loads((run_dir / "report.json").read_text())
    assert report["tasks_done"] == n
    outputs = run_dir / "outputs"
    assert sorted(p.name for p in outputs.iterdir()) == sorted(str(i) for i in range(n))
    for i in range(n):
        assert (outputs / str(i) / "r.txt").read_text() == f"{i}\n"
    for task, inode in kept.items():
        assert (outputs / str(task) / "r.txt").stat().st_ino == inode
    assert report["outputs"]["tasks"] == n
    runs = successful_runs(run_dir)  # outputs.jsonl: each task's result, once
    assert sorted(runs) == list(range(n))
    assert all(len(r) == 1 for r in runs.values()), runs
