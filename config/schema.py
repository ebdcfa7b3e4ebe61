"""The YAML configuration of a run, validated with pydantic.

One file describes the bag, the constraint, the machine types, billing, the provider,
the emulator model, sampling and monitoring. Every model forbids unknown fields so a
typo is an error that names the field, never a silently ignored setting.

Durations are seconds, or a string with a unit: ``"90s"``, ``"15m"``, ``"1h"``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveFloat,
    PositiveInt,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from autoscaler.core.errors import AutoscalerError

_UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(s|m|min|h|d)?\s*$")


def parse_duration(value: object) -> object:
    """Turn ``"15m"`` into 900.0; leave numbers and anything unparseable to pydantic."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if match is None:
            raise ValueError(
                f"{value!r} is not a duration: use seconds or a number with s, m, h or d"
            )
        return float(match.group(1)) * _UNITS[match.group(2) or "s"]
    return value


Seconds = Annotated[float, BeforeValidator(parse_duration)]
"""A non-negative duration in seconds (the caller adds positivity where needed)."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Name = Annotated[str, Field(min_length=1, pattern=r"^[A-Za-z0-9_.\-]+$")]
"""A machine type's or a job's name: letters, digits, ``_``, ``.`` and ``-``."""


# --- the bag -------------------------------------------------------------------------


class IntRange(_Model):
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


class Bag(_Model):
    """The tasks. Exactly one of ``command`` (with ``sweep``), ``file`` or ``synthetic``.

    * ``command`` is a template, ``{name}`` replaced by each combination of the
      ``sweep`` values (the cartesian product, in the order the names are given);
    * ``file`` names a text file with one command per line (blank lines and lines
      starting with ``#`` skipped), relative to the config file;
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
        return self


# --- constraint, billing, machine types -----------------------------------------------


class Constraint(_Model):
    """What the run, or one job, must respect: a budget, a deadline, or both.

    With both, the deadline is met only as far as the budget allows. A deadline is in
    seconds from the job's arrival (for a single bag, from the start of the run).
    """

    budget: PositiveFloat | None = Field(default=None, description="money, in the prices' currency")
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


class Billing(_Model):
    """How a provider charges. Prices are per ATU in both modes.

    ``fixed``: a machine pays a whole ATU as soon as it enters it (the papers' model).
    ``per_second``: a machine pays ``price * seconds / atu_s``, at least
    ``min_charge_s`` seconds; the controller commits money ``commit_s`` at a time.
    """

    mode: Literal["fixed", "per_second"] = "fixed"
    atu_s: Seconds = Field(default=3600.0, gt=0, description="accountable time unit")
    min_charge_s: Seconds = Field(default=60.0, ge=0, description="per_second only")
    commit_s: Seconds = Field(
        default=300.0, gt=0, description="per_second only: how far ahead money is committed"
    )


class MachineType(_Model):
    """A cloud offering: all machines of a type are alike."""

    name: Name
    price: PositiveFloat = Field(description="price per ATU of one machine")
    max_count: PositiveInt = Field(description="at most this many machines at once")
    boot_s: Seconds = Field(
        default=120.0, ge=0, description="launch to ready; the planner's estimate"
    )


# --- the emulator ---------------------------------------------------------------------


class NormalRuntime(_Model):
    dist: Literal["normal"]
    mean_s: Seconds = Field(gt=0)
    sd_s: Seconds = Field(ge=0)


class LognormalRuntime(_Model):
    """Lognormal given by the mean and standard deviation of the runtime itself."""

    dist: Literal["lognormal"]
    mean_s: Seconds = Field(gt=0)
    sd_s: Seconds = Field(ge=0)


class UniformRuntime(_Model):
    dist: Literal["uniform"]
    low_s: Seconds = Field(gt=0)
    high_s: Seconds = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> UniformRuntime:
        if self.high_s < self.low_s:
            raise ValueError(f"high_s ({self.high_s}) is below low_s ({self.low_s})")
        return self


class ConstantRuntime(_Model):
    dist: Literal["constant"]
    value_s: Seconds = Field(gt=0)


class BimodalRuntime(_Model):
    """Two normal modes: most tasks short, a share of them long (a skewed bag).

    Each task is long with probability ``long_share``; a mode's standard deviation is
    ``sd_share`` of its mean, so the two stay apart whatever the scale. The mean runtime
    is ``(1 - long_share) * short_s + long_share * long_s``.
    """

    dist: Literal["bimodal"]
    short_s: Seconds = Field(gt=0, description="mean of the short mode")
    long_s: Seconds = Field(gt=0, description="mean of the long mode")
    long_share: float = Field(gt=0, lt=1, description="share of long tasks")
    sd_share: float = Field(
        default=0.1,
        ge=0,
        le=0.5,
        description="standard deviation of each mode as a share of its mean; at most 0.5, "
        "as a wider mode is cut at the 1 s floor and no longer has its mean",
    )

    @model_validator(mode="after")
    def _ordered(self) -> BimodalRuntime:
        if self.long_s <= self.short_s:
            raise ValueError(f"long_s ({self.long_s:g}) must exceed short_s ({self.short_s:g})")
        return self


class ParetoRuntime(_Model):
    """Pareto (type I) with the given mean: a heavy tail of very long tasks.

    The scale (the shortest runtime) is ``x_m = mean_s * (alpha - 1) / alpha``. The
    smaller ``alpha``, the heavier the tail: at ``alpha <= 2`` the variance is infinite,
    at ``alpha <= 1`` the mean is too.
    """

    dist: Literal["pareto"]
    mean_s: Seconds = Field(gt=0)
    alpha: float = Field(allow_inf_nan=False, description="tail index (shape), above 1; e.g. 2.5")

    @field_validator("alpha")
    @classmethod
    def _finite_mean(cls, alpha: float) -> float:
        if alpha <= 1:
            raise ValueError("alpha must be > 1: at alpha <= 1 a Pareto's mean is infinite")
        return alpha


class WeibullRuntime(_Model):
    """Weibull with the given mean and shape ``k``: below 1 a long tail, above 1 a hump.

    The scale is ``lambda = mean_s / Gamma(1 + 1/k)``.
    """

    dist: Literal["weibull"]
    mean_s: Seconds = Field(gt=0)
    shape: float = Field(gt=0, allow_inf_nan=False, description="k; e.g. 0.7")

    @field_validator("shape")
    @classmethod
    def _scale_exists(cls, shape: float) -> float:
        if not math.isfinite(weibull_mean_factor(shape)):
            raise ValueError("shape is too small: Gamma(1 + 1/shape) overflows (use 0.006 or more)")
        return shape


def weibull_mean_factor(shape: float) -> float:
    """``Gamma(1 + 1/k)``: a Weibull's mean over its scale (infinite where it overflows)."""
    try:
        return math.gamma(1.0 + 1.0 / shape)
    except OverflowError:
        return math.inf


class TraceRuntime(_Model):
    """Runtimes in seconds from a file, one per line, used in order and cycled."""

    dist: Literal["trace"]
    file: Path


Runtime = Annotated[
    NormalRuntime
    | LognormalRuntime
    | UniformRuntime
    | ConstantRuntime
    | BimodalRuntime
    | ParetoRuntime
    | WeibullRuntime
    | TraceRuntime,
    Field(discriminator="dist"),
]


class MachineFailure(_Model):
    """Emulator only: the ``index``-th machine of ``type`` (in launch order) dies at ``at_s``."""

    type: str
    at_s: Seconds = Field(ge=0)
    index: int = Field(default=0, ge=0)


class Affine(_Model):
    """Emulator only: how a type's runtimes relate to the drawn ones, not in proportion.

    A task of drawn runtime x takes (a·x + b_s)·(1 + noise·ε) / speed on the type, ε a
    standard normal drawn once per task and type (clipped so the factor stays ≥ 0.05):
    the types are related by g(x) = a·f(x) + b up to noise (slides 001, compact
    sampling), which a plain ``speed`` (exactly proportional) would make exact.
    """

    a: PositiveFloat = Field(default=1.0, description="slope: the drawn runtime's factor")
    b_s: Seconds = Field(default=0.0, description="intercept: seconds added to every task")
    noise: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="relative per-task noise: the sd of the factor 1 + noise·ε",
    )


