"""What EC2 says of an instance type: its vCPUs (DescribeInstanceTypes), for a machine
type's default ``slots`` under ``ec2.lookup_slots: true``.

The client comes from ``providers/aws.py``, the one module that imports boto3; botocore's
errors come out as ``AutoscalerError`` through its ``aws_errors``. Asked once, when a
config is loaded for a run, and only when the config says so: a dry run or a validation
of a config without that setting never calls the cloud.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.aws import aws_errors, ec2_client


def lookup_vcpus(
    instance_types: Sequence[str],
    region: str,
    endpoint_url: str | None = None,
    profile: str | None = None,
) -> dict[str, int]:
    """Default vCPUs of each instance type in ``region``; a type EC2 does not know is
    left out of the answer (the caller names it)."""
    wanted = sorted(set(instance_types))
    if not wanted:
        return {}
    client = ec2_client(region, endpoint_url, 3, profile)
    out: dict[str, int] = {}
    for itype in wanted:  # one by one: an unknown type fails the whole call
        kwargs: dict[str, Any] = {"InstanceTypes": [itype]}
        try:
            with aws_errors(f"looking up the vCPUs of {itype} in {region}"):
                reply = client.describe_instance_types(**kwargs)
        except AutoscalerError as exc:
            if exc.code is not None and exc.code.startswith("InvalidInstanceType"):
                continue
            raise
        for info in reply.get("InstanceTypes", []):
            vcpus = info.get("VCpuInfo", {}).get("DefaultVCpus")
            if isinstance(vcpus, int) and vcpus > 0:
                out[str(info.get("InstanceType"))] = vcpus
    return out
