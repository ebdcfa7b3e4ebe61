"""EC2 instances as machines, through boto3 (its sessions, clients and error translation
are ``aws``'s); and the ``ec2`` provider kind: settings from a config, the SSH
bootstrapper, the cleanup sweeper.

Every instance and its volumes carry tags from the moment they exist
(``TagSpecifications`` at ``RunInstances``): the run (``RUN_TAG``), the launch token
(``LAUNCH_TAG``) and our machine type (``TYPE_TAG``), and the launch's own (the run's
project, job and user, ``cost_tags``: cost allocation tags, their values fitted to
AWS's rules by ``aws_tag_value``). ``TAG_KEYS`` are all the keys a launch sets: the IAM
policy in ``infra/`` lets the controller set those and no others. The run's tags are
what the rest rests on:

* ``describe`` and ``terminate`` only ever see instances of this run, so the daemon can
  never end an instance that is not its own, and an account's other instances stay out
  of its view;
* ``launch`` is idempotent per token across a daemon crash: before it calls
  ``RunInstances`` it looks for live instances of the token and adopts them. EC2's own
  ``ClientToken`` deduplicates retries of one call, but only for the same parameters;
  the tag lookup also covers a restarted daemon and emulators that ignore the token.
  Should the lookup miss them (DescribeInstances lags behind RunInstances), the replay
  asks each pool for what the first process asked under the same token (``ec2_pools``:
  the order is the token's), so EC2 answers with the first process's instances; where
  it asks otherwise (other zones avoided, other spot prices), EC2 refuses the token
  (``IdempotentParameterMismatch``) and the launch's instances are looked up by their
  tag again and adopted;
* ``autoscaler cleanup`` finds what any run left behind (``list_tagged``).

Instances shut down by their own agent terminate (``InstanceInitiatedShutdownBehavior``)
rather than stop, so a machine that is done costs nothing. IMDSv2 is required.

Each thread calls EC2 through a client of its own, on a boto3 session of its own: the
daemon calls the provider from several threads, and boto3 sessions are not thread-safe.

A launch is spread across the subnets, each a pool of the type (``ec2_pools``): one
RunInstances per pool, and a pool without capacity for the type passes its share to the
next. ``CreateFleet`` (``Type=instant``) would place a launch in one call, but moto (what
the tests run against) puts an instant fleet in its first override whatever the strategy
and ignores its ``ClientToken``, and a fleet over several types may start types the plan
did not price. Throttling is retried by botocore (``aws``); this module adds no retry
loop of its own beyond the walk over the pools.
Errors come out as ``AutoscalerError`` carrying the AWS error code.
"""

from __future__ import annotations

import hashlib
import threading
import time
import unicodedata
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

from botocore.exceptions import BotoCoreError, ClientError

from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.aws import (
    ThreadClients,
    as_ours,
    aws_errors,
    ec2_client,
    error_code,
    error_message,
)
from autoscaler.providers.base import (
    CAPACITY_CODES,
    LIMIT_CODES,
    PROVIDER_TAG,
    SUBNET_CODES,
    Capabilities,
    MachineRecord,
    MachineStatus,
    PartialLaunch,
    PricePoint,
    Provider,
    ProviderState,
    check_launch,
)
from autoscaler.providers.cost_tags import COST_TAG_KEYS
from autoscaler.providers.ec2_market import (
    latest_prices,
    spot_price_history,
    subnet_zones,
    type_prices,
)
from autoscaler.providers.ec2_pools import first_pool, spread
from autoscaler.providers.ec2_ssh import ec2_agent_args, ssh_bootstrap
from autoscaler.providers.kind import (
    Direct,
    ProviderKind,
    RunContext,
    Sweeper,
    TaggedMachine,
)

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_ec2.type_defs import FilterTypeDef, InstanceTypeDef

    from autoscaler.config.schema import Platform

