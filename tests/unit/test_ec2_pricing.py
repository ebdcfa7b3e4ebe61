"""Prices from the AWS Pricing API: the parser, and the lookup through a real boto3 client.

``data/pricing_t3_micro.json`` is a GetProducts response in the exact shape AWS sends
(``PriceList`` holds JSON strings; OnDemand and Reserved terms side by side), for t3.micro
Linux in us-east-1 at its published $0.0104 an hour. botocore's ``Stubber`` answers for
the remote side, so no network, credentials or moto are needed; botocore still builds
and validates the request and the response against the Pricing API's model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.ec2_prices import lookup_prices, parse_price

DATA = Path(__file__).parent / "data"


def recorded() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DATA / "pricing_t3_micro.json").read_text())
    return data


def pricing_client() -> Any:
    return boto3.client(
        "pricing",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def request(instance_type: str, region: str, **extra: Any) -> dict[str, Any]:
    """The GetProducts request lookup_prices must send for one type."""
    fields = [
        ("instanceType", instance_type),
        ("regionCode", region),
        ("operatingSystem", "Linux"),
        ("tenancy", "Shared"),
        ("preInstalledSw", "NA"),
        ("capacitystatus", "Used"),
    ]
    return {
        "ServiceCode": "AmazonEC2",
        "Filters": [{"Type": "TERM_MATCH", "Field": f, "Value": v} for f, v in fields],
        "FormatVersion": "aws_v1",
        "MaxResults": 100,
        **extra,
    }


def product(*prices: tuple[str, str], term: str = "OnDemand") -> str:
    """A PriceList item with one term of the given (unit, USD) price dimensions."""
    dims = {
        f"SKU.TERM.{i}": {"unit": unit, "pricePerUnit": {"USD": usd}}
        for i, (unit, usd) in enumerate(prices)
    }
    item = {"product": {"attributes": {}}, "terms": {term: {"SKU.TERM": {"priceDimensions": dims}}}}
    return json.dumps(item)


# --- parse_price --------------------------------------------------------------------------


def test_parse_price_reads_the_on_demand_hourly_price_not_the_reserved_ones() -> None:
    assert parse_price(recorded()["PriceList"]) == pytest.approx(0.0104)


def test_parse_price_without_an_hourly_usd_price_is_none() -> None:
    assert parse_price([]) is None
    assert parse_price([product(("Hrs", "0.0000000000"))]) is None
    assert parse_price([product(("Quantity", "53"))]) is None
    assert parse_price([product(("Hrs", "0.5"), term="Reserved")]) is None


def test_parse_price_takes_the_highest_when_several_products_remain() -> None:
    # A budget planned on the dearer of two look-alike products is not overrun.
    assert parse_price([product(("Hrs", "0.0104")), product(("Hrs", "0.0208"))]) == 0.0208


# --- lookup_prices ------------------------------------------------------------------------


def test_lookup_prices_asks_for_each_type_with_the_filters_and_leaves_out_the_unpriced() -> None:
    client = pricing_client()
    with Stubber(client) as stub:
        stub.add_response("get_products", recorded(), request("t3.micro", "us-east-1"))
        stub.add_response(
            "get_products",
            {"FormatVersion": "aws_v1", "PriceList": []},
            request("x9.nonesuch", "us-east-1"),
        )
        prices = lookup_prices(["t3.micro", "x9.nonesuch", "t3.micro"], "us-east-1", client=client)
        stub.assert_no_pending_responses()
    assert prices == {"t3.micro": pytest.approx(0.0104)}


def test_lookup_prices_follows_next_token() -> None:
    client = pricing_client()
    first = {"FormatVersion": "aws_v1", "PriceList": [], "NextToken": "page-2"}
    with Stubber(client) as stub:
        stub.add_response("get_products", first, request("t3.micro", "eu-west-1"))
        stub.add_response(
            "get_products", recorded(), request("t3.micro", "eu-west-1", NextToken="page-2")
        )
        prices = lookup_prices(["t3.micro"], "eu-west-1", client=client)
        stub.assert_no_pending_responses()
    assert prices == {"t3.micro": pytest.approx(0.0104)}


def test_a_pricing_api_error_is_ours_with_the_aws_code() -> None:
    client = pricing_client()
    with Stubber(client) as stub:
        stub.add_client_error(
            "get_products",
            service_error_code="ThrottlingException",
            service_message="Rate exceeded",
            http_status_code=400,
            expected_params=request("t3.micro", "us-east-1"),
        )
        with pytest.raises(AutoscalerError) as info:
            lookup_prices(["t3.micro"], "us-east-1", client=client)
    assert info.value.code == "ThrottlingException"
    assert info.value.retryable
    assert "t3.micro" in info.value.message
    assert "Rate exceeded" in info.value.message