class Emulator(_Model):
    """The virtual world of a dry run: how fast tasks run where, and what goes wrong.

    A task's runtime on a type is its drawn runtime divided by the type's ``speed``;
    a type listed in ``affine`` maps the drawn runtime affinely, with noise, first.
    """

    seed: int = 0
    runtime: Runtime = Field(
        default_factory=lambda: NormalRuntime(dist="normal", mean_s=900.0, sd_s=math.sqrt(5) * 60)
    )
    speed: dict[str, PositiveFloat] = Field(
        default_factory=dict, description="per machine type; missing types run at 1.0"
    )
    affine: dict[str, Affine] = Field(
        default_factory=dict,
        description="per machine type: runtime (a·x + b_s)·(1 + noise·ε) before the "
        "speed; missing types run the drawn runtime x",
    )
    task_failure_prob: float = Field(default=0.0, ge=0, lt=1)
    machine_failures: list[MachineFailure] = Field(default_factory=list)


# --- deadline mode ----------------------------------------------------------------------


class Deadline(_Model):
    """How deadline mode (``jobs``, or a bag with ``constraint.deadline_s``) plans."""

    planner: Literal["multi", "single"] = Field(
        default="multi",
        description="multi: every job in the bag at once (paper 002 model 7, Algorithm 2); "
        "single: job by job, earliest deadline first (model 10, Algorithm 3)",
    )
    reassign: bool = Field(
        default=True,
        description="every monitoring interval, move queued tasks off machines that would "
        "miss a deadline onto machines with room (paper 002 Algorithm 4)",
    )
    buy_when_late: bool = Field(
        default=True,
        description="with reassign: buy machines for tasks still expected late, when they "
        "finish them in time and the budget (if any) pays",
    )
    sample: PositiveInt = Field(
        default=5,
        description="a job without task_s runs this many tasks on every type before it is "
        "planned on their mean + z·sd/sqrt(n)",
    )
    keep_open: bool = Field(
        default=False,
        description="a pool that takes jobs while it runs (the service's deadline jobs): it "
        "does not stop when every task is done, releases idle machines at the end of their "
        "paid time and ends only when shut down",
    )


