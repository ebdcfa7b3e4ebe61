"""Failover scenarios on the EC2 world: a type (or a region) refused by the fault proxy,
the run configs that meet it, and what a run did about it, read from its journal.

Shared by ``test_failover.py`` and ``benchmarks/failover.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import yaml

from tests.integration.ec2_faults import REGION, Params

if TYPE_CHECKING:
    from tests.integration.ec2_world import Ec2World


# --- failover scenarios: a type refused, and what the run did about it -------------------------


def refuse_type(
    instance_type: str, after: int = 0, region: str | None = None
) -> Callable[[Params], bool]:
    """A rule's match: RunInstances of ``instance_type`` (in ``region``) after its
    first ``after``."""
    seen = [0]

    def match(params: Params) -> bool:
        if params.get("InstanceType") != [instance_type]:
            return False
        if region is not None and params.get(REGION) != [region]:
            return False
        seen[0] += 1
        return seen[0] > after

    return match


SPOT_DEADLINE: dict[str, Any] = {
    "bag": None,
    "constraint": None,
    "jobs": [
        {
            "name": "sweep",
            "bag": {"synthetic": 12},
            "constraint": {"deadline_s": 40},
            "task_s": {"small": 3, "fast": 1.5},
        }
    ],
    "machine_types": [
        {"name": "small", "price": 2, "max_count": 3, "boot_s": 5},
        {"name": "fast", "price": 1, "max_count": 3, "boot_s": 5},
    ],
}
"""``Ec2World.config`` overrides: a deadline job for which spot ``fast`` (c5.large) is
the cheaper way to the deadline, on-demand ``small`` (t3.micro) the other."""

SPOT_BUDGET_TASKS = 300
SPOT_BUDGET: dict[str, Any] = {
    "bag": {"synthetic": SPOT_BUDGET_TASKS},
    "constraint": {"budget": 80.0},
    "machine_types": [
        {"name": "small", "price": 1, "max_count": 12, "boot_s": 5},
        {"name": "fast", "price": 3, "max_count": 10, "boot_s": 5},
    ],
    "sampling": {"delta": 0.5},  # n = 8, iw = 8
    "emulator": {"runtime": {"dist": "normal", "mean_s": 6, "sd_s": 1}},
}
"""``Ec2World.config`` overrides: a budget run whose bag outlasts one ATU, so that after
sampling (8 machines of each type) the plan wants more of spot ``fast``."""


WEST = "us-west-2"


def two_regions(world: Ec2World) -> Path:
    """The deadline job on two providers of kind ec2: ``east`` (us-east-1, type
    ``use1``, the cheaper) and ``west`` (us-west-2, type ``usw2``), the same instance
    type in each; one moto server answers both regions."""
    data = yaml.safe_load(world.config(**SPOT_DEADLINE).read_text(encoding="utf-8"))
    east = data.pop("ec2")
    data.pop("provider")
    west_ec2 = boto3.client("ec2", endpoint_url=world.moto.endpoint, region_name=WEST)
    west = {
        **east,
        "region": WEST,
        "ami": west_ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"],
        "subnets": [s["SubnetId"] for s in west_ec2.describe_subnets()["Subnets"]][:2],
        "types": {"usw2": {"instance_type": "t3.micro"}},
    }
    east["types"] = {"use1": {"instance_type": "t3.micro"}}
    data["providers"] = {"east": {"kind": "ec2", **east}, "west": {"kind": "ec2", **west}}
    data["machine_types"] = [
        {"name": "use1", "price": 1, "max_count": 3, "boot_s": 5, "provider": "east"},
        {"name": "usw2", "price": 2, "max_count": 3, "boot_s": 5, "provider": "west"},
    ]
    data["jobs"][0]["task_s"] = {"use1": 3, "usw2": 3}
    data["emulator"]["speed"] = {"use1": 1, "usw2": 1}
    path = world.tmp / "two-regions.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


# --- what a run did about a refusal, from its journal ------------------------------------------

JournalRow = tuple[float, str, dict[str, Any]]  # (run time, record type, its fields)


@dataclass(frozen=True)
class Failover:
    """How a run answered the first refused launch of ``refused``, in run seconds.

    ``replanned_at``: the first launch of another type decided after the refusal (the
    same step: ``replanned_at == refused_at``); ``running_at``: the first machine of
    such a launch ready (its agent took work). None: it never happened."""

    refused: str
    kind: str  # what the run made of the refusal (capacity, limit, error, ...)
    refused_at: float
    replanned_at: float | None
    running_at: float | None
    refusals: int  # launches of ``refused`` refused in the whole run

    @property
    def same_step(self) -> bool:
        return self.replanned_at == self.refused_at

    @property
    def to_running_s(self) -> float | None:
        return None if self.running_at is None else self.running_at - self.refused_at


def failover_of(rows: list[JournalRow], refused: str) -> Failover | None:
    """The run's answer to its first refused launch of type ``refused`` (None: none)."""
    first = next(
        (i for i, (_, ty, d) in enumerate(rows) if ty == "LaunchFailed" and d["type"] == refused),
        None,
    )
    if first is None:
        return None
    t0, _, failed = rows[first]
    after = rows[first + 1 :]
    tokens = {d["token"]: t for t, ty, d in after if ty == "Launch" and d["type"] != refused}
    replanned = min(tokens.values(), default=None)
    machines = {
        d["machine"] for _, ty, d in after if ty == "MachineLaunched" and d["token"] in tokens
    }
    ready = (t for t, ty, d in after if ty == "MachineReady" and d["machine"] in machines)
    running = next(ready, None)
    count = sum(1 for _, ty, d in rows if ty == "LaunchFailed" and d["type"] == refused)
    return Failover(refused, str(failed.get("kind")), t0, replanned, running, count)