RUN_TAG = "autoscaler:run"
LAUNCH_TAG = "autoscaler:launch"
TYPE_TAG = "autoscaler:type"
TAG_KEYS = frozenset({"Name", RUN_TAG, LAUNCH_TAG, TYPE_TAG, PROVIDER_TAG, *COST_TAG_KEYS})
"""Every tag key a launch of ours sets (``PROVIDER_TAG`` in a run of several providers)."""

TAG_VALUE_MAX = 256
"""AWS's longest tag value, in characters."""
_TAG_PUNCTUATION = frozenset("_.:/=+-@")

# Codes that mean "not in this zone" or "not in this subnet": on to the next subnet.
_ZONE_CODES = CAPACITY_CODES | SUBNET_CODES
# Codes that no other subnet or a retry would change: raised at once.
_LIMIT_CODES = LIMIT_CODES
# EC2's answer to a ClientToken it saw before with other parameters: an earlier attempt
# of the launch (another process's) started instances under it.
_MISMATCH = "IdempotentParameterMismatch"
_STATES = {
    "pending": ProviderState.PENDING,
    "running": ProviderState.RUNNING,
    "shutting-down": ProviderState.TERMINATED,
    "terminated": ProviderState.TERMINATED,
    "stopping": ProviderState.TERMINATED,
    "stopped": ProviderState.TERMINATED,
}
_LIVE_STATES = ["pending", "running"]
_NOT_TERMINATED = ["pending", "running", "shutting-down", "stopping", "stopped"]
# Filter values and instance ids per request: EC2 accepts 200 values in one filter.
_CHUNK = 200


class _NoRoom(AutoscalerError):
    """A pool (zone or subnet) has no room for the type: its share goes to the next."""


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """One of our machine types as EC2 launches it."""

    instance_type: str  # e.g. "t3.micro"
    spot: bool = False
    max_price: float | None = None  # spot only; None = capped at the on-demand price


@dataclass(frozen=True, slots=True)
class Ec2Settings:
    region: str
    ami: str
    instances: Mapping[str, InstanceSpec]  # our machine type name -> spec
    subnets: tuple[str, ...] = ()  # pools a launch is spread across (``ec2_pools``)
    security_groups: tuple[str, ...] = ()
    key_name: str | None = None
    instance_profile: str | None = None  # a name, or an ARN (starts with "arn:")
    endpoint_url: str | None = None  # e.g. the moto server; None = AWS
    address: Literal["private", "public"] = "private"  # which IP MachineStatus.address is
    # A cloud-init script (rendered elsewhere), or gzip; or the script of a launch token.
    user_data: str | bytes | Callable[[str], str | bytes] | None = None
    max_attempts: int = 8  # requests per call, the first included (botocore standard mode)
    profile: str | None = None  # a named AWS profile: this provider's credentials
    spot_market: bool = False  # spot types' prices come from the spot price history


@dataclass(frozen=True, slots=True)
class TaggedInstance:
    """An instance some run left in the account, as ``autoscaler cleanup`` lists it."""

    id: str
    run_id: str
    type: str
    state: str
    launched_at: datetime


def client_token(run_id: str, token: str) -> str:
    """EC2's idempotency token for a launch: deterministic, unique per (run, token).

    A hash, so it fits EC2's 64 ASCII characters whatever the run id and token are.
    """
    return hashlib.sha256(f"{run_id}\0{token}".encode()).hexdigest()


def aws_tag_value(value: str) -> str:
    """``value`` as a tag value every AWS service takes (cost allocation included):
    letters, digits, spaces and ``_ . : / = + - @``, each other character ``_``; at most
    ``TAG_VALUE_MAX`` characters; never starting with the reserved ``aws:``."""
    kept = "".join(
        c if c in _TAG_PUNCTUATION or unicodedata.category(c)[0] in "LNZ" else "_" for c in value
    )
    if kept[:4].lower() == "aws:":
        kept = "_" + kept
    return kept[:TAG_VALUE_MAX]