# --- sampling and monitoring ----------------------------------------------------------


class Sampling(_Model):
    """Sample size parameters of paper 000 §2.1 (defaults: 95 % confidence, Δ = 0.25),
    and how the sample is taken.

    ``plain``: every type runs a sample set of n tasks. ``compact`` (slides 001): the
    first ``replicated`` tasks run on every type, the reference type (the one that can
    start the most sampling machines, then the cheapest) runs the rest of the n, and
    each other type's runtimes are the reference's mapped through g(x) = a·x + b,
    fitted by least squares on the replicated pairs, with the fit's error in their
    uncertainty. The other types start only ``replicated`` machines, released at the
    end of their paid time unless the first plan wants them.
    """

    z: PositiveFloat = 1.96
    delta: float = Field(default=0.25, gt=0, lt=1)
    mode: Literal["plain", "compact"] = Field(
        default="plain",
        description="plain: a sample of n tasks on every type; compact: replicate a few "
        "tasks on every type, fit g(x) = a·x + b, sample the rest on one type",
    )
    replicated: int = Field(
        default=7,
        ge=3,
        le=100,
        description="compact: tasks run on every type, the pairs the fit is made on "
        "(slides 001: 7 of a sample of 30; at least 3, at most the sample size n)",
    )

    @field_validator("replicated")
    @classmethod
    def _within_sample(cls, replicated: int, info: ValidationInfo) -> int:
        """At most the largest sample size ⌈z²/(2Δ²)⌉ (a smaller bag's n caps it too)."""
        z, delta = info.data.get("z"), info.data.get("delta")
        if z is not None and delta is not None:
            largest = math.ceil(z * z / (2 * delta * delta) - 1e-9)
            if replicated > largest:
                raise ValueError(
                    f"must be at most the sample size n = {largest} "
                    f"(z = {z:g}, delta = {delta:g}); got {replicated}"
                )
        return replicated


