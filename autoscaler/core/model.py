"""Records that travel between the config, the controller, the drivers and the report.

Times are seconds since the start of the run (``now``), money is in the prices'
currency. Events flow into ``Controller.step``; actions flow out of it. Both are
frozen dataclasses so the journal can record them as they are.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from autoscaler.core.actions import (
    ACTION_TYPES,
    OUT_OF_MONEY,
    Action,
    Assign,
    AssignGroup,
    Cancel,
    Configure,
    Defer,
    Extend,
    Forecast,
    Hold,
    Late,
    Launch,
    Learned,
    Mark,
    Move,
    Release,
    Replicate,
    Risk,
    Shortfall,
    Stop,
)
from autoscaler.core.task_files import FileSpec, Stored

__all__ = [
    "ACTION_TYPES",
    "EVENT_TYPES",
    "GIVEN_UP_KINDS",
    "NEVER",
    "NOTICE_REASON",
    "OUT_OF_MONEY",
    "SETUP_REASON",
    "Action",
    "Assign",
    "AssignGroup",
    "BoundaryNear",
    "BudgetSet",
    "Cancel",
    "Configure",
    "DeadlineSet",
    "Defer",
    "Event",
    "Extend",
    "Forecast",
    "HandedOver",
    "Hold",
    "Interrupted",
    "JobAdded",
    "JobArrived",
    "JobSpec",
    "JobWithdrawn",
    "Late",
    "Launch",
    "LaunchFailed",
    "Learned",
    "MachineLaunched",
    "MachineLost",
    "MachineReady",
    "MachineState",
    "Mark",
    "Move",
    "PricesSeen",
    "ProviderLimit",
    "QuotaSet",
    "RebalanceRecommended",
    "Release",
    "Replicate",
    "Resumed",
    "Risk",
    "Shortfall",
    "Shutdown",
    "Stop",
    "TaskDone",
    "TaskFailed",
    "TaskSpec",
    "TaskState",
    "Tick",
    "TypeSpec",
]


# --- the bag and the machine types -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One task of the bag."""

    id: int
    command: str | None  # shell command; None for a synthetic (emulated) task
    env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float | None = None  # its bag's per-task timeout
    # What the task says it needs (paper 004's TFSize, ETCPUTime, OFSize), or a user's
    # category; any may be missing (autoscaler.categories sorts tasks by them).
    input_bytes: float | None = None
    estimate_s: float | None = None
    output_bytes: float | None = None
    category: str | None = None
    files: FileSpec | None = None  # inputs to put in its work directory, outputs to keep


