"""The work of a run: one bag with its constraint, or deadline ``jobs``, each a bag
with its own. A run config is a platform (``config.platform``) plus this."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    PositiveFloat,
    PositiveInt,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from autoscaler.config.budgets import budget_problem
from autoscaler.config.durations import Seconds
from autoscaler.config.files import BagFiles
from autoscaler.config.needs import Bytes
from autoscaler.config.strict import ConfigModel, Name, known_types
from autoscaler.core.errors import AutoscalerError


def _valid_budget(budget: float) -> float:
    problem = budget_problem(budget)
    if problem is not None:
        raise ValueError(problem)
    return budget


Budget = Annotated[PositiveFloat, AfterValidator(_valid_budget)]
"""A budget as a config gives it: positive and finite (``config.budgets``)."""


# --- the bag -------------------------------------------------------------------------


class IntRange(ConfigModel):
    """``{start: 0, stop: 10, step: 1}``: Python's ``range``, stop excluded."""

    start: int = 0
    stop: int
    step: int = 1

    @model_validator(mode="after")
    def _nonempty(self) -> IntRange:
        if self.step == 0:
            raise ValueError("step must not be 0")
        if not range(self.start, self.stop, self.step):  # len() overflows past 2**63
            raise ValueError(f"range({self.start}, {self.stop}, {self.step}) is empty")
        return self


SweepValues = list[str | int | float] | IntRange


class TaskNeeds(ConfigModel):
    """What every task of a ``command`` bag needs (paper 004: input size, estimated
    time, output size) or its category label, each a value or a template filled with
    the sweep's values like the command (``"{size}KB"``)."""

    input_bytes: float | str | None = Field(default=None, description="bytes, or with KB, MB, GB")
    estimate_s: float | str | None = Field(default=None, description="seconds, or a duration")
    output_bytes: float | str | None = Field(default=None, description="bytes, or with KB, MB, GB")
    category: str | None = Field(default=None, description="a category label")


class Bag(ConfigModel):
    """The tasks. Exactly one of ``command`` (with ``sweep``), ``file`` or ``synthetic``.

    * ``command`` is a template, ``{name}`` replaced by each combination of the
      ``sweep`` values (the cartesian product, in the order the names are given);
      ``needs`` says what its tasks need, with the same templates;
    * ``file`` names a text file with one command per line (blank lines and lines
      starting with ``#`` skipped), relative to the config file; a ``.csv`` or
      ``.tsv`` file is a table with a header: a ``command`` column and optional
      ``input_bytes``, ``estimate_s``, ``output_bytes`` and ``category`` columns;
    * ``synthetic`` is a count of tasks for emulation; their runtimes come from
      ``emulator.runtime``.
    """

    command: str | None = None
    sweep: dict[str, SweepValues] = Field(default_factory=dict)
    file: Path | None = None
    synthetic: PositiveInt | None = None
    env: dict[str, str] = Field(default_factory=dict, description="environment of every task")
    max_retries: int = Field(
        default=2, ge=0, description="re-runs of a failed task before it is failed"
    )
    timeout_s: Seconds | None = Field(default=None, gt=0, description="per-task timeout")
    cpus: PositiveInt = Field(
        default=1, description="cores one task uses (a type's default slots: its vCPUs / cpus)"
    )
    needs: TaskNeeds | None = Field(
        default=None, description="what each task of a command bag needs (templates allowed)"
    )
    files: BagFiles | None = Field(
        default=None,
        description="inputs put in each task's work directory, outputs kept (config.files)",
    )

    @model_validator(mode="after")
    def _exactly_one_source(self) -> Bag:
        given = [
            name
            for name, value in (
                ("command", self.command),
                ("file", self.file),
                ("synthetic", self.synthetic),
            )
            if value is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of command, file or synthetic"
                + (f" (got {', '.join(given)})" if given else "")
            )
        if self.sweep and self.command is None:
            raise ValueError("sweep needs a command template")
        if self.files is not None and self.synthetic is not None:
            raise ValueError("files: only with a command or a file (synthetic tasks have none)")
        if self.needs is not None and self.command is None:
            raise ValueError(
                "needs: only with a command (a .csv or .tsv file gives them in its columns)"
            )
        return self


