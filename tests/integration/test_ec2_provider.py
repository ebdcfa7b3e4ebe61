"""The EC2 provider against a real moto server process (boto3 talks HTTP to it).

What moto cannot do (throttling, capacity and limit errors) comes from ``FaultProxy``,
an HTTP proxy in front of moto that answers chosen requests with EC2's error response:
the remote side is faked, botocore's retries and our handling of the answer run for real.
No test connects to an address an instance reports; they only compare them.
"""

from __future__ import annotations

import base64
import http.client
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from autoscaler.bootstrap.agent_start import agent_source
from autoscaler.bootstrap.userdata import render_user_data
from autoscaler.config.schema import Emulator as SimEmulator
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import Launch, LaunchFailed
from autoscaler.providers.base import (
    Capabilities,
    MachineRecord,
    PartialLaunch,
    ProviderState,
    check_launch,
    failure_kind,
)
from autoscaler.providers.cost_tags import COST_TAG_KEYS, JOB_TAG, PROJECT_TAG, USER_TAG, CostTags
from autoscaler.providers.ec2 import (
    LAUNCH_TAG,
    RUN_TAG,
    TAG_KEYS,
    TYPE_TAG,
    Ec2Provider,
    Ec2Settings,
    InstanceSpec,
    client_token,
    list_tagged,
    terminate_instances,
)
from autoscaler.providers.ec2_pools import first_pool
from autoscaler.providers.sim import SimProvider
from autoscaler.run.refusals import Holds, refusal
from tests.integration.ec2_faults import FaultProxy, Params
from tests.integration.services import MotoServer, fake_aws_credentials

pytestmark = pytest.mark.integration

REGION = "us-east-1"
RUN = "run-ec2-1"
NOW = 1000.0  # the driver's clock in these tests
USER_DATA = "#cloud-config\nruncmd:\n  - [echo, hello]\n"


@dataclass
class Aws:
    """The moto account of one test: a raw client to arrange and inspect with."""

    endpoint: str  # moto's own
    proxy: FaultProxy  # in front of moto: EC2's MaxCount behaviour, and injected faults
    ec2: Any  # boto3 EC2 client, straight to moto
    ami: str
    subnets: list[str]  # default subnets, one per zone, in zone order

    def settings(self, endpoint: str | None = None, **fields: Any) -> Ec2Settings:
        return Ec2Settings(
            region=REGION,
            ami=self.ami,
            instances={
                "small": InstanceSpec("t3.micro"),
                "big": InstanceSpec("m5.large"),
                "cheap": InstanceSpec("t3.small", spot=True, max_price=0.05),
            },
            endpoint_url=endpoint or self.proxy.endpoint,
            **fields,
        )

    def provider(self, run_id: str = RUN, settings: Ec2Settings | None = None) -> Ec2Provider:
        caps = Capabilities(
            billing=BillingModel("fixed", 3600.0),
            spot=True,
            max_counts={"small": 4, "big": 2, "cheap": 2},
        )
        return Ec2Provider(caps, run_id, settings or self.settings(), lambda: NOW)

    def instance(self, iid: str) -> dict[str, Any]:
        reply = self.ec2.describe_instances(InstanceIds=[iid])
        instance: dict[str, Any] = reply["Reservations"][0]["Instances"][0]
        return instance

    def all_instances(self) -> list[dict[str, Any]]:
        pages = self.ec2.get_paginator("describe_instances").paginate()
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def tagged(self, run_id: str) -> list[dict[str, Any]]:
        return [i for i in self.all_instances() if tags(i).get(RUN_TAG) == run_id]

    def foreign(self, run_id: str | None) -> str:
        """An instance started directly with boto3: with another run's tag, or none."""
        extra: dict[str, Any] = {}
        if run_id is not None:
            extra["TagSpecifications"] = [
                {"ResourceType": "instance", "Tags": [{"Key": RUN_TAG, "Value": run_id}]}
            ]
        reply = self.ec2.run_instances(
            ImageId=self.ami, InstanceType="t3.micro", MinCount=1, MaxCount=1, **extra
        )
        iid: str = reply["Instances"][0]["InstanceId"]
        return iid


def tags(resource: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in resource.get("Tags", [])}


@pytest.fixture
def aws(moto: MotoServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[Aws]:
    fake_aws_credentials(monkeypatch)
    moto.reset()
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=moto.endpoint)
    ami = ec2.describe_images(Owners=["amazon"])["Images"][0]["ImageId"]
    subnets = sorted(ec2.describe_subnets()["Subnets"], key=lambda s: s["AvailabilityZone"])
    with FaultProxy(moto.endpoint) as proxy:
        yield Aws(moto.endpoint, proxy, ec2, ami, [s["SubnetId"] for s in subnets])


@pytest.fixture
def proxy(aws: Aws) -> FaultProxy:
    return aws.proxy


# --- launch -----------------------------------------------------------------------------


def test_launch_tags_instances_and_their_volumes_from_the_start(aws: Aws) -> None:
    provider = aws.provider()
    records = provider.launch("small", 2, "tok-1", {"team": "physics"})

    assert len(records) == 2
    assert {r.type for r in records} == {"small"}
    assert {r.token for r in records} == {"tok-1"}
    assert all(r.launched_at <= NOW for r in records)
    expected = {
        RUN_TAG: RUN,
        LAUNCH_TAG: "tok-1",
        TYPE_TAG: "small",
        "Name": f"autoscaler {RUN} small",
        "team": "physics",
    }
    for rec in records:
        instance = aws.instance(rec.id)
        assert instance["InstanceType"] == "t3.micro"
        assert instance["ImageId"] == aws.ami
        assert tags(instance) == expected
        assert instance["ClientToken"] == client_token(RUN, "tok-1")
        volume_ids = [m["Ebs"]["VolumeId"] for m in instance["BlockDeviceMappings"]]
        assert volume_ids
        for volume in aws.ec2.describe_volumes(VolumeIds=volume_ids)["Volumes"]:
            assert tags(volume) == expected