@dataclass(frozen=True, slots=True)
class TypeSpec:
    """A machine type as the controller sees it."""

    name: str
    price: float  # per ATU, per machine
    max_count: int  # A_i
    boot_s: float  # launch to ready, the planner's estimate (β)
    provider: str = ""  # the name of the provider it comes from
    max_life_s: float | None = None  # a machine lives at most this long (a job's time limit)
    slots: int = 1  # tasks a machine runs at once
    group_max_s: float | None = None  # a task group's expected time at most this
    group_max_tasks: int | None = None  # tasks in one group at most this
    cap: float | None = None  # per ATU: the most a machine may be billed (a spot market's)
    reclaim_per_hour: float = 0.0  # the prior rate its machines are taken back (spot)

    @property
    def commit_price(self) -> float:
        """The price per ATU money is committed at: the cap of a type whose price moves
        (``PricesSeen``), else its price. Committing a spot machine at the most it may be
        billed keeps the budget whatever the market does."""
        return self.price if self.cap is None else self.cap


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job of a deadline-mode run (paper 002): the tasks ``first .. first + count - 1``,
    arriving at run time ``at``, due at run time ``deadline`` (absolute), optionally with
    a budget of its own, and the mean task time per type when it is known (a recurring
    application); without ``task_s`` the controller samples it. A type missing from a
    non-empty ``task_s`` cannot run the job. ``app`` names its application (default: the
    job's name): jobs of one application learn each other's task times.

    ``fallback``: types of ``task_s`` the job is planned on only when it needs them (a
    provider's part of a split job: the other providers' types, ``run.assemble.split_job``),
    that is when none of its own types can be launched or once it is said to be late
    (``deadline.jobs.planned_types``); a machine of one already up may take its late
    tasks at any time."""

    name: str
    first: int
    count: int
    at: float
    deadline: float
    budget: float | None = None
    task_s: Mapping[str, float] = field(default_factory=dict)
    app: str = ""
    fallback: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.fallback, tuple):  # a journal gives back a JSON list
            object.__setattr__(self, "fallback", tuple(self.fallback))

    @property
    def application(self) -> str:
        return self.app or self.name

    def owns(self, task: int) -> bool:
        return self.first <= task < self.first + self.count


class TaskState(enum.Enum):
    """Where a task is in its life."""

    PENDING = "pending"  #: in the bag, not on any machine
    RUNNING = "running"  #: assigned to at least one machine (replicas included)
    DONE = "done"  #: a run succeeded; terminal
    FAILED = "failed"  #: failed more often than retries allow; terminal
    CANCELLED = "cancelled"  #: its job was withdrawn (``JobWithdrawn``) first; terminal


class MachineState(enum.Enum):
    """Where a machine is in its life."""

    BOOTING = "booting"  #: launched and paid for, not yet asking for work
    READY = "ready"  #: can run tasks
    GONE = "gone"  #: released or lost; terminal


# --- events: what happened ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProviderLimit:
    """What a run may take from one provider across its types (None: no limit)."""

    name: str
    max_machines: int | None = None  # machines at once (a quota)
    machine_s: float | None = None  # machine seconds the run may use there, in all


@dataclass(frozen=True, slots=True)
class MachineLaunched:
    """A provider accepted a launch: the machine exists and is being paid for.

    ``at`` is when the provider started it, if that is earlier than the event (a launch
    adopted after a restart); paid time runs from then.
    """

    machine: str
    type: str
    token: str
    at: float | None = None
    provider: str = ""  # the name of the provider that started it (a run of several)
    # Its zone (EC2), if the provider said; journals before zones have none. Where a
    # machine landed is the provider's news, not a decision: kept out of the repr, so
    # the decision digest (``benchmarks.same_decisions``) reads runs as it did before.
    zone: str = field(default="", repr=False)


@dataclass(frozen=True, slots=True)
class LaunchFailed:
    """A launch (or part of it) did not happen; ``count`` machines never existed.

    ``kind`` says what the provider's refusal means for later launches: ``error`` (try
    again when the plan asks), ``capacity`` (the type is unavailable until ``until``:
    plan without it), ``limit`` (the provider's account or subnet is full: no scale-up
    of ``types``, the types of that provider, until ``until``; none given: of every
    type), ``throttled`` (no scale-up of any type until ``until``), ``setup`` (the
    type's machines failed their set-up too often) or ``unready`` (its machines kept
    ending before their agents were ready); a type given up (``GIVEN_UP_KINDS``, until
    ``NEVER``) is avoided as for ``capacity``, for good. After ``until`` the types
    avoided count less, regaining full weight over ``recover_s`` (``Capacity.weight``).
    """

    token: str
    type: str
    count: int
    reason: str
    kind: str = "error"
    until: float | None = None
    types: tuple[str, ...] = ()
    recover_s: float = 0.0


@dataclass(frozen=True, slots=True)
class MachineReady:
    machine: str


NEVER = 1e12
"""Run time far past any run's end: a type given up is avoided until then."""

GIVEN_UP_KINDS = frozenset({"setup", "unready"})
"""The kinds of ``LaunchFailed`` that give a type up: it is not bought again."""

NOTICE_REASON = "interruption notice"
"""How ``MachineLost`` names a machine its provider said it takes back (EC2 spot)."""

SETUP_REASON = "set-up failed"
"""How ``MachineLost`` names a machine whose set-up commands failed."""


@dataclass(frozen=True, slots=True)
class MachineLost:
    """A machine vanished without being released (crash, spot interruption, qdel)."""

    machine: str
    reason: str


@dataclass(frozen=True, slots=True)
class RebalanceRecommended:
    """``machine``'s provider says it is at raised risk of being taken back (EC2's
    rebalance recommendation, usually before any interruption notice): it takes no new
    work, its queued tasks go back to the bag, and it goes at the end of its paid time
    once its runs end (the path of a notice, without the loss). ``time``: when, as the
    provider wrote it."""

    machine: str
    time: str = ""


@dataclass(frozen=True, slots=True)
class TaskDone:
    task: int
    machine: str
    runtime_s: float
    stored: Stored | None = None  # a task with outputs: the attempt that stored them


@dataclass(frozen=True, slots=True)
class TaskFailed:
    task: int
    machine: str
    runtime_s: float
    error: str


@dataclass(frozen=True, slots=True)
class Tick:
    """The monitoring interval has passed."""


@dataclass(frozen=True, slots=True)
class BoundaryNear:
    """``machine`` reaches the end of its committed time soon: keep it or let it go."""

    machine: str


@dataclass(frozen=True, slots=True)
class Shutdown:
    """The run is asked to end now (a signal): release every machine, dispatch nothing."""

    reason: str


