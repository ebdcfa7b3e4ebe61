"""What the plan in force expects: per job (``Forecast``: its last finish and its share
of the machines' cost) and for the run (``Configure``: machines per type, whole cost and
last finish), from each machine's queue, alive or being launched."""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

from autoscaler.core.cost_shares import Run, arrivals, machine_runs, shares, step_costs, steps
from autoscaler.core.model import Configure, Forecast, Learned
from autoscaler.core.state import RunState
from autoscaler.core.step import Step
from autoscaler.deadline.category_parts import job_of_key, key_of, machine_key_s, planned_s
from autoscaler.deadline.jobs import DeadlineSettings, job_deadlines
from autoscaler.deadline.queues import queue_of
from autoscaler.deadline.reassign import Queue, finish_times
from autoscaler.deadline.slot_queues import cushion, on_slots
from autoscaler.deadline.withdraw import still_open


def forecast(cfg: DeadlineSettings, s: Step, jobs: set[str], why: str) -> None:
    """What the plan in force expects: per job (``Forecast``) and for the run
    (``Configure``: machines per type, whole cost and last finish)."""
    state = s.state
    deadlines = job_deadlines(cfg, state)
    # Each machine, alive or being launched: (queue, launched, paid until, type).
    queues: list[tuple[Queue, float, float, str]] = []
    for m in state.fleet.alive_machines():
        queues.append((queue_of(cfg, state, m, s.now), m.launched_at, m.paid_until, m.type.name))
    for token, planned in state.work.launch_queues.items():
        tname = state.fleet.pending_launches.get(token, ("", 0))[0]
        if not tname:
            continue
        t = state.types[tname]
        for tasks in planned:
            named = [(tid, key_of(cfg, state.tasks, state.work, tid)) for tid in tasks]
            times = {name: planned_s(cfg, state, name, tname) for _, name in named}
            paid = s.now + state.billing.first_step_s
            margin = state.billing.boundary_margin_s()
            start = s.now + t.boot_s + cushion(t.slots, max(times.values(), default=0.0))
            times = on_slots(times, t.slots)
            q = Queue(f"{token}?", start, paid - margin, named, times)
            queues.append((q, s.now, paid, tname))
    base = (
        state.money.committed
        - sum(  # committed money of machines not counted below
            state.billing.cost(m.type.price, m.paid_until - m.launched_at)
            for m in state.fleet.alive_machines()
        )
        - sum(
            c * state.billing.cost(state.types[tn].price, state.billing.first_step_s)
            for tn, c in state.fleet.pending_launches.values()
        )
    )
    past = _ran(cfg, state, s.now)
    name = _namer(state)
    counts: dict[str, int] = {}
    for _, _, _, tname in queues:
        counts[tname] = counts.get(tname, 0) + 1
    lo_of, hi_of, sd_of, spread, z_n = _spread(cfg, state, cfg.z, len(queues), name)
    unit = NormalDist()
    running_lo = _running_ends(past, s.now, unit.cdf(-cfg.z), spread)
    running_hi = _running_ends(past, s.now, unit.cdf(z_n), spread)
    running = _running_ends(past, s.now, 0.5, spread)
    one: Scale = lambda q, t: 1.0  # noqa: E731
    finish, cost, total = _expect(state, queues, deadlines, base, past, name, one, sd=sd_of)
    finish_lo, cost_lo, _ = _expect(state, queues, deadlines, base, past, name, lo_of, -1)
    finish_hi, cost_hi, _ = _expect(state, queues, deadlines, base, past, name, hi_of, 1)
    done: dict[str, float] = {}  # per job: the last end of its runs on alive machines
    for runs in past.runs.values():
        for _, run_end, job, _ in runs:
            done[job] = max(done.get(job, run_end), run_end)
    for job in sorted(_sharing(queues, past.runs, jobs, name)):
        end = max(finish.get(job, -math.inf), running.get(job, -math.inf))
        if end == -math.inf:
            # Nothing of it queued or running: it is done, but what it is charged
            # still moves with what runs beside it on a machine it ran on.
            end = lo = hi = done.get(job, -math.inf)
            if end == -math.inf:
                continue  # it ran on no machine alive: its charge is settled
        else:
            lo = max(finish_lo.get(job, -math.inf), running_lo.get(job, -math.inf))
            hi = max(finish_hi.get(job, -math.inf), running_hi.get(job, -math.inf))
        c = cost.get(job, 0.0)
        s.do(
            Forecast(
                job,
                end,
                c,
                finish_interval=(min(lo, end), max(hi, end)),
                cost_interval=(min(cost_lo.get(job, c), c), max(cost_hi.get(job, c), c)),
            )
        )
    last = max(finish.values(), default=s.now)
    s.do(Configure(counts, total, last, f"deadline plan ({why})"))


