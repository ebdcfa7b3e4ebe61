"""Helpers for tests of real runs: configs, the daemon as a process, the journal, /proc."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.providers.local import run_processes
from autoscaler.run.assemble import new_run_id
from autoscaler.run.daemon import Daemon
from autoscaler.run.rundir import RunFiles

ROOT = Path(__file__).resolve().parents[2]


def local_fields(max_count: int = 8) -> dict[str, Any]:
    """Where a time-scaled local run runs (one emulated hour in 10 real seconds): two
    types, ~10-minute synthetic tasks; a run config without its work."""
    return {
        "machine_types": [
            {"name": "small", "price": 1, "max_count": max_count, "boot_s": "2m"},
            {"name": "fast", "price": 3, "max_count": max_count, "boot_s": "2m"},
        ],
        "billing": {"mode": "fixed", "atu_s": "1h"},
        "provider": "local",
        "local": {"time_scale": 360},
        "monitoring_interval_s": "5m",
        "tail_replication": False,
        "daemon": {"heartbeat_s": 0.5, "lost_after_s": 3, "orphan_after_s": 30},
        "emulator": {
            "seed": 3,
            "runtime": {"dist": "normal", "mean_s": "10m", "sd_s": "2m"},
            "speed": {"small": 1, "fast": 3},
        },
    }


def local_config(tmp: Path, **overrides: Any) -> Path:
    """A time-scaled local run: 200 synthetic tasks of ~10 emulated minutes on two types.
    Its report has no plots (``plots=True`` draws them): matplotlib's import and two
    figures were about a second of CPU per run, the most of any part of a short run."""
    data: dict[str, Any] = {
        "name": "it",
        "bag": {"synthetic": 200},
        "constraint": {"budget": 60},
        "plots": False,
        **local_fields(),
    }
    for key, value in overrides.items():
        if key in ("local", "daemon", "emulator"):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp / "run.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def run_in_process(config: Path, run_dir: Path) -> Any:
    """The daemon's run of ``config`` in this process; its outcome (agents ended after)."""
    cfg = load_config(config)
    tasks = expand_bag(cfg, source=str(config))
    # A run id of its own: a local run's agents are found by it, and tests run side by side.
    files = RunFiles.create(cfg, tasks, run_dir, new_run_id(cfg), cfg.emulator.seed)
    try:
        return Daemon(files).run()
    finally:
        kill_agents(files.run_id)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "autoscaler", *args]