@dataclass(frozen=True, slots=True)
class BudgetSet:
    """The run's whole budget is now ``budget`` (a user's choice, e.g. an option of
    ``autoscaler plan``); a held run carries on under it. Spend already committed stays."""

    budget: float
    reason: str


@dataclass(frozen=True, slots=True)
class DeadlineSet:
    """Job ``job``'s deadline is now run time ``deadline`` (a user's update); its tasks
    are planned against it from now on."""

    job: str
    deadline: float
    reason: str


@dataclass(frozen=True, slots=True)
class Interrupted:
    """The service stops (a signal) and keeps the run to resume: every machine goes at
    once, nothing is dispatched, and the run waits (``awaiting_budget``) until
    ``Resumed``. Unlike ``Shutdown`` the run is not stopped."""

    reason: str


@dataclass(frozen=True, slots=True)
class HandedOver:
    """The daemon ends and leaves the run, its machines running, to the next daemon (a
    service restart: systemd, an upgrade). Nothing more is dispatched or released; the
    machines keep their paid time and their agents their leases. The next daemon adopts
    those still running, as after a crash; one that no daemon adopts ends with its
    agent's lease (its agent exits, and so does the machine). The state is unchanged:
    the run goes on, only its driver changes."""

    reason: str


@dataclass(frozen=True, slots=True)
class Resumed:
    """An interrupted run carries on: it plans again with the money and the bag it has."""

    reason: str


@dataclass(frozen=True, slots=True)
class QuotaSet:
    """The machines this run may hold at once, now that a service runs it beside other
    jobs that share the account's quota: per type (``max_count``), and per limited
    provider (``max_machines``), each counting the run's own machines alive or being
    launched. A plain run never has one. The service tells it again whenever what the
    others leave changes: the planners plan within it and the launches stay within it."""

    types: Mapping[str, int]
    providers: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobArrived:
    """Job ``job`` of a deadline-mode run arrives now: its tasks may be planned."""

    job: str


@dataclass(frozen=True, slots=True)
class JobAdded:
    """A new job joins a live deadline-mode run now (the service's deadline pool): ``job``
    owns ``job.count`` new tasks numbered from the run's task count (``job.first``), and
    has arrived. ``order``: the order its tasks join the bag in, a permutation of its ids
    (shuffled, as ``runs.new_state`` shuffles a job's tasks, by whoever makes the event:
    the state decides nothing). The tasks' commands are the driver's business.
    ``categories``: in a run with categories, each of its tasks' category id in id
    order (-1: none of the run's), as whoever makes the event sorted them; empty: none."""

    job: JobSpec
    order: tuple[int, ...]
    categories: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class JobWithdrawn:
    """Job ``job`` of a deadline-mode run is withdrawn now (a user's cancel): its tasks
    neither done nor failed are cancelled (``TaskState.CANCELLED``); queued ones leave
    their machines and the launches in flight, running ones end (the controller sends
    each a ``Cancel`` for its agent). What its tasks ran so far stays its cost; the
    other jobs are planned again."""

    job: str
    reason: str


@dataclass(frozen=True, slots=True)
class PricesSeen:
    """The prices of market-priced types (those with a ``TypeSpec.cap``), per ATU, as
    the market (or a dry run's trace) says: ``types[i]`` cost ``prices[i]`` from run
    time ``at[i]`` on, and the market is known up to now. Each type's last price is
    what the planners see from now on; what its machines are billed is reconciled from
    the history (``core.spot_prices``). ``source``: where they come from (``market``,
    ``trace``)."""

    types: tuple[str, ...]
    at: tuple[float, ...]
    prices: tuple[float, ...]
    source: str = "market"


Event = (
    MachineLaunched
    | LaunchFailed
    | MachineReady
    | MachineLost
    | TaskDone
    | TaskFailed
    | Tick
    | BoundaryNear
    | Shutdown
    | BudgetSet
    | JobArrived
    | JobAdded
    | DeadlineSet
    | Interrupted
    | HandedOver
    | Resumed
    | JobWithdrawn
    | QuotaSet
    | PricesSeen
    | RebalanceRecommended
)


EVENT_TYPES: tuple[type[Event], ...] = (
    MachineLaunched,
    LaunchFailed,
    MachineReady,
    MachineLost,
    TaskDone,
    TaskFailed,
    Tick,
    BoundaryNear,
    Shutdown,
    BudgetSet,
    JobArrived,
    JobAdded,
    DeadlineSet,
    Interrupted,
    HandedOver,
    Resumed,
    JobWithdrawn,
    QuotaSet,
    PricesSeen,
    RebalanceRecommended,
)
