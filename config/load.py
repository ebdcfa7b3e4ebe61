"""Loading a run's YAML file: parse, validate, resolve paths, check the files it names
(its bag is expanded into tasks by ``config/bag.py``).

Every way a file can be wrong ends in one ``ConfigError`` whose problems each name the
field (``machine_types[1].price``) and, where it is safe to show, the value as given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from autoscaler.config.durations import seconds_in
from autoscaler.config.files import resolve_inputs
from autoscaler.config.problems import validation_problems, yaml_problem
from autoscaler.config.schema import Bag, Platform, RunConfig, TraceRuntime, Work
from autoscaler.config.slots import VcpuLookup, fill_slots
from autoscaler.core.errors import AutoscalerError, ConfigError

__all__ = [
    "check_files",
    "config_json_schema",
    "config_warnings",
    "load_config",
    "load_price_trace",
    "load_trace",
    "read_text",
    "read_yaml",
    "resolve_paths",
    "top_mapping",
    "validation_problems",
]

MAX_LINES_SHOWN = 10
"""The most bad lines of a file one ``ConfigError`` lists."""

# --- loading --------------------------------------------------------------------------


PriceLookup = Callable[[Sequence[str], str, "str | None"], Mapping[str, float]]
"""(instance types, region, endpoint) -> USD per hour of those it found."""


def load_config(
    path: str | Path, prices: PriceLookup | None = None, vcpus: VcpuLookup | None = None
) -> RunConfig:
    """Read, validate and resolve one config file; raise ``ConfigError`` on any problem.

    Relative paths in the file are taken relative to the file's directory, and the
    files they name must exist (a trace file must also parse). With ``prices``, an EC2
    config that sets ``ec2.lookup_prices`` gets the machine types it gives no price
    filled in from the on-demand price per hour, scaled to the ATU; with ``vcpus``, one
    that sets ``ec2.lookup_slots`` gets the machine types it gives no ``slots`` their
    instance type's vCPUs divided by the bag's ``cpus`` (at least 1).
    """
    path = Path(path)
    source = str(path)
    data = read_yaml(path, "fields (bag, constraint, ...)")
    _read_price_traces(data, path.absolute().parent, source)
    if prices is not None:
        _fill_prices(data, prices, source)
    if vcpus is not None:
        fill_slots(data, vcpus, source)
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(source, validation_problems(exc, data)) from None

    cfg = resolve_paths(cfg, path.absolute().parent)
    check_files(cfg, source)
    return cfg


def read_yaml(path: Path, what: str) -> dict[str, Any]:
    """A YAML file's top-level mapping (of ``what``), or a ``ConfigError`` naming the file."""
    source = str(path)
    try:
        data = yaml.safe_load(read_text(path, source))
    except yaml.YAMLError as exc:
        raise ConfigError(source, [yaml_problem(exc)]) from None
    return top_mapping(data, source, what)


def top_mapping(data: object, source: str, what: str) -> dict[str, Any]:
    """``data``, a file's top level, if it is a mapping (of ``what``)."""
    if not isinstance(data, dict):
        got = "an empty file" if data is None else f"a {type(data).__name__}"
        raise ConfigError(source, [f"the top level must be a mapping of {what}, got {got}"])
    return data


def _fill_prices(data: dict[str, Any], prices: PriceLookup, source: str) -> None:
    """Put looked-up prices into the raw config where machine types give none."""
    ec2 = data.get("ec2")
    types = data.get("machine_types")
    if data.get("provider") != "ec2" or not isinstance(ec2, dict) or not isinstance(types, list):
        return
    if ec2.get("lookup_prices") is not True or not isinstance(ec2.get("types"), dict):
        return
    wanted: dict[int, str] = {}
    for i, t in enumerate(types):
        if isinstance(t, dict) and "price" not in t:
            spec = ec2["types"].get(t.get("name"))
            if isinstance(spec, dict) and isinstance(spec.get("instance_type"), str):
                wanted[i] = spec["instance_type"]
    if not wanted:
        return
    region, endpoint = str(ec2.get("region")), ec2.get("endpoint_url")
    try:
        found = prices(sorted(set(wanted.values())), region, endpoint)
    except AutoscalerError as exc:
        raise ConfigError(source, [f"ec2.lookup_prices: {exc.message}"]) from None
    billing = data.get("billing") if isinstance(data.get("billing"), dict) else {}
    atu = billing.get("atu_s", 3600.0)  # type: ignore[union-attr]
    atu = seconds_in(atu) if isinstance(atu, str) else atu
    if not isinstance(atu, int | float):
        return  # validation names the bad ATU
    problems = []
    for i, itype in wanted.items():
        if itype in found:
            types[i]["price"] = round(found[itype] * atu / 3600.0, 6)
        else:
            problems.append(
                f"machine_types[{i}].price: not given, and the AWS Pricing API has no "
                f"on-demand Linux price for {itype} in {region}"
            )
    if problems:
        raise ConfigError(source, problems)


C = TypeVar("C", bound=Platform)