class Categories(ConfigModel):
    """Sorting the tasks into categories (paper 004 §4.1): by their requirements, each
    level binned by its class interval (bins [0, 1.5 CI), [1.5 CI, 2.5 CI), ...; a level
    without an interval is not split), or by their ``category`` labels. Sampling runs
    ``benchmark_tasks`` tasks of each of the largest ``benchmark_share`` of categories
    on each machine type."""

    by: Literal["requirements", "label"] = "requirements"
    input_bytes: Bytes | None = Field(default=None, gt=0, description="class interval of inputs")
    estimate_s: Seconds | None = Field(
        default=None, gt=0, description="class interval of estimates"
    )
    output_bytes: Bytes | None = Field(default=None, gt=0, description="class interval of outputs")
    benchmark_share: float = Field(default=0.2, gt=0, le=1)
    benchmark_tasks: PositiveInt = 2

    @model_validator(mode="after")
    def _intervals(self) -> Categories:
        given = [self.input_bytes, self.estimate_s, self.output_bytes]
        if self.by == "requirements" and all(v is None for v in given):
            raise ValueError(
                "give a class interval (input_bytes, estimate_s or output_bytes), or by: label"
            )
        if self.by == "label" and any(v is not None for v in given):
            raise ValueError("by: label takes no class intervals")
        return self


# --- constraint, billing, machine types -----------------------------------------------


class Constraint(ConfigModel):
    """What the run, or one job, must respect: a budget, a deadline, or both.

    With both, the deadline is met only as far as the budget allows. A deadline is in
    seconds from the job's arrival (for a single bag, from the start of the run).
    """

    budget: Budget | None = Field(default=None, description="money, in the prices' currency")
    deadline_s: Seconds | None = Field(
        default=None,
        gt=0,
        description="deadline mode: seconds from the job's arrival (the run's start for a bag)",
    )
    on_shortfall: Literal["continue", "stop"] = Field(
        default="continue",
        description=(
            "when the budget is unlikely to finish the bag (said in the log, status, "
            "metrics and report, with the budget needed): continue finishes as many tasks "
            "as the budget pays for; stop ends the run at once and spends nothing more"
        ),
    )

    @model_validator(mode="after")
    def _one(self) -> Constraint:
        if self.budget is None and self.deadline_s is None:
            raise ValueError("give a budget, a deadline_s, or both")
        return self


# --- deadline mode: jobs --------------------------------------------------------------


class Job(ConfigModel):
    """Deadline mode (paper 002): one bag that arrives ``at`` seconds into the run and
    must finish ``constraint.deadline_s`` seconds after it arrives.

    ``task_s`` gives the mean task time per machine type when it is known (a recurring
    application): the job then runs only on the types it names. Empty, the means are
    unknown and the controller samples them. ``emulator_task_s`` is for dry runs and
    synthetic tasks only: the true mean per type the emulator runs the job's tasks at
    (a type it leaves out takes ``task_s``'s). ``app`` names the job's application
    (default: its name): ``task_s`` is a prior that runs of the application correct
    (``deadline.learn_task_times``), and the service remembers what its tasks took.
    """

    name: Name
    app: Name | None = Field(
        default=None,
        description="the job's application (default: its name): jobs of one application "
        "learn each other's task times, and the service remembers them for later jobs",
    )
    bag: Bag
    constraint: Constraint = Field(description="must give deadline_s; a budget is optional")
    at: Seconds = Field(default=0.0, ge=0, description="arrival, seconds from the run's start")
    task_s: dict[str, PositiveFloat] = Field(
        default_factory=dict,
        description="known mean task time per machine type; types not named cannot run "
        "the job; empty: unknown, sampled",
    )
    emulator_task_s: dict[str, PositiveFloat] = Field(
        default_factory=dict,
        description="dry runs and synthetic tasks only: the true mean task time per "
        "machine type (default: task_s)",
    )
    split: dict[Name, PositiveInt] = Field(
        default_factory=dict,
        description="several providers: tasks per provider, each part planned on that "
        "provider's types only (set from the providers' offers when deadline.offers is "
        "on, or by hand); empty: every type may run any task",
    )

    def emulator_means(self) -> JobMeans | None:
        """The emulator's mean task time per type, or None: the job gives none."""
        means = {**self.task_s, **self.emulator_task_s}
        return JobMeans(self.name, means) if means else None


