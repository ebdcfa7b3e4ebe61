"""EC2 end to end: the daemon as a process, a moto server for the EC2 API, a real sshd.

Every "instance" moto hands out is reached through one real sshd on loopback
(``ec2.ssh.connect``): the daemon never connects to the private address moto returns.
Agents are started over SSH and reach the dispatcher through reverse tunnels. Faults
moto cannot make (throttling, capacity) come from ``FaultProxy`` in front of moto.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.providers.cost_tags import CostTags
from autoscaler.providers.ec2 import LAUNCH_TAG, RUN_TAG, TYPE_TAG
from autoscaler.run.live_runs import RunEntry, read_entries, write_entry
from autoscaler.run.rundir import os_user
from tests.integration.daemon_helpers import (
    adopted,
    assert_deadline_end,
    assert_sampled_once,
    committed_over_time,
    journal_rows,
    plan_in_background,
    plot_files,
    read_plan,
    run_cleanup,
    run_cli,
    run_id_of,
    setup_ran,
    start_daemon,
    successful_runs,
    wait_for,
    with_setup,
)
from tests.integration.ec2_world import ATU, BUDGET, N_TASKS, Ec2World

AGENT_GONE_S = ATU + 30
"""How long an agent of a finished run may live on: to its lease's end, at most one ATU."""

pytestmark = pytest.mark.integration


def finish(proc: subprocess.Popen[str], timeout: float = 240) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"the daemon did not finish in {timeout:g}s:\n{out[-3000:]}") from None
    return out


def kill9(proc: subprocess.Popen[str]) -> None:
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate()


def report_of(run_dir: Path) -> dict[str, Any]:
    import json

    return dict(json.loads((run_dir / "report.json").read_text()))


def moto_time(text: str) -> float:
    """Seconds since the epoch of moto's "User initiated (YYYY-mm-dd HH:MM:SS UTC)"."""
    found = re.search(r"\((\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC\)", text)
    assert found, text
    return datetime.strptime(found.group(1) + "+0000", "%Y-%m-%d %H:%M:%S%z").timestamp()


def check_every_task_once(run_dir: Path, n: int = N_TASKS) -> None:
    done = Counter(data["task"] for _, _, data in journal_rows(run_dir, "TaskDone"))
    assert sorted(done) == list(range(n))
    assert set(done.values()) == {1}, "a task counted twice"
    runs = successful_runs(run_dir)
    assert all(len(r) == 1 for r in runs.values()), "a task ran to success twice"


def check_spend(run_dir: Path) -> None:
    spends = committed_over_time(run_dir)
    assert spends, "no journal"
    assert max(spends) <= BUDGET + 1e-9


def check_no_secrets(w: Ec2World, run_dir: Path) -> None:
    token = (run_dir / "token").read_text().strip()
    key_lines = [
        line
        for line in w.sshd.client_key.read_text().splitlines()
        if line and not line.startswith("-----")
    ]
    texts = {
        p: p.read_text(errors="replace")
        for p in [*run_dir.rglob("*"), *w.remote_dir.rglob("*.log")]
        if p.is_file() and p.name not in ("token", "journal.sqlite-wal", "journal.sqlite-shm")
    }
    texts[run_dir / "journal.sqlite"] = (
        (run_dir / "journal.sqlite").read_bytes().decode(errors="replace")
    )
    for path, text in texts.items():
        assert token not in text, f"the run token leaked into {path}"
        assert w.secret not in text, f"the AWS secret leaked into {path}"
        for line in key_lines:
            assert line not in text, f"private key material leaked into {path}"


def charged_to(world: Ec2World, charged: CostTags) -> tuple[set[str], set[str]]:
    """The instances, and the instances of the volumes, that carry ``charged``'s cost
    tags: found by those tags alone, as a bill split by them finds them."""
    filters: list[Any] = [{"Name": f"tag:{k}", "Values": [v]} for k, v in charged.tags().items()]
    pages = world.ec2.get_paginator("describe_instances").paginate(Filters=filters)
    instances = {
        i["InstanceId"] for page in pages for r in page["Reservations"] for i in r["Instances"]
    }
    volumes = world.ec2.describe_volumes(Filters=filters)["Volumes"]
    return instances, {a["InstanceId"] for v in volumes for a in v["Attachments"]}


