"""What the controller decides: the actions ``Controller.step`` returns (frozen
dataclasses, journaled as they are; ``core.model`` re-exports them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

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
    the budget; ``slow_cost`` is read from journals of older versions only (what the mix
    would need at the slow end, uncapped). ``best_effort``: the
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
    slow_cost: float | None = None  # older journals: the cost at the slow end, not capped


@dataclass(frozen=True, slots=True)
class Shortfall:
    """The budget left is unlikely to finish the bag: said once it is known, with the
    budget the estimates say the whole run needs (None: no affordable plan exists at any
    budget the planner could search). ``committed``: the money committed when it was said
    (None in journals written before it was kept)."""

    tasks_left: int
    needed_budget: float | None
    message: str
    committed: float | None = None


@dataclass(frozen=True, slots=True)
class Risk:
    """The budget may not finish the bag: it does at the estimated runtimes, but not at
    the reserved runtimes, slower by the planner's reserve (``risk.check_risk``; a
    ``Shortfall`` says it does not even at the estimates). ``needed_budget``: about what
    the whole run needs there, as ``autoscaler plan`` works out its minimum (None: more
    than the planner could search, or said at the start). ``at_start``: in journals of
    older versions only, said before any runtime was known because sampling alone
    committed more than half the budget. ``committed``: the money committed when it was
    said (None in older journals)."""

    tasks_left: int
    needed_budget: float | None
    message: str
    committed: float | None = None
    at_start: bool = False


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
    and a ``BudgetSet`` carries the run on from the samples. ``means``: each type's
    estimated mean runtime then, which the plan's options were made on (empty in older
    journals): a later warning says how far the estimates moved since."""

    reason: str
    means: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Stop:
    """The run ends: ``reason`` is None when the bag is finished."""

    reason: str | None


OUT_OF_MONEY = "budget exhausted"
"""How a ``Stop`` reason begins when the budget pays for no more machines and tasks are
left: what bears out a warning that the budget may not finish the bag."""


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
