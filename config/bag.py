"""A config's bag as tasks: the bag, or every job's, expanded into ``TaskSpec``s numbered
from 0: a count of synthetic tasks, one command, a command over every combination of a
sweep, or a file of commands (or a table of commands with what each needs), each task
with its bag's environment, timeout and files.

Every way a bag can be wrong ends in one ``ConfigError`` whose problems each name the
field (``jobs[1].bag.sweep.alpha``); a run too big for memory is refused before any task
is made.
"""

from __future__ import annotations

import itertools
import string
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autoscaler.config.files import fill_files, sweep_combos
from autoscaler.config.load import MAX_LINES_SHOWN, read_text
from autoscaler.config.needs import Needs, Row, fill_needs, is_table, read_table
from autoscaler.config.schema import Bag, IntRange, Job, JobMeans, RunConfig, SweepValues
from autoscaler.config.size import check_run_size
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.core.model import TaskSpec
from autoscaler.core.task_files import FileSpec

_NO_TASKS = "bag has no tasks"


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


def _expand(cfg: RunConfig, source: str) -> tuple[list[TaskSpec], list[range]]:
    """All tasks numbered from 0, and the ids each bag owns; a run too big for memory is
    refused before any is made."""
    check_run_size(cfg, source)
    tasks: list[TaskSpec] = []
    owned: list[range] = []
    for field, bag in cfg.bags():
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
        raise ConfigError(source, problems[:MAX_LINES_SHOWN])
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
