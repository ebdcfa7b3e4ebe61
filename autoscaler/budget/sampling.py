"""Sampling (paper 000 §2.1), plain and compact (slides 001): the configuration a run
starts with, when the samples are in, and whose runs a type's runtimes are judged by.

Compact sampling: the first ``state.paired_target`` tasks assigned run on every type
(their runs are counted on each type and never cancelled when another ends:
``RunState``). The reference type runs the rest of the sample set of n; each other
type's runtimes are the reference's mapped through g(x) = a·x + b, fitted by least
squares on the pairs, until the type has seen n runs of its own. Its machines (k of
them) are released at the end of their paid time once they have their replicated
tasks, unless the first plan wants them.
"""

from __future__ import annotations

from autoscaler.budget.fleet import meet_target
from autoscaler.budget.settings import EPS, ControllerSettings, planned
from autoscaler.core.decisions import Decisions
from autoscaler.core.model import Assign, Configure, Replicate, TaskState
from autoscaler.core.state import Machine, RunState
from autoscaler.core.step import Step
from autoscaler.learn.affine import AffineFit, fit_affine
from autoscaler.learn.stats import RuntimeStats, initial_workers, mapped_stats, sample_size


def sampling(settings: ControllerSettings, state: RunState) -> Configure:
    """The sampling configuration a fresh run starts with."""
    n = sample_size(state.n_tasks, settings.z, settings.delta)
    iw = initial_workers(state.n_tasks, n)
    # iw tasks at once per type: a machine of s slots runs s of them.
    aim = {name: -(-iw // t.slots) for name, t in state.types.items()}
    if is_compact(settings, state):
        # Only the reference samples n tasks; the others run the replicated ones.
        ref = reference(settings, state)
        aim = {name: iw if name == ref else min(iw, state.observed.paired_target) for name in aim}
    wanted = {name: min(aim[name], t.max_count) for name, t in state.types.items()}
    short = any(wanted[name] < aim[name] for name in aim)
    counts = _affordable(state, dict(wanted))
    caps = [
        why
        for why, capped in (
            ("max_count", short),
            ("budget", counts != wanted),
        )
        if capped
    ]
    reason = f"sampling: n={n}, iw={iw}"
    if is_compact(settings, state):
        reason = (
            f"compact sampling: n={n} on {reference(settings, state)}, iw={iw}; "
            f"{state.observed.paired_target} tasks replicated on every type"
        )
    if caps:
        started = ", ".join(f"{name} {c}" for name, c in counts.items())
        reason += f", capped by {' and '.join(caps)}: {started}"
    return Configure(counts, None, None, reason)


def _affordable(state: RunState, counts: dict[str, int]) -> dict[str, int]:
    """Shrink the sampling configuration until one step of it fits the budget."""
    if state.money.budget is None:
        return counts
    return _within(state, counts, state.money.budget)


def _within(state: RunState, counts: dict[str, int], money: float) -> dict[str, int]:
    """Shrink ``counts`` until one first step of each of their machines fits ``money``."""
    first = state.billing.first_step_s
    price = {n: state.billing.cost(t.commit_price, first) for n, t in state.types.items()}

    def cost() -> float:
        return sum(c * price[n] for n, c in counts.items())

    while cost() > money + EPS and any(counts.values()):
        # Take one machine from the type with the most; drop the dearest types last.
        name = max(counts, key=lambda n: (counts[n] > 1, counts[n], price[n]))
        counts[name] -= 1
    return counts


def sampling_types(state: RunState, now: float) -> list[str]:
    """The types plain sampling waits for: those of the last configuration that are
    available or have a machine alive."""
    return [
        n
        for n, c in state.decisions.configurations[-1][1].counts.items()
        if c > 0 and (state.capacity.available(n, now) or state.fleet.count_alive(n) > 0)
    ]


def refused_unsampled(settings: ControllerSettings, state: RunState) -> list[str]:
    """The types plain sampling wanted that lack their sample because launches of them
    were refused (no capacity through the sampling phase): the first plan was made
    without them, and none after it can include a type it has no runtimes of. Not
    those given up for good, nor under compact sampling (a late type has no replicated
    tasks to fit a line on)."""
    if is_compact(settings, state) or not state.decisions.configurations:
        return []
    refused = {t for _, t, _, _ in state.capacity.launch_problems}
    first = state.decisions.configurations[0][1].counts
    return [
        n
        for n, c in first.items()
        if c > 0
        and n in refused
        and not state.observed.stats[n].sampled
        and not state.capacity.given_up(n)
    ]


def late_sampling(
    settings: ControllerSettings, state: RunState, now: float, spare: float
) -> Configure | None:
    """The configuration that samples the types refused through sampling which may be
    launched again at ``now`` (``refused_unsampled``, none of them wanted by the plan
    in force), beside the plan's machines: as many machines of each as sampling
    starts a type with, shrunk until their first steps fit ``spare``, the money the
    plan does not need (so the bag it finishes stays paid for). None when no such
    type, not a task of a sample left to give it, or not a machine affordable."""
    target = state.decisions.target
    late = [
        n
        for n in refused_unsampled(settings, state)
        if target.get(n, 0) == 0 and state.capacity.launchable(n, now)
    ]
    n = sample_size(state.n_tasks, settings.z, settings.delta)
    if not late or len(state.tasks.pending) < n:
        return None
    iw = initial_workers(state.n_tasks, n)
    wanted = {
        name: min(-(-iw // state.types[name].slots), state.types[name].max_count) for name in late
    }
    counts = {name: c for name, c in _within(state, wanted, spare).items() if c > 0}
    if not counts:
        return None
    said = ", ".join(f"{name} {c}" for name, c in counts.items())
    why = (
        f"sampling {said} (n={n}): refused through sampling, launchable again; "
        f"paid from {spare:.2f} the plan leaves"
    )
    return Configure({**target, **counts}, None, None, why)


def resampling(decisions: Decisions) -> bool:
    """Whether a sampling configuration made after a plan (``late_sampling``) is in
    force: the last configuration predicts nothing, and a plan came before it."""
    configurations = decisions.configurations
    return (
        bool(configurations)
        and configurations[-1][1].predicted_makespan_s is None
        and decisions.plan() is not None
    )


def late_sampled(state: RunState, now: float) -> list[str] | None:
    """While a sampling configuration made after a plan (``late_sampling``) is in force,
    the types it still waits for: those it samples that have no sample yet and may
    still get one (a machine alive, or launchable; a task left to start). None when no
    such configuration is in force."""
    if not resampling(state.decisions):
        return None
    return [
        n
        for n in late_types(state.decisions)
        if not state.observed.stats[n].sampled
        and state.tasks.pending
        and (state.capacity.launchable(n, now) or state.fleet.count_alive(n) > 0)
    ]


def late_types(decisions: Decisions) -> list[str]:
    """The types the sampling configuration in force after a plan samples: those it
    wants more of than the plan did."""
    plan = decisions.plan()
    if plan is None or not decisions.configurations:
        return []
    last = decisions.configurations[-1][1].counts
    return [n for n, c in last.items() if c > plan.counts.get(n, 0)]


# --- compact sampling -------------------------------------------------------------------


def is_compact(settings: ControllerSettings, state: RunState) -> bool:
    """Whether the run samples compactly (and has more than one type to do it on)."""
    return (
        settings.policy == "bats"
        and settings.sampling_mode == "compact"
        and state.observed.paired_target > 0
        and len(state.types) > 1
    )


def reference(settings: ControllerSettings, state: RunState) -> str:
    """The type that samples the rest of the sample set: the one that can start the
    most of the iw sampling machines (the sample of n is in soonest), then the
    cheapest (iw machines of it are most of the sampling cost), then by name.
    Runtimes are unknown before sampling, so the price per task cannot choose."""
    n = sample_size(state.n_tasks, settings.z, settings.delta)
    iw = initial_workers(state.n_tasks, n)
    best = min(state.types.values(), key=lambda t: (-min(iw, t.max_count), t.price, t.name))
    return best.name


def fit(settings: ControllerSettings, state: RunState, name: str) -> AffineFit | None:
    """g for ``name`` against the reference, on the replicated tasks done on both."""
    ref = reference(settings, state)
    runs = (state.observed.paired_runs[tid] for tid in state.observed.paired)
    return fit_affine((r[ref], r[name]) for r in runs if ref in r and name in r)


def derived(
    settings: ControllerSettings, state: RunState, name: str
) -> tuple[AffineFit, RuntimeStats] | None:
    """The fit and the mapped reference runs ``name``'s estimates come from, or None
    when they come from its own runs: plain sampling, the reference itself, a type
    with n runs of its own, or no fit yet."""
    if not is_compact(settings, state):
        return None
    ref = reference(settings, state)
    base = state.observed.stats[ref]
    if name == ref or state.observed.stats[name].done >= base.sample_target or base.done == 0:
        return None
    g = fit(settings, state, name)
    if g is None:
        return None
    return g, mapped_stats(base, g)


def stats(settings: ControllerSettings, state: RunState, name: str) -> RuntimeStats:
    """The runs ``name``'s runtimes are judged by: its own, or the reference's mapped."""
    d = derived(settings, state, name)
    return state.observed.stats[name] if d is None else d[1]


def compact_progress(settings: ControllerSettings, s: Step) -> tuple[bool, list[str]]:
    """Whether compact sampling is complete, and the types it samples: the reference
    has its sample set (as ``RuntimeStats.sampled``), every other type has ended its
    runs of the replicated tasks (or has no machine left to run them on)."""
    state = s.state
    ref = reference(settings, state)
    first = state.decisions.configurations[0][1].counts
    types = [
        n
        for n, c in first.items()
        if c > 0 and (state.capacity.available(n, s.now) or state.fleet.count_alive(n) > 0)
    ]
    if ref not in types or not state.observed.stats[ref].sampled:
        return False, types
    if len(state.observed.paired) < state.observed.paired_target:
        return False, types
    for name in types:
        st = state.observed.stats[name]
        open_ = any(t not in st.sample or t in st.sample_open for t in state.observed.paired)
        if name != ref and open_ and state.fleet.count_alive(name) > 0:
            return False, types
    return True, types


def probe(settings: ControllerSettings, s: Step, m: Machine) -> bool:
    """Compact sampling: give ``m`` (idle, or a free slot of it) a replicated task its
    type has not run yet
    (the first ``paired_target`` tasks assigned become them). A type other than the
    reference that has them all is sampled: its target drops to 0, so its machines
    go at the end of their paid time (draining meanwhile), unless a plan wants them."""
    state = s.state
    name = m.type.name
    ref = reference(settings, state)
    queued = {t for x in state.fleet.alive_machines() if x.type.name == name for t in x.queue}
    for tid in state.observed.paired:
        if tid in state.observed.stats[name].sample or tid in queued:
            continue
        if m.id in state.tasks.running_on.get(tid, {}):
            continue  # another slot of ``m`` runs it already
        if state.tasks.task_state[tid] is TaskState.PENDING:
            s.do(Assign(tid, m.id))
            return True
        if state.tasks.task_state[tid] is TaskState.DONE or state.tasks.task_state[tid] is (
            TaskState.RUNNING
        ):
            s.do(Replicate(tid, m.id))
            return True
    if name == ref:
        return False
    if len(state.observed.paired) < state.observed.paired_target:
        if state.tasks.pending:
            s.do(Assign(state.tasks.pending[0], m.id))
            return True
        return False
    if state.decisions.target.get(name, 0) > 0:
        counts = {**state.decisions.target, name: 0}
        why = (
            f"compact sampling: {name} has its {state.observed.paired_target} replicated tasks; "
            "its machines go at the end of their paid time"
        )
        s.do(Configure(counts, None, None, why))
        meet_target(s)
    return False


def probing(state: RunState, m: Machine) -> bool:
    """Whether ``m`` runs a replicated task's counted run during compact sampling."""
    return (
        bool(state.observed.paired_runs)
        and not state.money.stopped
        and not planned(state.decisions)
        and any(
            t in state.observed.paired_runs and m.type.name not in state.observed.paired_runs[t]
            for t in m.running
        )
    )
