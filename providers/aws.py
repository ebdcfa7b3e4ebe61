"""AWS through boto3, configured in one place (as SkyPilot's ``sky/adaptors/aws.py``):
sessions and clients (one session per thread), botocore's retries, and its errors as
ours. ``ec2`` and ``ec2_prices`` call AWS through it.

Throttling is retried by botocore (standard mode, exponential backoff with jitter); an
error that outlasts the retries comes out as an ``AutoscalerError`` carrying the AWS
error code, retryable when throttling or a server error may pass.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import boto3
import botocore.session
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError, ProfileNotFound
from botocore.loaders import Loader

from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.base import CAPACITY_CODES, LIMIT_CODES

if TYPE_CHECKING:
    from mypy_boto3_ec2 import EC2Client
    from mypy_boto3_pricing import PricingClient

# What botocore's standard mode retries as throttling: still throttled after its retries,
# the call may succeed later.
_THROTTLE_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottledException",
        "TooManyRequestsException",
        "RequestThrottled",
        "EC2ThrottledException",
        "BandwidthLimitExceeded",
        "PriorRequestNotComplete",
    }
)
_SERVER_CODES = frozenset({"InternalError", "InternalFailure", "ServiceUnavailable", "Unavailable"})


def _config(max_attempts: int) -> Config:
    # ``total_max_attempts`` counts the first request too; botocore's ``max_attempts``
    # key would count only the retries after it (8 would mean 9 requests).
    return Config(
        retries={"mode": "standard", "total_max_attempts": max_attempts},
        connect_timeout=10,
        read_timeout=30,
    )


# Making sessions and clients reads botocore's data files into shared caches; done
# concurrently it has failed (boto/boto3#1592): one at a time.
_CREATE_LOCK = threading.Lock()
# botocore's data files (the EC2 model alone takes about 0.3 s of CPU to parse) are
# read once per process: every new session is given the same loader, which caches
# what it has read. A session itself stays new per client (its credentials and
# profile are resolved afresh), and is never boto3's default session.
_LOADER: list[Loader] = []


def _session(profile: str | None) -> boto3.session.Session:
    """A new session of ``profile`` on the process's loader (call under ``_CREATE_LOCK``)."""
    core = botocore.session.get_session()
    if not _LOADER:
        _LOADER.append(core.get_component("data_loader"))
    core.register_component("data_loader", _LOADER[0])
    session = boto3.session.Session(botocore_session=core, profile_name=profile)
    try:  # a profile named is looked up now, not at the first call
        session.get_credentials()
    except ProfileNotFound:
        raise AutoscalerError(
            f"ec2.profile: no AWS profile named {profile!r} in the AWS config files"
        ) from None
    return session


def ec2_client(
    region: str, endpoint_url: str | None, max_attempts: int, profile: str | None = None
) -> EC2Client:
    """A new EC2 client, made from the process's session of ``profile`` under a lock.
    ``max_attempts``: requests per call, the first included; ``profile``: a named
    profile of the AWS config files (None: boto3's usual chain)."""
    with _CREATE_LOCK:
        session = _session(profile)
        client: EC2Client = session.client(
            "ec2",
            region_name=region,
            endpoint_url=endpoint_url,
            config=_config(max_attempts),
        )
    # botocore's standard mode retries every HTTP 5xx, and EC2 answers a capacity
    # shortage with a 500: retrying it in the same zone only delays the walk to the
    # next one (and spends the account's RunInstances rate). Raise those at once.
    client.meta.events.register_first("needs-retry.ec2.RunInstances", _no_retry_in_zone)
    return client


def s3_client(region: str | None, endpoint_url: str | None) -> Any:
    """A new S3 client on the process's loader (task outputs: ``providers.s3``)."""
    with _CREATE_LOCK:
        return _session(None).client(
            "s3", region_name=region, endpoint_url=endpoint_url, config=_config(5)
        )


def pricing_client(endpoint_url: str | None = None) -> PricingClient:
    """A Pricing API client on a new session of its own (for ``ec2_prices``).

    The API lives in us-east-1 whatever region it prices.
    """
    with _CREATE_LOCK:
        client: PricingClient = _session(None).client(
            "pricing", region_name="us-east-1", endpoint_url=endpoint_url, config=_config(8)
        )
    return client


class ThreadClients:
    """Each thread's own EC2 client and session, made by ``make`` on the thread's first
    call.

    The daemon calls one provider from several threads (its executor, the bootstrap
    threads); boto3 sessions are not thread-safe, so none is shared between threads.
    """

    def __init__(self, make: Callable[[], EC2Client]) -> None:
        self._make = make
        self._local = threading.local()

    def ec2(self) -> EC2Client:
        client: EC2Client | None = getattr(self._local, "ec2", None)
        if client is None:
            client = self._make()
            self._local.ec2 = client
        return client


def _no_retry_in_zone(response: Any = None, **kwargs: Any) -> None:
    """A ``needs-retry`` hook: a zone or limit error ends the call, as a ``ClientError``."""
    if response is None:
        return
    parsed = response[1]
    code = parsed.get("Error", {}).get("Code")
    if code in CAPACITY_CODES or code in LIMIT_CODES:
        raise ClientError(parsed, "RunInstances")


def error_code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code") or "Unknown")


def error_message(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Message") or exc)


def as_ours(what: str, exc: ClientError | BotoCoreError) -> AutoscalerError:
    """botocore's error as ours: the AWS code, what we were doing, AWS's message.

    Never the request itself: a request is signed with the credentials.
    """
    if isinstance(exc, ClientError):
        code = error_code(exc)
        retryable = code in _THROTTLE_CODES or code in _SERVER_CODES
        return AutoscalerError(
            f"{what}: {code}: {error_message(exc)}", retryable=retryable, code=code
        )
    if isinstance(exc, NoCredentialsError):
        return AutoscalerError(f"{what}: no AWS credentials found", code="NoCredentials")
    # Connection refused or timed out, after botocore's retries.
    name = type(exc).__name__
    return AutoscalerError(f"{what}: {name}: {exc}", retryable=True, code=name)


@contextmanager
def aws_errors(what: str) -> Iterator[None]:
    """Raise botocore's errors in the block as ours (``as_ours``): for every AWS call of the
    project, so modules that do not import boto3 (``ec2_prices``) can wrap theirs too."""
    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise as_ours(what, exc) from exc
