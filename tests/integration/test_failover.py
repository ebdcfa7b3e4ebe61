"""Failover on EC2 (moto behind the fault proxy, agents over SSH): a type refused for
capacity or a spot shortage is planned around in the step that hears of it, so
machines of another type run within one monitoring interval; every task is done once,
and the money committed never passes the budget."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import boto3
import pytest
import yaml

from tests.integration.daemon_helpers import (
    assert_deadline_end,
    committed_over_time,
    journal_rows,
    run_id_of,
    start_daemon,
)
from tests.integration.ec2_world import Ec2World
from tests.integration.failover_world import (
    SPOT_BUDGET,
    SPOT_BUDGET_TASKS,
    SPOT_DEADLINE,
    WEST,
    Failover,
    failover_of,
    refuse_type,
    two_regions,
)
from tests.integration.test_ec2_daemon import check_every_task_once, finish

pytestmark = pytest.mark.integration

INTERVAL_S = 10.0  # the world's monitoring interval


def failover(run_dir: Path, refused: str) -> Failover:
    found = failover_of(journal_rows(run_dir), refused)
    assert found is not None, f"no launch of {refused} was refused"
    print(
        f"\nfailover from {refused} ({found.kind}): refused at {found.refused_at:.2f}s, "
        f"re-planned at {found.replanned_at}, machines running elsewhere "
        f"{found.to_running_s}s after the refusal (monitoring interval {INTERVAL_S:g}s); "
        f"{found.refusals} refusals"
    )
    return found


def test_a_deadline_job_refused_its_spot_type_runs_on_demand_within_one_interval(
    world: Ec2World,
) -> None:
    """Spot (``fast``) is the cheaper way to the deadline; EC2 has none: the step that
    hears of it buys on-demand ``small`` machines, which run before the next tick."""
    world.proxy.fail(
        "RunInstances",
        "InsufficientInstanceCapacity",
        status=500,
        match=refuse_type("c5.large"),
    )
    config = world.config(**SPOT_DEADLINE)
    run_dir = world.tmp / "run"
    proc = start_daemon(str(config), "--out", str(run_dir))
    out = finish(proc)
    assert proc.returncode == 0, out[-3000:]
    found = failover(run_dir, "fast")
    assert found.kind == "capacity"
    assert found.same_step, "the refusal was not planned around in the step that heard it"
    assert found.to_running_s is not None
    report = assert_deadline_end(run_dir, 12)
    assert {m["type"] for m in report["machines"]} == {"small"}
    assert {i["InstanceType"] for i in world.instances(run_id_of(run_dir))} == {"t3.micro"}
    (outcome,) = report["jobs"]
    assert outcome["tasks_late"] == 0


def test_a_subnet_without_capacity_sends_every_launch_to_the_other_zone(
    world: Ec2World,
) -> None:
    """EC2 has no capacity in the first subnet for any type: each launch's share there
    goes to the second subnet in the same call, so the run never hears of a refusal and
    finishes in time; the report says which zone each machine ran in."""
    config = world.config(**SPOT_DEADLINE)
    first, second = yaml.safe_load(config.read_text(encoding="utf-8"))["ec2"]["subnets"]
    world.proxy.fail(
        "RunInstances",
        "InsufficientInstanceCapacity",
        status=500,
        match=lambda params: params.get("SubnetId") == [first],
    )
    run_dir = world.tmp / "run"
    proc = start_daemon(str(config), "--out", str(run_dir))
    out = finish(proc)
    assert proc.returncode == 0, out[-3000:]
    report = assert_deadline_end(run_dir, 12)
    (outcome,) = report["jobs"]
    assert outcome["tasks_late"] == 0
    assert any(r.injected for r in world.proxy.requests("RunInstances"))
    assert not journal_rows(run_dir, "LaunchFailed")
    instances = world.instances(run_id_of(run_dir))
    assert instances
    assert {i["SubnetId"] for i in instances} == {second}
    zone = {s["SubnetId"]: s["AvailabilityZone"] for s in world.ec2.describe_subnets()["Subnets"]}
    assert {m["zone"] for m in report["machines"]} == {zone[second]}
    table = (run_dir / "report.md").read_text(encoding="utf-8").split("## Machines")[1]
    assert "| machine | type | zone |" in table
    assert all(f"| {m['id']} | {m['type']} | {zone[second]} |" in table for m in report["machines"])


@pytest.mark.long(2)
def test_a_spot_type_refused_after_sampling_is_replanned_onto_on_demand_at_once(
    world: Ec2World,
) -> None:
    """Budget mode: after sampling (8 machines of each type) the plan wants more spot
    ``fast``; EC2 has no more: the step that hears of it plans more on-demand
    ``small`` instead. Every task is done once; the committed money stays within the
    budget throughout."""
    budget = SPOT_BUDGET["constraint"]["budget"]
    world.proxy.fail(
        "RunInstances",
        "InsufficientInstanceCapacity",
        status=500,
        match=refuse_type("c5.large", after=2),  # sampling's launch: 4 in each subnet
    )
    n = SPOT_BUDGET_TASKS
    config = world.config(**SPOT_BUDGET)
    run_dir = world.tmp / "run"
    proc = start_daemon(str(config), "--out", str(run_dir))
    out = finish(proc, timeout=400)
    assert proc.returncode == 0, out[-3000:]
    found = failover(run_dir, "fast")
    assert found.kind == "capacity"
    assert found.same_step, "the refusal was not planned around in the step that heard it"
    assert found.to_running_s is not None
    plans = [d for _, _, d in journal_rows(run_dir, "Configure") if "unavailable" in d["reason"]]
    assert plans
    assert plans[0]["counts"]["small"] > 8
    check_every_task_once(run_dir, n)
    assert max(committed_over_time(run_dir)) <= budget + 1e-9
    assert not world.running(run_id_of(run_dir))


# --- EC2 in two regions: two providers of kind ec2 in one config ------------------------------


@pytest.mark.parametrize(
    ("code", "kind"),
    [("InsufficientInstanceCapacity", "capacity"), ("VcpuLimitExceeded", "limit")],
)
@pytest.mark.long
def test_one_region_refusing_capacity_or_quota_fails_over_to_the_other_region(
    world: Ec2World, code: str, kind: str
) -> None:
    """us-east-1 refuses every launch (no capacity; or the account's vCPU quota there):
    the step that hears of it buys the job's machines in us-west-2, which run before
    the next tick; the job is done in time, every task once, nothing left running."""
    world.proxy.fail(
        "RunInstances", code, status=500, match=refuse_type("t3.micro", region="us-east-1")
    )
    run_dir = world.tmp / "run"
    proc = start_daemon(str(two_regions(world)), "--out", str(run_dir))
    out = finish(proc)
    assert proc.returncode == 0, out[-3000:]
    found = failover(run_dir, "use1")
    assert found.kind == kind
    assert found.same_step, "the refusal was not planned around in the step that heard it"
    assert found.to_running_s is not None
    report = assert_deadline_end(run_dir, 12)
    assert {(m["type"], m["provider"]) for m in report["machines"]} == {("usw2", "west")}
    (outcome,) = report["jobs"]
    assert outcome["tasks_late"] == 0
    run_id = run_id_of(run_dir)
    assert not world.instances(run_id), "an instance was started in the refusing region"
    west_ec2 = boto3.client("ec2", endpoint_url=world.moto.endpoint, region_name=WEST)
    west = dataclasses.replace(world, ec2=west_ec2)
    assert west.instances(run_id)
    assert not west.running(run_id)