def test_a_bag_runs_on_two_instance_types_tunnelled_tagged_and_billed(world: Ec2World) -> None:
    run_dir = world.tmp / "run"
    marker = world.tmp / "setup.log"
    started = time.monotonic()
    # A real run's report, plots too; its money charged to a project (cost tags).
    config = with_setup(world.config(plots=True, project="physics"), marker)
    proc = start_daemon(str(config), "--out", str(run_dir))
    out = finish(proc)
    wall = time.monotonic() - started
    assert proc.returncode == 0, out[-3000:]
    report = report_of(run_dir)
    run_id = run_id_of(run_dir)
    print(f"\nEC2 (moto) + sshd: {N_TASKS} tasks in {wall:.1f}s wall, cost {report['cost']}")
    assert report["tasks_done"] == N_TASKS
    check_every_task_once(run_dir)
    check_spend(run_dir)
    setup_ran(run_dir, marker)  # each instance ran the run's set-up once (issue 23 §1)
    for name in plot_files(run_dir):
        assert (run_dir / name).stat().st_size > 0, name

    instances = world.instances(run_id)
    assert {i["InstanceId"] for i in instances} == {m["id"] for m in report["machines"]}
    assert not world.running(run_id), "an instance of the run is still running"
    types = Counter(i["InstanceType"] for i in instances)
    assert set(types) == {"t3.micro", "c5.large"}
    for i in instances:
        tags = {t["Key"]: t["Value"] for t in i.get("Tags", [])}
        assert tags[RUN_TAG] == run_id
        assert tags[LAUNCH_TAG].startswith("L")
        assert tags[TYPE_TAG] in ("small", "fast")
        assert i["MetadataOptions"]["HttpTokens"] == "required"
    # Charged to the config's project, the run's name and who started it.
    tagged, _ = charged_to(world, CostTags("physics", "ec2it", os_user()))
    assert tagged == {i["InstanceId"] for i in instances}

    # Tunnelled: every machine's agent was started over SSH and reached the dispatcher
    # through its own tunnel port on the instance's loopback.
    log = (run_dir / "log.jsonl").read_text()
    for i in instances:
        assert re.search(rf'"agent started over ssh".*"machine": "{i["InstanceId"]}"', log) or (
            re.search(rf'"machine": "{i["InstanceId"]}".*"agent started over ssh"', log)
        )
        assert (world.remote_dir / i["InstanceId"] / "agent.py").is_file()
    assert (run_dir / "known_hosts").stat().st_mode & 0o077 == 0

    # The report's spend is what EC2's launch and termination times make under the
    # configured billing: whole ATUs from launch to termination (moto's clock has whole
    # seconds, so each end may be off by up to one second, in either direction).
    by_type = {"t3.micro": 1.0, "c5.large": 3.0}
    billed = 0.0
    for i in instances:
        life = moto_time(i["StateTransitionReason"]) - i["LaunchTime"].timestamp()
        billed += by_type[i["InstanceType"]] * max(1, math.ceil((life - 1.0) / ATU))
    assert report["cost"] == pytest.approx(billed)
    assert report["cost"] <= BUDGET
    check_no_secrets(world, run_dir)
    # A released agent leaves at once; one whose tunnel died with its machine's release
    # stops at its lease's end, within one ATU (a loaded host: seconds more).
    wait_for(lambda: not world.agent_pids(), AGENT_GONE_S, "every agent of the run to exit")