def test_a_launch_s_cost_tags_are_on_its_instances_and_volumes_as_aws_takes_them(
    aws: Aws,
) -> None:
    """Found by the cost tags alone, as a bill split by them would: a job named with
    characters AWS refuses in a tag value (parentheses, ``#``, a backslash) is tagged
    with those characters as ``_``. Every key set is one the IAM policy lets a launch
    set (``ec2.TAG_KEYS``)."""
    charged = CostTags("physics", "sweep (v2) #3", "LAB\\alice")
    records = aws.provider().launch("small", 2, "tok-1", charged.tags())
    aws.provider().launch("big", 1, "tok-2", {})  # no cost tags: not found by them

    filters: list[Any] = [
        {"Name": f"tag:{PROJECT_TAG}", "Values": ["physics"]},
        {"Name": f"tag:{JOB_TAG}", "Values": ["sweep _v2_ _3"]},
        {"Name": f"tag:{USER_TAG}", "Values": ["LAB_alice"]},
    ]
    pages = aws.ec2.get_paginator("describe_instances").paginate(Filters=filters)
    found = [i for page in pages for r in page["Reservations"] for i in r["Instances"]]
    assert {i["InstanceId"] for i in found} == {r.id for r in records}
    volumes = aws.ec2.describe_volumes(Filters=filters)["Volumes"]
    attached = {a["InstanceId"] for v in volumes for a in v["Attachments"]}
    assert attached == {r.id for r in records}
    every = [m["Ebs"]["VolumeId"] for i in found for m in i["BlockDeviceMappings"]]
    assert sorted(v["VolumeId"] for v in volumes) == sorted(every)
    for resource in [*found, *volumes]:
        assert set(tags(resource)) <= TAG_KEYS
        assert set(COST_TAG_KEYS) <= set(tags(resource))


def test_our_tags_win_over_the_callers(aws: Aws) -> None:
    [rec] = aws.provider().launch("small", 1, "tok-1", {RUN_TAG: "other", TYPE_TAG: "x"})
    assert tags(aws.instance(rec.id))[RUN_TAG] == RUN
    assert tags(aws.instance(rec.id))[TYPE_TAG] == "small"


def test_user_data_gzipped_whole_reaches_the_instance_byte_for_byte(aws: Aws) -> None:
    """The real agent's user data is bytes (the script gzip-compressed as a whole, as
    ``bootstrap: user-data`` renders it): the instance gets exactly those bytes."""
    user_data = render_user_data(agent_source(), "http://10.0.0.2:8080", "tok-1")
    assert isinstance(user_data, bytes)
    settings = aws.settings(user_data=user_data)
    [rec] = aws.provider(settings=settings).launch("small", 1, "tok-1", {})
    got = aws.ec2.describe_instance_attribute(InstanceId=rec.id, Attribute="userData")
    assert base64.b64decode(got["UserData"]["Value"]) == user_data


