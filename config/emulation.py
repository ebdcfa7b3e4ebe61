"""The ``emulator:`` section: how fast tasks run where in a dry run (and a local run's
synthetic tasks), and what goes wrong."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, field_validator, model_validator

from autoscaler.config.durations import Seconds
from autoscaler.config.strict import ConfigModel


class NormalRuntime(ConfigModel):
    dist: Literal["normal"]
    mean_s: Seconds = Field(gt=0)
    sd_s: Seconds = Field(ge=0)


class LognormalRuntime(ConfigModel):
    """Lognormal given by the mean and standard deviation of the runtime itself."""

    dist: Literal["lognormal"]
    mean_s: Seconds = Field(gt=0)
    sd_s: Seconds = Field(ge=0)


class UniformRuntime(ConfigModel):
    dist: Literal["uniform"]
    low_s: Seconds = Field(gt=0)
    high_s: Seconds = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> UniformRuntime:
        if self.high_s < self.low_s:
            raise ValueError(f"high_s ({self.high_s}) is below low_s ({self.low_s})")
        return self


class ConstantRuntime(ConfigModel):
    dist: Literal["constant"]
    value_s: Seconds = Field(gt=0)


class BimodalRuntime(ConfigModel):
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


class ParetoRuntime(ConfigModel):
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


class WeibullRuntime(ConfigModel):
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


class TraceRuntime(ConfigModel):
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


class MachineFailure(ConfigModel):
    """Emulator only: the ``index``-th machine of ``type`` (in launch order) dies at ``at_s``."""

    type: str
    at_s: Seconds = Field(ge=0)
    index: int = Field(default=0, ge=0)


Rate = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""Events per hour."""

RefusalCode = Literal[
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "UnfulfillableCapacity",
    "SpotMaxPriceTooLow",
    "Unsupported",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
    "MaxSpotInstanceCountExceeded",
]
"""The EC2 error codes a refusal can rehearse: no capacity for the type (avoided for a
while) or the account's quota (its provider's types held), as ``providers.base`` reads
them."""


class Refusal(ConfigModel):
    """Emulator only: launches of ``type`` refused with EC2's error ``code`` from
    ``from_s`` until ``until_s`` (run seconds), as a real launch is refused: the run
    reacts as it does to EC2. ``share`` below 1 refuses that share of the launches in the
    window, each drawn once with the run's seed."""

    type: str
    from_s: Seconds = Field(default=0.0, ge=0, description="the window opens (run seconds)")
    until_s: Seconds | None = Field(
        default=None, description="the window closes (run seconds); none: never"
    )
    code: RefusalCode = Field(
        default="InsufficientInstanceCapacity", description="the error code EC2 would send"
    )
    share: float = Field(
        default=1.0, gt=0, le=1, description="the share of launches in the window refused"
    )

    @model_validator(mode="after")
    def _window(self) -> Refusal:
        if self.until_s is not None and self.until_s <= self.from_s:
            raise ValueError(
                f"until_s ({self.until_s:g} s) must be after from_s ({self.from_s:g} s)"
            )
        return self

    def refuses(self, type: str, now: float) -> bool:
        """Whether the window covers a launch of ``type`` at ``now`` (``share`` aside)."""
        return (
            type == self.type
            and now >= self.from_s
            and (self.until_s is None or now < self.until_s)
        )