def outdated(state: RunState, said: Sequence[Learned], now: float | None) -> set[str]:
    """The open jobs whose last forecast rests on what proved wrong: those of an
    application whose learned time on a type was just ``said`` (the plan's times moved),
    and, at a tick (``now``), those forecast to be done by a time that has passed with
    tasks left. Without this a job's forecast was made again only when its plan
    changed: a job whose tasks all ran three times their declared time kept, to its end,
    a forecast made in its first minutes (last finish 1,140 s, done at 2,340 s)."""
    work = state.work
    apps = {work.job_named(n.job).application for n in said}
    candidates = {j.name for j in work.jobs if j.application in apps}
    if now is not None:
        candidates |= {name for name, f in work.forecasts.items() if f.finish < now}
    if not candidates:
        return set()
    return candidates & still_open(state.tasks, work)


def _namer(state: RunState) -> Callable[[str], str]:
    """The job a task key belongs to (``category_parts.job_of_key``), each key looked up
    once per forecast."""
    known: dict[str, str] = {}

    def name(key: str) -> str:
        job = known.get(key)
        if job is None:
            job = known[key] = job_of_key(state.work, key).name
        return job

    return name


def _sharing(
    queues: list[tuple[Queue, float, float, str]],
    ran: Mapping[str, Sequence[Run]],
    jobs: set[str],
    name_of: Callable[[str], str],
) -> set[str]:
    """``jobs`` and the jobs that share a machine with one of them: what a machine's
    cost charges one of them changes what it charges the others."""
    out = set(jobs)
    for q, _, _, _ in queues:
        names = {name_of(key) for _, key in q.tasks}
        names |= {name for _, _, name, _ in ran.get(q.machine, ())}
        if names & jobs:
            out |= names
    return out


def at_low_end(cfg: DeadlineSettings, state: RunState, queues: list[Queue]) -> list[Queue]:
    """``queues`` with each job's time per task at the low end of what is known of it:
    what is late even then is surely late. A machine's time for a job is the mean of
    its own runs of it where it has some, else of its type's (``jobs.machine_task_s``),
    known within z·r/√n of its n runs (r: the job's relative spread, ``PRIOR_SPREAD``
    before two runs; a planned time with no runs: within z·r); its m queued tasks
    spread by z·r/√m more. Early, on a few slow first runs, little is surely late."""
    (spread,) = _seen_spreads(state, lambda tid: state.work.job_of(tid).name)
    out = []
    for q in queues:
        m = state.fleet.machines.get(q.machine)
        counts: dict[str, int] = {}
        for _, key in q.tasks:
            counts[key] = counts.get(key, 0) + 1
        times = {}
        for key, e in q.task_s.items():
            job = job_of_key(state.work, key).name
            seen = spread.get(job)
            r = PRIOR_SPREAD if seen is None else seen[0]
            runs = state.observed.machine_job_runs.get((q.machine, job))
            if (runs is None or runs[0] <= 0) and m is not None:
                runs = state.observed.job_runs.get((job, m.type.name))
            n = runs[0] if runs is not None else 0
            known = r / math.sqrt(n) if n > 0 else r
            noise = r / math.sqrt(max(1, counts.get(key, 0)))
            times[key] = e * max(0.0, 1.0 - cfg.z * math.hypot(known, noise))
        out.append(replace(q, task_s=times))
    return out