@dataclass(frozen=True, slots=True)
class JobMeans:
    """A job's mean task time per machine type, as the emulator runs its tasks."""

    job: str
    by_type: Mapping[str, float]

    def of(self, type_name: str) -> float:
        """The mean on ``type_name``; a type the job has none for cannot run it."""
        mean = self.by_type.get(type_name)
        if mean is None:
            raise AutoscalerError(
                f"job {self.job!r} has no mean task time for machine type {type_name!r} "
                f"(it has: {', '.join(sorted(self.by_type))}): it cannot run there"
            )
        return mean


# --- the work of a run ----------------------------------------------------------------


DEFAULT_PROJECT = "default"
"""The project of a run or job that names none."""


class Work(ConfigModel):
    """What a run does: one ``bag`` with its ``constraint`` (a budget: budget mode; a
    ``deadline_s``: deadline mode with one job), or ``jobs`` (deadline mode, paper 002):
    bags arriving over time, each with its own constraint. In the jobs form
    ``constraint`` is not given; once validated it holds their summary (the sum of the
    jobs' budgets if every job has one, and the last deadline), and ``bag`` is None.
    """

    name: str = "run"
    bag: Bag | None = Field(default=None, description="the tasks, with constraint; not with jobs")
    if TYPE_CHECKING:  # always set once validated: the jobs form fills in their summary
        constraint: Constraint
    else:
        constraint: Constraint | None = Field(
            default=None, description="what the bag must respect; not with jobs"
        )
    jobs: list[Job] = Field(
        default_factory=list,
        description="deadline mode: bags arriving over time, each with a deadline; "
        "instead of bag and constraint",
    )
    categories: Categories | None = Field(
        default=None, description="sort tasks into categories (paper 004) by needs or label"
    )
    project: Name | None = Field(
        default=None,
        description="the project the run's money is charged to (a service's project "
        "budgets and reports, the machines' cost tags); none: `default`",
    )
    plots: bool = Field(
        default=True,
        description="the report's plots (gantt.png, spend.png); false: report.json and "
        "report.md only, a second or so less per run (a service's own `plots: false` "
        "leaves them out of every job's report)",
    )

    @property
    def project_name(self) -> str:
        return self.project or DEFAULT_PROJECT

    def _one_form(self) -> None:
        if self.jobs:
            given = [f for f in ("bag", "constraint") if getattr(self, f) is not None]
            if given:
                raise ValueError(
                    f"jobs: give either bag and constraint, or jobs, not both (got jobs and "
                    f"{' and '.join(given)})"
                )
            seen: set[str] = set()
            for i, job in enumerate(self.jobs):
                if job.name in seen:
                    raise ValueError(f"jobs[{i}].name: job {job.name!r} is given twice")
                seen.add(job.name)
        elif self.bag is None:
            raise ValueError(
                "bag: missing: give a bag and its constraint (budget mode, or one deadline bag), "
                "or jobs (deadline mode)"
            )
        elif self.constraint is None:
            raise ValueError("constraint: missing (required)")

    def _check_work(self, names: set[str], cheapest: float) -> None:
        """The work against the platform: the machine ``names`` it may name, and the
        ``cheapest`` unit a budget must pay for; then the jobs' summary is set."""
        for i, job in enumerate(self.jobs):
            _check_job(f"jobs[{i}]", job, names)
        budgets = [(f"jobs[{i}].constraint.budget", j.constraint) for i, j in enumerate(self.jobs)]
        for field, constraint in budgets or [("constraint.budget", self.constraint)]:
            budget = constraint.budget
            if budget is not None and budget < cheapest:
                raise ValueError(
                    f"{field} {budget:g} is below one unit of the cheapest machine "
                    f"type ({cheapest:g})"
                )
        with_budget = [j.name for j in self.jobs if j.constraint.budget is not None]
        if with_budget and len(with_budget) < len(self.jobs):
            without = next(i for i, j in enumerate(self.jobs) if j.constraint.budget is None)
            raise ValueError(
                f"jobs[{without}].constraint.budget: missing, while "
                f"{', '.join(with_budget)} {'has' if len(with_budget) == 1 else 'have'} one: "
                "give every job a budget or none (the jobs share machines, so their budgets "
                "are held as one: the run never commits more than their sum)"
            )
        if self.jobs:  # frozen: the summary is set once, here
            object.__setattr__(self, "constraint", _summary(self.jobs))

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.jobs:  # the jobs' summary, derived again when the dump is validated
            data.pop("constraint", None)
        return data

    @property
    def deadline_mode(self) -> bool:
        """Jobs, or one bag with a deadline: the controller meets deadlines."""
        return bool(self.jobs) or self.constraint.deadline_s is not None

    def deadline_jobs(self) -> list[Job]:
        """The jobs of deadline mode: ``jobs``, or one job named after the run holding
        the bag (arriving at 0, means unknown); none in budget mode."""
        if self.jobs:
            return list(self.jobs)
        if self.bag is None or self.constraint.deadline_s is None:
            return []
        # Not validated again: the run's name need not be a valid job name.
        return [Job.model_construct(name=self.name, bag=self.bag, constraint=self.constraint)]

    def bags(self) -> list[tuple[str, Bag]]:
        """Every bag with the field that gives it: ``bag``, or each ``jobs[i].bag``."""
        if self.bag is not None:
            return [("bag", self.bag)]
        return [(f"jobs[{i}].bag", j.bag) for i, j in enumerate(self.jobs)]

    @property
    def max_retries(self) -> int:
        """Re-runs of a failed task: the bag's, or the most of any job's."""
        if self.bag is not None:
            return self.bag.max_retries
        return max(j.bag.max_retries for j in self.jobs)


