"""EC2's spot price history (``ec2.spot_prices: market``): the request, the parser and the
price per type over time, on handmade DescribeSpotPriceHistory answers.

botocore's ``Stubber`` answers for the remote side, so no network, credentials or moto
are needed; botocore still builds and validates the request and the response against
EC2's model. (moto's own answer is tested in tests/integration/test_ec2_market.py.)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.ec2_market import (
    SpotRecord,
    parse_history,
    spot_price_history,
    subnet_zones,
    type_prices,
)

T0 = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


def ec2_client() -> Any:
    return boto3.client(
        "ec2",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def line(itype: str, zone: str, minutes: int, price: str) -> dict[str, Any]:
    """One SpotPriceHistory item as EC2 sends it."""
    return {
        "AvailabilityZone": zone,
        "InstanceType": itype,
        "ProductDescription": "Linux/UNIX",
        "SpotPrice": price,
        "Timestamp": T0 + timedelta(minutes=minutes),
    }


def test_the_request_names_the_types_linux_and_the_window_and_follows_next_token() -> None:
    client = ec2_client()
    start, end = T0, T0 + timedelta(minutes=5)
    asked = {
        "InstanceTypes": ["c5.large", "t3.micro"],
        "ProductDescriptions": ["Linux/UNIX"],
        "StartTime": start,
        "EndTime": end,
    }
    with Stubber(client) as stub:
        stub.add_response(
            "describe_spot_price_history",
            {"SpotPriceHistory": [line("c5.large", "us-east-1a", -30, "0.0310")], "NextToken": "n"},
            asked,
        )
        stub.add_response(
            "describe_spot_price_history",
            {"SpotPriceHistory": [line("t3.micro", "us-east-1b", 2, "0.0031")], "NextToken": ""},
            {**asked, "NextToken": "n"},
        )
        records = spot_price_history(client, ["c5.large", "t3.micro"], start, end)
        stub.assert_no_pending_responses()
    assert [(r.instance_type, r.zone, r.usd_per_hour) for r in records] == [
        ("c5.large", "us-east-1a", 0.031),
        ("t3.micro", "us-east-1b", 0.0031),
    ]


def test_an_error_comes_out_as_ours_with_the_aws_code() -> None:
    client = ec2_client()
    with Stubber(client) as stub:
        stub.add_client_error(
            "describe_spot_price_history", "UnauthorizedOperation", "not allowed", 403
        )
        with pytest.raises(AutoscalerError) as err:
            spot_price_history(client, ["c5.large"], T0, T0)
    assert err.value.code == "UnauthorizedOperation"
    assert "spot price history of c5.large" in err.value.message


def test_parse_orders_by_time_and_leaves_out_lines_without_a_price() -> None:
    items = [
        line("c5.large", "us-east-1a", 10, "0.04"),
        line("c5.large", "us-east-1a", 0, "0.03"),
        {"InstanceType": "c5.large", "AvailabilityZone": "us-east-1a", "Timestamp": T0},
    ]
    assert [r.usd_per_hour for r in parse_history(items)] == [0.03, 0.04]


def test_a_type_costs_the_highest_price_in_force_among_its_zones() -> None:
    records = parse_history(
        [
            line("c5.large", "us-east-1a", 0, "0.030"),
            line("c5.large", "us-east-1b", 0, "0.035"),
            line("c5.large", "us-east-1a", 10, "0.050"),  # a rises above b
            line("c5.large", "us-east-1a", 20, "0.020"),  # a falls: b's is the highest
            line("c5.large", "us-east-1b", 30, "0.035"),  # b again, unchanged: no change
            line("t3.micro", "us-east-1a", 5, "0.004"),
        ]
    )
    series = type_prices(records)
    assert series["c5.large"] == [
        (T0, 0.035),
        (T0 + timedelta(minutes=10), 0.05),
        (T0 + timedelta(minutes=20), 0.035),
    ]
    assert series["t3.micro"] == [(T0 + timedelta(minutes=5), 0.004)]


def test_only_the_zones_of_the_subnets_price_a_type() -> None:
    """A zone none of the run's subnets is in cannot take its machines: its price is
    left out (us-east-1c's 0.09 here)."""
    records = parse_history(
        [
            line("c5.large", "us-east-1a", 0, "0.030"),
            line("c5.large", "us-east-1c", 0, "0.090"),
            line("c5.large", "us-east-1b", 5, "0.040"),
        ]
    )
    series = type_prices(records, frozenset({"us-east-1a", "us-east-1b"}))
    assert series["c5.large"] == [(T0, 0.03), (T0 + timedelta(minutes=5), 0.04)]
    assert type_prices(records)["c5.large"] == [(T0, 0.09)]


def test_the_zones_of_the_subnets_are_asked_once() -> None:
    client = ec2_client()
    with Stubber(client) as stub:
        stub.add_response(
            "describe_subnets",
            {
                "Subnets": [
                    {"SubnetId": "subnet-a", "AvailabilityZone": "us-east-1a"},
                    {"SubnetId": "subnet-b", "AvailabilityZone": "us-east-1d"},
                ]
            },
            {"SubnetIds": ["subnet-a", "subnet-b"]},
        )
        assert subnet_zones(client, ["subnet-a", "subnet-b"]) == {
            "subnet-a": "us-east-1a",
            "subnet-b": "us-east-1d",
        }


def test_no_line_no_price() -> None:
    assert type_prices([]) == {}
    assert type_prices([SpotRecord("c5.large", "us-east-1a", T0, 0.03)]) == {
        "c5.large": [(T0, 0.03)]
    }