# --- real runs: the local provider and the daemon -------------------------------------


class Local(_Model):
    """``provider: local``: every machine is a worker-agent process on this host.

    A machine of a type boots for the type's ``boot_s`` and runs synthetic tasks as
    sleeps of their drawn runtime (``emulator.runtime``) divided by the type's speed
    (``emulator.speed``), so a dry run and a local run of one config do the same work.
    ``time_scale`` compresses emulated time: at 60, one emulated minute passes in one
    real second, for ATUs, boot times, synthetic sleeps and the monitoring interval
    alike. Real commands run unscaled.
    """

    time_scale: PositiveFloat = Field(default=1.0, description="emulated seconds per real second")
    python: str | None = Field(
        default=None, description="interpreter of the agents (default: the daemon's)"
    )
    workdir: Path | None = Field(
        default=None, description="working directory of tasks (default: <run dir>/work)"
    )


class Daemon(_Model):
    """The real-time driver: where agents reach it and how it watches them (real seconds)."""

    host: str = Field(default="127.0.0.1", description="address the dispatcher binds")
    port: int = Field(default=0, ge=0, le=65535, description="0: any free port")
    heartbeat_s: float = Field(default=2.0, gt=0, description="agents report this often")
    lost_after_s: float = Field(
        default=15.0, gt=0, description="a machine silent this long is lost"
    )
    orphan_after_s: float = Field(
        default=60.0, gt=0, description="an agent that cannot reach the daemon this long exits"
    )
    tail_bytes: int = Field(
        default=4096, ge=0, le=1 << 20, description="output kept per stream and task"
    )
    metrics_port: int | None = Field(
        default=None, ge=0, le=65535, description="serve Prometheus metrics on this port"
    )
    metrics_host: str = "127.0.0.1"

    @model_validator(mode="after")
    def _timeouts(self) -> Daemon:
        if self.lost_after_s <= self.heartbeat_s:
            raise ValueError(
                f"lost_after_s ({self.lost_after_s:g}) must exceed heartbeat_s "
                f"({self.heartbeat_s:g})"
            )
        return self


# --- real machines: Amazon EC2 and Grid Engine ----------------------------------------

_HOST_PORT = r"^[A-Za-z0-9_.\-]+:[0-9]{1,5}$"


class Ec2Type(_Model):
    """What one of our machine types is on EC2."""

    instance_type: Annotated[str, Field(min_length=1, pattern=r"^[a-z0-9]+[a-z0-9\-]*\.[a-z0-9]+$")]
    spot: bool = Field(default=False, description="a one-time spot instance, not on-demand")
    max_price: PositiveFloat | None = Field(
        default=None, description="spot only: USD per hour at most (default: on-demand price)"
    )


class Ssh(_Model):
    """How the controller reaches instances to start agents: SSH with a reverse tunnel.

    Host keys are never added blindly: ``pinned`` trusts the key an instance offers at
    its first connection, right after launch, and pins it to the instance id in the run
    directory (a later different key is refused); ``console`` accepts only a key the
    instance printed to its console output (cloud-init's host key block).
    """

    user: str = Field(default="ec2-user", min_length=1)
    key_file: Path = Field(description="the private key of ec2.key_name (never copied)")
    host_keys: Literal["pinned", "console"] = "pinned"
    connect: Annotated[str, Field(pattern=_HOST_PORT)] | None = Field(
        default=None,
        description="host:port to connect to instead of each instance's address "
        "(tests; a port forward)",
    )
    port: int = Field(default=22, ge=1, le=65535)
    remote_dir: str = Field(default="/tmp/autoscaler", min_length=1)
    python: str = Field(default="python3", min_length=1, description="python on the instances")
    poweroff_on_exit: bool = Field(
        default=True,
        description="power the instance off when its agent exits (it then terminates)",
    )
    timeout_s: Seconds = Field(default=600.0, gt=0, description="launch to SSH answering, at most")