def _client(settings: Ec2Settings) -> EC2Client:
    return ec2_client(
        settings.region, settings.endpoint_url, settings.max_attempts, settings.profile
    )


def _tags(instance: InstanceTypeDef) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in instance.get("Tags", [])}


def _instances(client: EC2Client, filters: list[FilterTypeDef]) -> Iterator[InstanceTypeDef]:
    for page in client.get_paginator("describe_instances").paginate(Filters=filters):
        for reservation in page["Reservations"]:
            yield from reservation.get("Instances", [])


def _chunks(ids: Sequence[str]) -> Iterator[list[str]]:
    for i in range(0, len(ids), _CHUNK):
        yield list(ids[i : i + _CHUNK])


class Ec2Provider:
    """EC2 instances of one run, found by the run's tag."""

    status_polling_interval = 10.0
    """DescribeInstances is rate-limited and counted against the account."""
    adopt_waits_s: tuple[float, ...] = (0.0, 1.0, 2.0, 4.0)
    """Before each look for an earlier attempt's instances after EC2 refused a reused
    ``ClientToken``: DescribeInstances may not show new instances for a few seconds."""

    def __init__(
        self,
        capabilities: Capabilities,
        run_id: str,
        settings: Ec2Settings,
        clock: Callable[[], float],
    ):
        self._capabilities = capabilities
        self.run_id = run_id
        self.settings = settings
        self._clock = clock
        self._clients = ThreadClients(lambda: _client(settings))
        self._types: dict[str, str] = {}  # instance id -> our type, for ids EC2 forgot
        # The daemon calls a provider from several threads: two launches of one type at
        # once would both count the instances alive and both pass its maximum. A type's
        # launches (count, then RunInstances) take turns; other types' do not wait.
        self._launching: dict[str, threading.Lock] = {}
        self._zones: frozenset[str] | None = None  # of the subnets, once asked (the market)
        self._subnet_zones: dict[str, str] = {}  # subnet -> its zone, once asked
        self._zone_prices: dict[tuple[str, str], float] = {}  # (instance type, zone) -> USD/h

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    @property
    def client(self) -> EC2Client:
        """The calling thread's EC2 client (each thread has a session of its own)."""
        return self._clients.ec2()

    # --- the provider protocol ------------------------------------------------------

    def launch(
        self,
        type: str,
        count: int,
        token: str,
        tags: Mapping[str, str],
        *,
        avoid_zones: Collection[str] = (),
    ) -> list[MachineRecord]:
        """Start up to ``count`` instances of ``type``, or adopt those ``token`` started.

        EC2 may start fewer than asked (``MinCount=1``): the records say what started.
        """
        if count <= 0:
            return []
        with self._launching.setdefault(type, threading.Lock()):
            return self._launch(type, count, token, tags, avoid_zones)

    def _launch(
        self,
        type: str,
        count: int,
        token: str,
        tags: Mapping[str, str],
        avoid_zones: Collection[str] = (),
    ) -> list[MachineRecord]:
        live = list(self._run_instances_live())
        adopted = [i for i in live if _tags(i).get(LAUNCH_TAG) == token]
        if adopted:
            return [self._record(i, type, token) for i in adopted]
        alive = sum(1 for i in live if _tags(i).get(TYPE_TAG) == type)
        check_launch(self._capabilities, type, alive, count)
        spec = self.settings.instances.get(type)
        if spec is None:
            raise AutoscalerError(
                f"machine type {type!r} has no EC2 instance type in the settings",
                code="UnknownType",
            )
        started = self._run(type, spec, count, token, tags, avoid_zones)
        return [self._record(i, type, token) for i in started]

    def describe(self, ids: Sequence[str] | None = None) -> list[MachineStatus]:
        """This run's instances (all, or ``ids``); an asked-for id EC2 no longer shows
        (terminated long ago, or never ours) is TERMINATED."""
        found: dict[str, MachineStatus] = {}
        for instance in self._run_instances(ids):
            status = self._status(instance)
            found[status.id] = status
        if ids is None:
            return list(found.values())
        return [
            found.get(i) or MachineStatus(i, self._types.get(i, ""), ProviderState.TERMINATED)
            for i in dict.fromkeys(ids)
        ]

    def terminate(self, ids: Sequence[str], *, now: bool = False) -> list[str]:
        """Terminate the instances of ``ids`` that carry this run's tag; do not wait (so
        ``now`` changes nothing).

        An id without the tag (another run's, or no run's) is left alone and left out.
        """
        ours = [i["InstanceId"] for i in self._run_instances(ids)]
        for chunk in _chunks(ours):
            with aws_errors(f"terminating {len(chunk)} instance(s) of run {self.run_id}"):
                self.client.terminate_instances(InstanceIds=chunk)
        return ours

    # --- more than the protocol -------------------------------------------------------

    def console_output(self, machine: str) -> str:
        """The instance's console output ("" before it has any); botocore decodes it."""
        with aws_errors(f"reading the console of {machine}"):
            reply = self.client.get_console_output(InstanceId=machine)
        return str(reply.get("Output") or "")

    # --- the spot market (``ec2.spot_prices: market``) -------------------------------------

    def market_types(self) -> tuple[str, ...]:
        """Our spot types, when their prices come from the market."""
        if not self.settings.spot_market:
            return ()
        return tuple(name for name, spec in self.settings.instances.items() if spec.spot)

    def spot_prices(self, since: float | None, now: float) -> list[PricePoint]:
        """The spot price changes of our spot types after ``since`` up to ``now`` (the
        driver's clock), per ATU: for each, the highest price in force among the zones
        of the subnets (all the region's without subnets; ``ec2_market``), with the
        price in force at ``since`` (or now) dated when EC2 set it."""
        names = self.market_types()
        if not names:
            return []
        wall = time.time()
        end = datetime.fromtimestamp(wall, UTC)
        start = end if since is None else datetime.fromtimestamp(wall - (now - since), UTC)
        itypes = {name: self.settings.instances[name].instance_type for name in names}
        if self._zones is None:
            subnets = self.settings.subnets
            self._subnet_zones = subnet_zones(self.client, subnets) if subnets else {}
            self._zones = frozenset(self._subnet_zones.values())
        records = spot_price_history(self.client, sorted(set(itypes.values())), start, end)
        self._zone_prices = {**self._zone_prices, **latest_prices(records)}
        series = type_prices(records, self._zones)
        per_atu = self._capabilities.billing.atu_s / 3600.0
        out = [
            PricePoint(name, now - (wall - at.timestamp()), usd * per_atu)
            for name, itype in itypes.items()
            for at, usd in series.get(itype, [])
        ]
        return sorted(out, key=lambda p: p.at)

    # --- EC2 ----------------------------------------------------------------------------

    def _run_instances(self, ids: Sequence[str] | None) -> Iterator[InstanceTypeDef]:
        """Instances carrying this run's tag, all or among ``ids``.

        Always filtered by the tag: an unfiltered DescribeInstances lists the whole
        account. Ids go in as a filter too, which (unlike ``InstanceIds``) does not
        fail the whole call on one unknown id.
        """
        run: FilterTypeDef = {"Name": f"tag:{RUN_TAG}", "Values": [self.run_id]}
        with aws_errors(f"describing the instances of run {self.run_id}"):
            if ids is None:
                yield from _instances(self.client, [run])
                return
            for chunk in _chunks(list(dict.fromkeys(ids))):
                yield from _instances(self.client, [run, {"Name": "instance-id", "Values": chunk}])

    def _run_instances_live(self) -> Iterator[InstanceTypeDef]:
        filters: list[FilterTypeDef] = [
            {"Name": f"tag:{RUN_TAG}", "Values": [self.run_id]},
            {"Name": "instance-state-name", "Values": _LIVE_STATES},
        ]
        with aws_errors(f"describing the instances of run {self.run_id}"):
            yield from _instances(self.client, filters)

    def _run(
        self,
        type: str,
        spec: InstanceSpec,
        count: int,
        token: str,
        tags: Mapping[str, str],
        avoid_zones: Collection[str] = (),
    ) -> list[InstanceTypeDef]:
        """RunInstances per pool (subnet): the launch spread across them (``ec2_pools``),
        a pool without capacity for the type passing its share to the next pool, and
        after the last back to those that started all they were asked. The subnets in
        ``avoid_zones`` are left out while another subnet is not.

        Request n of the walk has a ``ClientToken`` of its own, derived from the launch
        token and n, and the walk starts at the launch token's pool (``first_pool``):
        another process replaying the launch with the same subnets outside the zones
        avoided and the same spot prices asks each pool for the same count under the
        same token, and EC2 answers with the instances it started then. A replay that
        asks otherwise (other zones avoided, the prices moved meanwhile) is refused the
        token (``IdempotentParameterMismatch``): the launch's instances are then looked
        up by their tag again and adopted (``_earlier``).

        What the pools refused is raised, as ``PartialLaunch`` when some machines started
        (they exist and are paid for: the run must own them); an error other than a
        pool's lack of room (an account limit) ends the walk. A launch every pool refused
        for lack of room is refused as the run should take it (``_refusal``).
        """
        request = self._request(type, spec, count, token, tags)
        subnets: Sequence[str | None] = self._subnets_outside(avoid_zones)
        first = client_token(self.run_id, token)
        start = first_pool(token, len(subnets))
        shares = spread(count, len(subnets), start, self._pool_prices(spec, subnets))
        started: list[InstanceTypeDef] = []
        failures: list[str] = []
        refused: list[AutoscalerError] = []  # the pools' lack of room, as met
        ended: AutoscalerError | None = None  # the error that ended the walk
        whole: list[int] = []  # pools that started all they were asked for
        carry = 0
        asks = [(s.pool, s.count) for s in shares]
        n = 0
        while asks:
            pool, share = asks.pop(0)
            ask = share + carry
            if ask <= 0:
                continue
            subnet = subnets[pool]
            # EC2 refuses a ClientToken reused with other parameters
            # (IdempotentParameterMismatch): each request gets its own, still
            # deterministic, so a retry of the same attempt stays idempotent.
            key = first if n == 0 else client_token(self.run_id, f"{token}#{n}")
            n += 1
            try:
                instances = self._run_in(type, spec, request, subnet, ask, key)
            except _NoRoom as exc:
                failures.append(f"{subnet or 'default subnet'}: {exc.message}")
                refused.append(exc)
                carry = ask
            except AutoscalerError as exc:
                if exc.code == _MISMATCH and (earlier := self._earlier(token)):
                    by_id = {i["InstanceId"]: i for i in [*started, *earlier]}
                    return list(by_id.values())
                if not started:
                    raise
                failures.append(exc.message)
                ended, carry = exc, ask
                break
            else:
                started += instances
                carry = ask - len(instances)
                if carry == 0:
                    whole.append(pool)
            if not asks and carry > 0 and whole:
                asks, whole = [(p, 0) for p in whole], []
        if carry <= 0 or not (refused or ended):
            return started
        why = ended or _refusal(refused)
        what = f"launching {count} x {spec.instance_type} (type {type!r})"
        if started:
            what += f": {len(started)} started, {carry} refused"
        message = f"{what}: " + "; ".join(failures)
        retryable = why.code == "InsufficientInstanceCapacity" or why.retryable
        if not started:
            raise AutoscalerError(message, retryable=retryable, code=why.code)
        records = [self._record(i, type, token) for i in started]
        raise PartialLaunch(records, message, retryable=retryable, code=why.code)

    def _earlier(self, token: str) -> list[InstanceTypeDef]:
        """The live instances an earlier attempt of ``token``'s launch started, found by
        the launch's tag: looked for a few times (``adopt_waits_s``), as DescribeInstances
        may not show them yet; none if they never show (or the lookups fail)."""
        filters: list[FilterTypeDef] = [
            {"Name": f"tag:{RUN_TAG}", "Values": [self.run_id]},
            {"Name": f"tag:{LAUNCH_TAG}", "Values": [token]},
            {"Name": "instance-state-name", "Values": _LIVE_STATES},
        ]
        for wait in self.adopt_waits_s:
            time.sleep(wait)
            try:
                with aws_errors(f"describing the instances of launch {token}"):
                    found = list(_instances(self.client, filters))
            except AutoscalerError:
                continue
            if found:
                return found
        return []

    def _run_in(
        self,
        type: str,
        spec: InstanceSpec,
        request: Mapping[str, Any],
        subnet: str | None,
        count: int,
        key: str,
    ) -> list[InstanceTypeDef]:
        """One RunInstances of ``count`` in ``subnet``; ``_NoRoom`` if the zone or
        subnet has no room for the type."""
        kwargs = {**request, "MaxCount": count, "ClientToken": key}
        if subnet is not None:
            kwargs["SubnetId"] = subnet
        where = f" in {subnet}" if subnet else ""
        what = f"launching {count} x {spec.instance_type} (type {type!r}){where}"
        try:
            reply = self.client.run_instances(**kwargs)
        except ClientError as exc:
            code = error_code(exc)
            if code not in _ZONE_CODES:
                raise as_ours(what, exc) from exc
            raise _NoRoom(f"{code}: {error_message(exc)}", code=code) from exc
        except BotoCoreError as exc:
            raise as_ours(what, exc) from exc
        instances = reply.get("Instances", [])
        for instance in instances:
            self._types[instance["InstanceId"]] = type
        return instances

    def _subnets_outside(self, zones: Collection[str]) -> Sequence[str | None]:
        """The subnets to launch in: those outside ``zones``, or all of them when every
        one is in (a launch the run decided goes somewhere); the default subnet without
        subnets."""
        subnets = self.settings.subnets
        if not subnets:
            return (None,)
        if not zones:
            return subnets
        if len(self._subnet_zones) < len(subnets):
            self._subnet_zones = {**self._subnet_zones, **subnet_zones(self.client, subnets)}
        outside = [s for s in subnets if self._subnet_zones.get(s) not in zones]
        return outside or subnets

    def _pool_prices(self, spec: InstanceSpec, subnets: Sequence[str | None]) -> list[float | None]:
        """Each subnet's latest spot price of ``spec`` (None where unknown), for a spot
        type whose prices are the market's; empty otherwise (pools taken in turn)."""
        if not (spec.spot and self.settings.spot_market and self.settings.subnets):
            return []
        zones, prices = self._subnet_zones, self._zone_prices
        return [prices.get((spec.instance_type, zones.get(s or "", ""))) for s in subnets]

    def _request(
        self, type: str, spec: InstanceSpec, count: int, token: str, tags: Mapping[str, str]
    ) -> dict[str, Any]:
        s = self.settings
        all_tags = {
            "Name": aws_tag_value(f"autoscaler {self.run_id} {type}"),
            **{key: aws_tag_value(value) for key, value in tags.items()},
            RUN_TAG: self.run_id,
            LAUNCH_TAG: token,
            TYPE_TAG: type,
        }
        tag_list = [{"Key": k, "Value": v} for k, v in all_tags.items()]
        request: dict[str, Any] = {
            "ImageId": s.ami,
            "InstanceType": spec.instance_type,
            "MinCount": 1,
            "MaxCount": count,
            "InstanceInitiatedShutdownBehavior": "terminate",
            "MetadataOptions": {
                "HttpTokens": "required",
                "HttpEndpoint": "enabled",
                "HttpPutResponseHopLimit": 1,
            },
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
        }
        if s.key_name:
            request["KeyName"] = s.key_name
        if s.security_groups:
            request["SecurityGroupIds"] = list(s.security_groups)
        if s.instance_profile:
            key = "Arn" if s.instance_profile.startswith("arn:") else "Name"
            request["IamInstanceProfile"] = {key: s.instance_profile}
        if s.user_data:
            data = s.user_data(token) if callable(s.user_data) else s.user_data
            request["UserData"] = data  # botocore encodes it in base64
        if spec.spot:
            options: dict[str, Any] = {
                "SpotInstanceType": "one-time",
                "InstanceInterruptionBehavior": "terminate",
            }
            if spec.max_price is not None:
                options["MaxPrice"] = f"{spec.max_price:.6f}"
            request["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": options}
        return request

    def _record(self, instance: InstanceTypeDef, type: str, token: str) -> MachineRecord:
        self._types[instance["InstanceId"]] = type
        zone = instance.get("Placement", {}).get("AvailabilityZone", "")
        return MachineRecord(
            instance["InstanceId"], type, token, self._launched_at(instance), zone=zone
        )

    def _launched_at(self, instance: InstanceTypeDef) -> float:
        """The launch on the driver's clock: now, less how long ago EC2 launched it."""
        launched = instance.get("LaunchTime")
        age = 0.0 if launched is None else max(0.0, time.time() - launched.timestamp())
        return self._clock() - age

    def _status(self, instance: InstanceTypeDef) -> MachineStatus:
        iid = instance["InstanceId"]
        mtype = _tags(instance).get(TYPE_TAG) or self._types.get(iid, "")
        state = _STATES.get(instance.get("State", {}).get("Name", ""), ProviderState.TERMINATED)
        key = "PublicIpAddress" if self.settings.address == "public" else "PrivateIpAddress"
        address = instance.get(key)
        why = None
        if state is ProviderState.TERMINATED:
            reason = instance.get("StateReason", {})
            why = (
                reason.get("Message") or reason.get("Code") or instance.get("StateTransitionReason")
            )
        return MachineStatus(iid, mtype, state, str(address) if address else None, why or None)


