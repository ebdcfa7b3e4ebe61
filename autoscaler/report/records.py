"""The report's records: ``Report`` (``report.json`` is its ``to_json()``) and the
records it is made of, and the JSON Schema generated from them.

``config/report.schema.json`` (``report_json_schema()``, ``autoscaler schema --report``)
is generated from these dataclasses, so the document and its schema cannot drift apart.
A deadline-mode run's report is a ``DeadlineReport``: the same record (``mode``
``deadline``) with a section per job after the others (``jobs``); ``mode`` tells the two
apart.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Discriminator, Tag, TypeAdapter, ValidationError

from autoscaler.core.errors import AutoscalerError
from autoscaler.report.category_lines import CategoryLine
from autoscaler.report.json_record import record as _record
from autoscaler.report.outputs import OutputsSummary

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
GANTT_PNG = "gantt.png"
SPEND_PNG = "spend.png"
UNFINISHED_TXT = "unfinished.txt"
"""The commands of the tasks not done, one a line: a bag file (``bag: {file: ...}``)."""
EPS = 1e-6
"""How far apart two amounts of money (or seconds) may be and still count as equal."""

_WRONG_KEYS_SHOWN = 3


@_record
class Prediction:
    """What BaTS's first plan after sampling said the run would cost and take (or, when
    that plan was a best-effort one soon replaced, the plan that replaced it)."""

    cost: float | None
    """The plan's predicted cost."""
    makespan_s: float | None
    """The plan's predicted makespan, from the run's start, in seconds."""
    at_s: float | None
    """When the plan was made, in seconds from the run's start."""
    cost_interval: tuple[float, float] | None = None
    """The interval the plan gave its cost (the ends of the runtimes' intervals; a plan
    forecast to spend its whole budget: down to the budget less its end reserve and one
    unit of its dearest type, where a run that stops buying units ends)."""
    makespan_interval_s: tuple[float, float] | None = None
    """The interval the plan gave its makespan, in seconds from the run's start (a plan
    held at its budget: machines go as the money runs short, and the fewer left end the
    bag later)."""
    cost_inside: bool | None = None
    """Whether the actual cost fell inside the cost interval."""
    makespan_inside: bool | None = None
    """Whether the actual makespan fell inside its interval (null: the bag did not finish)."""
    best_effort: bool = False
    """This prediction is of a best-effort plan: the planner found no mix that finishes
    the bag within the budget, and the run kept going on the most profitable type."""
    replaced_best_effort_at_s: float | None = None
    """When the first plan after sampling was such a best-effort plan and a plan that
    meets the budget replaced it, when the best-effort one was made; the prediction is
    then the plan that replaced it, the one the run followed (null: neither)."""
    resampled_at_s: float | None = None
    """When types whose launches were refused through sampling were sampled after the
    first plan (made without them), when that sampling began; the prediction is then
    the first plan made once their samples were in (null: no such sampling)."""


@_record
class ShortfallNote:
    """The first time the run said its budget was unlikely to finish the bag (a
    shortfall), or that it might not (a risk)."""

    at_s: float
    """When, in seconds from the run's start."""
    tasks_left: int
    """Tasks not yet done then."""
    needed_budget: float | None
    """The budget the estimates said the whole run needed (null: none the planner found)."""
    message: str
    """What was said (in the log, status, metrics and here)."""
    committed: float | None = None
    """The money committed when it was said (null: a journal written before it was kept)."""
    borne_out: bool | None = None
    """Whether the run bore the warning out: true, it ended with tasks left because the
    budget paid for no more machines; false, the bag was finished within the budget;
    null, it ended otherwise (stopped, held) or has not ended."""


@_record
class BillingTerms:
    """How machines were paid (the config's ``billing``)."""

    mode: Literal["fixed", "per_second"]
    """fixed: whole ATUs; per_second: by the second after a minimum charge."""
    atu_s: float
    """The accountable time unit, in seconds: prices are per ATU."""
    min_charge_s: float | None
    """The minimum charge of a machine under per-second billing (null under fixed)."""