class Ec2(_Model):
    """``provider: ec2``: instances in one region. Credentials come from boto3's usual
    chain (environment, profile, instance role), never from this file."""

    region: str = Field(min_length=1)
    endpoint_url: str | None = Field(
        default=None, description="an EC2-compatible endpoint (an emulator); default AWS"
    )
    ami: str = Field(pattern=r"^ami-[0-9a-f]+$")
    types: dict[str, Ec2Type] = Field(description="our machine type name -> instance type")
    subnets: list[str] = Field(
        default_factory=list, description="tried in order: a capacity error moves to the next"
    )
    security_groups: list[str] = Field(default_factory=list)
    key_name: str | None = None
    instance_profile: str | None = Field(default=None, description="name or ARN of the worker's")
    address: Literal["private", "public"] = "private"
    bootstrap: Literal["ssh", "user-data"] = Field(
        default="ssh",
        description="ssh: fabric starts agents through a reverse tunnel; user-data: "
        "cloud-init starts them and they reach controller_url",
    )
    ssh: Ssh | None = None
    controller_url: str | None = Field(
        default=None, description="user-data only: where instances reach the dispatcher"
    )
    lookup_prices: bool = Field(
        default=False,
        description="fill machine types without a price from the AWS Pricing API (on-demand)",
    )
    unavailable_s: Seconds = Field(
        default=600.0, gt=0, description="after a capacity error, the type is avoided this long"
    )
    limit_hold_s: Seconds = Field(
        default=900.0, gt=0, description="after an account limit error, no scale-up this long"
    )
    max_attempts: int = Field(default=8, ge=1, le=20, description="botocore standard retries")

    @model_validator(mode="after")
    def _bootstrap(self) -> Ec2:
        if self.bootstrap == "ssh" and self.ssh is None:
            raise ValueError("ec2.bootstrap is ssh: give ec2.ssh (at least key_file)")
        if self.bootstrap == "user-data" and self.controller_url is None:
            raise ValueError("ec2.bootstrap is user-data: give ec2.controller_url")
        return self


class SgeType(_Model):
    """What one of our machine types is on the cluster: a queue and/or resources."""

    queue: str | None = None
    resources: str | None = Field(default=None, description="qsub -l, e.g. h_vmem=2G")
    extra_args: list[str] = Field(default_factory=list, description="more qsub arguments")


class Sge(_Model):
    """``provider: sge``: each machine is a Grid Engine job running a worker agent.

    The ATU and prices are the config's, as in paper 000's emulation. Agents read the
    run's token from the run directory, so it must be on a filesystem the nodes share.
    """

    types: dict[str, SgeType]
    python: str | None = Field(
        default=None, description="interpreter of the agents (default: the daemon's)"
    )
    workdir: Path | None = Field(default=None, description="working directory of tasks")


# --- deadline mode: jobs --------------------------------------------------------------


class Job(_Model):
    """Deadline mode (paper 002): one bag that arrives ``at`` seconds into the run and
    must finish ``constraint.deadline_s`` seconds after it arrives.

    ``task_s`` gives the mean task time per machine type when it is known (a recurring
    application): the job then runs only on the types it names. Empty, the means are
    unknown and the controller samples them. ``emulator_task_s`` is for dry runs and
    synthetic tasks only: the true mean per type the emulator runs the job's tasks at
    (a type it leaves out takes ``task_s``'s).
    """

    name: Name
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


# --- the whole file -------------------------------------------------------------------