def run_cli(
    *args: str,
    cwd: Path = ROOT,
    timeout: float = 120,
    prefix: Sequence[str] = (),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """``autoscaler ARGS`` as a user would run it from a script: no terminal (``prefix``:
    a command it runs under, such as ``isolated()``; ``env``: its environment, else
    this process's)."""
    return subprocess.run(
        [*prefix, *cli(*args)],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


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


def run_cleanup(config: Path, *args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``autoscaler cleanup`` as a user would run it from a script: no terminal."""
    return run_cli("cleanup", str(config), *args, cwd=cwd)


def start_daemon(*args: str) -> subprocess.Popen[str]:
    """``autoscaler run ...`` in its own session, as a user would start it."""
    return subprocess.Popen(
        cli("run", *args),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


Row = tuple[float, str, dict[str, Any]]


def journal_rows(run_dir: Path, type_name: str | None = None) -> list[Row]:
    """(t, type, data) of the journal's records, all or of one type."""
    db = run_dir / "journal.sqlite"
    if not db.exists():
        return []
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        query = "SELECT t, type, data FROM journal"
        params: tuple[str, ...] = ()
        if type_name is not None:
            query += " WHERE type = ?"
            params = (type_name,)
        rows = con.execute(query + " ORDER BY seq", params).fetchall()
    except sqlite3.OperationalError:
        return []
    finally:
        con.close()
    return [(t, ty, json.loads(d)) for t, ty, d in rows]


def assigned_rows(run_dir: Path) -> list[Row]:
    """(t, "Assign", {"task", "machine"}) for every task queued on a machine: one by one
    (``Assign``), in a task group (``AssignGroup``) or taken back onto it (``Move``)."""
    out: list[Row] = []
    for t, kind, d in journal_rows(run_dir):
        if kind == "Assign":
            out.append((t, kind, d))
        elif kind == "AssignGroup":
            out += [(t, "Assign", {"task": x, "machine": d["machine"]}) for x in d["tasks"]]
        elif kind == "Move":
            out += [(t, "Assign", {"task": x, "machine": d["target"]}) for x in d["tasks"]]
    return out


def wait_for(
    what: Callable[[], bool],
    timeout: float,
    message: str,
    explain: Callable[[], str] | None = None,
) -> None:
    """Wait until ``what()``; past ``timeout``, fail saying ``message`` (and what
    ``explain()`` tells of the state then)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if what():
            return
        time.sleep(0.05)
    more = f"\n{explain()}" if explain is not None else ""
    raise AssertionError(f"timed out after {timeout:g}s waiting for {message}{more}")


def run_id_of(run_dir: Path) -> str:
    con = sqlite3.connect(f"file:{run_dir / 'journal.sqlite'}?mode=ro", uri=True, timeout=5)
    try:
        (value,) = con.execute("SELECT value FROM meta WHERE key = 'run_id'").fetchone()
    finally:
        con.close()
    return str(json.loads(value))


def agents_of(run_id: str) -> list[int]:
    """Pids of live agent processes of the run."""
    return [pid for pid, _ in run_processes(run_id)]


def kill_agents(run_id: str) -> None:
    for pid in agents_of(run_id):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def committed_over_time(run_dir: Path) -> list[float]:
    """Committed spend after every step, recomputed by replaying the journal."""
    from autoscaler.core.journal import SqliteJournal, replay
    from autoscaler.run.assemble import new_state
    from autoscaler.run.rundir import RunFiles

    files = RunFiles.open(run_dir)
    state = new_state(files.cfg, len(files.tasks), files.seed)
    journal = SqliteJournal(run_dir / "journal.sqlite")
    try:
        out = []
        for _, step in itertools.groupby(journal.records(), key=lambda record: record.t):
            replay(state, step)
            out.append(state.money.committed)
    finally:
        journal.close()
    return out


def outputs(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "outputs.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


def successful_runs(run_dir: Path) -> dict[int, set[tuple[str, int]]]:
    """Task -> the distinct (machine, run) pairs that succeeded (a re-sent result counts once)."""
    out: dict[int, set[tuple[str, int]]] = {}
    for line in outputs(run_dir):
        if line["exit_code"] == 0 and not line["error"]:
            out.setdefault(line["task"], set()).add((line["machine"], line["run"]))
    return out


def done_counts(run_dir: Path) -> Counter[int]:
    return Counter(d["task"] for _, _, d in journal_rows(run_dir, "TaskDone"))


def assert_clean_end(run_dir: Path, report: dict[str, Any], n_tasks: int) -> None:
    """Every task done exactly once, money within budget all along, no agent left."""
    done = done_counts(run_dir)
    assert sorted(done) == list(range(n_tasks)), "some task never finished"
    assert max(done.values()) == 1, f"tasks counted twice: {[t for t, c in done.items() if c > 1]}"
    runs = successful_runs(run_dir)
    twice = {t: r for t, r in runs.items() if len(r) > 1}
    assert not twice, f"tasks that ran to success more than once: {twice}"
    missing = sorted(set(done) - set(runs))
    assert not missing, f"results the journal counts missing from outputs.jsonl: {missing}"
    budget = report["budget"]
    assert max(committed_over_time(run_dir)) <= budget + 1e-6
    assert report["cost"] <= budget + 1e-6
    assert report["tasks_done"] == n_tasks
    assert agents_of(run_id_of(run_dir)) == []
    for name in ("report.json", "report.md", "log.jsonl", *plot_files(run_dir)):
        assert (run_dir / name).stat().st_size > 0, name


def assert_deadline_end(run_dir: Path, n_tasks: int) -> dict[str, Any]:
    """A deadline run's clean end: every task done exactly once, no agent left, the
    per-job report adding up; the report."""
    report: dict[str, Any] = json.loads((run_dir / "report.json").read_text())
    assert report["mode"] == "deadline"
    assert report["stop_reason"] is None
    done = done_counts(run_dir)
    assert sorted(done) == list(range(n_tasks)), "some task never finished"
    assert max(done.values()) == 1
    twice = {t: r for t, r in successful_runs(run_dir).items() if len(r) > 1}
    assert not twice, f"tasks that ran to success more than once: {twice}"
    assert agents_of(run_id_of(run_dir)) == []
    assert sum(j["done"] for j in report["jobs"]) == n_tasks
    # Each figure is rounded to 4 decimals in the report, so the parts may miss the
    # rounded total by up to 5e-5 each.
    parts = sum(j["cost"] for j in report["jobs"]) + report["unattributed_cost"]
    assert parts == pytest.approx(report["cost"], abs=5e-5 * (len(report["jobs"]) + 2))
    for j in report["jobs"]:
        assert j["finish_s"] is not None
        assert j["met_deadline"] == (j["tasks_late"] == 0)
    for name in ("report.json", "report.md", "log.jsonl", *plot_files(run_dir)):
        assert (run_dir / name).stat().st_size > 0, name
    return report


def plot_files(run_dir: Path) -> tuple[str, ...]:
    """The plots the run's report has, by its config (``plots``); none there if it has none."""
    config = yaml.safe_load((run_dir / "config.yaml").read_text(encoding="utf-8"))
    if config.get("plots", True):
        return ("gantt.png", "spend.png")
    assert not list(run_dir.glob("*.png")), "plots drawn for a run without them"
    return ()


# --- `autoscaler plan` for real, and the run that takes it over ---------------------------


def first_t(run_dir: Path, type_name: str) -> float:
    rows = journal_rows(run_dir, type_name)
    assert rows, f"no {type_name} in the journal"
    return rows[0][0]


def assert_sampled_once(run_dir: Path) -> None:
    """One sampling configuration, one hold, one budget set: the samples were reused."""
    sampling = [
        d for _, _, d in journal_rows(run_dir, "Configure") if d["reason"].startswith("sampling")
    ]
    assert len(sampling) == 1
    assert len(journal_rows(run_dir, "Hold")) == 1
    assert len(journal_rows(run_dir, "BudgetSet")) == 1
    assert first_t(run_dir, "Hold") <= first_t(run_dir, "BudgetSet")


def plan_in_background(config: Path, plan_dir: Path, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        cli("plan", str(config), "--yes", "--out", str(plan_dir)),
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def read_plan(plan_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((plan_dir / "plan.json").read_text(encoding="utf-8"))
    return data


def adopted(run_dir: Path) -> set[str]:
    """Machines launched before the budget was set that finished tasks after it: the
    sampling machines the run took over."""
    set_at = first_t(run_dir, "BudgetSet")
    before = {d["machine"] for t, _, d in journal_rows(run_dir, "MachineLaunched") if t < set_at}
    return before & {d["machine"] for t, _, d in journal_rows(run_dir, "TaskDone") if t > set_at}


def with_setup(config: Path, marker: Path) -> Path:
    """``config`` with a run-wide ``setup:`` command that appends a line to ``marker``
    on each machine (issue 23 §1); ``setup_ran`` checks it."""
    data: dict[str, Any] = yaml.safe_load(config.read_text(encoding="utf-8"))
    data["setup"] = [f"echo set-up $$ >> {marker}"]
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    return config


def setup_ran(run_dir: Path, marker: Path) -> None:
    """Each machine the run launched ran the set-up once, and became ready after it."""
    launched = {d["machine"] for _, _, d in journal_rows(run_dir, "MachineLaunched")}
    ready = {d["machine"] for _, _, d in journal_rows(run_dir, "MachineReady")}
    lines = marker.read_text(encoding="utf-8").splitlines() if marker.exists() else []
    assert ready, "no machine became ready"
    assert ready <= launched
    assert len(lines) == len(ready), (lines, sorted(ready))


def with_categories(config: Path, tasks: int) -> Path:
    """``config`` on a bag file of ``tasks`` real commands in two labelled categories
    (``short``: 1 s, ``long``: 3 s, alternating), sorted by label (paper 004)."""
    rows = ["command,category"]
    rows += [("sleep 1,short" if i % 2 == 0 else "sleep 3,long") for i in range(tasks)]
    (config.parent / "labelled.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    data: dict[str, Any] = yaml.safe_load(config.read_text(encoding="utf-8"))
    data["bag"] = {"file": "labelled.csv"}
    data["categories"] = {"by": "label"}
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    return config


def categories_measured(report: dict[str, Any]) -> None:
    """The report's categories are the two labels, every task done, and on each type
    that ran both, the long ones took longer."""
    lines = {c["name"]: c for c in report["categories"]}
    assert set(lines) == {"short", "long"}, report["categories"]
    assert sum(c["done"] for c in lines.values()) == sum(c["tasks"] for c in lines.values())
    mean = {(n, t["type"]): t["mean_s"] for n, c in lines.items() for t in c["on_types"]}
    both = {t for _, t in mean if ("short", t) in mean and ("long", t) in mean}
    assert both, f"no type ran both categories: {mean}"
    for t in both:
        assert mean["long", t] > mean["short", t] + 1.0, mean