def test_instances_require_imdsv2_terminate_on_shutdown_and_get_the_settings(
    aws: Aws,
) -> None:
    key = aws.ec2.create_key_pair(KeyName="autoscaler-test")["KeyName"]
    sg = aws.ec2.create_security_group(GroupName="workers", Description="test")["GroupId"]
    iam = boto3.client("iam", region_name=REGION, endpoint_url=aws.endpoint)
    profile = iam.create_instance_profile(InstanceProfileName="worker")["InstanceProfile"]
    settings = aws.settings(
        key_name=key,
        security_groups=(sg,),
        instance_profile="worker",
        user_data=USER_DATA,
        subnets=(aws.subnets[1],),
    )
    [rec] = aws.provider(settings=settings).launch("small", 1, "tok-1", {})

    instance = aws.instance(rec.id)
    options = instance["MetadataOptions"]
    assert options["HttpTokens"] == "required"
    assert options["HttpEndpoint"] == "enabled"
    assert options["HttpPutResponseHopLimit"] == 1
    shutdown = aws.ec2.describe_instance_attribute(
        InstanceId=rec.id, Attribute="instanceInitiatedShutdownBehavior"
    )
    assert shutdown["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    user_data = aws.ec2.describe_instance_attribute(InstanceId=rec.id, Attribute="userData")
    assert base64.b64decode(user_data["UserData"]["Value"]).decode() == USER_DATA
    assert instance["KeyName"] == key
    assert [g["GroupId"] for g in instance["SecurityGroups"]] == [sg]
    assert instance["SubnetId"] == aws.subnets[1]
    assert instance["IamInstanceProfile"]["Arn"] == profile["Arn"]
    assert "InstanceLifecycle" not in instance  # on-demand

    # An instance profile given by its ARN reaches EC2 as one.
    by_arn = replace(settings, instance_profile=profile["Arn"])
    [rec2] = aws.provider(settings=by_arn).launch("small", 1, "tok-2", {})
    assert aws.instance(rec2.id)["IamInstanceProfile"]["Arn"] == profile["Arn"]


def test_spot_types_launch_as_one_time_spot_capped_at_their_max_price(
    aws: Aws, proxy: FaultProxy
) -> None:
    provider = aws.provider()
    [rec] = provider.launch("cheap", 1, "tok-1", {})

    assert aws.instance(rec.id)["InstanceLifecycle"] == "spot"
    # moto does not keep the spot options: read them off the request it was sent.
    [request] = proxy.requests("RunInstances")
    params = {k: v[0] for k, v in request.params.items()}
    assert params["InstanceMarketOptions.MarketType"] == "spot"
    assert params["InstanceMarketOptions.SpotOptions.SpotInstanceType"] == "one-time"
    assert params["InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior"] == "terminate"
    assert float(params["InstanceMarketOptions.SpotOptions.MaxPrice"]) == 0.05
    assert params["MinCount"] == "1"
    assert params["MaxCount"] == "1"


def test_a_launch_returns_what_started_when_ec2_starts_fewer(aws: Aws) -> None:
    # Straight to moto, which starts MinCount instances: as EC2 short of capacity would.
    provider = aws.provider(settings=aws.settings(endpoint=aws.endpoint))
    records = provider.launch("small", 3, "tok-1", {})
    assert len(records) == 1
    assert [i["InstanceId"] for i in aws.tagged(RUN)] == [records[0].id]


def test_launch_is_idempotent_per_token_across_providers(aws: Aws) -> None:
    first = aws.provider().launch("small", 2, "tok-1", {})
    again = aws.provider().launch("small", 2, "tok-1", {})
    restarted = aws.provider()  # a daemon restarted after a crash
    adopted = restarted.launch("small", 2, "tok-1", {})

    ids = sorted(r.id for r in first)
    assert sorted(r.id for r in again) == ids
    assert sorted(r.id for r in adopted) == ids
    assert all(r.launched_at <= NOW for r in adopted)
    assert sorted(i["InstanceId"] for i in aws.tagged(RUN)) == ids
    # The restarted provider knows the adopted instances' types.
    assert {s.type for s in restarted.describe()} == {"small"}

    # Another token is another launch.
    other = restarted.launch("small", 1, "tok-2", {})
    assert len(aws.tagged(RUN)) == 3
    assert other[0].id not in ids


def test_a_token_whose_instances_ended_launches_again(aws: Aws) -> None:
    provider = aws.provider()
    [rec] = provider.launch("small", 1, "tok-1", {})
    aws.ec2.terminate_instances(InstanceIds=[rec.id])
    [again] = provider.launch("small", 1, "tok-1", {})
    assert again.id != rec.id


def test_launch_refuses_past_the_types_max_count_and_unknown_types(aws: Aws) -> None:
    provider = aws.provider()
    provider.launch("big", 2, "tok-1", {})
    with pytest.raises(AutoscalerError) as expected:
        check_launch(provider.capabilities, "big", 2, 1)
    with pytest.raises(AutoscalerError) as info:
        provider.launch("big", 1, "tok-2", {})
    assert info.value.code == expected.value.code
    assert info.value.message == expected.value.message
    with pytest.raises(AutoscalerError) as unknown:
        provider.launch("huge", 1, "tok-3", {})
    assert unknown.value.code == "UnknownType"
    assert len(aws.tagged(RUN)) == 2


# --- describe and terminate ----------------------------------------------------------------


def test_describe_sees_only_the_runs_instances(aws: Aws) -> None:
    untagged = aws.foreign(None)
    other_run = aws.foreign("run-other")
    provider = aws.provider()
    records = provider.launch("small", 2, "tok-1", {})
    ours = sorted(r.id for r in records)

    statuses = provider.describe()
    assert sorted(s.id for s in statuses) == ours
    for status in statuses:
        assert status.type == "small"
        assert status.state in (ProviderState.PENDING, ProviderState.RUNNING)
        assert status.address == aws.instance(status.id)["PrivateIpAddress"]

    asked = provider.describe([ours[0], untagged, other_run])
    by_id = {s.id: s for s in asked}
    assert by_id[ours[0]].state in (ProviderState.PENDING, ProviderState.RUNNING)
    # Not ours: as good as gone, whatever state it is in.
    assert by_id[untagged].state is ProviderState.TERMINATED
    assert by_id[other_run].state is ProviderState.TERMINATED
    assert aws.instance(other_run)["State"]["Name"] in ("pending", "running")


def test_describe_reports_the_public_address_when_asked(aws: Aws) -> None:
    provider = aws.provider(settings=aws.settings(address="public"))
    [rec] = provider.launch("small", 1, "tok-1", {})
    [status] = provider.describe([rec.id])
    assert status.address == aws.instance(rec.id)["PublicIpAddress"]
    assert status.address != aws.instance(rec.id)["PrivateIpAddress"]


def test_an_instance_terminated_from_outside_shows_terminated(aws: Aws) -> None:
    provider = aws.provider()
    records = provider.launch("small", 2, "tok-1", {})
    gone, kept = records[0].id, records[1].id
    aws.ec2.terminate_instances(InstanceIds=[gone])
    never = "i-0123456789abcdef0"

    by_id = {s.id: s for s in provider.describe([gone, kept, never])}
    assert by_id[gone].state is ProviderState.TERMINATED
    assert by_id[gone].type == "small"
    assert by_id[kept].state in (ProviderState.PENDING, ProviderState.RUNNING)
    assert by_id[never].state is ProviderState.TERMINATED
    assert {s.id: s.state for s in provider.describe()}[gone] is ProviderState.TERMINATED


def test_terminate_ends_only_the_runs_instances(aws: Aws) -> None:
    untagged = aws.foreign(None)
    other_run = aws.foreign("run-other")
    provider = aws.provider()
    [rec] = provider.launch("small", 1, "tok-1", {})

    assert provider.terminate([rec.id, untagged, other_run]) == [rec.id]
    assert aws.instance(rec.id)["State"]["Name"] in ("shutting-down", "terminated")
    for foreign in (untagged, other_run):
        assert aws.instance(foreign)["State"]["Name"] in ("pending", "running")
    [status] = provider.describe([rec.id])
    assert status.state is ProviderState.TERMINATED
    assert provider.terminate([]) == []


def test_console_output_is_decoded_text(aws: Aws) -> None:
    provider = aws.provider()
    [rec] = provider.launch("small", 1, "tok-1", {})
    output = provider.console_output(rec.id)
    assert isinstance(output, str)
    assert "Linux" in output  # moto's canned boot log, base64 on the wire


def test_an_unknown_instance_is_an_error_naming_it(aws: Aws) -> None:
    with pytest.raises(AutoscalerError) as info:
        aws.provider().console_output("i-0123456789abcdef0")
    assert info.value.code == "InvalidInstanceID.NotFound"
    assert "i-0123456789abcdef0" in info.value.message
    assert "testing" not in info.value.message  # the (fake) credentials


def test_threads_call_ec2_at_once_each_through_its_own_client(aws: Aws) -> None:
    """Four threads launch, describe and read consoles at the same moment (as the
    daemon's executor and bootstrap threads do); each has a client of its own, kept
    for its later calls."""
    provider = aws.provider()
    threads = 4
    barrier = threading.Barrier(threads, timeout=60)

    def work(n: int) -> tuple[Any, str, ProviderState, str]:
        barrier.wait()  # all four threads exist before any of them calls EC2
        client = provider.client
        [rec] = provider.launch("small", 1, f"tok-{n}", {})
        [status] = provider.describe([rec.id])
        console = provider.console_output(rec.id)
        assert provider.client is client
        return client, rec.id, status.state, console

    with ThreadPoolExecutor(threads) as pool:
        results = list(pool.map(work, range(threads)))

    clients = [r[0] for r in results]
    assert len({id(c) for c in clients}) == threads  # the objects are alive: ids differ
    assert provider.client not in clients
    assert sorted(r[1] for r in results) == sorted(i["InstanceId"] for i in aws.tagged(RUN))
    assert all(r[2] in (ProviderState.PENDING, ProviderState.RUNNING) for r in results)
    assert all("Linux" in r[3] for r in results)


# --- cleanup ------------------------------------------------------------------------------


def test_cleanup_lists_and_terminates_tagged_instances_only(aws: Aws) -> None:
    untagged = aws.foreign(None)
    other_run = aws.foreign("run-other")
    [rec] = aws.provider().launch("big", 1, "tok-1", {})
    gone = aws.provider().launch("small", 1, "tok-2", {})[0].id
    aws.ec2.terminate_instances(InstanceIds=[gone])
    settings = aws.settings()

    listed = {t.id: t for t in list_tagged(settings)}
    assert set(listed) == {rec.id, other_run}
    assert listed[rec.id].run_id == RUN
    assert listed[rec.id].type == "big"
    assert listed[rec.id].state in ("pending", "running")
    assert listed[rec.id].launched_at.tzinfo is not None
    assert listed[other_run].run_id == "run-other"

    ended = terminate_instances(settings, [untagged, other_run, rec.id])
    assert sorted(ended) == sorted([other_run, rec.id])
    assert aws.instance(untagged)["State"]["Name"] in ("pending", "running")
    assert list_tagged(settings) == []


# --- faults from the remote side -------------------------------------------------------------


def test_no_capacity_in_one_zone_launches_in_the_next(aws: Aws, proxy: FaultProxy) -> None:
    first, second = aws.subnets[0], aws.subnets[1]
    proxy.fail(
        "RunInstances",
        "InsufficientInstanceCapacity",
        status=500,
        match=lambda p: p.get("SubnetId") == [first],
    )
    settings = aws.settings(subnets=(first, second))
    [rec] = aws.provider(settings=settings).launch("small", 1, "tok-2", {})  # starts at first

    assert aws.instance(rec.id)["SubnetId"] == second
    runs = proxy.requests("RunInstances")
    # One try per zone: botocore does not retry the 500 in the zone without capacity.
    assert [(r.params["SubnetId"], r.injected) for r in runs] == [
        ([first], "InsufficientInstanceCapacity"),
        ([second], None),
    ]
    tokens = [r.params["ClientToken"][0] for r in runs]
    assert tokens[0] == client_token(RUN, "tok-2")
    assert tokens[0] != tokens[1]
    assert all(len(t) <= 64 for t in tokens)


# --- pools: a launch spread across the subnets ----------------------------------------------


def zones(aws: Aws) -> dict[str, str]:
    return {s["SubnetId"]: s["AvailabilityZone"] for s in aws.ec2.describe_subnets()["Subnets"]}


def asked(proxy: FaultProxy) -> list[tuple[str, int, str | None]]:
    """Each RunInstances: its subnet, how many it asked for, and the fault injected."""
    return [
        (r.params["SubnetId"][0], int(r.params["MaxCount"][0]), r.injected)
        for r in proxy.requests("RunInstances")
    ]


def token_at(pool: int, pools: int) -> str:
    """A launch token whose launches over ``pools`` subnets start at ``pool``."""
    return next(t for t in (f"tok-{i}" for i in range(100)) if first_pool(t, pools) == pool)


def ec2_client_tokens() -> Callable[[Params], bool]:
    """A rule's match: EC2's check of a RunInstances' ``ClientToken``, which moto does not
    make: a token it saw before with other parameters is refused (the rule's code,
    ``IdempotentParameterMismatch``). A repeat with the same parameters passes, and
    moto starts it anew where EC2 would answer with the instances it started then."""
    first: dict[str, tuple[tuple[str, ...], ...]] = {}

    def match(params: Params) -> bool:
        keys = ("SubnetId", "MaxCount", "InstanceType", "ImageId")
        request = tuple(tuple(params.get(k, [])) for k in keys)
        return first.setdefault(params["ClientToken"][0], request) != request

    return match


def test_a_launch_of_four_over_two_subnets_puts_two_in_each_zone(
    aws: Aws, proxy: FaultProxy
) -> None:
    first, second = aws.subnets[0], aws.subnets[1]
    zone = zones(aws)
    provider = aws.provider(settings=aws.settings(subnets=(first, second)))
    token = token_at(0, 2)
    records = provider.launch("small", 4, token, {})

    assert Counter(aws.instance(r.id)["SubnetId"] for r in records) == {first: 2, second: 2}
    assert Counter(r.zone for r in records) == {zone[first]: 2, zone[second]: 2}
    assert all(r.zone == aws.instance(r.id)["Placement"]["AvailabilityZone"] for r in records)
    assert asked(proxy) == [(first, 2, None), (second, 2, None)]
    tokens = [r.params["ClientToken"][0] for r in proxy.requests("RunInstances")]
    assert tokens[0] == client_token(RUN, token)
    assert len(set(tokens)) == 2
    # A restarted daemon adopts the launch's instances, zones and all, and starts none.
    again = aws.provider(settings=aws.settings(subnets=(first, second))).launch(
        "small", 4, token, {}
    )
    assert sorted((r.id, r.zone) for r in again) == sorted((r.id, r.zone) for r in records)
    assert proxy.counts["RunInstances"] == 2


def test_a_launch_avoiding_a_zone_held_after_reclaims_goes_to_the_other_zones(
    aws: Aws, proxy: FaultProxy
) -> None:
    first, second = aws.subnets[0], aws.subnets[1]
    zone = zones(aws)
    provider = aws.provider(settings=aws.settings(subnets=(first, second)))
    records = provider.launch("small", 2, "tok-1", {}, avoid_zones=(zone[first],))

    assert {aws.instance(r.id)["SubnetId"] for r in records} == {second}
    assert {r.zone for r in records} == {zone[second]}
    assert asked(proxy) == [(second, 2, None)]
    # Every zone held: the launch the run decided still goes somewhere, over all pools.
    both = provider.launch("small", 2, "tok-2", {}, avoid_zones=(zone[first], zone[second]))
    assert Counter(aws.instance(r.id)["SubnetId"] for r in both) == {first: 1, second: 1}


def test_launches_of_one_machine_go_to_their_tokens_pools_and_spread(aws: Aws) -> None:
    """Where a launch starts is its token's (``first_pool``: its sequence number), not
    the launches' before: launches of one machine take the pools in turn, whatever the
    type."""
    subnets = (aws.subnets[0], aws.subnets[1])
    provider = aws.provider(settings=aws.settings(subnets=subnets))
    tokens = [f"tok-{i}" for i in range(6)]
    launched = [
        provider.launch("small" if i < 4 else "big", 1, t, {})[0] for i, t in enumerate(tokens)
    ]

    where = [aws.instance(r.id)["SubnetId"] for r in launched]
    assert where == [subnets[i % 2] for i in range(6)]
    assert set(where) == set(subnets)


def launch_four_refused_in(
    aws: Aws, subnet: str, code: str = "InsufficientInstanceCapacity", status: int = 500
) -> list[MachineRecord]:
    """4 ``small`` over the first two subnets while EC2 refuses ``subnet`` with ``code``."""
    aws.proxy.fail(
        "RunInstances", code, status=status, match=lambda p: p.get("SubnetId") == [subnet]
    )
    provider = aws.provider(settings=aws.settings(subnets=(aws.subnets[0], aws.subnets[1])))
    return provider.launch("small", 4, token_at(0, 2), {})


@pytest.mark.parametrize(
    ("refusing", "asks"),
    [
        (0, [(0, 2, True), (1, 4, False)]),  # the first pool's share goes to the second
        (1, [(0, 2, False), (1, 2, True), (0, 2, False)]),  # the last's back to the first
    ],
)
def test_a_pool_without_capacity_passes_its_share_on_and_the_launch_lands_whole(
    aws: Aws, proxy: FaultProxy, refusing: int, asks: list[tuple[int, int, bool]]
) -> None:
    records = launch_four_refused_in(aws, aws.subnets[refusing])
    other = aws.subnets[1 - refusing]

    assert [aws.instance(r.id)["SubnetId"] for r in records] == [other] * 4
    assert {r.zone for r in records} == {zones(aws)[other]}
    code = "InsufficientInstanceCapacity"
    assert asked(proxy) == [(aws.subnets[p], n, code if no else None) for p, n, no in asks]
    tokens = {r.params["ClientToken"][0] for r in proxy.requests("RunInstances")}
    assert len(tokens) == len(asks)


def test_machines_started_before_a_later_pool_hits_a_limit_come_with_the_error(
    aws: Aws, proxy: FaultProxy
) -> None:
    """They exist and are paid for: the run must own them, and learn of the limit."""
    first, second = aws.subnets[0], aws.subnets[1]
    with pytest.raises(PartialLaunch) as info:
        launch_four_refused_in(aws, second, "VcpuLimitExceeded", 400)

    assert info.value.code == "VcpuLimitExceeded"
    assert "2 started, 2 refused" in info.value.message
    records = info.value.records
    assert [aws.instance(r.id)["SubnetId"] for r in records] == [first] * 2
    assert sorted(r.id for r in records) == sorted(i["InstanceId"] for i in aws.tagged(RUN))
    assert [n for _, n, _ in asked(proxy)] == [2, 2]


def test_a_market_priced_spot_launch_goes_to_the_cheapest_zone_then_the_next(
    aws: Aws, proxy: FaultProxy
) -> None:
    """With the market's prices (``spot_prices: market``), a spot launch goes to the
    subnet whose zone has spot cheapest now; its refusal moves it to the next cheapest."""
    first, second, third = aws.subnets[:3]
    zone = zones(aws)
    proxy.spot_price(zone[first], 0.05)
    proxy.spot_price(zone[second], 0.02)
    proxy.spot_price(zone[third], 0.03)
    settings = aws.settings(subnets=(first, second, third), spot_market=True)
    provider = aws.provider(settings=settings)
    provider.spot_prices(None, NOW)
    records = provider.launch("cheap", 2, "tok-1", {})
    assert {r.zone for r in records} == {zone[second]}
    assert asked(proxy) == [(second, 2, None)]
    provider.terminate([r.id for r in records])

    proxy.fail(
        "RunInstances",
        "InsufficientInstanceCapacity",
        status=500,
        match=lambda p: p.get("SubnetId") == [second] and p.get("InstanceType") == ["t3.small"],
    )
    again = provider.launch("cheap", 2, "tok-2", {})
    assert {r.zone for r in again} == {zone[third]}
    assert asked(proxy)[1:] == [(second, 2, "InsufficientInstanceCapacity"), (third, 2, None)]
    # On-demand types are not priced by the market: taken in turn.
    small = provider.launch("small", 3, "tok-3", {})
    assert Counter(r.zone for r in small) == {zone[first]: 1, zone[second]: 1, zone[third]: 1}


@pytest.mark.parametrize(
    ("code", "status"), [("InsufficientInstanceCapacity", 500), ("Unsupported", 400)]
)
def test_no_zone_can_launch_the_type(aws: Aws, proxy: FaultProxy, code: str, status: int) -> None:
    proxy.fail("RunInstances", code, status=status)
    subnets = tuple(aws.subnets[:3])
    settings = aws.settings(subnets=subnets)
    with pytest.raises(AutoscalerError) as info:
        aws.provider(settings=settings).launch("small", 2, "tok-1", {})

    assert info.value.code == code
    assert "t3.micro" in info.value.message
    assert all(subnet in info.value.message for subnet in subnets)
    assert proxy.counts["RunInstances"] == len(subnets)
    assert aws.tagged(RUN) == []


@pytest.mark.parametrize(
    "code", ["InstanceLimitExceeded", "VcpuLimitExceeded", "MaxSpotInstanceCountExceeded"]
)
def test_an_account_limit_is_raised_at_once(aws: Aws, proxy: FaultProxy, code: str) -> None:
    proxy.fail("RunInstances", code, status=400)
    settings = aws.settings(subnets=tuple(aws.subnets[:2]))
    with pytest.raises(AutoscalerError) as info:
        aws.provider(settings=settings).launch("small", 1, "tok-1", {})

    assert info.value.code == code
    assert not info.value.retryable
    assert proxy.counts["RunInstances"] == 1


SUBNET_FULL = "InsufficientFreeAddressesInSubnet"
NO_CAPACITY = "InsufficientInstanceCapacity"


@pytest.mark.parametrize("codes", [(NO_CAPACITY, SUBNET_FULL), (SUBNET_FULL, NO_CAPACITY)])
def test_a_zone_without_capacity_and_a_full_subnet_refuse_for_capacity_in_any_order(
    aws: Aws, proxy: FaultProxy, codes: tuple[str, str]
) -> None:
    """One pool has no capacity for the type, the other subnet no address left: the type
    is what is short (the run avoids it), not the provider (a limit holds every type of
    it), whichever pool answered last."""
    subnets = (aws.subnets[0], aws.subnets[1])
    for subnet, code in zip(subnets, codes, strict=True):
        status = 500 if code == NO_CAPACITY else 400
        proxy.fail(
            "RunInstances", code, status=status, match=lambda p, s=subnet: p.get("SubnetId") == [s]
        )
    provider = aws.provider(settings=aws.settings(subnets=subnets))
    with pytest.raises(AutoscalerError) as info:
        provider.launch("small", 2, token_at(0, 2), {})

    assert [(s, c) for s, _, c in asked(proxy)] == list(zip(subnets, codes, strict=True))
    assert info.value.code == NO_CAPACITY
    assert failure_kind(info.value.code, info.value.retryable) == "capacity"
    assert all(subnet in info.value.message for subnet in subnets)
    assert SUBNET_FULL in info.value.message


def test_every_subnet_full_is_the_providers_limit(aws: Aws, proxy: FaultProxy) -> None:
    proxy.fail("RunInstances", SUBNET_FULL, status=400)
    subnets = (aws.subnets[0], aws.subnets[1])
    with pytest.raises(AutoscalerError) as info:
        aws.provider(settings=aws.settings(subnets=subnets)).launch("small", 2, "tok-1", {})

    assert proxy.counts["RunInstances"] == 2
    assert info.value.code == SUBNET_FULL
    assert failure_kind(info.value.code, info.value.retryable) == "limit"


def test_a_replayed_launch_asks_each_pool_what_the_first_process_asked(
    aws: Aws, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A daemon resumed after a crash replays a launch whose instances DescribeInstances
    does not show yet: its requests are the first process's, pool for pool and under the
    same ``ClientToken``s, whatever the first process launched before, so EC2 (whose
    token check the proxy makes) answers with the instances it started then rather than
    refusing the token. (moto ignores the token and starts them anew; EC2 would not.)"""
    proxy.fail("RunInstances", "IdempotentParameterMismatch", match=ec2_client_tokens())
    subnets = (aws.subnets[0], aws.subnets[1])
    first = aws.provider(settings=aws.settings(subnets=subnets))
    for i in range(3):  # launches before: where the next one starts must not depend on them
        first.launch("small", 1, f"before-{i}", {})
    before = len(proxy.requests("RunInstances"))
    first.launch("small", 1, "tok-1", {})
    asked_first = proxy.requests("RunInstances")[before:]

    resumed = aws.provider(settings=aws.settings(subnets=subnets))
    monkeypatch.setattr(resumed, "_run_instances_live", lambda: iter(()))  # the lag
    again = resumed.launch("small", 1, "tok-1", {})

    asked_again = proxy.requests("RunInstances")[before + len(asked_first) :]
    assert len(again) == 1
    assert [r.injected for r in asked_again] == [None]

    def request(r: Any) -> tuple[str, str, str]:
        return (r.params["SubnetId"][0], r.params["MaxCount"][0], r.params["ClientToken"][0])

    assert [request(r) for r in asked_again] == [request(r) for r in asked_first]
    assert asked_first[0].params["ClientToken"] == [client_token(RUN, "tok-1")]


def launched_avoiding_a_zone(aws: Aws, proxy: FaultProxy) -> tuple[tuple[str, str], str, list[Any]]:
    """A first process's launch of 2 while it avoided the first subnet's zone, with EC2
    refusing a token reused with other parameters: the subnets, the token, the records."""
    proxy.fail("RunInstances", "IdempotentParameterMismatch", match=ec2_client_tokens())
    subnets = (aws.subnets[0], aws.subnets[1])
    token = token_at(0, 2)
    avoided = zones(aws)[subnets[0]]
    records = aws.provider(settings=aws.settings(subnets=subnets)).launch(
        "small", 2, token, {}, avoid_zones=(avoided,)
    )
    return subnets, token, records


def test_a_replay_refused_its_token_adopts_the_first_attempts_instances(
    aws: Aws, proxy: FaultProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first process launched while avoiding a zone; the resumed daemon replays the
    launch without (it does not know the zones avoided then), so its first request is
    not the first process's and EC2 refuses the token. The launch's instances are then
    looked up by their tag again and adopted: none started twice, none left untracked."""
    subnets, token, records = launched_avoiding_a_zone(aws, proxy)
    assert asked(proxy) == [(subnets[1], 2, None)]

    resumed = aws.provider(settings=aws.settings(subnets=subnets))
    monkeypatch.setattr(resumed, "_run_instances_live", lambda: iter(()))  # the lag
    adopted = resumed.launch("small", 2, token, {})

    assert asked(proxy)[1:] == [(subnets[0], 1, "IdempotentParameterMismatch")]
    assert sorted((r.id, r.zone) for r in adopted) == sorted((r.id, r.zone) for r in records)
    assert sorted(i["InstanceId"] for i in aws.tagged(RUN)) == sorted(r.id for r in records)
    assert {s.type for s in resumed.describe([r.id for r in adopted])} == {"small"}


def test_a_replay_refused_its_token_whose_instances_never_show_is_an_error(
    aws: Aws, proxy: FaultProxy
) -> None:
    """Nothing of the earlier attempt to adopt (its instances ended): the refusal is the
    launch's, an error the run does not mistake for a shortage or a limit."""
    subnets, token, records = launched_avoiding_a_zone(aws, proxy)
    aws.ec2.terminate_instances(InstanceIds=[r.id for r in records])

    resumed = aws.provider(settings=aws.settings(subnets=subnets))
    resumed.adopt_waits_s = (0.0, 0.0)
    describes = proxy.counts["DescribeInstances"]
    with pytest.raises(AutoscalerError) as info:
        resumed.launch("small", 2, token, {})

    assert info.value.code == "IdempotentParameterMismatch"
    assert failure_kind(info.value.code, info.value.retryable) == "error"
    assert proxy.counts["DescribeInstances"] - describes == 1 + 2  # the launch's, the 2 looks
    assert len(aws.tagged(RUN)) == 2


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("InsufficientInstanceCapacity", 500),
        ("InsufficientCapacity", 500),
        ("UnfulfillableCapacity", 400),
        ("SpotMaxPriceTooLow", 400),
        ("Unsupported", 400),
        ("InstanceLimitExceeded", 400),
        ("VcpuLimitExceeded", 400),
        ("MaxSpotInstanceCountExceeded", 400),
    ],
)
def test_a_dry_runs_refusal_means_to_the_run_what_ec2s_does(
    aws: Aws, proxy: FaultProxy, code: str, status: int
) -> None:
    """The emulator's ``emulator.refusals`` raise what EC2's refusal raises here (code,
    retryable), so the run makes the same ``LaunchFailed`` of both: the same kind, hold,
    types held and recovery."""
    proxy.fail("RunInstances", code, status=status)
    real = aws.provider(settings=aws.settings(subnets=tuple(aws.subnets[:2])))
    with pytest.raises(AutoscalerError) as ec2:
        real.launch("cheap", 2, "tok-1", {})
    world = SimEmulator.model_validate({"refusals": [{"type": "cheap", "code": code}]})
    sim = SimProvider(real.capabilities, world, 1, lambda: NOW)
    with pytest.raises(AutoscalerError) as emulated:
        sim.launch("cheap", 2, "tok-1", {})
    assert (emulated.value.code, emulated.value.retryable) == (ec2.value.code, ec2.value.retryable)
    launch = Launch("cheap", 2, "tok-1")
    siblings = real.capabilities.siblings("cheap")

    def failed(err: AutoscalerError) -> LaunchFailed:
        return refusal(launch, 2, err.message, err.code, err.retryable, siblings, Holds(), NOW)

    assert replace(failed(emulated.value), reason="") == replace(failed(ec2.value), reason="")
    assert code in emulated.value.message