@_record
class ConfigurationChoice:
    """A configuration the controller chose: how many machines of each type to run."""

    t_s: float
    """When, in seconds from the run's start."""
    counts: Mapping[str, int]
    """Machines wanted per machine type."""
    reason: str
    """Why (sampling, a plan, a re-plan, round robin)."""
    predicted_cost: float | None
    """The plan's predicted cost (null for sampling and round robin)."""
    predicted_makespan_s: float | None
    """The plan's predicted makespan in seconds (null for sampling and round robin)."""
    cost_interval: tuple[float, float] | None = None
    """The interval of the predicted cost (null without a prediction)."""
    makespan_interval_s: tuple[float, float] | None = None
    """The interval of the predicted makespan (null without a prediction)."""
    best_effort: bool = False
    """The planner found no mix that finishes the bag within the budget: the most
    profitable type only, its prediction for a budget it cannot meet."""


@_record
class TypeSummary:
    """What one machine type did and cost over the run."""

    machines: int
    """Machines of the type launched."""
    units_paid: float
    """ATUs paid for them (fractions under per-second billing)."""
    cost: float
    """What they cost under the billing model."""
    tasks_run: int
    """Tasks they finished."""
    busy_s: float
    """Seconds they spent running tasks (task-seconds: a machine of several slots counts
    each task running on it)."""
    idle_s: float
    """Seconds they were ready but ran nothing (slot-seconds: each free slot counts)."""
    boot_s: float
    """Seconds from their launches to their being ready."""
    slots: int = 1
    """Tasks a machine of the type runs at once."""


@_record
class MachineSummary:
    """One machine's life and cost."""

    id: str
    """The machine's id."""
    type: str
    """Its machine type."""
    start_s: float
    """Launched, in seconds from the run's start."""
    ready_s: float | None
    """Ready for tasks (null if it never was)."""
    end_s: float
    """Ended (or the report's time, if it was still alive)."""
    units_paid: float
    """ATUs paid for it (a fraction under per-second billing)."""
    cost: float
    """What it cost under the billing model."""
    tasks_run: int
    """Tasks it finished."""
    busy_s: float
    """Seconds it spent running tasks (task-seconds over its slots)."""
    idle_s: float
    """Seconds it was ready but ran nothing (slot-seconds: each free slot counts)."""
    end_reason: str | None
    """Why it ended (null if it was still alive)."""
    provider: str = ""
    """The name of the provider it came from."""
    slots: int = 1
    """Tasks it ran at once, at most."""
    zone: str = ""
    """Where its provider put it (an EC2 availability zone); empty if it did not say."""


@_record
class ProviderSummary:
    """The machines of one provider of the run, and what they cost."""

    kind: str
    """The provider's kind (sim, local, sge, slurm, ec2)."""
    types: tuple[str, ...]
    """Its machine types."""
    machines: int
    """Machines launched there."""
    units_paid: float
    """ATUs paid for them."""
    cost: float
    """What they cost under the billing model."""
    tasks_run: int
    """Tasks they finished."""


@_record
class SpotTypeLine:
    """One market-priced machine type: what its machines were committed at and billed."""

    cap: float
    """Its price cap per ATU, which the budget committed its machines' time at."""
    last_price: float | None
    """The last price seen per ATU (null: none was read)."""
    at_cap: float
    """What its machines would cost at the cap: the most they could be billed."""
    billed: float
    """What its machines are billed: per second at the prices in force (the last seen
    taken to hold since it was read)."""


@_record
class SpotPrices:
    """Where the prices of the run's market-priced types came from."""

    source: str
    """market (EC2's spot price history), trace (a dry run's emulator.spot_prices), or
    config (no price was read: the config's prices, committed at the caps)."""
    refreshed_at_s: float | None
    """Run time of the last reading (null: none)."""
    refreshes: int
    """Readings taken."""
    types: Mapping[str, SpotTypeLine]
    """Per market-priced machine type."""


@_record
class FailedTask:
    """A task that failed on every attempt."""

    task: int
    """The task's id (its index in the bag)."""
    attempts: int
    """How many times it ran."""
    error: str
    """The last attempt's error."""


UnfinishedWhy = Literal["not_started", "cut_off", "failed"]