PRIOR_SPREAD = 0.2
"""The relative spread of a job's task times (sd over mean) assumed until two of its
runs have ended: a declared time is a mean, and runs scatter about it (paper 002's
cloud experiment: ±10 % to ±30 % uniform, sd 6 % to 17 %)."""

Scale = Callable[[Queue, str], float]
"""The factor a queue's task times are taken at (its machine type given)."""


@dataclass(frozen=True, slots=True)
class _Past:
    """What the machines have run, as the report will charge it (``_ran``)."""

    runs: dict[str, list[Run]]  # per alive machine: its ended and running runs
    spent: dict[str, float]  # per job: its part of the machines that have ended
    arrived: dict[str, float]  # per job: when it came (``cost_shares.arrivals``)
    tasks: list[tuple[str, float, float]]  # each running task: (job, start, expected s)


def _ran(cfg: DeadlineSettings, state: RunState, now: float) -> _Past:
    """What the machines have run so far, as the report will charge their cost
    (``core.cost_shares``): per alive machine its ended runs and its running ones to
    their expected end; and per job its part of the machines that have ended. A forecast
    made mid-run then charges a machine's whole cost by all it ran and will run, and
    keeps what a job spent on machines that are gone; and each running task, whose end
    (``_running_ends``) is a job's end while nothing of it is queued."""
    arrived = arrivals(state.work)
    ran: dict[str, list[Run]] = {}
    spent: dict[str, float] = {}
    tasks: list[tuple[str, float, float]] = []
    for mid, runs in machine_runs(state.tasks, state.work).items():
        m = state.fleet.machines.get(mid)
        if m is None:
            continue
        if m.alive:
            ran[mid] = runs
            continue
        costs = step_costs(state.fleet, m, now)
        for name, c in shares(runs, m.launched_at, state.billing.step_s, costs, arrived)[0].items():
            spent[name] = spent.get(name, 0.0) + c
    for m in state.fleet.alive_machines():
        for tid, start in m.running.items():
            e = machine_key_s(cfg, state, m, key_of(cfg, state.tasks, state.work, tid)) or 0.0
            name = state.work.job_of(tid).name
            ran.setdefault(m.id, []).append((start, max(now, start + e), name, 1.0))
            tasks.append((name, start, e))
    return _Past(ran, spent, arrived, tasks)


def _running_ends(
    past: _Past, now: float, q: float, spread: Mapping[str, tuple[float, int]]
) -> dict[str, float]:
    """Per job the ``q`` quantile of its running tasks' last end, each task's time taken
    as normal about its expected time e with the job's relative spread r
    (``PRIOR_SPREAD`` before two runs), given that it has run ``now − start`` already.
    A task run past where that normal ends is in a tail it does not describe (a hung
    input, a slow machine): the more surely the normal says it should have ended
    (``w``, the normal's chance of a time below what it has run), the more its time
    left is taken as memoryless, of mean e, instead. Before, such a task was forecast
    to end at once, tick after tick, and its job's interval shrank to a point."""
    unit = NormalDist()
    out: dict[str, float] = {}
    for name, start, e in past.tasks:
        seen = spread.get(name)
        r = PRIOR_SPREAD if seen is None else seen[0]
        if e <= 0:
            end = now
        else:
            w = unit.cdf(((now - start) / e - 1.0) / r) if r > 0 else float(now >= start + e)
            normal = start + e * (1.0 + r * unit.inv_cdf(min(w + q * (1.0 - w), 1.0 - 1e-9)))
            memoryless = now - e * math.log1p(-q)
            end = (1.0 - w) * max(now, normal) + w * memoryless
        out[name] = max(out.get(name, end), end)
    return out