@pytest.mark.slow
def test_throttling_is_retried_with_backoff_not_a_storm(aws: Aws, proxy: FaultProxy) -> None:
    max_attempts = 10
    settings = aws.settings(max_attempts=max_attempts)
    provider = aws.provider(settings=settings)
    proxy.throttle(for_s=3.0)
    records = provider.launch("small", 1, "tok-1", {})

    assert len(records) == 1
    seen = proxy.requests()
    throttled = [s for s in seen if s.injected == "RequestLimitExceeded"]
    assert throttled, "the throttle never bit"
    # Two calls (look up the token's instances, run them), each retried by botocore
    # at most max_attempts times, and each succeeding once.
    assert len(seen) <= 2 * max_attempts
    assert [s.action for s in seen if s.injected is None] == ["DescribeInstances", "RunInstances"]
    assert len(aws.tagged(RUN)) == 1


def test_still_throttled_after_the_retries_is_a_retryable_error(
    aws: Aws, proxy: FaultProxy
) -> None:
    settings = aws.settings(max_attempts=2)
    proxy.throttle(for_s=600.0)
    with pytest.raises(AutoscalerError) as info:
        aws.provider(settings=settings).launch("small", 1, "tok-1", {})
    assert info.value.code == "RequestLimitExceeded"
    assert info.value.retryable
    assert sum(proxy.counts.values()) == 2  # botocore's two attempts, then us: no loop
    proxy.clear()
    assert aws.tagged(RUN) == []