@_record
class UnfinishedTask:
    """A task the run did not do, and why: what ``unfinished.txt`` runs again."""

    task: int
    """The task's id (its index in the bag)."""
    command: str | None
    """Its command (null for a synthetic task, which has none)."""
    why: UnfinishedWhy
    """not_started: it never ran; cut_off: it ran, but the run ended before a run of it
    finished (a retry after a failed attempt that never came included); failed: it failed
    on every attempt."""
    error: str | None
    """The last failed attempt's error (null if no attempt failed)."""


@_record
class Rehearsal:
    """What a dry run's rehearsed troubles (``emulator.refusals``, ``reclaim_per_hour``)
    cost: the run's refusals and reclaims, against the same dry run without them."""

    refused: int
    """Launches refused."""
    reclaimed: int
    """Machines taken back by their provider."""
    reclaimed_cost: float
    """What the machines taken back cost."""
    runs_cut: int
    """Task runs a reclaim cut short (their tasks went back to the bag)."""
    cut_s: float
    """Task-seconds of those runs: work done again."""
    calm_cost: float
    """The same dry run's cost (same config and seed) without refusals and reclaims."""
    calm_makespan_s: float
    """That run's makespan."""


@_record
class ReclaimHoldNote:
    """A machine type held after repeated reclaims of its machines (``reclaims:``): no
    new machine of it, the plan on the other types."""

    type: str
    """The machine type held."""
    from_s: float
    """When the hold began (the reclaim that made it), in seconds from the run's start."""
    until_s: float
    """When it ended: the window passed, or the learned rate fell back (or the run ended)."""
    reclaims: int
    """Reclaims of the type within the window when the hold began (or last grew)."""
    window_s: float
    """The window they were counted in (``reclaims.within_s``)."""
    moved_to: tuple[str, ...]
    """The types launched while it was held."""
    zone: str = ""
    """The zone held alone, the type's launches going to its other zones (empty: the
    whole type was held)."""


@_record
class LaunchProblem:
    """A launch the provider refused, and what the controller made of it."""

    t_s: float
    """When, in seconds from the run's start."""
    type: str
    """The machine type asked for."""
    kind: str
    """capacity, limit, throttled or error."""
    reason: str
    """What the provider said."""


@_record
class LateNote:
    """A lateness the run said of a job (deadline mode, ``Late``)."""

    at_s: float
    """When it was said, in seconds from the run's start."""
    tasks: int
    """The job's tasks then expected to end after its deadline."""
    seconds: float
    """By how much the last of them was expected to be late, in seconds."""
    cause: str
    """What gave way: deadline (no machines the provider allows finish the job in time)
    or budget (the budget cannot pay for those that would)."""
    message: str
    """What was said (in the log, status, metrics and here)."""


@_record
class LearnedNote:
    """A job's task time on a type that its runs showed far and surely off what the job
    declared (deadline mode, ``Learned``; issue 22 §1)."""

    at_s: float
    """When it was said, in seconds from the run's start."""
    type: str
    """The machine type."""
    declared_s: float
    """The job's declared time per task there (``task_s``)."""
    learned_s: float
    """What plans used from then on: the declared time blended with the runs."""
    runs: int
    """The runs of the job's application there that showed it."""
    message: str
    """What was said (in the log, status and here)."""


GaveWay = Literal["none", "deadline", "budget", "both"]


