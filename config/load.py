"""Loading a run's YAML file: parse, validate, resolve paths, expand the bag or the jobs.

Every way a file can be wrong ends in one ``ConfigError`` whose problems each name the
field (``machine_types[1].price``) and, where it is safe to show, the value as given.
"""

from __future__ import annotations

import itertools
import math
import string
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import ValidationError

from autoscaler.config.durations import seconds_in
from autoscaler.config.files import fill_files, resolve_inputs, sweep_combos
from autoscaler.config.needs import Needs, Row, fill_needs, is_table, read_table
from autoscaler.config.problems import validation_problems, yaml_problem
from autoscaler.config.schema import (
    Bag,
    IntRange,
    Job,
    JobMeans,
    Platform,
    RunConfig,
    SweepValues,
    TraceRuntime,
    Work,
)
from autoscaler.config.size import check_run_size
from autoscaler.config.slots import VcpuLookup, fill_slots
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.core.files import FileSpec
from autoscaler.core.model import TaskSpec

__all__ = [
    "check_files",
    "config_json_schema",
    "config_warnings",
    "expand_bag",
    "expand_jobs",
    "load_config",
    "load_trace",
    "read_text",
    "read_yaml",
    "resolve_paths",
    "task_means",
    "top_mapping",
    "validation_problems",
]

_NO_TASKS = "bag has no tasks"
_MAX_LINES_SHOWN = 10

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
        for field, bag in (_bags(cfg) if isinstance(cfg, Work) else [])
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
    if len(problems) > _MAX_LINES_SHOWN:
        more = len(problems) - _MAX_LINES_SHOWN
        problems = [*problems[:_MAX_LINES_SHOWN], f"... and {more} more bad lines"]
    if problems:
        raise ConfigError(source, problems)
    if not runtimes:
        raise ConfigError(source, ["the trace has no runtimes"])
    return runtimes


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


# --- the bag --------------------------------------------------------------------------


def expand_bag(cfg: RunConfig, *, source: str = "config") -> list[TaskSpec]:
    """The tasks of the bag, or of every job in the order given, with ids 0..N-1.

    ``command`` with ``sweep`` is formatted with every combination of the sweep values
    (the first key varies slowest); ``command`` alone is one task, taken verbatim.
    Each task carries its bag's environment and timeout. ``source`` names the config in
    errors.
    """
    return _expand(cfg, source)[0]


def expand_jobs(cfg: RunConfig, *, source: str = "config") -> list[tuple[Job, range]]:
    """Each job of deadline mode (``cfg.deadline_jobs()``) with the ids of its tasks
    in ``expand_bag``'s numbering; none in budget mode."""
    jobs = cfg.deadline_jobs()
    if not jobs:
        return []
    return list(zip(jobs, _expand(cfg, source)[1], strict=True))


def task_means(cfg: RunConfig, n_tasks: int) -> list[JobMeans | None]:
    """Per task id, the emulator's mean task time per machine type (its job's
    ``emulator_task_s``, else ``task_s``), or None where the job gives none or in
    budget mode."""
    means: list[JobMeans | None] = [None] * n_tasks
    for job, ids in expand_jobs(cfg):
        if ids.stop > n_tasks:
            raise AutoscalerError(
                f"job {job.name!r} owns tasks up to {ids.stop - 1}, the run has {n_tasks}"
            )
        job_means = job.emulator_means()
        for i in ids:
            means[i] = job_means
    return means


def _bags(cfg: Work) -> list[tuple[str, Bag]]:
    """Every bag of ``cfg`` with the field that gives it."""
    if cfg.bag is not None:
        return [("bag", cfg.bag)]
    return [(f"jobs[{i}].bag", j.bag) for i, j in enumerate(cfg.jobs)]


def _expand(cfg: RunConfig, source: str) -> tuple[list[TaskSpec], list[range]]:
    """All tasks numbered from 0, and the ids each bag owns; a run too big for memory is
    refused before any is made."""
    check_run_size(cfg, source)
    tasks: list[TaskSpec] = []
    owned: list[range] = []
    for field, bag in _bags(cfg):
        first = len(tasks)
        env, timeout = dict(bag.env), bag.timeout_s
        needs: Sequence[Needs] | None = None
        if bag.synthetic is not None:
            commands: Sequence[str | None] = [None] * bag.synthetic
        elif bag.file is not None and is_table(bag.file):
            rows = _table_rows(bag.file, source, field)
            commands, needs = [r.command for r in rows], [r.needs for r in rows]
        elif bag.file is not None:
            commands = _file_commands(bag.file, source, field)
        elif bag.command is not None and bag.sweep:
            also = bag.files.templates() if bag.files is not None else []
            commands = _sweep_commands(bag.command, bag.sweep, source, field, also)
        elif bag.command is not None:
            commands = [bag.command]
        else:  # the schema guarantees one source; keep the error typed if that ever changes
            raise ConfigError(source, [f"{field}: give exactly one of command, file or synthetic"])
        if bag.needs is not None:
            needs = _sweep_needs(bag, source, field)
        files = _bag_files(bag, source, field, len(commands))
        tasks.extend(
            TaskSpec(
                id=first + i,
                command=c,
                env=env,
                timeout_s=timeout,
                files=files[i],
                **_fields(needs, i),
            )
            for i, c in enumerate(commands)
        )
        owned.append(range(first, len(tasks)))
    return tasks, owned


