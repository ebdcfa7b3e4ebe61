"""Records that travel between the config, the controller, the drivers and the report.

Times are seconds since the start of the run (``now``), money is in the prices'
currency. Events flow into ``Controller.step``; actions flow out of it. Both are
frozen dataclasses so the journal can record them as they are.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

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


@dataclass(frozen=True, slots=True)
class JobSpec:
    """A job of a deadline-mode run (paper 002): the tasks ``first .. first + count - 1``,
    arriving at run time ``at``, due at run time ``deadline`` (absolute), optionally with
    a budget of its own, and the mean task time per type when it is known (a recurring
    application); without ``task_s`` the controller samples it. A type missing from a
    non-empty ``task_s`` cannot run the job. ``app`` names its application (default: the
    job's name): jobs of one application learn each other's task times."""

    name: str
    first: int
    count: int
    at: float
    deadline: float
    budget: float | None = None
    task_s: Mapping[str, float] = field(default_factory=dict)
    app: str = ""

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


@dataclass(frozen=True, slots=True)
class LaunchFailed:
    """A launch (or part of it) did not happen; ``count`` machines never existed.

    ``kind`` says what the provider's refusal means for later launches: ``error`` (try
    again when the plan asks), ``capacity`` (the type is unavailable until ``until``:
    plan without it), ``limit`` (the provider's account or subnet is full: no scale-up
    of ``types``, the types of that provider, until ``until``; none given: of every
    type), ``throttled`` (no scale-up of any type until ``until``) or ``setup`` (the
    type's machines failed their set-up too often: avoided as for ``capacity``). After ``until``
    the types avoided count less, regaining full weight over ``recover_s``
    (``RunRecords.weight``).
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
class TaskDone:
    task: int
    machine: str
    runtime_s: float


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
class Resumed:
    """An interrupted run carries on: it plans again with the money and the bag it has."""

    reason: str


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
    the state decides nothing). The tasks' commands are the driver's business."""

    job: JobSpec
    order: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class JobWithdrawn:
    """Job ``job`` of a deadline-mode run is withdrawn now (a user's cancel): its tasks
    neither done nor failed are cancelled (``TaskState.CANCELLED``); queued ones leave
    their machines and the launches in flight, running ones end (the controller sends
    each a ``Cancel`` for its agent). What its tasks ran so far stays its cost; the
    other jobs are planned again."""

    job: str
    reason: str


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
    | Resumed
    | JobWithdrawn
)


# --- actions: what the controller decided ---------------------------------------------


@dataclass(frozen=True, slots=True)
class Launch:
    """Start ``count`` machines of ``type``; ``token`` makes the launch idempotent.

    ``queues`` (deadline mode): the tasks each new machine is bought for, one tuple per
    machine, queued on the machines in the order they come up; tasks of a machine that
    never comes up go back to the bag."""

    type: str
    count: int
    token: str
    queues: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True, slots=True)
class Extend:
    """Commit ``machine`` to another paid unit, until ``until``."""

    machine: str
    until: float


@dataclass(frozen=True, slots=True)
class Mark:
    """Release ``machine`` at the end of its paid unit (``release``), or keep it after all."""

    machine: str
    release: bool


@dataclass(frozen=True, slots=True)
class Release:
    """Terminate ``machine`` now; tasks on it that did not finish go back to the bag."""

    machine: str
    reason: str


@dataclass(frozen=True, slots=True)
class Assign:
    """Append ``task`` to ``machine``'s queue."""

    task: int
    machine: str


@dataclass(frozen=True, slots=True)
class AssignGroup:
    """Append ``tasks`` to ``machine``'s queue, in order: a task group (paper 004), one
    record however many tasks. Its agent is sent them at once and runs them as its slots
    free up; one not yet started can still be moved or cancelled."""

    tasks: tuple[int, ...]
    machine: str


@dataclass(frozen=True, slots=True)
class Replicate:
    """Run a copy of the running ``task`` on ``machine``; the first result wins."""

    task: int
    machine: str


@dataclass(frozen=True, slots=True)
class Cancel:
    """Stop ``task`` on ``machine`` (a losing replica, or a task being moved)."""

    task: int
    machine: str
    reason: str


@dataclass(frozen=True, slots=True)
class Move:
    """Take queued, not yet started ``tasks`` from ``source`` and queue them on ``target``."""

    tasks: tuple[int, ...]
    source: str
    target: str


@dataclass(frozen=True, slots=True)
class Defer:
    """Launches the target wants wait for ``types`` (an outage or an account hold).

    The monitoring tick after the wait tries them again; an empty ``types`` says nothing
    waits any more. Only the state reads it: no driver acts on it.
    """

    types: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Configure:
    """A new machine configuration was chosen (counts per type), with its prediction.

    The prediction is a point and an interval (lo, hi) for the whole run's cost and
    makespan (run time from the start), and the interval of each type's mean runtime the
    plan assumed: the monitor re-plans when an estimate leaves it. Costs are capped at
    the budget; ``slow_cost`` is what the mix would need at the slow end, uncapped (more
    than the budget: the budget is at risk). ``best_effort``: the
    planner found no mix that finishes the bag within the budget, and this keeps going
    on the most profitable type (its prediction is for a budget it cannot meet).
    """

    counts: Mapping[str, int]
    predicted_cost: float | None  # None before anything is known (sampling)
    predicted_makespan_s: float | None
    reason: str
    cost_interval: tuple[float, float] | None = None
    makespan_interval_s: tuple[float, float] | None = None
    assumed_lo_s: Mapping[str, float] = field(default_factory=dict)
    assumed_hi_s: Mapping[str, float] = field(default_factory=dict)
    best_effort: bool = False  # the planner found no mix the budget pays for: one type
    slow_cost: float | None = None  # the cost at the interval's slow end, not capped


@dataclass(frozen=True, slots=True)
class Shortfall:
    """The budget left is unlikely to finish the bag: said once it is known, with the
    budget the estimates say the whole run needs (None: no affordable plan exists at any
    budget the planner could search)."""

    tasks_left: int
    needed_budget: float | None
    message: str


@dataclass(frozen=True, slots=True)
class Risk:
    """The budget may not finish the bag: it does at the estimated runtimes, but not at
    the slow end of their intervals (a ``Shortfall`` says it does not even at the
    estimates). ``needed_budget``: about what the whole run needs at that slow end
    (None: more than the planner could search)."""

    tasks_left: int
    needed_budget: float | None
    message: str


@dataclass(frozen=True, slots=True)
class Forecast:
    """Deadline mode: what the plan just made expects of job ``job``: when its last task
    ends (``finish``, run time) and the money its machines' time costs (``cost``: each
    machine's planned cost shared by the jobs in proportion to their planned seconds),
    each with an interval: task times at the ends of each type's runtime interval."""

    job: str
    finish: float
    cost: float
    finish_interval: tuple[float, float] | None = None
    cost_interval: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class Late:
    """Deadline mode: job ``job`` is expected to miss its deadline, ``tasks`` of its tasks
    ending late, the last by ``seconds`` (0 and 0: it is expected on time again);
    ``cause`` says what gave way: ``deadline`` (no machines the provider allows finish it
    in time) or ``budget`` (the budget cannot pay for those that would)."""

    job: str
    tasks: int
    seconds: float
    cause: str
    message: str


@dataclass(frozen=True, slots=True)
class Learned:
    """Deadline mode: job ``job``'s tasks take ``learned_s`` on type ``type`` by ``runs``
    runs (of its application), far and surely off the ``declared_s`` its ``task_s``
    gives; said once per job and type (``deadline.prior``)."""

    job: str
    type: str
    declared_s: float
    learned_s: float
    runs: int
    message: str


@dataclass(frozen=True, slots=True)
class Hold:
    """The samples are complete and the run waits for a budget (``autoscaler plan``):
    nothing more is committed, the machines work on the bag until their paid time ends,
    and a ``BudgetSet`` carries the run on from the samples."""

    reason: str


@dataclass(frozen=True, slots=True)
class Stop:
    """The run ends: ``reason`` is None when the bag is finished."""

    reason: str | None


Action = (
    Launch
    | Extend
    | Mark
    | Release
    | Assign
    | AssignGroup
    | Replicate
    | Cancel
    | Move
    | Defer
    | Configure
    | Shortfall
    | Risk
    | Forecast
    | Late
    | Learned
    | Hold
    | Stop
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
    Resumed,
    JobWithdrawn,
)
ACTION_TYPES: tuple[type[Action], ...] = (
    Launch,
    Extend,
    Mark,
    Release,
    Assign,
    AssignGroup,
    Replicate,
    Cancel,
    Move,
    Defer,
    Configure,
    Shortfall,
    Risk,
    Forecast,
    Late,
    Learned,
    Hold,
    Stop,
)