@_record
class JobOutcome:
    """One job of a deadline-mode run: its deadline and budget against what happened."""

    name: str
    """The job's name."""
    at_s: float
    """When it arrived, in seconds from the run's start."""
    deadline_s: float
    """When it was due, in seconds from the run's start."""
    budget: float | None
    """Its own budget (null if it has none)."""
    tasks: int
    """Its tasks."""
    done: int
    """Its tasks done."""
    failed: int
    """Its tasks that failed on every attempt."""
    finish_s: float | None
    """The end of its last task done (null if none was done)."""
    tasks_late: int
    """Tasks done after the deadline, and tasks not done once the deadline had passed."""
    seconds_late: float
    """How late it finished (finish minus deadline, at least 0); a job not finished by
    the report's time is late by at least that time minus its deadline."""
    met_deadline: bool
    """Whether every task was done by the deadline."""
    cost: float
    """Its share of the machines' cost: each billing unit of a machine charged to the
    jobs that had arrived when it began, by their seconds in it (``core.cost_shares``)."""
    predicted_cost: float | None
    """The last forecast of its cost (null if it was never planned): made again when
    its plan changes or what the plan rested on proves wrong."""
    predicted_finish_s: float | None
    """The last forecast of its finish, in seconds from the run's start."""
    first_warning: LateNote | None
    """The first time it was said to be late (null: never)."""
    warnings: int
    """How many times a lateness was said of it (each a change of the expectation)."""
    gave_way: GaveWay | None
    """A job with a budget: what gave way, the deadline (tasks late), the budget (its
    cost above it), both, or none (null: the job has no budget)."""
    learned: tuple[LearnedNote, ...] = ()
    """Its declared task times that its runs showed far off, one per type (issue 22 §1)."""
    predicted_finish_interval_s: tuple[float, float] | None = None
    """The interval of the last plan's forecast of its finish (task times at the ends of
    each type's runtime interval; null without a forecast)."""
    predicted_cost_interval: tuple[float, float] | None = None
    """The interval of the last plan's forecast of its cost (null without a forecast)."""
    finish_inside: bool | None = None
    """Whether its finish fell inside the finish interval (null: not finished, or none)."""
    cost_inside: bool | None = None
    """Whether its cost fell inside the cost interval (null: no interval)."""


@_record
class Report:
    """The outcome of one run against its budget, and its predictions against the actual."""

    run_id: str
    """The run's id (also the tag on its machines)."""
    mode: Literal["budget"]
    """The constraint: finish as fast as possible within a budget."""
    policy: str
    """The config's policy (bats or round_robin; deadline mode: its planner)."""
    provider: str
    """The config's provider (sim for a dry run's config, local, sge, slurm, ec2), or its
    providers with their kinds (``campus (slurm), east (ec2)``)."""
    seed: int
    """The emulator's seed."""
    budget: float | None
    """The budget (null if the config has none)."""
    cost: float
    """What the machines cost by their lives under the billing model."""
    committed: float
    """What the controller committed (paid units, launches in flight included)."""
    within_budget: bool
    """Whether ``cost`` is within the budget."""
    makespan_s: float
    """Seconds from the start to the last task done (to the stop if the bag is unfinished)."""
    tasks_total: int
    """Tasks in the bag."""
    tasks_done: int
    """Tasks done."""
    tasks_failed: int
    """Tasks that failed on every attempt."""
    stop_reason: str | None
    """Why the run stopped before the bag was finished (null if it finished)."""
    predicted: Prediction | None
    """BaTS's first plan after sampling (null if no plan was made)."""
    billing: BillingTerms
    """How machines were paid."""
    configurations: tuple[ConfigurationChoice, ...]
    """Every configuration the controller chose, in time order."""
    machine_types: Mapping[str, TypeSummary]
    """Per machine type, in the config's order."""
    machines: tuple[MachineSummary, ...]
    """Every machine launched."""
    failed_tasks: tuple[FailedTask, ...]
    """The failed tasks."""
    launch_problems: tuple[LaunchProblem, ...]
    """The launches the provider refused."""
    wall_s: float | None
    """Real seconds the run took (for a dry run, the emulation's)."""
    shortfall: ShortfallNote | None = None
    """The first warning that the budget was unlikely to finish the bag (null: none)."""
    unfinished_tasks: tuple[UnfinishedTask, ...] = ()
    """Every task not done (failed ones included), by id; empty when every task was done.
    Their commands are in ``unfinished.txt`` in the run directory."""
    providers: Mapping[str, ProviderSummary] = field(default_factory=dict)
    """Per provider of the run (by the name the config gives it; in a one-provider run,
    its kind): its machines and their cost."""
    risk: ShortfallNote | None = None
    """The first warning that the budget was at risk: enough at the estimated runtimes,
    not at the slow end of their intervals (null: none)."""
    categories: tuple[CategoryLine, ...] = ()
    """With ``categories:`` in the config (paper 004): each category's tasks and the time
    they took on each machine type (empty: the run had none)."""
    time_scale: float | None = None
    """A real run only: emulated seconds per real second (absent from a dry run's report)."""
    refused_agents: int | None = None
    """A real run only: agent requests refused (wrong token or run; absent from a dry run's)."""
    outputs: OutputsSummary | None = None
    """A real run with task files only: where their outputs are and how much came back."""
    spot_prices: SpotPrices | None = None
    """A run with market-priced types (ec2.spot_prices: market, emulator.spot_prices):
    where their prices came from, and their machines committed against billed (null:
    every price is the config's)."""
    rehearsal: Rehearsal | None = None
    """A dry run with ``emulator.refusals`` or ``reclaim_per_hour`` only: what they cost
    against the same run without them (absent otherwise)."""
    reclaim_holds: tuple[ReclaimHoldNote, ...] | None = None
    """The machine types held after repeated reclaims, in time order (absent: none)."""

    @property
    def emulated(self) -> bool:
        """Whether the run was a dry run, in the emulator: a real run's report has a
        ``time_scale``, a dry run's none."""
        return self.time_scale is None

    def to_json(self) -> dict[str, Any]:
        """The ``report.json`` document: the fields in order, a real run's extras only there."""
        data: dict[str, Any] = _REPORT.dump_python(self, mode="json")
        for key in _LEFT_OUT_WHEN_NULL:
            if data[key] is None:
                del data[key]
        return data


