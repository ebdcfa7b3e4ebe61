"""A machine type's default ``slots`` on EC2 (``ec2.lookup_slots: true``): its instance
type's vCPUs divided by the bag's ``cpus``, floored, at least 1, filled into the raw
config before it is validated, so the run's resolved config says what was chosen."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autoscaler.core.errors import AutoscalerError, ConfigError

VcpuLookup = Callable[[Sequence[str], str, "str | None", "str | None"], Mapping[str, int]]
"""(instance types, region, endpoint, profile) -> default vCPUs of those it found."""


def _ec2_sections(data: dict[str, Any]) -> dict[str | None, dict[str, Any]]:
    """Each EC2 section that asks for ``lookup_slots``, by provider name (None: the
    one-provider form)."""
    out: dict[str | None, dict[str, Any]] = {}
    ec2 = data.get("ec2")
    if data.get("provider") == "ec2" and isinstance(ec2, dict):
        out[None] = ec2
    providers = data.get("providers")
    if isinstance(providers, dict):
        for name, section in providers.items():
            if isinstance(section, dict) and section.get("kind") == "ec2":
                out[str(name)] = section
    return {
        k: v
        for k, v in out.items()
        if v.get("lookup_slots") is True and isinstance(v.get("types"), dict)
    }


def _cpus(data: dict[str, Any]) -> int:
    bag = data.get("bag")
    cpus = bag.get("cpus", 1) if isinstance(bag, dict) else 1
    return cpus if isinstance(cpus, int) and cpus > 0 else 1  # validation names a bad one


def fill_slots(data: dict[str, Any], vcpus: VcpuLookup, source: str) -> None:
    """Put ⌊vCPUs / bag.cpus⌋ (at least 1) into the raw config's machine types on EC2
    that give no ``slots``, for sections with ``lookup_slots: true``."""
    types = data.get("machine_types")
    if not isinstance(types, list):
        return
    cpus = _cpus(data)
    problems = []
    for provider, section in _ec2_sections(data).items():
        wanted: dict[int, str] = {}
        for i, t in enumerate(types):
            if not isinstance(t, dict) or "slots" in t or t.get("provider") != provider:
                continue
            spec = section["types"].get(t.get("name"))
            if isinstance(spec, dict) and isinstance(spec.get("instance_type"), str):
                wanted[i] = spec["instance_type"]
        if not wanted:
            continue
        region = str(section.get("region"))
        where = "ec2" if provider is None else f"providers.{provider}"
        try:
            found = vcpus(
                sorted(set(wanted.values())),
                region,
                section.get("endpoint_url"),
                section.get("profile"),
            )
        except AutoscalerError as exc:
            raise ConfigError(source, [f"{where}.lookup_slots: {exc.message}"]) from None
        for i, itype in wanted.items():
            if itype in found:
                types[i]["slots"] = max(1, found[itype] // cpus)
            else:
                problems.append(
                    f"machine_types[{i}].slots: not given, and EC2 does not describe "
                    f"{itype} in {region}"
                )
    if problems:
        raise ConfigError(source, problems)
