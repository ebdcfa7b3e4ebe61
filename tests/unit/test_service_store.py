"""The service's store keeps a job's tasks as it was given them, streamed into rows: a
big bag is never held a second time as one JSON text while it is stored (issue 19)."""

from __future__ import annotations

import json
import sqlite3
import tracemalloc
from pathlib import Path

from autoscaler.config.schema import RunConfig
from autoscaler.config.service_schema import job_config
from autoscaler.core.model import TaskSpec
from autoscaler.core.task_files import FileSpec, InputFile
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


def test_a_task_s_timeout_needs_and_files_come_back_too(tmp_path: Path) -> None:
    """A job the service starts runs the tasks it was given: the store kept only each
    task's command and env, so a bag's ``timeout_s`` (a hung task then ran until the
    machine went), its files (outputs never collected) and what its tasks need (their
    categories) were dropped between submit and start."""
    cfg, _ = _job(2)
    files = FileSpec((InputFile("/data/in.csv", "in.csv"),), ("out/*.h5",), 5_000_000)
    tasks = [
        TaskSpec(0, "sleep 100", timeout_s=30.0, category="long", estimate_s=90.0),
        TaskSpec(1, "run --x 1", {"X": "1"}, files=files, input_bytes=2048.0),
    ]
    store = Store(tmp_path / "service.db")
    job = store.add("kept", cfg, tasks, NOW, lambda j: tmp_path / j)
    store.close()
    assert Store(tmp_path / "service.db").tasks(job) == tasks
    assert Store(tmp_path / "service.db", read_only=True).tasks(job) == tasks


def test_a_store_from_before_the_extra_column_reads_and_takes_jobs(tmp_path: Path) -> None:
    """A state directory from before: its task rows have no ``extra``; read back they
    are bare, and the store opened to write adds the column and keeps new jobs whole."""
    cfg, _ = _job(1)
    store = Store(tmp_path / "service.db")
    first = store.add("old", cfg, [TaskSpec(0, "echo a")], NOW, lambda j: tmp_path / j)
    store.close()
    with sqlite3.connect(tmp_path / "service.db") as db:
        db.execute("ALTER TABLE job_tasks DROP COLUMN extra")
    assert Store(tmp_path / "service.db", read_only=True).tasks(first) == [TaskSpec(0, "echo a")]
    store = Store(tmp_path / "service.db")
    job = store.add("new", cfg, [TaskSpec(0, "true", timeout_s=5.0)], NOW, lambda j: tmp_path / j)
    assert store.tasks(first) == [TaskSpec(0, "echo a")]
    assert store.tasks(job) == [TaskSpec(0, "true", timeout_s=5.0)]


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