class LocalLoad(ConfigModel):
    """Emulator only: a cluster provider's own users, as paper 003 emulates a cluster
    (``autoscaler.offers.cluster``): rigid jobs of 1 to ``max_procs`` processors and
    ``min_job_s`` to ``max_job_s`` (both log-uniform) arrive until they keep
    ``utilisation`` of its ``processors`` busy, each held to its runtime plus
    ``slack_s``, in an Earliest-Deadline-First queue. A dry run's machines of the
    provider wait in that queue before they boot, and its offers (``deadline.offers``)
    come from it."""

    processors: PositiveInt = Field(description="the cluster's processors, its users' and ours")
    utilisation: float = Field(ge=0, lt=1, description="the share of them its users keep busy")
    max_procs: PositiveInt | None = Field(
        default=None, description="the largest local job, in processors (default: all of them)"
    )
    min_job_s: Seconds = Field(default=3600.0, gt=0, description="the shortest local job")
    max_job_s: Seconds = Field(default=18 * 3600.0, gt=0, description="the longest local job")
    slack_s: Seconds = Field(
        default=86400.0, ge=0, description="a local job's deadline: its runtime plus this"
    )

    @model_validator(mode="after")
    def _ordered(self) -> LocalLoad:
        if self.max_job_s < self.min_job_s:
            raise ValueError(
                f"max_job_s ({self.max_job_s:g} s) is below min_job_s ({self.min_job_s:g} s)"
            )
        return self


class Affine(ConfigModel):
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


class Emulator(ConfigModel):
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
    category_speed: dict[str, dict[str, PositiveFloat]] = Field(
        default_factory=dict,
        description="per task category label (a bag file's category column), per machine "
        "type: a further speed factor (a type fast at one kind of task and slow at "
        "another); missing pairs run at 1.0",
    )
    task_failure_prob: float = Field(default=0.0, ge=0, lt=1)
    share_slowdown: float = Field(
        default=0.0,
        ge=0,
        description="tasks sharing a machine of several slots slow each other: a task "
        "that starts with n tasks running there (itself included) on s slots takes "
        "1 + share_slowdown·(n − 1)/(s − 1) times its runtime (memory bandwidth); 0: none",
    )
    machine_failures: list[MachineFailure] = Field(default_factory=list)
    spot_prices: dict[str, list[tuple[Seconds, float]] | Path] = Field(
        default_factory=dict,
        description="per machine type: its price per ATU over time in a dry run, as "
        "[[time, price], ...] (run time, ascending; each price holds until the next) or "
        "a CSV file of time_s,price lines; the dry run reads it each monitoring interval "
        "as a real run reads the spot market (ec2.spot_prices: market)",
    )
    refusals: list[Refusal] = Field(
        default_factory=list,
        description="launches of a type refused over a window of the run, with EC2's "
        "error codes: rehearse a capacity outage or a quota",
    )
    reclaim_per_hour: dict[str, Rate] = Field(
        default_factory=dict,
        description="per spot machine type: the hourly rate at which its provider takes a "
        "machine back (each machine's time drawn from an exponential with the run's seed), "
        "as an interruption notice on EC2 does; its tasks go back to the bag",
    )
    local_load: dict[str, LocalLoad] = Field(
        default_factory=dict,
        description="per cluster provider (slurm or sge, by its name): its own users' jobs; "
        "in a dry run its machines wait in their queue, and its offers come from it",
    )

    @property
    def rehearses(self) -> bool:
        """Whether launches are refused or machines taken back (a rehearsal)."""
        return bool(self.refusals) or any(r > 0 for r in self.reclaim_per_hour.values())

    def calm(self) -> Emulator:
        """This world without refusals and reclaims: what a rehearsal is measured against."""
        return self.model_copy(update={"refusals": [], "reclaim_per_hour": {}})


def check_price_trace(field: str, trace: list[tuple[float, float]]) -> None:
    """Refuse a price trace that is empty, goes back in time or has a negative price."""
    if not trace:
        raise ValueError(f"{field}: give at least one [time, price] point")
    last: float | None = None
    for i, (at, price) in enumerate(trace):
        if not (math.isfinite(at) and at >= 0):
            raise ValueError(f"{field}[{i}]: time {at:g} must be 0 or more")
        if last is not None and at <= last:
            raise ValueError(f"{field}[{i}]: times must increase ({at:g} s after {last:g} s)")
        if not (math.isfinite(price) and price >= 0):
            raise ValueError(f"{field}[{i}]: price {price:g} must be 0 or more")
        last = at