def _charged(
    state: RunState,
    q: Queue,
    launched: float,
    life: float,
    price: float,
    machine_cost: float,
    ran: Sequence[Run],
    slots: int,
    name_of: Callable[[str], str],
    arrived: Mapping[str, float],
) -> dict[str, float]:
    """Each job's part of one machine's expected ``machine_cost`` (``core.cost_shares``):
    what it ``ran``, then its queue in order from when it is free (a slotted machine's
    queue is one lane of times over its slots, each second of it ``slots`` seconds run),
    over its ``life`` from ``launched``.
    The steps are costed as billed, scaled to ``machine_cost`` (the mean over the spread
    of the machine's end)."""
    runs = list(ran)
    t = q.busy_until
    for _, key in q.tasks:
        d = q.task_s.get(key, 0.0)
        runs.append((t, t + d, name_of(key), float(slots)))
        t += d
    step_s = state.billing.step_s
    bill = [
        state.billing.cost(price, min(life, k * step_s))
        for k in range(1, steps(0.0, life, step_s) + 1)
    ]
    costs = [b - a for a, b in itertools.pairwise([0.0, *bill])]
    whole = sum(costs)
    if whole > 0:
        costs = [c * machine_cost / whole for c in costs]
    return shares(runs, launched, step_s, costs, arrived)[0]


def _expect(
    state: RunState,
    queues: list[tuple[Queue, float, float, str]],
    deadlines: Mapping[str, float],
    base: float,
    past: _Past,
    name_of: Callable[[str], str],
    scale: Scale,
    side: int = 0,
    sd: Scale | None = None,
) -> tuple[dict[str, float], dict[str, float], float]:
    """Per job its last finish and its share of the machines' cost, and the run's whole
    cost (from ``base``, the money of machines not in ``queues``), each queue's task
    times taken at ``scale`` times the plan's. A machine's cost is charged by what it
    ran (``past.runs``) and its queue (``_charged``); a job's part of the machines that
    have ended (``past.spent``) is added as it is.

    ``side`` −1 or 1: the low or high end. A job's last task on a machine may be moved
    to another one, or one more moved in (reassignment), so its end there is known
    within one task's time either way; and its cost lies between its tasks' own machine
    time at the price per second (no idle time) and its share of the machine's cost with
    all of that machine's idle money (the idle time is shared by the seconds run, which
    are not known until the run ends).

    ``sd``: the spread of a queue's work, as a share of it; each machine is then costed
    at its mean cost over the spread of its end, not at the cost of its mean end (under
    fixed billing a plan that fills a unit pays the next one about half the time)."""
    finish: dict[str, float] = {}
    cost: dict[str, float] = dict(past.spent)
    total = base
    for q0, launched, paid_until, tname in queues:
        f = scale(q0, tname)
        q = q0 if f == 1.0 else replace(q0, task_s={k: v * f for k, v in q0.task_s.items()})
        ends = finish_times(q, deadlines)
        end = max([q.busy_until, *ends.values()])
        paid = max(paid_until, end) - launched
        price = state.types[tname].price
        machine_cost = state.billing.cost(price, paid)
        if sd is not None:
            work = sum(q.task_s.get(key, 0.0) for _, key in q.tasks)
            machine_cost = state.billing.expected_cost(
                price, end - launched, sd(q, tname) * work, paid_until - launched
            )
        total += machine_cost
        slots = state.types[tname].slots
        ran = past.runs.get(q0.machine, ())
        seconds: dict[str, float] = {}
        for start, stop, name, _ in ran:
            seconds[name] = seconds.get(name, 0.0) + (stop - start) / slots
        for _, key in q.tasks:
            name = name_of(key)
            seconds[name] = seconds.get(name, 0.0) + q.task_s.get(key, 0.0)
        busy = sum(seconds.values())
        per_s = price / state.billing.atu_s
        idle = max(0.0, machine_cost - per_s * busy)
        parts = (  # the low end is the jobs' own seconds, at the price per second
            {}
            if side < 0
            else _charged(
                state, q, launched, paid, price, machine_cost, ran, slots, name_of, past.arrived
            )
        )
        for name, sec in seconds.items():
            share = parts.get(name, 0.0)
            c = share if side == 0 else per_s * sec if side < 0 else share + idle
            cost[name] = cost.get(name, 0.0) + c
        for key, end_j in ends.items():
            name = name_of(key)
            end_j += side * q.task_s.get(key, 0.0)
            finish[name] = max(finish.get(name, 0.0), end_j)
    return finish, cost, total