def _bag_files(bag: Bag, source: str, field: str, n: int) -> Sequence[FileSpec | None]:
    """Each task's files (``config.files``; inputs already made absolute by
    ``resolve_paths``, else relative to the working directory)."""
    if bag.files is None:
        return [None] * n
    combos = _combos(bag) if bag.command is not None and bag.sweep else None
    specs, problems = fill_files(bag.files, combos, Path.cwd(), field)
    if problems:
        raise ConfigError(source, problems)
    return specs if combos is not None else specs * n


def _fields(needs: Sequence[Needs] | None, i: int) -> dict[str, Any]:
    """A task's requirements as ``TaskSpec`` fields (none: the defaults)."""
    if needs is None:
        return {}
    n = needs[i]
    return {
        "input_bytes": n.input_bytes,
        "estimate_s": n.estimate_s,
        "output_bytes": n.output_bytes,
        "category": n.category,
    }


def _table_rows(path: Path, source: str, field: str) -> list[Row]:
    rows, problems = read_table(read_text(path, source, f"{field}.file"), path, f"{field}.file")
    if problems:
        raise ConfigError(source, problems[:_MAX_LINES_SHOWN])
    if not rows:
        raise ConfigError(source, [f"{field}.file: {_NO_TASKS}: no commands in {path}"])
    return rows


def _sweep_needs(bag: Bag, source: str, field: str) -> list[Needs]:
    """``bag.needs`` filled for each combination of the sweep, in the commands' order."""
    assert bag.needs is not None
    needs, problems = fill_needs(bag.needs.model_dump(), _combos(bag), f"{field}.needs")
    if problems:
        raise ConfigError(source, problems)
    return needs


def _combos(bag: Bag) -> list[dict[str, object]]:
    """Every combination of the bag's sweep values, in the order of its commands."""
    values = {
        name: range(v.start, v.stop, v.step) if isinstance(v, IntRange) else v
        for name, v in bag.sweep.items()
    }
    return sweep_combos(values)


def _file_commands(path: Path, source: str, field: str = "bag") -> list[str]:
    commands = []
    for line in read_text(path, source, f"{field}.file").splitlines():
        text = line.strip()
        if text and not text.startswith("#"):
            commands.append(text)
    if not commands:
        raise ConfigError(source, [f"{field}.file: {_NO_TASKS}: no commands in {path}"])
    return commands


def _sweep_commands(
    template: str,
    sweep: Mapping[str, SweepValues],
    source: str,
    bag: str = "bag",
    also: Sequence[str] = (),
) -> list[str]:
    """The commands; ``also``: more templates of the bag (its files') that use the sweep."""
    problems: list[str] = []
    try:
        fields = [name for _, name, _, _ in string.Formatter().parse(template) if name is not None]
        more = [n for t in also for _, n, _, _ in string.Formatter().parse(t) if n is not None]
    except ValueError as exc:
        raise ConfigError(source, [f"{bag}.command: not a valid template: {exc}"]) from None
    used: set[str] = {n.split(".", 1)[0].split("[", 1)[0] for n in more}
    for field in fields:
        name = field.split(".", 1)[0].split("[", 1)[0]
        if not name or name.isdigit():
            problems.append(
                f"{bag}.command: placeholders need a sweep name, as in {{alpha}} (got {{{field}}})"
            )
        elif name not in sweep:
            problems.append(f"{bag}.command: placeholder {{{name}}} is not in {bag}.sweep")
        used.add(name)
    problems.extend(
        f"{bag}.sweep.{name}: not used in {bag}.command" for name in sweep if name not in used
    )

    values: dict[str, Sequence[object]] = {}
    for name, given in sweep.items():
        if isinstance(given, IntRange):
            values[name] = range(given.start, given.stop, given.step)
        else:
            values[name] = given
            if not given:
                problems.append(f"{bag}.sweep.{name}: {_NO_TASKS}: the list is empty (got [])")
    if problems:
        raise ConfigError(source, problems)

    names = list(values)
    try:
        return [
            template.format_map(dict(zip(names, combo, strict=True)))
            for combo in itertools.product(*values.values())
        ]
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as exc:
        raise ConfigError(source, [f"{bag}.command: cannot fill the template: {exc}"]) from None