def _refusal(refused: Sequence[AutoscalerError]) -> AutoscalerError:
    """What the pools' refusals of (the rest of) a launch for lack of room mean to the
    run: a full subnet's (``SUBNET_CODES``: the provider's limit, holding all its types)
    only when every refusal was a full subnet's; else the type's lack of capacity in a
    zone (the last such refusal), whatever order the pools answered in."""
    capacity = [r for r in refused if r.code not in SUBNET_CODES]
    return (capacity or refused)[-1]


# --- cleanup: every run's instances -------------------------------------------------------


def list_tagged(settings: Ec2Settings) -> list[TaggedInstance]:
    """Every not-terminated instance in the region that carries the run tag (any run)."""
    client = _client(settings)
    filters: list[FilterTypeDef] = [
        {"Name": "tag-key", "Values": [RUN_TAG]},
        {"Name": "instance-state-name", "Values": _NOT_TERMINATED},
    ]
    out = []
    with aws_errors(f"listing the instances tagged {RUN_TAG} in {settings.region}"):
        for instance in _instances(client, filters):
            tags = _tags(instance)
            out.append(
                TaggedInstance(
                    id=instance["InstanceId"],
                    run_id=tags.get(RUN_TAG, ""),
                    type=tags.get(TYPE_TAG, ""),
                    state=instance.get("State", {}).get("Name", ""),
                    launched_at=instance["LaunchTime"],
                )
            )
    return out