def resolve_paths(cfg: C, base_dir: str | Path) -> C:
    """Return ``cfg`` (a run config, or a platform alone) with its relative file paths
    made relative to ``base_dir``."""
    base = Path(base_dir)

    def resolve(p: Path) -> Path:
        p = p.expanduser()
        return p if p.is_absolute() else base / p

    def resolve_bag(bag: Bag) -> Bag:
        if bag.files is not None:
            bag = bag.model_copy(update={"files": resolve_inputs(bag.files, base)})
        return bag if bag.file is None else bag.model_copy(update={"file": resolve(bag.file)})

    if isinstance(cfg, Work) and cfg.bag is not None:
        cfg = cfg.model_copy(update={"bag": resolve_bag(cfg.bag)})
    if isinstance(cfg, Work) and cfg.jobs:
        jobs = [j.model_copy(update={"bag": resolve_bag(j.bag)}) for j in cfg.jobs]
        cfg = cfg.model_copy(update={"jobs": jobs})
    runtime = cfg.emulator.runtime
    if isinstance(runtime, TraceRuntime):
        emulator = cfg.emulator.model_copy(
            update={"runtime": runtime.model_copy(update={"file": resolve(runtime.file)})}
        )
        cfg = cfg.model_copy(update={"emulator": emulator})
    if cfg.ec2 is not None and cfg.ec2.ssh is not None:
        ssh = cfg.ec2.ssh.model_copy(update={"key_file": resolve(cfg.ec2.ssh.key_file)})
        cfg = cfg.model_copy(update={"ec2": cfg.ec2.model_copy(update={"ssh": ssh})})
    return cfg


def check_files(cfg: Platform, source: str) -> None:
    """Refuse ``cfg`` (a run config, or a platform alone) if a file it names is missing
    or, for a trace, does not parse; ``source`` names the config."""
    problems = [
        f"{field}.file: no such file: {bag.file}"
        for field, bag in (cfg.bags() if isinstance(cfg, Work) else [])
        if bag.file is not None and not bag.file.is_file()
    ]
    runtime = cfg.emulator.runtime
    if isinstance(runtime, TraceRuntime):
        if not runtime.file.is_file():
            problems.append(f"emulator.runtime.file: no such file: {runtime.file}")
        else:
            try:
                load_trace(runtime.file)
            except ConfigError as exc:
                problems.extend(f"emulator.runtime.file: {exc.source}, {p}" for p in exc.problems)
    if problems:
        raise ConfigError(source, problems)


def load_trace(path: str | Path) -> list[float]:
    """Runtimes in seconds, one per line; blank lines and ``#`` comments are skipped.

    A ``ConfigError`` names the file and, for a bad value, its line.
    """
    source = str(path)
    runtimes: list[float] = []
    problems: list[str] = []
    for number, line in enumerate(read_text(Path(path), source).splitlines(), start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            value = float(text)
        except ValueError:
            problems.append(f"line {number}: not a number (got {text!r})")
            continue
        if not (value > 0 and math.isfinite(value)):
            problems.append(f"line {number}: a runtime must be a positive number (got {text})")
            continue
        runtimes.append(value)
    if len(problems) > MAX_LINES_SHOWN:
        more = len(problems) - MAX_LINES_SHOWN
        problems = [*problems[:MAX_LINES_SHOWN], f"... and {more} more bad lines"]
    if problems:
        raise ConfigError(source, problems)
    if not runtimes:
        raise ConfigError(source, ["the trace has no runtimes"])
    return runtimes


def _read_price_traces(data: dict[str, Any], base: Path, source: str) -> None:
    """Put the points of each ``emulator.spot_prices`` trace given as a file (relative
    to ``base``) into the raw config, so validation sees every trace alike."""
    emulator = data.get("emulator")
    traces = emulator.get("spot_prices") if isinstance(emulator, dict) else None
    if not isinstance(traces, dict):
        return
    for name, trace in traces.items():
        if isinstance(trace, str):
            file = Path(trace).expanduser()
            file = file if file.is_absolute() else base / file
            field = f"emulator.spot_prices.{name}"
            traces[name] = [list(p) for p in load_price_trace(file, source, field)]


def load_price_trace(path: Path, source: str, field: str) -> list[tuple[float, float]]:
    """A price trace's points from a CSV file: ``time_s,price`` lines (a first line that
    does not parse is a header; blank lines and ``#`` comments are skipped). A
    ``ConfigError`` of ``source`` names ``field``, the file and the bad line."""
    points: list[tuple[float, float]] = []
    header = False
    lines = read_text(path, source, field).splitlines()
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        cells = [c.strip() for c in text.split(",")]
        try:
            if len(cells) != 2:
                raise ValueError
            points.append((float(cells[0]), float(cells[1])))
        except ValueError:
            if not points and not header:
                header = True
                continue
            raise ConfigError(
                source, [f"{field}: {path} line {number}: not time_s,price (got {text!r})"]
            ) from None
    return points


def read_text(path: Path, source: str, field: str = "") -> str:
    prefix = f"{field}: " if field else ""
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source, [f"{prefix}cannot read {path}: {exc.strerror or exc}"]) from None
    except UnicodeDecodeError:
        raise ConfigError(source, [f"{prefix}cannot read {path}: not UTF-8 text"]) from None


def config_warnings(cfg: RunConfig) -> list[str]:
    """What is valid in ``cfg`` but likely not meant: each a sentence naming the fields.

    A machine type left out of ``emulator.speed`` runs at speed 1 in a dry run (and in a
    local run's synthetic tasks); with several types that silently changes which type
    the planner prefers, and can turn a finishing run into one that stops early.
    """
    jobs = cfg.deadline_jobs()
    if len(cfg.machine_types) < 2 or (jobs and all(j.emulator_means() for j in jobs)):
        return []  # every job's tasks run at the job's own means: the speeds are unused
    missing = [t.name for t in cfg.machine_types if t.name not in cfg.emulator.speed]
    if not missing:
        return []
    return [
        f"emulator.speed gives no speed for machine type{'s' if len(missing) > 1 else ''} "
        f"{', '.join(missing)}: a dry run runs {'them' if len(missing) > 1 else 'it'} at speed 1"
    ]


def config_json_schema() -> dict[str, Any]:
    """The JSON Schema of a config file (what ``config/schema.json`` holds)."""
    return RunConfig.model_json_schema(mode="validation")
