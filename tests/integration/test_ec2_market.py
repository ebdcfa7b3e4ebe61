"""The spot market against a moto server (issue 37 §1): ``ec2.spot_prices: market``.

moto answers DescribeSpotPriceHistory with one line per zone that offers the instance
type, each at $0.00001 an hour dated 2006 (a price set long ago, still in force): the
provider's reading, and a whole run through the CLI whose planners and report take
their spot price from it, are checked against that answer. The requests are read off
``FaultProxy`` in front of moto, which forwards them untouched.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from autoscaler.core.billing import BillingModel
from autoscaler.providers.base import Capabilities
from autoscaler.providers.ec2 import Ec2Provider, Ec2Settings, InstanceSpec
from tests.integration.daemon_helpers import committed_over_time, journal_rows, start_daemon
from tests.integration.ec2_faults import FaultProxy
from tests.integration.ec2_world import BUDGET, N_TASKS, Ec2World
from tests.integration.services import MotoServer, fake_aws_credentials
from tests.integration.test_ec2_daemon import finish

pytestmark = pytest.mark.integration

MOTO_PRICE = 0.00001  # USD an hour: what moto says every spot price is
NOW = 5000.0  # the driver's clock


def _provider(endpoint: str, market: bool, atu_s: float = 60.0) -> Ec2Provider:
    settings = Ec2Settings(
        region="us-east-1",
        ami="ami-12c6146b",
        instances={
            "small": InstanceSpec("t3.micro"),
            "cheap": InstanceSpec("c5.large", spot=True, max_price=0.09),
        },
        endpoint_url=endpoint,
        spot_market=market,
    )
    caps = Capabilities(billing=BillingModel("per_second", atu_s), spot=True)
    return Ec2Provider(caps, "run-market", settings, lambda: NOW)


def test_the_provider_reads_each_spot_type_s_price_per_atu_from_the_history(
    moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_aws_credentials(monkeypatch)
    moto.reset()
    with FaultProxy(moto.endpoint) as proxy:
        provider = _provider(proxy.endpoint, market=True)
        assert provider.market_types() == ("cheap",)
        points = provider.spot_prices(None, NOW)
        [request] = proxy.requests("DescribeSpotPriceHistory")
        assert not proxy.requests("DescribeSubnets")  # no subnets: every zone
    # The price in force (dated when moto set it, long before the run) for the one spot
    # type, at the hour's price scaled to the 60 s ATU; the on-demand type is not asked.
    assert [p.type for p in points] == ["cheap"]
    assert points[0].price == pytest.approx(MOTO_PRICE * 60 / 3600)
    assert points[0].at < 0
    params = {k: v[0] for k, v in request.params.items()}
    assert params["InstanceType.1"] == "c5.large"
    assert "InstanceType.2" not in params
    assert params["ProductDescription.1"] == "Linux/UNIX"
    # moto's answer, as the parser sees it: one line per zone, the same price
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto.endpoint)
    lines = ec2.describe_spot_price_history(InstanceTypes=["c5.large"])["SpotPriceHistory"]
    assert len({line["AvailabilityZone"] for line in lines}) > 1
    assert {float(line["SpotPrice"]) for line in lines} == {MOTO_PRICE}


def test_without_the_market_nothing_is_asked(
    moto: MotoServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_aws_credentials(monkeypatch)
    with FaultProxy(moto.endpoint) as proxy:
        provider = _provider(proxy.endpoint, market=False)
        assert provider.market_types() == ()
        assert provider.spot_prices(None, NOW) == []
        assert not proxy.requests("DescribeSpotPriceHistory")


def _market_run(world: Ec2World) -> tuple[Path, dict[str, Any]]:
    """The EC2 world's run with ``spot_prices: market``, to its end: its directory and
    report (every task done)."""
    run_dir = world.tmp / "run"
    proc = start_daemon(str(world.config(ec2={"spot_prices": "market"})), "--out", str(run_dir))
    out = finish(proc)
    assert proc.returncode == 0, out[-3000:]
    report: dict[str, Any] = json.loads((run_dir / "report.json").read_text())
    assert report["tasks_done"] == N_TASKS
    return run_dir, report


def test_a_run_on_the_spot_market_plans_and_bills_at_its_prices(world: Ec2World) -> None:
    """A run of the EC2 world (small on-demand at 1, fast spot capped at 3 an ATU) with
    ``spot_prices: market``: the market is read at the start and every monitoring
    interval, journaled; the fast type's price becomes moto's, its spot requests go out
    with the cap as MaxPrice, the budget holds, and the report bills its machines at the
    market's price and says where it came from."""
    run_dir, report = _market_run(world)
    seen = journal_rows(run_dir, "PricesSeen")
    assert seen
    assert seen[0][0] == pytest.approx(0.0, abs=5.0)
    assert seen[0][2]["types"] == ["fast"]
    per_atu = MOTO_PRICE * 60 / 3600  # the world's ATU is 60 s
    assert seen[0][2]["prices"] == [pytest.approx(per_atu)]
    assert world.proxy.requests("DescribeSpotPriceHistory")
    [subnets] = world.proxy.requests("DescribeSubnets")  # the subnets' zones, asked once
    asked = {k: v[0] for k, v in subnets.params.items()}
    assert {asked["SubnetId.1"], asked["SubnetId.2"]} == set(
        yaml.safe_load((run_dir / "config.yaml").read_text())["ec2"]["subnets"]
    )

    spot = report["spot_prices"]
    assert spot["source"] == "market"
    assert spot["refreshes"] == len(seen)
    fast = spot["types"]["fast"]
    assert fast["cap"] == 3.0
    assert fast["last_price"] == pytest.approx(per_atu)
    fast_machines = [m for m in report["machines"] if m["type"] == "fast"]
    assert fast_machines, "the planners did not buy the spot type at a fraction of a cent"
    assert fast["billed"] == pytest.approx(sum(m["cost"] for m in fast_machines))
    assert fast["billed"] < 0.01 < fast["at_cap"]
    committed = committed_over_time(run_dir)  # the journal replayed, prices and all
    assert max(committed) <= BUDGET + 1e-9
    assert committed[-1] == pytest.approx(report["committed"])
    assert report["cost"] <= report["committed"] + 1e-9
    assert "Spot prices: EC2's spot price history" in (run_dir / "report.md").read_text()

    spot_launches = [
        {k: v[0] for k, v in s.params.items()}
        for s in world.proxy.requests("RunInstances")
        if s.params.get("InstanceMarketOptions.MarketType") == ["spot"]
    ]
    assert spot_launches
    for params in spot_launches:  # the cap, 3 an ATU of 60 s, as USD an hour
        assert float(params["InstanceMarketOptions.SpotOptions.MaxPrice"]) == pytest.approx(180.0)
    assert not world.running(report["run_id"])