def terminate_instances(settings: Ec2Settings, ids: Sequence[str]) -> list[str]:
    """Terminate those of ``ids`` that carry the run tag (of any run); return them.

    An instance without the tag is not ours to end, whatever id the user typed.
    """
    client = _client(settings)
    ours: list[str] = []
    with aws_errors(f"finding the tagged instances among {len(ids)} id(s)"):
        for chunk in _chunks(list(dict.fromkeys(ids))):
            filters: list[FilterTypeDef] = [
                {"Name": "tag-key", "Values": [RUN_TAG]},
                {"Name": "instance-id", "Values": chunk},
            ]
            ours += [i["InstanceId"] for i in _instances(client, filters)]
    for chunk in _chunks(ours):
        with aws_errors(f"terminating {len(chunk)} instance(s)"):
            client.terminate_instances(InstanceIds=chunk)
    return ours


# --- the kind -------------------------------------------------------------------------------


def ec2_settings(
    cfg: Platform, user_data: str | bytes | Callable[[str], str | bytes] | None = None
) -> Ec2Settings:
    """The provider settings of ``cfg``'s ``ec2`` section."""
    e = cfg.ec2
    if e is None:
        raise AutoscalerError("provider is ec2 but the config has no ec2 section")
    return Ec2Settings(
        region=e.region,
        ami=e.ami,
        instances={
            name: InstanceSpec(t.instance_type, spot=t.spot, max_price=_max_price(cfg, name))
            for name, t in e.types.items()
        },
        subnets=tuple(e.subnets),
        security_groups=tuple(e.security_groups),
        key_name=e.key_name,
        instance_profile=e.instance_profile,
        endpoint_url=e.endpoint_url,
        address=e.address,
        user_data=user_data,
        max_attempts=e.max_attempts,
        profile=e.profile,
        spot_market=e.spot_prices == "market",
    )