def test_a_command_runs_in_its_agent_s_directory_on_the_instance(world: Ec2World) -> None:
    """A task with no files runs in its agent's working directory, on the instance. It
    was sent the controller's ``runs/<id>/work``, which no instance has: on EC2 every
    such task failed (here the "instances" share the host, so the path existed)."""
    config = world.config()
    data = yaml.safe_load(config.read_text())
    data["bag"] = {"command": "echo {i} && pwd", "sweep": {"i": {"stop": 3}}}
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    run_dir = world.tmp / "run"
    out = finish(start_daemon(str(config), "--out", str(run_dir)))
    assert report_of(run_dir)["tasks_done"] == 3, out[-3000:]
    results = [json.loads(line) for line in (run_dir / "outputs.jsonl").read_text().splitlines()]
    assert sorted(r["task"] for r in results) == [0, 1, 2]
    for result in results:
        i, cwd = result["stdout"].split()
        assert int(i) == result["task"]
        assert Path(cwd).is_relative_to(world.remote_dir / result["machine"]), result
        assert not Path(cwd).is_relative_to(run_dir), result


def test_a_deadline_job_runs_on_ec2(world: Ec2World) -> None:
    """Deadline mode on EC2 (moto, agents over SSH): one job with known task times,
    planned and run once each; every instance terminated; the per-job report."""
    job = {
        "name": "sweep",
        "bag": {"synthetic": 12},
        "constraint": {"deadline_s": 20},
        "task_s": {"small": 3, "fast": 1.5},
    }
    config = world.config(bag=None, constraint=None, jobs=[job])
    run_dir = world.tmp / "run"
    proc = start_daemon(str(config), "--out", str(run_dir))
    out = finish(proc)
    assert proc.returncode == 0, out[-3000:]
    report = assert_deadline_end(run_dir, 12)
    run_id = run_id_of(run_dir)
    (outcome,) = report["jobs"]
    print(
        f"\nEC2 deadline job: finish {outcome['finish_s']:.0f}s of {outcome['deadline_s']:.0f}s, "
        f"{outcome['tasks_late']} late, cost {report['cost']}"
    )
    instances = world.instances(run_id)
    assert {i["InstanceId"] for i in instances} == {m["id"] for m in report["machines"]}
    assert not world.running(run_id), "an instance of the run is still running"
    # A released agent leaves at once; one whose tunnel died with its machine's release
    # stops at its lease's end, within one ATU (a loaded host: seconds more).
    wait_for(lambda: not world.agent_pids(), AGENT_GONE_S, "every agent of the run to exit")


# --- crashes ----------------------------------------------------------------------------------


def launches(run_dir: Path) -> dict[str, int]:
    """Launch token -> machines asked for, from the journal."""
    return {d["token"]: d["count"] for _, _, d in journal_rows(run_dir, "Launch")}


def check_no_duplicates(w: Ec2World, run_dir: Path, run_id: str) -> None:
    asked = launches(run_dir)
    per_token = Counter(
        {t["Key"]: t["Value"] for t in i["Tags"]}[LAUNCH_TAG] for i in w.instances(run_id)
    )
    for token, count in per_token.items():
        assert count <= asked[token], f"launch {token}: {count} instances for {asked[token]} asked"


def done_count(run_dir: Path) -> int:
    return len(journal_rows(run_dir, "TaskDone"))


@pytest.mark.long
def test_kill9_after_the_token_is_journaled_before_run_instances_returns(world: Ec2World) -> None:
    """moto has started the instances but the daemon dies before it hears so: the
    resumed daemon finds them by their launch tag and adopts them, launching none again."""
    run_dir = world.tmp / "run"
    world.proxy.hold("RunInstances")
    proc = start_daemon(str(world.config()), "--out", str(run_dir))
    try:
        wait_for(
            lambda: (run_dir / "journal.sqlite").exists() and bool(launches(run_dir)),
            30,
            "launches journaled",
        )
        run_id = run_id_of(run_dir)
        wait_for(
            lambda: world.proxy.held >= 2 and len(world.running(run_id)) >= 2,
            30,
            "RunInstances done by moto, answers held back",
        )
        assert not journal_rows(run_dir, "MachineLaunched")
    finally:
        kill9(proc)
    world.proxy.release()
    before = set(world.running(run_id))
    proc = start_daemon("--resume", str(run_dir))
    out = finish(proc)
    assert proc.returncode == 0, out[-3000:]
    adopted = {d["machine"] for _, _, d in journal_rows(run_dir, "MachineLaunched")}
    assert before <= adopted, "an instance started before the crash was not adopted"
    check_no_duplicates(world, run_dir, run_id)
    assert not world.running(run_id)
    check_every_task_once(run_dir)
    check_spend(run_dir)
    # A released agent leaves at once; one whose tunnel died with its machine's release
    # stops at its lease's end, within one ATU (a loaded host: seconds more).
    wait_for(lambda: not world.agent_pids(), AGENT_GONE_S, "every agent of the run to exit")


