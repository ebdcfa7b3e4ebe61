"""The service's store keeps a job's tasks as it was given them, streamed into rows: a
big bag is never held a second time as one JSON text while it is stored (issue 19)."""

from __future__ import annotations

import json
import sqlite3
import tracemalloc
from pathlib import Path

from autoscaler.config.schema import RunConfig
from autoscaler.config.service import job_config
from autoscaler.core.model import TaskSpec
from autoscaler.service.store import Store
from tests.unit.test_service_config import EXAMPLES, NOW, service


def _job(n: int) -> tuple[RunConfig, list[TaskSpec]]:
    data = {"name": "big", "bag": {"synthetic": n}, "constraint": {"budget": 40}}
    return job_config(service(), data, source="job.yaml", base_dir=EXAMPLES, now_wall=NOW)


def test_a_job_s_tasks_come_back_as_they_were_stored(tmp_path: Path) -> None:
    cfg, _ = _job(3)
    tasks = [
        TaskSpec(0, "echo one"),
        TaskSpec(1, "echo $X", {"X": "two"}),
        TaskSpec(2, None),
    ]
    store = Store(tmp_path / "service.db")
    job = store.add("big", cfg, tasks, NOW, lambda j: tmp_path / j)
    again = Store(tmp_path / "service.db", read_only=True)
    assert again.tasks(job) == tasks
    assert again.row(job).n_tasks == 3


def test_a_store_from_before_task_rows_still_reads_its_jobs_tasks(tmp_path: Path) -> None:
    cfg, _ = _job(2)
    store = Store(tmp_path / "service.db")
    job = store.add("old", cfg, [], NOW, lambda j: tmp_path / j)
    store.close()
    with sqlite3.connect(tmp_path / "service.db") as db:
        legacy = json.dumps(["echo a", ["echo $B", {"B": "b"}]])
        db.execute("UPDATE jobs SET tasks = ?, n_tasks = 2 WHERE id = ?", (legacy, job))
    assert Store(tmp_path / "service.db").tasks(job) == [
        TaskSpec(0, "echo a"),
        TaskSpec(1, "echo $B", {"B": "b"}),
    ]


def test_storing_a_big_bag_does_not_hold_it_again_as_one_text(tmp_path: Path) -> None:
    """Python's peak allocation while 200,000 tasks are stored stays well below the size
    of the bag as one JSON text (what the store built before)."""
    cfg, _ = _job(1)
    tasks = [
        TaskSpec(i, f"simulate --case {i:08d} --out results/{i:08d}.h5") for i in range(200_000)
    ]
    text = len(json.dumps([t.command for t in tasks]))
    store = Store(tmp_path / "service.db")
    tracemalloc.start()
    try:
        store.add("big", cfg, tasks, NOW, lambda j: tmp_path / j)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < text / 4, f"peak {peak:,} bytes while storing a bag of {text:,} bytes as JSON"
    assert len(store.tasks("j1")) == 200_000