@_record
class DeadlineReport(Report):
    """The outcome of a deadline-mode run (paper 002): the run's record, then each job
    against its deadline. ``predicted`` is null: each job has its own forecast."""

    mode: Literal["deadline"]  # type: ignore[assignment]  # the tag: a Report of another mode
    """The constraint: each job by its deadline, as cheaply as possible."""
    jobs: tuple[JobOutcome, ...] = dataclasses.field(kw_only=True)
    """Every job, in the order given."""
    jobs_met_deadline: int = dataclasses.field(kw_only=True)
    """Jobs whose every task was done by the deadline."""
    unattributed_cost: float = dataclasses.field(kw_only=True)
    """The cost of machines that ran no task, which no job is charged."""


_REAL_RUN_ONLY = ("time_scale", "refused_agents", "outputs")
_LEFT_OUT_WHEN_NULL = (*_REAL_RUN_ONLY, "spot_prices", "rehearsal", "reclaim_holds")
"""Left out of report.json when null: a real run's extras in a dry run's report, the spot
market's in a run without one, a rehearsal's in a dry run without one."""


def _mode(report: Any) -> str:
    """Which record a report is: a deadline run's says so; anything else is read as a
    budget run's (one without ``mode`` is then refused for that)."""
    mode = report.get("mode") if isinstance(report, dict) else getattr(report, "mode", None)
    return "deadline" if mode == "deadline" else "budget"


_REPORT: TypeAdapter[Report] = TypeAdapter(
    Annotated[
        Annotated[Report, Tag("budget")] | Annotated[DeadlineReport, Tag("deadline")],
        Discriminator(_mode),
    ]
)
_TAGS = ("budget", "deadline")


def report_json_schema() -> dict[str, Any]:
    """The JSON Schema of ``report.json`` (what ``config/report.schema.json`` holds)."""
    return _REPORT.json_schema()


def read_report(run_dir: Path) -> Report:
    """The report in ``run_dir``; ``AutoscalerError`` naming the first wrong keys if the
    file cannot be read or is not a report this version writes."""
    path = run_dir / REPORT_JSON
    try:
        return _REPORT.validate_json(path.read_bytes())
    except OSError as exc:
        raise AutoscalerError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except ValidationError as exc:
        wrong = [
            f"{'.'.join(str(p) for p in _untagged(e['loc'])) or 'the document'}: {e['msg']}"
            for e in exc.errors()[:_WRONG_KEYS_SHOWN]
        ]
        more = exc.error_count() - len(wrong)
        raise AutoscalerError(
            f"{path}: not a report this version writes ({'; '.join(wrong)}"
            + (f"; {more} more" if more else "")
            + ")"
        ) from None


def _untagged(loc: tuple[int | str, ...]) -> tuple[int | str, ...]:
    """An error's place in the document, without the mode's tag pydantic puts first."""
    return loc[1:] if loc and loc[0] in _TAGS else loc