@pytest.mark.alone  # under load its released agents were still exiting when it looked
def test_kill9_while_instances_run_tasks_then_resume(world: Ec2World) -> None:
    n = 80
    run_dir = world.tmp / "run"
    proc = start_daemon(str(world.config(bag={"synthetic": n})), "--out", str(run_dir))
    try:
        wait_for(lambda: done_count(run_dir) >= 15, 120, "15 tasks done")
    finally:
        kill9(proc)
    run_id = run_id_of(run_dir)
    alive = world.running(run_id)
    assert alive, "the instances died with the daemon"
    charged = CostTags("default", "ec2it", os_user())  # a config that names no project
    assert charged_to(world, charged) == (set(alive), set(alive))  # instances, volumes
    agents = set(world.agent_pids())
    assert agents, "the agents died with the daemon"
    time.sleep(2)  # the agents retry through their dead tunnels meanwhile
    proc = start_daemon("--resume", str(run_dir))
    out = finish(proc)
    assert proc.returncode == 0, out[-3000:]
    check_every_task_once(run_dir, n)
    check_no_duplicates(world, run_dir, run_id)
    check_spend(run_dir)
    assert not world.running(run_id), "an instance outlived the resumed run"
    # What the resumed daemon launched is charged as what the first one did.
    assert charged_to(world, charged)[0] == {i["InstanceId"] for i in world.instances(run_id)}
    # The resumed daemon re-opened the tunnels to the same agents: results after the
    # crash came from machines launched before it.
    after = {d["machine"] for _, _, d in journal_rows(run_dir, "TaskDone")[15:]}
    assert after & set(alive)
    # A released agent leaves at once; one whose tunnel died with its machine's release
    # stops at its lease's end, within one ATU (a loaded host: seconds more).
    wait_for(lambda: not world.agent_pids(), AGENT_GONE_S, "every agent of the run to exit")


def test_plan_samples_on_ec2_and_the_run_takes_its_instances_over(world: Ec2World) -> None:
    """`plan --yes` samples on EC2 and holds; `run --plan DIR --option N` carries the run
    on from the samples with the instances that still have paid time (their agents
    reached through new tunnels), and no instance outlives it."""
    # Units of two ATUs: the sampling instances keep paid time through the hold and the
    # hand-over. At one ATU their unit ended before `run --plan` came on a host loaded by
    # another job, and nothing was left to take over.
    atu = 2 * ATU
    # Machines work on through the hold (their time is paid): the bag must outlast the
    # sampling, the hold and the `run` starting, which takes seconds on a loaded host. The
    # six sampling instances do about 3 tasks a second: 300 is about 100 s of work from
    # their start, most of their first unit, so `run --plan` may come up to a minute after
    # the hold and still find tasks and paid time. (120 were all done 16 s after the hold,
    # before a `run --plan` that took 25 s to come in CI; at one ATU, 160 ran past the
    # option's budget on a host loaded to 4 on its 2 cores.)
    n = 300
    config = world.config(bag={"synthetic": n}, billing={"mode": "fixed", "atu_s": atu})
    plan_dir = world.tmp / "plan"
    plan = plan_in_background(config, plan_dir, world.tmp)
    try:
        wait_for(lambda: (plan_dir / "plan.json").exists(), 120, "the plan's frontier")
        data = read_plan(plan_dir)
        option = str(len(data["options"]))
        run = run_cli(
            "run", "--plan", str(plan_dir), "--option", option, cwd=world.tmp, timeout=240
        )
        _, plan_err = plan.communicate(timeout=60)
    finally:
        plan.kill()
    assert plan.returncode == 0, plan_err
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    run_dir = Path(data["run_dir"])
    run_id = run_id_of(run_dir)
    check_every_task_once(run_dir, n)
    check_spend(run_dir)
    assert_sampled_once(run_dir)
    assert adopted(run_dir), "no sampling instance was taken over"
    assert not world.running(run_id), "an instance outlived the run"
    # A released agent leaves at once; one whose tunnel died with its machine's release
    # stops at its lease's end, within one unit (a loaded host: seconds more).
    wait_for(lambda: not world.agent_pids(), atu + 30, "every agent of the run to exit")


