"""Categories in a budget run (issue 21 §3, paper 004 §4–5): sampled per (category,
type), estimated per (category, type), and each type given the categories it is good at.

Two types at the same price, each four times faster at one kind of task
(``emulator.category_speed``); a bag file labels each task. Without categories a
machine takes the bag's next task whatever it is; with them it takes the categories
the (category, type) MILP plans for its type.
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.run.start import DryRun, dry_run

CONFIG = """
bag: {file: bag.csv}
constraint: {budget: 120}
billing: {mode: fixed, atu_s: 1h}
machine_types:
  - {name: a, price: 1, max_count: 3, boot_s: 60}
  - {name: b, price: 1, max_count: 3, boot_s: 60}
emulator:
  seed: 2
  runtime: {dist: normal, mean_s: 10m, sd_s: 1m}
  category_speed: {cpu: {a: 4, b: 1}, io: {a: 1, b: 4}}
"""


def run(tmp_path: Path, categories: bool) -> tuple[DryRun, list[str]]:
    labels = ["cpu"] * 300 + ["io"] * 300
    random.Random(1).shuffle(labels)
    rows = ["command,category", *(f"true {i},{label}" for i, label in enumerate(labels))]
    (tmp_path / "bag.csv").write_text("\n".join(rows) + "\n")
    path = tmp_path / f"run-{categories}.yaml"
    path.write_text(CONFIG + ("categories: {by: label}\n" if categories else ""))
    cfg = load_config(path)
    return dry_run(cfg, expand_bag(cfg), plots=False), labels


def where(done: DryRun, labels: list[str]) -> Counter[tuple[str, str]]:
    state = done.state
    return Counter(
        (labels[s.task], state.fleet.machines[s.machine].type.name)
        for s in state.tasks.segments
        if s.outcome == "done"
    )


def test_each_type_gets_the_categories_it_is_fast_at_and_the_run_is_cheaper(
    tmp_path: Path,
) -> None:
    plain, labels = run(tmp_path, categories=False)
    sorted_, _ = run(tmp_path, categories=True)
    for done in (plain, sorted_):
        assert done.report.tasks_done == 600
        assert done.report.cost <= 120
    placed = where(sorted_, labels)
    assert placed["cpu", "a"] >= 0.85 * 300
    assert placed["io", "b"] >= 0.85 * 300
    assert where(plain, labels)["cpu", "a"] < 0.7 * 300  # FCFS mixes them
    assert sorted_.report.cost < 0.7 * plain.report.cost
    assert sorted_.report.makespan_s < 0.7 * plain.report.makespan_s


def test_sampling_covers_every_large_category_on_every_type(tmp_path: Path) -> None:
    done, _ = run(tmp_path, categories=True)
    state = done.state
    assert set(state.tasks.task_category) == {0, 1}
    for key in ((0, "a"), (0, "b"), (1, "a"), (1, "b")):
        assert state.observed.category_runs[key][0] >= 2, key