def _spread(
    cfg: DeadlineSettings, state: RunState, z: float, queues: int, name_of: Callable[[str], str]
) -> tuple[Scale, Scale, Scale, dict[str, tuple[float, int]], float]:
    """The low and high factor of a queue's task times, the spread of its work as a
    share of it, each job's relative spread and runs (``_seen_spreads``), and the z of
    one queue's high end (below). Each job's runs seen to end, as a share of the mean of
    its runs on the same type, give its relative spread r (n runs); a queue of m tasks
    then takes 1 ± √((z·r/√n)² + (z·r/√m)²) times its planned time: the mean's error
    and the spread of m more runs; the spread is that at z = 1. Where the queue's jobs differ, the
    widest of them. A job with fewer than two runs seen to end is planned on its
    declared (or sampled) mean, and its runs are taken to spread by ``PRIOR_SPREAD``."""
    spread, by_key = _seen_spreads(
        state,
        lambda tid: state.work.job_of(tid).name,
        lambda tid: key_of(cfg, state.tasks, state.work, tid),
    )
    # A job ends with the latest of its machines' queues: for that latest end to be
    # below the high end as often as one queue's end is below z, each queue's own
    # spread is taken at z_n, Φ(z_n)^n = Φ(z) (the means' error is shared by all).
    z_n = NormalDist().inv_cdf(NormalDist().cdf(z) ** (1.0 / max(1, queues)))

    def widest(q: Queue, z_mean: float, z_q: float, keyed: bool = False) -> float:
        out = 0.0
        names = {key if keyed else name_of(key) for _, key in q.tasks}
        for name in names:
            seen = (by_key if keyed else spread).get(name)
            mean_err = 0.0 if seen is None else z_mean * seen[0] / math.sqrt(seen[1])
            r = PRIOR_SPREAD if seen is None else seen[0]
            out = max(out, math.hypot(mean_err, z_q * r / math.sqrt(len(q.tasks))))
        return out

    def factor(sign: float, z_q: float) -> Scale:
        return lambda q, tname: max(0.0, 1.0 + sign * widest(q, z, z_q))

    return (
        factor(-1.0, z),
        factor(1.0, z_n),
        lambda q, tname: widest(q, 1.0, 1.0, True),
        spread,
        z_n,
    )


def _seen_spreads(
    state: RunState, *names: Callable[[int], str]
) -> list[dict[str, tuple[float, int]]]:
    """Per way a task is named (its job, or its job's part of its category), per name:
    the sd of its runs seen to end, each as a share of the mean of its runs on the same
    type, and their number (names with two runs or more). One pass over the runs."""
    runs: list[dict[tuple[str, str], list[float]]] = [{} for _ in names]
    for seg in state.tasks.segments:
        m = state.fleet.machines.get(seg.machine)
        if seg.outcome == "done" and m is not None and seg.end > seg.start:
            for table, name in zip(runs, names, strict=True):
                table.setdefault((name(seg.task), m.type.name), []).append(seg.end - seg.start)
    out = []
    for table in runs:
        shares: dict[str, list[float]] = {}
        for (key, _), times in table.items():
            mean = sum(times) / len(times)
            shares.setdefault(key, []).extend(t / mean for t in times)
        out.append({key: (statistics.stdev(v), len(v)) for key, v in shares.items() if len(v) >= 2})
    return out
