"""Spot interruption notices on EC2 (moto): the agent reads its instance's notice from
the metadata (here a loopback stand-in, ``tests/integration/notices.py``), and the
daemon hands the machine's tasks back to the bag at once instead of finding them lost
when the machine stops answering."""

from __future__ import annotations

import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration.daemon_helpers import (
    assigned_rows,
    committed_over_time,
    journal_rows,
    run_id_of,
    start_daemon,
    wait_for,
)
from tests.integration.ec2_world import Ec2World
from tests.integration.test_ec2_daemon import finish, kill9, report_of

pytestmark = pytest.mark.integration

N = 24


def in_progress(run_dir: Path, machines: set[str]) -> dict[str, set[int]]:
    """Tasks given to each of ``machines`` and not yet done by it."""
    done = {(d["task"], d["machine"]) for _, _, d in journal_rows(run_dir, "TaskDone")}
    out: dict[str, set[int]] = {}
    for _, _, d in assigned_rows(run_dir):
        if d["machine"] in machines and (d["task"], d["machine"]) not in done:
            out.setdefault(d["machine"], set()).add(d["task"])
    return out


def spot_daemon(world: Ec2World) -> tuple[Path, subprocess.Popen[str]]:
    """A daemon on ``N`` tasks of ~6 s on the spot type, reading the metadata every
    0.2 s: its run directory and process."""
    run_dir = world.tmp / "run"
    config = world.config(
        bag={"synthetic": N},
        constraint={"budget": 80},
        emulator={"runtime": {"dist": "normal", "mean_s": 12, "sd_s": 1}},  # 6 s on fast
        ec2={"notice_every_s": 0.2},
    )
    return run_dir, start_daemon(str(config), "--out", str(run_dir))


def fresh_spot_machine(world: Ec2World, run_dir: Path) -> str:
    """A spot instance just given a task (so it has seconds of work to go)."""
    wait_for(lambda: journal_rows(run_dir, "TaskDone"), 120, "a task done")
    run_id = run_id_of(run_dir)
    seen: dict[str, set[int]] = {}
    fresh: list[str] = []

    def fresh_task() -> bool:
        """A spot instance given a task since the last look."""
        spot = {
            i["InstanceId"]
            for i in world.instances(run_id)
            if i["InstanceType"] == "c5.large" and i["State"]["Name"] == "running"
        }
        now = in_progress(run_dir, spot)
        fresh.extend(m for m in spot if m in seen and now.get(m, set()) - seen[m])
        seen.update({m: now.get(m, set()) for m in spot})
        return bool(fresh)

    wait_for(fresh_task, 90, "a spot instance given a task")
    return fresh[0]


@dataclass(frozen=True)
class Heard:
    """A spot run to its end after the metadata said something of one of its machines."""

    run_dir: Path
    victim: str  # the machine the metadata spoke of
    run_id: str
    heard_s: float  # from posting it to the journal row that says the run heard it
    returncode: int | None
    out: str


def post_and_hear(world: Ec2World, post: Callable[[str], None], row: str, what: str) -> Heard:
    """``spot_daemon``'s run: once a spot machine has just been given a task, ``post``
    something for it in the metadata, wait for the journal's ``row`` naming it, and run
    to the end (the daemon killed if anything fails)."""
    run_dir, proc = spot_daemon(world)
    try:
        victim = fresh_spot_machine(world, run_dir)
        run_id = run_id_of(run_dir)
        posted = time.monotonic()
        post(victim)
        wait_for(
            lambda: any(d["machine"] == victim for _, _, d in journal_rows(run_dir, row)), 30, what
        )
        heard_s = time.monotonic() - posted
        out = finish(proc)
    finally:
        if proc.poll() is None:
            kill9(proc)
    return Heard(run_dir, victim, run_id, heard_s, proc.returncode, out)


@pytest.mark.long
def test_a_spot_notice_hands_the_machines_tasks_back_at_once(world: Ec2World) -> None:
    heard = post_and_hear(
        world,
        lambda m: world.notices.notice(m, "terminate", "2026-11-26T12:00:00Z"),
        "MachineLost",
        "the noticed machine counted gone",
    )
    run_dir, victim, run_id, acted_s = heard.run_dir, heard.victim, heard.run_id, heard.heard_s
    assert heard.returncode == 0, heard.out[-3000:]
    (lost,) = [d for _, _, d in journal_rows(run_dir, "MachineLost") if d["machine"] == victim]
    assert "interruption notice (terminate at 2026-11-26T12:00:00Z)" in lost["reason"]
    assert world.notices.reads[victim] >= 1
    assert world.notices.tokenless == 0  # IMDSv2: every read sent the session token
    # Its task in progress ran again elsewhere, and every task counts once.
    done = Counter(d["task"] for _, _, d in journal_rows(run_dir, "TaskDone"))
    assert sorted(done) == list(range(N))
    assert set(done.values()) == {1}
    # What it had in progress when it was counted gone ran again elsewhere.
    lost_t = next(t for t, _, d in journal_rows(run_dir, "MachineLost") if d["machine"] == victim)
    ended = {d["task"] for t, _, d in journal_rows(run_dir, "TaskDone") if t <= lost_t}
    held = {
        d["task"]
        for t, _, d in assigned_rows(run_dir)
        if d["machine"] == victim and t <= lost_t and d["task"] not in ended
    }
    assert held, "the noticed machine had no task in progress"
    done_by = {d["task"]: d["machine"] for _, _, d in journal_rows(run_dir, "TaskDone")}
    assert all(done_by[t] != victim for t in held)
    # From the notice to its tasks queued elsewhere: seconds, against EC2's two minutes.
    again = [t for t, _, d in assigned_rows(run_dir) if d["task"] in held and t >= lost_t]
    assert again
    print(
        f"\nnotice: the machine counted gone {acted_s:.1f}s after it was posted, its task "
        f"queued elsewhere {min(again) - lost_t:.1f}s later (EC2 gives 120 s)"
    )
    assert max(committed_over_time(run_dir)) <= 80 + 1e-9
    report = report_of(run_dir)
    gone = next(m for m in report["machines"] if m["id"] == victim)
    assert "interruption notice" in (gone["end_reason"] or "")
    assert "interruption notice" in (run_dir / "report.md").read_text()
    assert not world.running(run_id)
