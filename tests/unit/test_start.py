"""``start_run``: every run starts from a config and a mode, in one place."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.journal import JOURNAL_DB
from autoscaler.run.daemon import Daemon
from autoscaler.run.start import EmulatedRun, dry_run, start_run

EXAMPLES = Path(__file__).parents[2] / "config" / "examples"


def test_a_dry_start_runs_as_the_dry_run_does(tmp_path: Path) -> None:
    cfg = load_config(EXAMPLES / "quickstart.yaml")
    tasks = expand_bag(cfg)
    seen: list[float] = []
    started = start_run(
        "dry",
        tmp_path / "a",
        cfg,
        tasks,
        run_id="r",
        seed=4,
        progress=lambda state, estimate: seen.append(state.now),
    )
    assert isinstance(started, EmulatedRun)
    ran = started.run()
    alone = dry_run(cfg, tasks, seed=4, run_id="r", out_dir=tmp_path / "b")
    assert ran.report.cost == alone.report.cost
    assert ran.report.makespan_s == alone.report.makespan_s
    assert json.loads((tmp_path / "a" / "report.json").read_text())["run_id"] == "r"
    assert seen
    assert seen == sorted(seen)


def test_a_dry_start_defaults_to_the_config_seed_and_a_new_run_id() -> None:
    cfg = load_config(EXAMPLES / "quickstart.yaml")
    started = start_run("dry", None, cfg, expand_bag(cfg))
    assert started.seed == cfg.emulator.seed
    assert started.run_id.startswith(f"{cfg.name}-")


def test_a_new_real_start_writes_its_run_directory_and_a_plan_start_holds(
    tmp_path: Path,
) -> None:
    cfg = load_config(EXAMPLES / "local.yaml")
    tasks = expand_bag(cfg)
    new = start_run("new", tmp_path / "new", cfg, tasks, run_id="n", seed=1)
    assert isinstance(new, Daemon)
    assert (new.files.run_id, new.files.seed, new.resume, new.hold) == ("n", 1, False, False)
    assert (tmp_path / "new" / "config.yaml").is_file()
    planning = start_run("plan", tmp_path / "plan", cfg, tasks, run_id="p")
    assert planning.hold
    assert planning.files.seed == cfg.emulator.seed


def test_resume_takes_its_config_from_the_run_directory(tmp_path: Path) -> None:
    cfg = load_config(EXAMPLES / "local.yaml")
    with pytest.raises(AutoscalerError, match="takes its config and tasks from its directory"):
        start_run("resume", tmp_path, cfg)
    with pytest.raises(AutoscalerError, match=f"no {JOURNAL_DB} here"):
        start_run("resume", tmp_path)


def test_a_run_killed_before_its_daemon_started_can_be_resumed(tmp_path: Path) -> None:
    """The run directory names its run from the moment its tasks file shows: a daemon
    killed right after (``kill -9`` once ``tasks.jsonl`` appears, as docs/runs.md does)
    left a journal without the run's facts, and ``--resume`` refused the run."""
    cfg = load_config(EXAMPLES / "local.yaml")
    tasks = expand_bag(cfg)
    new = start_run("new", tmp_path / "run", cfg, tasks, run_id="k", seed=5)
    assert isinstance(new, Daemon)  # created, never run: killed here
    resumed = start_run("resume", tmp_path / "run")
    assert isinstance(resumed, Daemon)
    files = resumed.files
    assert (files.run_id, files.seed, files.start_wall) == ("k", 5, new.files.start_wall)
    assert files.tasks == tasks
    assert files.address is None  # no dispatcher listened yet
    with pytest.raises(AutoscalerError, match="already holds a run: use --resume"):
        start_run("new", tmp_path / "run", cfg, tasks, run_id="k2", seed=5)