def test_the_proxy_counts_every_request_and_forwards_the_rest(aws: Aws, proxy: FaultProxy) -> None:
    once = Config(retries={"mode": "standard", "total_max_attempts": 1})
    ec2 = boto3.client("ec2", region_name=REGION, endpoint_url=proxy.endpoint, config=once)
    proxy.fail("DescribeImages", "InternalError", status=500, times=2)
    outcomes = []
    for _ in range(3):
        try:
            ec2.describe_images(Owners=["amazon"])
            outcomes.append("ok")
        except ClientError as exc:
            outcomes.append(exc.response["Error"]["Code"])
    assert outcomes == ["InternalError", "InternalError", "ok"]
    assert proxy.counts["DescribeImages"] == 3
    proxy.clear()
    assert proxy.counts == {}


def test_the_proxy_reads_chunked_bodies_and_keeps_connections_alive(proxy: FaultProxy) -> None:
    proxy.fail("DescribeRegions", "Unsupported", match=lambda p: p.get("Marker") == ["chunked"])
    host, port = proxy.endpoint.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        body = iter([b"Action=DescribeRegions", b"&Version=2016-11-15&Marker=chunked"])
        conn.request(
            "POST",
            "/",
            body=body,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            encode_chunked=True,
        )
        reply = conn.getresponse()
        error = reply.read()
        assert reply.status == 400
        assert b"<Code>Unsupported</Code>" in error
        sock = conn.sock
        conn.request("GET", "/moto-api/")  # forwarded to moto, on the same connection
        forwarded = conn.getresponse()
        forwarded.read()
        assert forwarded.status == 200
        assert conn.sock is sock
    finally:
        conn.close()
    assert proxy.counts["DescribeRegions"] == 1
    assert [s.injected for s in proxy.requests()] == ["Unsupported", None]


def test_launches_of_one_type_at_once_never_pass_its_maximum(aws: Aws) -> None:
    """Six launches of one ``big`` each (maximum 2), released together on six threads as
    the daemon's provider threads may send them: two instances start, four launches are
    refused for the maximum."""
    provider = aws.provider()
    gate = threading.Barrier(6)

    def launch(i: int) -> int | str:
        gate.wait()
        try:
            return len(provider.launch("big", 1, f"tok-{i}", {}))
        except AutoscalerError as error:
            return str(error)

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(launch, range(6)))

    assert sorted(r for r in results if isinstance(r, int)) == [1, 1]
    refused = [r for r in results if isinstance(r, str)]
    assert len(refused) == 4
    assert all("exceeds the limit 2" in r for r in refused)
    assert len([i for i in aws.tagged(RUN) if tags(i).get(TYPE_TAG) == "big"]) == 2