def _max_price(cfg: Platform, name: str) -> float | None:
    """The MaxPrice (USD per hour) of type ``name``'s spot requests: its ``max_price``;
    for a type whose price is the market's, its cap (``Platform.price_cap``) at the hour
    either way, so EC2 never bills a machine more than the budget committed on it."""
    spec = cfg.ec2_type(name)
    cap = cfg.price_cap(name)
    if spec is None or not spec.spot:
        return None
    if cap is None or spec.max_price is not None:
        return spec.max_price
    return cap * 3600.0 / cfg.billing.atu_s


def build(cfg: Platform, ctx: RunContext) -> Provider:
    """The EC2 provider of a real run of ``cfg``; with ``bootstrap: user-data`` its
    instances start their agents themselves, each launch's user data with that launch's
    token (``bootstrap.credentials``) and the run's CA pinned."""
    user_data: Callable[[str], str | bytes] | None = None
    if cfg.ec2 is not None and cfg.ec2.bootstrap == "user-data":
        from autoscaler.bootstrap.agent_start import agent_source
        from autoscaler.bootstrap.credentials import launch_token
        from autoscaler.bootstrap.userdata import render_user_data

        url, source, args = cfg.ec2.controller_url, agent_source(), ec2_agent_args(cfg)
        assert url is not None

        def render(launch: str) -> str | bytes:
            token = launch_token(ctx.token, launch)
            return render_user_data(
                source, url, token, args, poweroff_on_exit=True, register=True, ca_pem=ctx.ca_pem
            )

        user_data = render

    settings = ec2_settings(cfg, user_data)
    return Ec2Provider(KIND.capabilities(cfg, ctx.billing), ctx.run_id, settings, ctx.clock)


def sweeper(cfg: Platform) -> Sweeper:
    """Cleanup in the region of ``cfg``'s ``ec2`` section."""
    settings = ec2_settings(cfg)
    return Sweeper(
        lambda: [TaggedMachine(i.id, i.run_id, i.type, i.state) for i in list_tagged(settings)],
        lambda ids: terminate_instances(settings, ids),
    )


def direct(cfg: Platform) -> Direct:
    """Agents started from user data connect to ``controller_url``'s host; those of an SSH
    bootstrap come through its tunnels."""
    ec2 = cfg.ec2
    if ec2 is None:
        return Direct()
    if ec2.bootstrap == "ssh":
        return Direct(tunnelled=True)
    host = urlsplit(ec2.controller_url).hostname if ec2.controller_url else None
    return Direct(hosts=(host,) if host else ())


KIND = ProviderKind(
    "ec2", spot=True, build=build, sweeper=sweeper, bootstrapper=ssh_bootstrap, direct=direct
)
