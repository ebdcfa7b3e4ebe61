"""Real runs on machines of several slots: local agents, Grid Engine, Slurm and EC2
(moto, agents over SSH), each with the harness of its own daemon tests.

What each checks: every task done once, none lost; the report names the slots per type
and per machine; a machine holds more than one task at a time (queued on it and not yet
ended, from the journal). That a machine runs at most its slots at once is the
emulator's unit test and the agent's own tests (real runtimes reach the journal late,
with the reports that carry them).
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration import sge, slurm
from tests.integration.daemon_helpers import (
    categories_measured,
    journal_rows,
    local_config,
    run_cli,
    run_in_process,
    start_daemon,
    successful_runs,
    with_categories,
)
from tests.integration.ec2_world import N_TASKS, Ec2World
from tests.integration.test_ec2_daemon import check_spend, finish, report_of
from tests.integration.test_sge_daemon import assert_clean_end
from tests.integration.test_sge_daemon import run_to_its_end as sge_run
from tests.integration.test_slurm_daemon import assert_no_job_left
from tests.integration.test_slurm_daemon import run_to_its_end as slurm_run

pytestmark = pytest.mark.integration


def in_hand(run_dir: Path) -> dict[str, int]:
    """Per machine, the most tasks it held at once: queued on it (one by one, in a group,
    or moved there) and not yet ended or taken away, from the journal's records in order."""
    held: dict[str, set[int]] = defaultdict(set)
    most: Counter[str] = Counter()
    for _, kind, d in journal_rows(run_dir):
        if kind == "Assign":
            held[d["machine"]].add(d["task"])
        elif kind == "AssignGroup":
            held[d["machine"]].update(d["tasks"])
        elif kind == "Move":
            held[d["source"]].difference_update(d["tasks"])
            held[d["target"]].update(d["tasks"])
        elif kind in ("TaskDone", "TaskFailed", "Cancel"):
            held[d["machine"]].discard(d["task"])
        elif kind in ("MachineLost", "Release"):
            held[d["machine"]].clear()
        for m, tasks in held.items():
            most[m] = max(most[m], len(tasks))
    return dict(most)


def every_task_once(run_dir: Path, n: int) -> None:
    done = Counter(d["task"] for _, _, d in journal_rows(run_dir, "TaskDone"))
    assert sorted(done) == list(range(n)), "a task was lost"
    assert set(done.values()) == {1}, "a task counted twice"
    runs = successful_runs(run_dir)
    assert all(len(r) == 1 for r in runs.values()), "a task ran to success twice"


def slotted(report: dict[str, Any], slots: dict[str, int]) -> None:
    for name, want in slots.items():
        assert report["machine_types"][name]["slots"] == want
    for m in report["machines"]:
        assert m["slots"] == slots[m["type"]]


def with_slots(config: Path, slots: int) -> None:
    """Every machine type of the config file runs ``slots`` tasks at once."""
    data = yaml.safe_load(config.read_text())
    for t in data["machine_types"]:
        t["slots"] = slots
    config.write_text(yaml.safe_dump(data), encoding="utf-8")


def check_in_hand(run_dir: Path, machines: list[dict[str, Any]]) -> None:
    """A machine held two tasks at once; some were handed out as a group (issue 21 §2)."""
    assert journal_rows(run_dir, "AssignGroup"), "no task group was handed out"
    most = in_hand(run_dir)
    assert most, "no task was assigned"
    assert set(most) <= {m["id"] for m in machines}
    assert max(most.values()) > 1, f"no machine held two tasks at once: {most}"