# --- faults moto cannot make -------------------------------------------------------------------


@pytest.mark.long(2)
def test_throttling_for_30s_slows_the_run_without_an_error_storm(world: Ec2World) -> None:
    run_dir = world.tmp / "run"
    world.proxy.throttle(30)
    started = time.monotonic()
    config = world.config(ec2={"throttle_hold_s": 15})  # scale-up waits 15 s after a refusal
    proc = start_daemon(str(config), "--out", str(run_dir))
    out = finish(proc, timeout=300)
    wall = time.monotonic() - started
    assert proc.returncode == 0, out[-3000:]
    refused = [r for r in world.proxy.requests() if r.injected]
    print(f"\nthrottled 30s: {len(refused)} requests refused, run took {wall:.0f}s")
    assert refused, "the throttle never bit"
    assert len(refused) < 60, f"{len(refused)} throttled requests: retries without backoff"
    assert wall > 30  # it waited the throttling out
    check_every_task_once(run_dir)
    check_spend(run_dir)
    assert not world.running(run_id_of(run_dir))


@pytest.mark.long
def test_a_capacity_error_on_one_type_leads_to_a_plan_without_it(world: Ec2World) -> None:
    n = 60
    run_dir = world.tmp / "run"
    world.proxy.fail(
        "RunInstances",
        "InsufficientInstanceCapacity",
        status=500,
        match=lambda p: p.get("InstanceType") == ["c5.large"],
    )
    proc = start_daemon(str(world.config(bag={"synthetic": n})), "--out", str(run_dir))
    out = finish(proc)
    assert proc.returncode == 0, out[-3000:]
    report = report_of(run_dir)
    run_id = run_id_of(run_dir)
    assert {i["InstanceType"] for i in world.instances(run_id)} == {"t3.micro"}
    problems = report["launch_problems"]
    assert problems
    assert {(p["type"], p["kind"]) for p in problems} == {("fast", "capacity")}
    assert (
        "InsufficientInstanceCapacity" in problems[0]["reason"]
        or "capacity" in problems[0]["reason"]
    )
    plans = [c for c in report["configurations"] if c.get("predicted_makespan_s") is not None]
    assert plans, "no plan was made"
    assert plans[-1]["counts"].get("fast", 0) == 0
    assert "Launches the provider refused" in (run_dir / "report.md").read_text()
    check_every_task_once(run_dir, n)
    check_spend(run_dir)


