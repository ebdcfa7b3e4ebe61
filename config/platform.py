"""The parts of a platform, the ``Platform`` of ``config.schema``: machine types and how
they are billed, how deadline mode plans and budget mode samples, and the settings of
each provider and of the daemon."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    Field,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
    model_validator,
)

from autoscaler.config.durations import Seconds
from autoscaler.config.strict import ConfigModel, Name
from autoscaler.core.reclaims import (
    HOLD_AFTER,
    HOLD_BELOW,
    HOLD_WINDOW_S,
    PRIOR_WEIGHT_H,
    SPOT_PRIOR_PER_HOUR,
)

# --- billing, machine types -----------------------------------------------------------


class Billing(ConfigModel):
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


class MachineType(ConfigModel):
    """A cloud offering: all machines of a type are alike."""

    name: Name
    price: float = Field(
        ge=0, description="price per ATU of one machine (0: free, as a cluster's own time)"
    )
    max_count: PositiveInt = Field(description="at most this many machines at once")
    boot_s: Seconds = Field(
        default=120.0, ge=0, description="launch to ready; the planner's estimate"
    )
    provider: Name | None = Field(
        default=None, description="with providers: the name of the provider it comes from"
    )
    slots: PositiveInt | None = Field(
        default=None,
        description="tasks a machine runs at once (default 1; on EC2 the instance type's "
        "vCPUs divided by the bag's cpus)",
    )
    group_max_s: Seconds | None = Field(
        default=None,
        gt=0,
        description="a task group's expected time on this type at most this (paper 004's "
        "CPU and wall-time limits per resource)",
    )
    group_max_tasks: PositiveInt | None = Field(
        default=None, description="at most this many tasks in one group on this type"
    )
    setup: list[str] = Field(
        default_factory=list,
        description="commands each machine of this type runs once before its first task, "
        "after the run's setup",
    )
    reclaim_per_hour: float | None = Field(
        default=None,
        ge=0,
        description="how often a machine of this type is taken back, per machine-hour, "
        "before the run learns it (the prior of its learned rate; default "
        f"{SPOT_PRIOR_PER_HOUR:g} for an EC2 spot type, else 0)",
    )


class Reclaims(ConfigModel):
    """When a type whose machines keep being taken back (spot) is held: no new machine
    of it, the plan moves to the other types, until the window passes or its learned
    reclaim rate falls back below ``return_per_hour``."""

    hold_after: PositiveInt = Field(
        default=HOLD_AFTER, description="reclaims of a type within within_s that hold it"
    )
    within_s: Seconds = Field(
        default=HOLD_WINDOW_S, gt=0, description="the window counted, and how long a hold lasts"
    )
    hold_below: float = Field(
        default=HOLD_BELOW,
        ge=0,
        le=1,
        description="... and only while its machines keep at most this share of their work "
        "at the learned rate (each reclaim losing the work it was seen to cut short and a "
        "replacement's boot; 1: every repeated reclaim holds); reclaims that lose less are "
        "priced into the plan",
    )
    prior_weight_h: float = Field(
        default=PRIOR_WEIGHT_H,
        ge=0,
        description="machine-hours of observation a type's reclaim_per_hour counts for",
    )
    return_per_hour: float | None = Field(
        default=None,
        ge=0,
        description="a hold ends early when the type's learned rate falls below this "
        "(default: the type's reclaim_per_hour)",
    )


# --- deadline mode ----------------------------------------------------------------------


class Deadline(ConfigModel):
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
    offers: Literal["none", "no_lb", "plb", "dplb", "dplb_v2", "free_time_slots", "cheapest"] = (
        Field(
            default="none",
            description="several providers (paper 003): split each job with task_s across "
            "the providers by their offers (n tasks by time t), composed by this policy, when "
            "the run starts (cheapest: the split of least expected cost that meets the deadline, "
            "not one of the paper's); none: the planner chooses among every type",
        )
    )
    learn_task_times: bool = Field(
        default=True,
        description="a job's task_s is a prior: plans blend it with the runs seen of the "
        "job and of earlier jobs of its application (false: believe task_s forever)",
    )
    keep_open: bool = Field(
        default=False,
        description="a pool that takes jobs while it runs (the service's deadline jobs): it "
        "does not stop when every task is done, releases idle machines at the end of their "
        "paid time and ends only when shut down",
    )


# --- sampling and monitoring ----------------------------------------------------------


class Sampling(ConfigModel):
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


class Local(ConfigModel):
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
    shared_fs: bool = Field(
        default=False,
        description="agents see the daemon's file system: task inputs are linked and "
        "outputs moved in place, not sent over HTTP",
    )


class Daemon(ConfigModel):
    """The real-time driver: where agents reach it and how it watches them (real seconds)."""

    host: str = Field(default="127.0.0.1", description="address the dispatcher binds")
    port: int = Field(default=0, ge=0, le=65535, description="0: any free port")
    heartbeat_s: float = Field(
        default=2.0,
        gt=0,
        description="agents report this often; past 500 × this many machines, less often "
        "(the fleet's heartbeats held to 500 a second)",
    )
    lost_after_s: float = Field(
        default=15.0,
        gt=0,
        description="a machine silent this long is lost (stretched as the heartbeat is)",
    )
    orphan_after_s: float = Field(
        default=60.0, gt=0, description="an agent that cannot reach the daemon this long exits"
    )
    tail_bytes: int = Field(
        default=4096, ge=0, le=1 << 20, description="output kept per stream and task"
    )
    group_s: float = Field(
        default=2.0,
        ge=0,
        description="task groups: a machine is handed at most this much expected work at "
        "once (real seconds), its agent reporting results many per message; stretched as "
        "the heartbeat is; 0: one task per slot at a time (one-by-one dispatch)",
    )
    report_s: float = Field(
        default=0.25,
        ge=0,
        le=60,
        description="an agent with queued tasks holds a result at most this long, to send "
        "several in one request; once the heartbeat stretches, until its heartbeat",
    )
    metrics_port: int | None = Field(
        default=None, ge=0, le=65535, description="serve Prometheus metrics on this port"
    )
    metrics_host: str = "127.0.0.1"
    machine_prefix: str = Field(
        default="",
        pattern=r"^[A-Za-z0-9_]*$",
        description="the run's machines are named <type>-<prefix>_L<n>-<i> (without one: "
        "<type>-L<n>-<i>); a service names its jobs' machines by the job's id, so names are "
        "unique across the jobs it runs side by side",
    )

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


class Ec2Type(ConfigModel):
    """What one of our machine types is on EC2."""

    instance_type: Annotated[str, Field(min_length=1, pattern=r"^[a-z0-9]+[a-z0-9\-]*\.[a-z0-9]+$")]
    spot: bool = Field(default=False, description="a one-time spot instance, not on-demand")
    max_price: PositiveFloat | None = Field(
        default=None, description="spot only: USD per hour at most (default: on-demand price)"
    )


class Ssh(ConfigModel):
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


SPOT_NOTICE_URL = "http://169.254.169.254/latest/meta-data/spot/instance-action"
"""EC2's spot interruption notice: 404 until the instance is to be taken back."""