def test_a_market_that_does_not_answer_leaves_the_spot_type_at_its_cap(world: Ec2World) -> None:
    """DescribeSpotPriceHistory refused every time (a policy without the permission):
    each failed reading is logged, nothing is journaled, the run finishes within budget
    with its spot machines committed and billed at the cap, and the report says no
    market price was read."""
    world.proxy.fail("DescribeSpotPriceHistory", "UnauthorizedOperation", status=403)
    run_dir, report = _market_run(world)
    assert not journal_rows(run_dir, "PricesSeen")
    assert world.proxy.requests("DescribeSpotPriceHistory")
    log = (run_dir / "log.jsonl").read_text()
    assert '"spot prices not read"' in log
    assert "UnauthorizedOperation" in log
    spot = report["spot_prices"]
    assert spot["source"] == "config"
    assert spot["refreshes"] == 0
    fast = spot["types"]["fast"]
    assert fast["last_price"] is None
    assert fast["billed"] == fast["at_cap"]
    assert max(committed_over_time(run_dir)) <= BUDGET + 1e-9
    assert "no market price was read" in (run_dir / "report.md").read_text()


EXAMPLE = Path(__file__).resolve().parents[2] / "config" / "examples" / "spot_market.yaml"


def test_the_spot_market_example_runs_against_moto(world: Ec2World) -> None:
    """``config/examples/spot_market.yaml`` as a user runs it on EC2, pointed at moto:
    its types (on-demand ``od`` and spot ``spot``, the same c5.large), per-second
    billing, budget and ``spot_prices: market`` kept; what only a real account has (AMI,
    subnets, key, security group, profile, SSH) taken from the world, the bag a few
    synthetic tasks, the type limits and boot times this machine can run. The run reads
    the market, runs its spot type at moto's price, bills it per second at that price,
    stays within budget and leaves no instance running."""
    example = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert example["ec2"]["spot_prices"] == "market"
    ours = yaml.safe_load(world.config().read_text(encoding="utf-8"))
    data = {
        **example,
        "bag": {"synthetic": 12},
        "plots": False,
        "monitoring_interval_s": 10,
        "daemon": ours["daemon"],
        "emulator": {**ours["emulator"], "speed": {"od": 1, "spot": 1}},
    }
    data["machine_types"] = [{**t, "max_count": 3, "boot_s": 5} for t in example["machine_types"]]
    kept = {"region", "spot_prices", "types", "bootstrap", "address"}
    data["ec2"] = {
        **{k: v for k, v in example["ec2"].items() if k in kept},
        **{k: v for k, v in ours["ec2"].items() if k not in kept},
    }
    path = world.tmp / "spot_market.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    run_dir = world.tmp / "example"
    proc = start_daemon(str(path), "--out", str(run_dir))
    out = finish(proc)
    assert proc.returncode == 0, out[-3000:]
    report: dict[str, Any] = json.loads((run_dir / "report.json").read_text())
    assert report["tasks_done"] == 12
    seen = journal_rows(run_dir, "PricesSeen")
    assert seen
    assert seen[0][2]["types"] == ["spot"]
    per_atu = MOTO_PRICE  # the example's ATU is an hour: moto's hourly price as it is
    assert seen[0][2]["prices"] == [pytest.approx(per_atu)]
    spot = report["spot_prices"]
    assert spot["source"] == "market"
    assert spot["types"]["spot"]["cap"] == pytest.approx(0.085)
    spot_machines = [m for m in report["machines"] if m["type"] == "spot"]
    assert spot_machines, "the planners did not buy the spot type at a fraction of a cent"
    assert spot["types"]["spot"]["billed"] == pytest.approx(sum(m["cost"] for m in spot_machines))
    assert max(committed_over_time(run_dir)) <= example["constraint"]["budget"] + 1e-9
    assert report["cost"] <= report["committed"] + 1e-9
    assert not world.running(report["run_id"])