@pytest.mark.long
def test_a_spot_instance_terminated_from_outside_has_its_tasks_requeued(world: Ec2World) -> None:
    n = 80
    run_dir = world.tmp / "run"
    proc = start_daemon(str(world.config(bag={"synthetic": n})), "--out", str(run_dir))
    try:
        wait_for(lambda: done_count(run_dir) >= 10, 120, "10 tasks done")
        run_id = run_id_of(run_dir)
        spot = [
            i["InstanceId"]
            for i in world.instances(run_id)
            if i["InstanceType"] == "c5.large" and i["State"]["Name"] == "running"
        ]
        assert spot
        victim = spot[0]
        world.ec2.terminate_instances(InstanceIds=[victim])  # the spot market took it back
        out = finish(proc)
    finally:
        if proc.poll() is None:
            kill9(proc)
    assert proc.returncode == 0, out[-3000:]
    lost = [d for _, _, d in journal_rows(run_dir, "MachineLost") if d["machine"] == victim]
    assert lost, "the interrupted instance was not seen as lost"
    # The tasks it held when it went (given, not done) went back to the bag: each was given
    # to another machine, unless the instance's agent (moto's termination does not end the
    # local process) handed its result in first, which counts (issue 36 §4); and
    # check_every_task_once: each is done once either way.
    held: set[int] = set()
    again: set[int] = set()
    late: set[int] = set()
    went = False
    for _, kind, d in journal_rows(run_dir):
        tasks = d.get("tasks") or ([d["task"]] if "task" in d else [])
        to = d.get("target", d.get("machine"))
        if kind in ("Assign", "AssignGroup", "Move") and went:
            again.update(t for t in tasks if t in held and to != victim)
        elif kind in ("Assign", "AssignGroup", "Move") and to == victim:
            held.update(tasks)
        elif kind == "Move" and d.get("source") == victim:
            held.difference_update(tasks)
        elif kind == "TaskDone" and not went:
            held.discard(d["task"])
        elif kind == "TaskDone" and d["machine"] == victim:
            late.add(d["task"])
        elif kind == "MachineLost" and d["machine"] == victim:
            went = True
    assert held, "the instance held no task when it went"
    assert held <= again | late
    check_every_task_once(run_dir, n)
    check_spend(run_dir)
    report = report_of(run_dir)
    gone = next(m for m in report["machines"] if m["id"] == victim)
    assert gone["units_paid"] >= 1  # its paid units still count
    assert "lost" in (gone["end_reason"] or "")
    assert not world.running(run_id)


# --- cleanup beside a live run ------------------------------------------------------------------


@pytest.mark.long
def test_cleanup_from_elsewhere_keeps_a_live_runs_instances(
    world: Ec2World, autoscaler_state: Path
) -> None:
    """A run with --out in a directory of its own; cleanup --yes from another directory (no
    runs/ there) while it runs: every instance of the run is its live run's and is kept,
    and the run ends cleanly. The same cleanup terminates an instance of a dead run whose
    registry entry its daemon left behind (stale: nothing holds its lock)."""
    n = 80
    config = world.config(bag={"synthetic": n})
    dead = "ec2it-20260101T000000Z-dead"
    ami = world.ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    tags = {RUN_TAG: dead, LAUNCH_TAG: "L0", TYPE_TAG: "small", "Name": dead}
    stray = world.ec2.run_instances(
        ImageId=ami,
        InstanceType="t3.micro",
        MinCount=1,
        MaxCount=1,
        TagSpecifications=[
            {"ResourceType": "instance", "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}
        ],
    )["Instances"][0]["InstanceId"]
    (world.tmp / "dead-run").mkdir()
    write_entry(autoscaler_state, RunEntry(dead, world.tmp / "dead-run", 1, "2026-01-01T00:00Z"))
    elsewhere = world.tmp / "elsewhere"
    elsewhere.mkdir()
    run_dir = world.tmp / "somewhere" / "run"
    proc = start_daemon(str(config), "--out", str(run_dir))
    try:
        wait_for(lambda: done_count(run_dir) >= 10, 120, "10 tasks done")
        run_id = run_id_of(run_dir)
        assert world.running(run_id), "the run has no instance running"
        done = run_cleanup(config, "--yes", cwd=elsewhere)
        assert proc.poll() is None, "the run was over before cleanup returned"
        out = finish(proc)
    finally:
        if proc.poll() is None:
            kill9(proc)
    assert done.returncode == 0, done.stdout + done.stderr
    ours = [row for row in done.stdout.splitlines() if f" run {run_id} " in row]
    assert ours, f"none of the run's instances was listed:\n{done.stdout}"
    for row in ours:
        assert f"live run (daemon pid {proc.pid})" in row, row
    assert f"terminated 1: {stray}" in done.stdout
    assert f"run {dead}: removed its stale registry entry" in done.stderr
    states = {i["InstanceId"]: i["State"]["Name"] for i in world.instances(dead)}
    assert states[stray] in ("shutting-down", "terminated")
    assert proc.returncode == 0, out[-3000:]
    check_every_task_once(run_dir, n)
    assert not world.running(run_id)
    assert read_entries(autoscaler_state) == [], "an entry outlived its run"