def test_a_local_run_on_4_slots(tmp_path: Path) -> None:
    """Local agents of 4 slots: more tasks in hand than machines, none lost, none twice,
    the report per machine."""
    config = local_config(
        tmp_path,
        bag={"synthetic": 60},
        constraint={"budget": 40},
        machine_types=[
            {"name": "small", "price": 1, "max_count": 2, "boot_s": "2m", "slots": 4},
            {"name": "fast", "price": 3, "max_count": 2, "boot_s": "2m", "slots": 4},
        ],
    )
    run_dir = tmp_path / "run"
    outcome = run_in_process(config, run_dir)
    report = json.loads((run_dir / "report.json").read_text())
    assert outcome.report.tasks_done == 60
    every_task_once(run_dir, 60)
    slotted(report, {"small": 4, "fast": 4})
    check_in_hand(run_dir, report["machines"])
    assert sum(in_hand(run_dir).values()) > len(report["machines"])
    assert sum(m["tasks_run"] for m in report["machines"]) == 60
    text = (run_dir / "report.md").read_text()
    assert "| machine | type | slots |" in text


@sge.XDIST_GROUP
@pytest.mark.usefixtures("sge")
def test_a_grid_engine_run_on_2_slots(tmp_path: Path) -> None:
    """Grid Engine jobs of 2 slots (no parallel environment here: no slot request), on a
    bag of two labelled categories."""
    config = with_categories(sge.sge_config(tmp_path, 16), 16)
    with_slots(config, 2)
    run_dir = tmp_path / "run"
    run_id, _ = sge_run(config, run_dir)
    report = assert_clean_end(run_dir, run_id, 16)
    slotted(report, {"small": 2, "large": 2})
    check_in_hand(run_dir, report["machines"])
    categories_measured(report)


@slurm.XDIST_GROUP
@pytest.mark.usefixtures("slurm")
def test_a_slurm_run_on_2_slots(tmp_path: Path) -> None:
    """Slurm jobs of 2 slots: small asks --cpus-per-task=2 (slots x cpus), large keeps
    its own cpus: 2. A bag of two labelled categories."""
    config = with_categories(slurm.slurm_config(tmp_path, 16), 16)
    with_slots(config, 2)
    run_dir = tmp_path / "run"
    run_id, _ = slurm_run(config, run_dir)
    report = report_of(run_dir)
    assert report["stop_reason"] is None
    assert report["tasks_done"] == 16
    every_task_once(run_dir, 16)
    slotted(report, {"small": 2, "large": 2})
    check_in_hand(run_dir, report["machines"])
    categories_measured(report)
    assert_no_job_left(run_id)


@pytest.mark.long
def test_ec2_slots_default_to_vcpus_on_moto(world: Ec2World) -> None:
    """ec2.lookup_slots: t3.micro and c5.large have 2 vCPUs (DescribeInstanceTypes on
    moto), so both types get 2 slots; validate says so, and a run uses them, on a bag
    of two labelled categories."""
    config = with_categories(world.config(ec2={"lookup_slots": True}), N_TASKS)
    checked = run_cli("validate", str(config))
    assert checked.returncode == 0, checked.stderr
    assert "small (1/ATU, max 3, 2 slots)" in checked.stdout
    run_dir = world.tmp / "run"
    proc = start_daemon(str(config), "--out", str(run_dir))
    out = finish(proc)
    assert proc.returncode == 0, out[-3000:]
    report = report_of(run_dir)
    assert report["tasks_done"] == N_TASKS
    every_task_once(run_dir, N_TASKS)
    check_spend(run_dir)
    slotted(report, {"small": 2, "fast": 2})
    resolved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert {t["name"]: t["slots"] for t in resolved["machine_types"]} == {"small": 2, "fast": 2}
    check_in_hand(run_dir, report["machines"])
    categories_measured(report)


def test_an_unknown_instance_type_for_lookup_slots_names_the_field(world: Ec2World) -> None:
    config = world.config(ec2={"lookup_slots": True})
    data = yaml.safe_load(config.read_text())
    data["ec2"]["types"]["small"]["instance_type"] = "zz9.nosuch"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    checked = run_cli("validate", str(config))
    assert checked.returncode == 2
    assert "machine_types[0].slots" in checked.stderr
    assert "zz9.nosuch" in checked.stderr
