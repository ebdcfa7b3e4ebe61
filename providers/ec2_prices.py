"""On-demand EC2 prices from the AWS Pricing API, for ``ec2.lookup_prices: true``.

``lookup_prices`` asks GetProducts for each machine type's on-demand Linux price;
``parse_price`` reads the answer's ``PriceList``. The client comes from
``providers/aws.py`` (``pricing_client``), the one module that imports boto3 and owns its
sessions and retry settings; botocore's errors come out as ``AutoscalerError`` through its
``aws_errors``. Tested in ``tests/unit/test_ec2_pricing.py`` on a recorded response.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from autoscaler.providers.aws import aws_errors, pricing_client

if TYPE_CHECKING:
    from mypy_boto3_pricing import PricingClient


def parse_price(price_list: Sequence[str]) -> float | None:
    """USD per hour from the Pricing API's ``PriceList`` (JSON strings), OnDemand terms.

    The filters of ``lookup_prices`` leave one product per type; should more remain
    (a new attribute splitting a product in two), the highest hourly price is taken,
    so a budget planned on it is not overrun. None when no hourly USD price is there.
    """
    prices = []
    for raw in price_list:
        item = json.loads(raw)
        for term in item.get("terms", {}).get("OnDemand", {}).values():
            for dim in term.get("priceDimensions", {}).values():
                usd = dim.get("pricePerUnit", {}).get("USD")
                if usd is None or dim.get("unit", "Hrs") not in ("Hrs", "Hours"):
                    continue
                value = float(usd)
                if value > 0:
                    prices.append(value)
    return max(prices) if prices else None


def _price_filters(instance_type: str, region: str) -> list[dict[str, str]]:
    fields = {
        "instanceType": instance_type,
        "regionCode": region,
        "operatingSystem": "Linux",
        "tenancy": "Shared",
        "preInstalledSw": "NA",
        "capacitystatus": "Used",
    }
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in fields.items()]


def lookup_prices(
    instance_types: Sequence[str],
    region: str,
    endpoint_url: str | None = None,
    *,
    client: PricingClient | None = None,
) -> dict[str, float]:
    """On-demand Linux USD per hour for each type in ``region``, from the Pricing API.

    The API lives in us-east-1 whatever region it prices. A type with no price is left
    out of the answer (the caller names it). ``client`` replaces the one made here.
    """
    if client is None:
        client = pricing_client(endpoint_url)
    out: dict[str, float] = {}
    for itype in dict.fromkeys(instance_types):
        price_list: list[str] = []
        kwargs: dict[str, Any] = {
            "ServiceCode": "AmazonEC2",
            "Filters": _price_filters(itype, region),
            "FormatVersion": "aws_v1",
            "MaxResults": 100,
        }
        with aws_errors(f"looking up the price of {itype} in {region}"):
            while True:
                reply = client.get_products(**kwargs)
                price_list += reply.get("PriceList", [])
                next_token = reply.get("NextToken")
                if not next_token:
                    break
                kwargs["NextToken"] = next_token
        price = parse_price(price_list)
        if price is not None:
            out[itype] = price
    return out
