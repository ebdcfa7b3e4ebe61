"""Spot prices from EC2's spot price history, for ``ec2.spot_prices: market``.

``spot_price_history`` asks DescribeSpotPriceHistory (Linux/UNIX) for the instance
types' price changes in a window, in every zone of the region; ``type_prices`` turns
them into one price per instance type over time: at each change, the highest price in
force among the zones of the run's subnets (every zone without subnets): a launch walks
the subnets' pools and may land in any of their zones, so a plan or a bill made on the highest
is never short. ``subnet_zones`` finds the subnets' zones; ``latest_prices`` the price
in force in each zone, which orders a spot launch's pools (``ec2_pools``). The client
is ``providers/aws.py``'s; its errors come out as ``AutoscalerError`` (``aws_errors``).
Tested in ``tests/unit/test_ec2_market.py`` on handmade answers and in
``tests/integration/test_ec2_market.py`` against moto.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from autoscaler.providers.aws import aws_errors

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client

PRODUCT = "Linux/UNIX"
"""The product whose spot prices are read: Linux instances (in a VPC, as ours are)."""


@dataclass(frozen=True, slots=True)
class SpotRecord:
    """One line of EC2's spot price history."""

    instance_type: str
    zone: str
    at: datetime  # when the price took effect
    usd_per_hour: float


def parse_history(items: Iterable[Any]) -> list[SpotRecord]:
    """The records of DescribeSpotPriceHistory's ``SpotPriceHistory``, oldest first; a
    line without a price or a time is left out."""
    out = []
    for item in items:
        price, at = item.get("SpotPrice"), item.get("Timestamp")
        if price is None or not isinstance(at, datetime):
            continue
        out.append(
            SpotRecord(
                str(item.get("InstanceType", "")),
                str(item.get("AvailabilityZone", "")),
                at,
                float(price),
            )
        )
    return sorted(out, key=lambda r: r.at)


def type_prices(
    records: Sequence[SpotRecord], zones: Collection[str] = ()
) -> dict[str, list[tuple[datetime, float]]]:
    """Per instance type, its price over time: at each change in any of ``zones`` (none
    given: every zone), the highest price then in force among those zones that have one
    (oldest first, changes only)."""
    out: dict[str, list[tuple[datetime, float]]] = {}
    in_force: dict[str, dict[str, float]] = {}
    for r in sorted(records, key=lambda r: r.at):
        if zones and r.zone not in zones:
            continue
        by_zone = in_force.setdefault(r.instance_type, {})
        by_zone[r.zone] = r.usd_per_hour
        price = max(by_zone.values())
        series = out.setdefault(r.instance_type, [])
        if series and series[-1][0] == r.at:
            series[-1] = (r.at, price)
        elif not series or series[-1][1] != price:
            series.append((r.at, price))
    return out


def spot_price_history(
    client: EC2Client, instance_types: Sequence[str], start: datetime, end: datetime
) -> list[SpotRecord]:
    """The price changes of ``instance_types`` between ``start`` and ``end``, in every
    zone of the client's region, with the price in force at ``start`` (EC2 includes it,
    dated when it was set)."""
    records: list[SpotRecord] = []
    what = f"reading the spot price history of {', '.join(instance_types)}"
    with aws_errors(what):
        pages = client.get_paginator("describe_spot_price_history").paginate(
            InstanceTypes=list(instance_types),  # type: ignore[arg-type]
            ProductDescriptions=[PRODUCT],
            StartTime=start,
            EndTime=end,
        )
        for page in pages:
            records += parse_history(page.get("SpotPriceHistory", []))
    return records


def subnet_zones(client: EC2Client, subnets: Sequence[str]) -> dict[str, str]:
    """The availability zone of each of ``subnets`` (DescribeSubnets)."""
    with aws_errors(f"finding the zones of subnets {', '.join(subnets)}"):
        reply = client.describe_subnets(SubnetIds=list(subnets))
    return {s["SubnetId"]: s["AvailabilityZone"] for s in reply.get("Subnets", [])}


def latest_prices(records: Iterable[SpotRecord]) -> dict[tuple[str, str], float]:
    """The last price of each (instance type, zone) among ``records``: what a launch into
    that zone's pool pays now (``ec2_pools`` puts a launch in the cheapest)."""
    return {(r.instance_type, r.zone): r.usd_per_hour for r in sorted(records, key=lambda r: r.at)}