class RunConfig(_Model):
    """One run: what to run under which constraint, where it may run and how that is paid.

    What to run is either one ``bag`` with its ``constraint`` (a budget: budget mode; a
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
    machine_types: list[MachineType] = Field(min_length=1)
    billing: Billing = Field(default_factory=Billing)
    provider: Literal["sim", "local", "sge", "ec2"] = Field(
        default="sim",
        description="sim: dry runs only; local: worker processes on this host; "
        "sge: Grid Engine jobs; ec2: Amazon EC2 instances",
    )
    local: Local = Field(default_factory=Local)
    ec2: Ec2 | None = None
    sge: Sge | None = None
    daemon: Daemon = Field(default_factory=Daemon)
    policy: Literal["bats", "round_robin"] = Field(
        default="bats",
        description="bats: budget planner; round_robin: every machine from the start",
    )
    emulator: Emulator = Field(default_factory=Emulator)
    sampling: Sampling = Field(default_factory=Sampling)
    deadline: Deadline = Field(default_factory=Deadline)
    monitoring_interval_s: Seconds = Field(default=300.0, gt=0)
    solver: Literal["highs", "cbc"] = Field(
        default="highs",
        description="MILP solver: HiGHS in-process (highspy); CBC (PuLP's bundled binary)",
    )
    tail_replication: bool = Field(
        default=True, description="once the bag is empty, idle paid machines replicate slow tasks"
    )

    @field_validator("machine_types")
    @classmethod
    def _unique_names(cls, types: list[MachineType]) -> list[MachineType]:
        seen: set[str] = set()
        for t in types:
            if t.name in seen:
                raise ValueError(f"machine type {t.name!r} is given twice")
            seen.add(t.name)
        return types

    @model_validator(mode="after")
    def _cross_checks(self) -> RunConfig:
        self._one_form()
        names = {t.name for t in self.machine_types}
        for field, named in (("speed", self.emulator.speed), ("affine", self.emulator.affine)):
            _known_types(f"emulator.{field}", named, names)
        for failure in self.emulator.machine_failures:
            if failure.type not in names:
                raise ValueError(
                    f"emulator.machine_failures names unknown machine type {failure.type!r}"
                )
        self._provider_section(names)
        for i, job in enumerate(self.jobs):
            _check_job(f"jobs[{i}]", job, names)
        cheapest = self._min_unit_cost(min(t.price for t in self.machine_types))
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
        return self

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

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if self.jobs:  # the jobs' summary, derived again when the dump is validated
            data.pop("constraint", None)
        return data

    def _provider_section(self, names: set[str]) -> None:
        section: Ec2 | Sge | None = None
        if self.provider == "ec2":
            section = self.ec2
        elif self.provider == "sge":
            section = self.sge
        else:
            return
        if section is None:
            raise ValueError(f"provider is {self.provider}: give the {self.provider} section")
        # Unknown keys first: a misspelt key also leaves its type without an entry, and
        # the typo is the more useful of the two to name.
        for name in sorted(set(section.types) - names):
            raise ValueError(
                f"{self.provider}.types names unknown machine type {name!r} "
                f"(machine types: {', '.join(sorted(names))})"
            )
        for name in sorted(names - set(section.types)):
            raise ValueError(f"{self.provider}.types has no entry for machine type {name!r}")

    def _min_unit_cost(self, price: float) -> float:
        if self.billing.mode == "fixed":
            return price
        return price * max(self.billing.min_charge_s, 1.0) / self.billing.atu_s

    @property
    def time_scale(self) -> float:
        """Emulated seconds per real second (1 but for a time-scaled local run)."""
        return self.local.time_scale if self.provider == "local" else 1.0

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

    @property
    def max_retries(self) -> int:
        """Re-runs of a failed task: the bag's, or the most of any job's."""
        if self.bag is not None:
            return self.bag.max_retries
        return max(j.bag.max_retries for j in self.jobs)

    def type_named(self, name: str) -> MachineType:
        for t in self.machine_types:
            if t.name == name:
                return t
        raise KeyError(name)


def _known_types(field: str, named: Iterable[str], names: set[str]) -> None:
    for name in named:
        if name not in names:
            raise ValueError(
                f"{field} names unknown machine type {name!r} (known: {', '.join(sorted(names))})"
            )


def _check_job(where: str, job: Job, names: set[str]) -> None:
    if job.constraint.deadline_s is None:
        raise ValueError(
            f"{where}.constraint.deadline_s: missing: every job needs a deadline (a bag "
            "with a budget only runs as a single bag and constraint, without jobs)"
        )
    _known_types(f"{where}.task_s", job.task_s, names)
    _known_types(f"{where}.emulator_task_s", job.emulator_task_s, names)
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