class Ec2(ConfigModel):
    """``provider: ec2``: instances in one region. Credentials come from boto3's usual
    chain (environment, profile, instance role), or from the named ``profile``; never
    from this file."""

    region: str = Field(min_length=1)
    endpoint_url: str | None = Field(
        default=None, description="an EC2-compatible endpoint (an emulator); default AWS"
    )
    ami: str = Field(pattern=r"^ami-[0-9a-f]+$")
    types: dict[str, Ec2Type] = Field(description="our machine type name -> instance type")
    subnets: list[str] = Field(
        default_factory=list,
        description="pools of every type: a launch is spread across them (round robin; a "
        "market-priced spot type: the cheapest zones), a capacity error in one passes its "
        "share to the next",
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
        default=None,
        description="user-data only: where instances reach the dispatcher, https://HOST:PORT "
        "(the dispatcher serves https there, its certificate from the run's CA)",
    )
    lookup_prices: bool = Field(
        default=False,
        description="fill machine types without a price from the AWS Pricing API (on-demand)",
    )
    spot_prices: Literal["config", "market"] = Field(
        default="config",
        description="config: a spot type costs its machine type's price; market: its price "
        "comes from EC2's spot price history (DescribeSpotPriceHistory, Linux/UNIX, the "
        "highest among the zones of the subnets, or of the region), read each monitoring "
        "interval; the budget commits "
        "its time at its cap (max_price, else its machine type's price, sent to EC2 as "
        "MaxPrice) and the report bills it at the prices in force",
    )
    lookup_slots: bool = Field(
        default=False,
        description="give machine types without slots the instance type's vCPUs divided by "
        "the bag's cpus (EC2 DescribeInstanceTypes, asked once when the run is built)",
    )
    unavailable_s: Seconds = Field(
        default=600.0, gt=0, description="after a capacity error, the type is avoided this long"
    )
    limit_hold_s: Seconds = Field(
        default=900.0,
        gt=0,
        description="after an account limit error, no scale-up of this provider's types this long",
    )
    recover_s: Seconds = Field(
        default=1800.0,
        ge=0,
        description="after the avoidance of a refused type ends, it counts less in the plans "
        "and regains full weight over this long",
    )
    throttle_hold_s: Seconds = Field(
        default=60.0,
        gt=0,
        description="after EC2 throttles a launch past botocore's retries, no scale-up this "
        "long (wall-clock seconds)",
    )
    notice_url: str | None = Field(
        default=SPOT_NOTICE_URL,
        pattern=r"^https?://",
        description="where agents read a spot interruption notice (the instance metadata; "
        "{machine} is replaced by the instance id); null: not read",
    )
    notice_every_s: Seconds = Field(
        default=5.0, gt=0, description="how often agents read the interruption notice"
    )
    max_attempts: int = Field(default=8, ge=1, le=20, description="botocore standard retries")
    profile: str | None = Field(
        default=None,
        min_length=1,
        description="a named profile of the AWS config files: this provider's credentials "
        "(two EC2 providers may use two accounts); default: boto3's usual chain",
    )

    @model_validator(mode="after")
    def _bootstrap(self) -> Ec2:
        if self.bootstrap == "ssh" and self.ssh is None:
            raise ValueError("ec2.bootstrap is ssh: give ec2.ssh (at least key_file)")
        if self.bootstrap == "user-data" and self.controller_url is None:
            raise ValueError("ec2.bootstrap is user-data: give ec2.controller_url")
        if self.bootstrap == "user-data" and not str(self.controller_url).startswith("https://"):
            raise ValueError(
                f"ec2.controller_url {self.controller_url!r} must be https://HOST:PORT: agents "
                "started from user data verify the controller against the run's CA"
            )
        return self