def _check_job(where: str, job: Job, names: set[str]) -> None:
    if job.constraint.deadline_s is None:
        raise ValueError(
            f"{where}.constraint.deadline_s: missing: every job needs a deadline (a bag "
            "with a budget only runs as a single bag and constraint, without jobs)"
        )
    known_types(f"{where}.task_s", job.task_s, names)
    known_types(f"{where}.emulator_task_s", job.emulator_task_s, names)
    if job.emulator_task_s and not job.task_s:
        missing = sorted(names - set(job.emulator_task_s))
        if missing:
            raise ValueError(
                f"{where}.emulator_task_s gives no mean for machine type "
                f"{', '.join(missing)}, which the job may run on (its task_s is empty: "
                "every type)"
            )


def _summary(jobs: Sequence[Job]) -> Constraint:
    """One constraint for all the jobs: their budgets' sum (if each has one), the last
    deadline, and stop on a shortfall only if every job says so."""
    budgets = [j.constraint.budget for j in jobs]
    return Constraint(
        budget=None if None in budgets else sum(b for b in budgets if b is not None),
        deadline_s=max(j.at + (j.constraint.deadline_s or 0.0) for j in jobs),
        on_shortfall="stop"
        if all(j.constraint.on_shortfall == "stop" for j in jobs)
        else "continue",
    )
