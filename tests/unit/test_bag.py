"""Expanding a config's bag into tasks: synthetic, one command, a sweep, a file of
commands; each task's environment; the problems that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.config.bag import expand_bag, expand_jobs
from autoscaler.config.load import load_config
from autoscaler.config.schema import RunConfig
from autoscaler.core.errors import ConfigError
from tests.unit.test_config import GOOD, TYPES, problems, write


def sweep_config(tmp_path: Path, bag: str) -> RunConfig:
    return load_config(write(tmp_path, f"bag: {bag}\nconstraint: {{budget: 40}}\n" + TYPES))


def test_synthetic_tasks(tmp_path: Path) -> None:
    """``synthetic: n`` gives n tasks without a command, ids 0..n-1."""
    tasks = expand_bag(load_config(write(tmp_path, GOOD)))
    assert [(t.id, t.command) for t in tasks] == [(i, None) for i in range(5)]


def test_every_task_gets_env(tmp_path: Path) -> None:
    """bag.env is the environment of every task."""
    text = GOOD.replace("{synthetic: 5}", "{synthetic: 3, env: {OMP_NUM_THREADS: '1'}}")
    tasks = expand_bag(load_config(write(tmp_path, text)))
    assert all(t.env == {"OMP_NUM_THREADS": "1"} for t in tasks)


def test_sweep_order(tmp_path: Path) -> None:
    """The first sweep key varies slowest, values in the order given."""
    cfg = sweep_config(tmp_path, '{command: "r {a} {b}", sweep: {a: [x, y], b: [1, 2.5]}}')
    assert [t.command for t in expand_bag(cfg)] == ["r x 1", "r x 2.5", "r y 1", "r y 2.5"]


def test_sweep_count(tmp_path: Path) -> None:
    """The bag is the cartesian product: 3 × 20 tasks, ids 0..59."""
    cfg = sweep_config(
        tmp_path, '{command: "p {alpha} {seed}", sweep: {alpha: [0.1, 0.2, 0.5], seed: {stop: 20}}}'
    )
    tasks = expand_bag(cfg)
    assert len(tasks) == 60
    assert (tasks[-1].id, tasks[-1].command) == (59, "p 0.5 19")


def test_sweep_range_step(tmp_path: Path) -> None:
    """A range sweep is Python's range, stop excluded."""
    cfg = sweep_config(tmp_path, '{command: "s {n}", sweep: {n: {start: 1, stop: 8, step: 3}}}')
    assert [t.command for t in expand_bag(cfg)] == ["s 1", "s 4", "s 7"]


def test_large_sweep(tmp_path: Path) -> None:
    """A 100,000-task sweep expands completely."""
    cfg = sweep_config(tmp_path, '{command: "t {a} {b}", sweep: {a: {stop: 1000}, b: {stop: 100}}}')
    tasks = expand_bag(cfg)
    assert len(tasks) == 100_000
    assert tasks[-1].command == "t 999 99"


def test_placeholder_not_in_sweep(tmp_path: Path) -> None:
    """A placeholder without a sweep entry is named."""
    cfg = sweep_config(tmp_path, '{command: "r {a} {beta}", sweep: {a: [1]}}')
    with pytest.raises(ConfigError) as info:
        expand_bag(cfg)
    assert info.value.problems == ["bag.command: placeholder {beta} is not in bag.sweep"]


def test_sweep_key_not_used(tmp_path: Path) -> None:
    """A sweep entry the template does not use is named."""
    cfg = sweep_config(tmp_path, '{command: "r {a}", sweep: {a: [1], gamma: [2]}}')
    with pytest.raises(ConfigError) as info:
        expand_bag(cfg)
    assert info.value.problems == ["bag.sweep.gamma: not used in bag.command"]


def test_command_without_sweep_is_verbatim(tmp_path: Path) -> None:
    """A command without a sweep is one task, braces left alone."""
    cfg = sweep_config(tmp_path, "{command: \"awk '{print $1}' f\"}")
    assert [t.command for t in expand_bag(cfg)] == ["awk '{print $1}' f"]


def test_file_bag_skips_comments(tmp_path: Path) -> None:
    """A file bag is one task per line, blank and ``#`` lines skipped."""
    write(tmp_path, "# header\necho a\n\n  # indented comment\necho b\n", "tasks.txt")
    cfg = load_config(write(tmp_path, GOOD.replace("{synthetic: 5}", "{file: tasks.txt}")))
    assert [(t.id, t.command) for t in expand_bag(cfg)] == [(0, "echo a"), (1, "echo b")]


def test_file_bag_without_commands(tmp_path: Path) -> None:
    """A file bag of comments only has no tasks."""
    write(tmp_path, "# nothing yet\n", "tasks.txt")
    found = problems(tmp_path, GOOD.replace("{synthetic: 5}", "{file: tasks.txt}"))
    assert found[0].startswith("bag.file: bag has no tasks")


def test_every_bag_is_named_by_its_field(tmp_path: Path) -> None:
    """One bag is ``bag``; jobs' bags are ``jobs[i].bag``, in the order given, which is
    also the order their tasks are numbered in."""
    one = load_config(write(tmp_path, GOOD))
    assert one.bags() == [("bag", one.bag)]
    jobs = load_config(Path(__file__).resolve().parents[2] / "config/examples/deadline.yaml")
    assert [field for field, _ in jobs.bags()] == [f"jobs[{i}].bag" for i in range(len(jobs.jobs))]
    assert [bag for _, bag in jobs.bags()] == [j.bag for j in jobs.jobs]
    sizes = [bag.synthetic for _, bag in jobs.bags()]
    assert [len(ids) for _, ids in expand_jobs(jobs)] == sizes