class SgeType(ConfigModel):
    """What one of our machine types is on the cluster: a queue and/or resources."""

    queue: str | None = None
    resources: str | None = Field(default=None, description="qsub -l, e.g. h_vmem=2G")
    pe: str | None = Field(
        default=None,
        min_length=1,
        description="a parallel environment: a machine asks qsub -pe PE for its slots times "
        "the bag's cpus; none: no slot request (the job takes one queue slot)",
    )
    extra_args: list[str] = Field(default_factory=list, description="more qsub arguments")


class Sge(ConfigModel):
    """``provider: sge``: each machine is a Grid Engine job running a worker agent.

    The ATU and prices are the config's, as in paper 000's emulation. Agents read the
    run's token from the run directory, so it must be on a filesystem the nodes share.
    """

    types: dict[str, SgeType]
    python: str | None = Field(
        default=None, description="interpreter of the agents (default: the daemon's)"
    )
    workdir: Path | None = Field(default=None, description="working directory of tasks")
    shared_fs: bool = Field(
        default=False,
        description="agents see the daemon's file system: task inputs are linked and "
        "outputs moved in place, not sent over HTTP",
    )


class SlurmType(ConfigModel):
    """What one of our machine types is on the cluster: a partition and a resource request."""

    partition: str | None = Field(default=None, description="sbatch --partition")
    constraint: str | None = Field(default=None, description="sbatch --constraint (features)")
    cpus: PositiveInt = Field(default=1, description="sbatch --cpus-per-task")
    mem: str | None = Field(default=None, description="sbatch --mem, e.g. 2G")
    extra_args: list[str] = Field(default_factory=list, description="more sbatch arguments")


class Slurm(ConfigModel):
    """``provider: slurm``: each machine is a Slurm batch job running a worker agent.

    The ATU and prices are the config's; a job's time limit is one ATU (whole minutes).
    Agents read the run's token from the run directory, so it must be on a filesystem
    the nodes share.
    """

    types: dict[str, SlurmType]
    python: str | None = Field(
        default=None, description="interpreter of the agents (default: the daemon's)"
    )
    workdir: Path | None = Field(default=None, description="working directory of tasks")
    shared_fs: bool = Field(
        default=False,
        description="agents see the daemon's file system: task inputs are linked and "
        "outputs moved in place, not sent over HTTP",
    )
    account_from_project: bool = Field(
        default=False,
        description="each job's --account is the run's project (in lower case; every "
        "project must be an account in the cluster's accounting, slurmdbd); false: the "
        "project is only the job's --comment",
    )
