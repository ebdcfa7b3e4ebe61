"""What the machines of a run can still do: N_e, N_p and the forecast of a plan (pure).

* N_e (paper 000 §2.2): the tasks left once the time already paid for is used. Every
  machine paid for counts, launches still in flight included: a launch commits its
  first step, and the machine boots and works in it.
* N_p: the tasks the machines kept can do in the units the money left still pays for.
* ``forecast``: when a mix would finish the bag and what the whole run would cost,
  for given mean runtimes; run at the ends of the runtimes' interval it gives the
  interval of the prediction.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from autoscaler.core.model import MachineState
from autoscaler.core.state import Machine, RunState
from autoscaler.learn.stats import tasks_within

# Enum members looked up once: reading ``MachineState.READY`` calls a descriptor.
_BOOTING = MachineState.BOOTING

_EPS = 1e-6

Residuals = Callable[[str, np.ndarray], np.ndarray]
"""Expected total runtimes on a type of tasks already running for the given seconds,
all at once (``learn.stats.tail_estimates``)."""


def paid_completions(
    state: RunState, now: float, means: Mapping[str, float], residual: Residuals
) -> float:
    """Σ ft_m: tasks the machines paid for are expected to finish in their paid time.

    A machine of s slots is s lanes. A running task counts if its expected rest fits
    in its lane; the time left after it is filled with whole tasks of the type's mean,
    as is every free lane's. A booting machine loses the rest of its boot; a launch in
    flight does its first step less the whole boot. Types without an estimate count
    for nothing (they cannot be planned with yet). ``residual`` is asked once per type,
    of the running tasks on machines with paid time left, and only of types that have
    such a task (a type's curve is built where a task-by-task reading would build it).
    """
    billing = state.billing
    margin = billing.boundary_margin_s()
    total = 0.0
    simple: dict[str, list[Machine]] = {}  # one slot, one run at most: counted at once
    machines: list[tuple[Machine, float, float, int]] = []  # machine, left, mean, first age
    ages: dict[str, list[float]] = {}  # the other machines' running tasks
    for m in state.fleet.alive_machines():
        mean = means.get(m.type.name)
        if mean is None:
            continue
        if m.type.slots <= 1 and len(m.running) <= 1:
            simple.setdefault(m.type.name, []).append(m)
            continue
        left = m.paid_until - margin - now
        if m.state is _BOOTING:
            left -= max(0.0, m.launched_at + m.type.boot_s - now)
        seen = ages.setdefault(m.type.name, [])
        machines.append((m, left, mean, len(seen)))
        if left >= 0:  # else every lane is spent before its first task
            for start in m.running.values():
                seen.append(now - start)
    # ``total`` adds whole numbers only: exact in any order.
    for name, ms in simple.items():
        total += _one_lane(ms, now, margin, means[name], residual)
    totals = {n: residual(n, np.array(a)).tolist() for n, a in ages.items() if a}
    for m, left, mean, first in machines:
        lanes = [left] * max(1, m.type.slots)
        if left >= 0:
            name = m.type.name
            done_at, age_of = totals.get(name, []), ages[name]
            for i in range(len(m.running)):
                lane = i % len(lanes)
                if lanes[lane] < 0:
                    continue
                rest = max(0.0, done_at[first + i] - age_of[first + i])
                if rest > lanes[lane]:
                    lanes[lane] = -1.0
                    continue
                total += 1
                lanes[lane] -= rest
        total += sum(math.floor(lane / mean + _EPS) for lane in lanes if lane > 0)
    for tname, count in state.fleet.pending_launches.values():
        mean = means.get(tname)
        if mean is None:
            continue
        usable = billing.first_step_s - margin - state.types[tname].boot_s
        slots = state.types[tname].slots
        total += count * slots * max(0, math.floor(usable / mean + _EPS))
    return total


def _one_lane(
    ms: list[Machine], now: float, margin: float, mean: float, residual: Residuals
) -> float:
    """``paid_completions`` of machines of one type with one slot and one run at most, all
    at once (a tick of a big fleet asks it of thousands): a running task counts if its
    expected rest fits in the paid time left, which is then filled with whole tasks of
    ``mean``. The same arithmetic, element by element, as machine by machine."""
    left = np.array([m.paid_until for m in ms]) - margin - now
    for i, m in enumerate(ms):
        if m.state is _BOOTING:  # few at a time
            left[i] -= max(0.0, m.launched_at + m.type.boot_s - now)
    starts = np.array([next(iter(m.running.values()), math.nan) for m in ms])
    ran = (left >= 0) & ~np.isnan(starts)
    age = now - starts[ran]
    rest = np.maximum(0.0, residual(ms[0].type.name, age) - age) if len(age) else np.empty(0)
    lane = left.copy()
    kept = np.ones(len(ms), dtype=bool)  # not spent on its running task
    fits = rest <= left[ran]
    kept[np.flatnonzero(ran)[~fits]] = False
    lane[ran] = left[ran] - rest
    counted = int(np.count_nonzero(fits))
    lane = lane[kept & (lane > 0)]
    return counted + float(np.floor(lane / mean + _EPS).sum())


def expected_left(
    state: RunState, now: float, means: Mapping[str, float], residual: Residuals
) -> float:
    """N_e: tasks left beyond what paid time will do (never below zero)."""
    return max(0.0, state.tasks_left - paid_completions(state, now, means, residual))


def potential(
    state: RunState,
    means: Mapping[str, float],
    sds: Mapping[str, float],
    z: float = 0.0,
    loss: float = 0.25,
) -> float:
    """N_p: tasks the machines kept (launches in flight included) can do in the units
    the money not yet committed pays for, at the current mix's rate of spending.

    Units are whole ATUs under fixed billing, a fraction under per-second billing;
    each slot of each machine does ``tasks_within`` of that horizon (the final-unit
    cushion). Under fixed billing the units are bought as the machines reach the end
    of their paid time (``_units_paid``): machines launched after others (after a
    sampling phase, booting) reach it later, and the money that pays no whole unit of
    every machine may still pay the next unit of those that need it first.
    """
    kept = [m for m in state.fleet.alive_machines() if not m.marked and m.type.name in means]
    keep: list[str] = [m.type.name for m in kept]
    keep += [t for t, c in state.fleet.pending_launches.values() if t in means for _ in range(c)]
    if not keep:
        return 0.0
    per_unit = sum(state.types[t].price for t in keep)
    if state.money.budget is None or per_unit <= 0:  # no budget, or machines that are free
        return math.inf
    left = max(0.0, state.money.budget - state.money.committed)
    if state.billing.mode == "fixed":
        first = state.now + state.billing.first_step_s
        ends = [m.paid_until for m in kept] + [first] * (len(keep) - len(kept))
        units = _units_paid(ends, [state.types[t].price for t in keep], left, per_unit)
    else:
        units = [left / per_unit] * len(keep)
    atu = state.billing.atu_s
    each: dict[tuple[str, float], float] = {}
    for t, u in zip(keep, units, strict=True):
        if (t, u) not in each:
            lane = tasks_within(u * atu, means[t], sds.get(t, 0.0), z, loss)
            each[t, u] = state.types[t].slots * lane
    return float(sum(each[t, u] for t, u in zip(keep, units, strict=True)))  # in their order


def _units_paid(
    ends: Sequence[float], prices: Sequence[float], left: float, per_unit: float
) -> list[float]:
    """Whole units the money ``left`` pays each machine beyond its paid time ``ends``,
    bought in the order the machines need them, until a machine's next unit cannot be
    paid: the horizon stops there, at that machine's end, for every machine.

    R = ⌊left/Σc_i⌋ units each (every machine's next R units); what remains pays one
    more unit for the machines whose paid time ends before the first one it cannot
    pay for. Machines whose paid time ends together are all paid or none: with every
    end the same, each gets R units, the lockstep count of paper 000 §2.2.
    """
    rounds = math.floor(left / per_unit + _EPS)
    rest = left - rounds * per_unit
    units = [float(rounds)] * len(ends)
    order = sorted(range(len(ends)), key=lambda i: ends[i])
    stop = math.inf  # the end of the first machine the rest cannot pay a unit for
    for i in order:
        if prices[i] > rest + _EPS * per_unit:
            stop = ends[i]
            break
        rest -= prices[i]
    for i in order:
        if ends[i] >= stop:
            break
        units[i] = rounds + 1.0
    return units


@dataclass(frozen=True, slots=True)
class Forecast:
    end_s: float  # run time at which the last task is expected to end
    cost: float  # what the whole run is expected to cost by then
    fluid_cost: float = 0.0  # every machine to the fluid end, not capped at the budget


def forecast(
    state: RunState,
    now: float,
    counts: Mapping[str, int],
    means: Mapping[str, float],
    ragged_s: float = 0.0,
    budget: float | None = None,
) -> Forecast:
    """When ``counts`` (machines per type) would finish the tasks left, and the run's cost.

    Fluid: every machine of the mix works from when it is free (now; the end of its
    boot; a new machine's boot from now) at s_i/T_i tasks per second until the last task
    is done, plus ``ragged_s`` for the ragged end (the last tasks do not all end
    together: ``ragged.ragged_end``). Machines pay their lifetimes to the fluid end (a
    machine goes when it has no task left), under the billing's rules; machines already
    gone, or marked to go, pay what they did. Capped at the budget: the run never spends
    more (what it cannot pay for, it does not finish).
    """
    billing = state.billing
    live: dict[str, list[tuple[float, float, float]]] = {}  # type -> (launched, free, paid)
    fixed_cost = 0.0
    margin = billing.boundary_margin_s()
    leaving_work = 0.0  # tasks' worth done by machines that go at the end of their paid time
    for m in state.fleet.machines.values():
        if not m.alive:
            end = m.ended_at if m.ended_at is not None else now
            fixed_cost += billing.cost(m.type.price, end - m.launched_at)
        elif m.marked or m.type.name not in means or counts.get(m.type.name, 0) == 0:
            fixed_cost += billing.cost(m.type.price, m.paid_until - m.launched_at)
            if m.type.name in means:
                free = max(now, m.launched_at + m.type.boot_s)
                lanes = m.type.slots * max(0.0, m.paid_until - margin - free)
                leaving_work += lanes / means[m.type.name]
        else:
            free = max(now, m.launched_at + m.type.boot_s)
            live.setdefault(m.type.name, []).append((m.launched_at, free, m.paid_until))
    for tname, count in state.fleet.pending_launches.values():
        boot, first = state.types[tname].boot_s, billing.first_step_s
        if tname in means and counts.get(tname, 0) > 0:
            live.setdefault(tname, []).extend([(now, now + boot, now + first)] * count)
        else:
            fixed_cost += count * billing.cost(state.types[tname].price, first)
    rate = 0.0
    weighted_free = 0.0
    workers: list[tuple[str, float]] = []  # (type, launched)
    for tname, want in counts.items():
        if want <= 0 or tname not in means:
            continue
        ordered = sorted(live.get(tname, []), key=lambda lfp: lfp[1])
        have = [(launched, free) for launched, free, _ in ordered[:want]]
        have += [(now, now + state.types[tname].boot_s)] * (want - len(have))
        slots = state.types[tname].slots
        for launched, free in have:
            rate += slots / means[tname]
            weighted_free += slots * free / means[tname]
            workers.append((tname, launched))
        for launched, free, paid in ordered[want:]:  # to be marked: go when paid time ends
            fixed_cost += billing.cost(state.types[tname].price, paid - launched)
            leaving_work += slots * max(0.0, paid - margin - free) / means[tname]
    if rate <= 0 or state.tasks_left <= 0:
        paid = fixed_cost + _paid_by_live(state, workers, now)
        return Forecast(now, paid, paid)
    fluid_end = (max(0.0, state.tasks_left - leaving_work) + weighted_free) / rate
    end = fluid_end + ragged_s
    # Each machine goes once it has no task left: on average at the fluid end (its own
    # last task), not at the run's end, which only the longest last task reaches: one
    # machine of each type in the mix is counted to the end (it may run that task).
    last: dict[str, float] = {}
    cost = fixed_cost
    for t, launched in workers:
        cost += billing.cost(state.types[t].price, fluid_end - launched)
        last[t] = min(last.get(t, launched), launched)
    fluid_cost = cost
    for t, launched in last.items():
        price = state.types[t].price
        cost += billing.cost(price, end - launched) - billing.cost(price, fluid_end - launched)
    budget = state.money.budget if budget is None else budget
    if budget is not None:
        cost = min(cost, budget)
    return Forecast(end, cost, fluid_cost)


def money_end(
    state: RunState,
    now: float,
    counts: Mapping[str, int],
    means: Mapping[str, float],
    cap: float,
) -> tuple[float, bool]:
    """When ``counts`` would finish the tasks left (fluid, as ``forecast``) if each
    machine's next step of paid time is bought only while the money left of the budget
    ``cap`` lasts, in the order the machines need it: a machine whose next step the
    money cannot pay goes at the end of its paid time, and the machines still paid do
    the rest. What a run held at its budget does (``boundaries.can_extend``):
    ``forecast`` pays every machine to the fluid end, and caps the cost, not the time.
    With whether the bag finishes: if the money runs out with tasks left, when the last
    machine's paid time ends (a run that finishes within the budget on this mix ends by
    then) and False."""
    if state.tasks_left <= 0:
        return now, True
    billing = state.billing
    left = cap - state.money.committed
    margin = billing.boundary_margin_s()
    # (free, paid until, rate, price of a step or inf: never extended)
    lanes: list[list[float]] = []
    taken: dict[str, int] = {}
    for m in sorted(state.fleet.machines.values(), key=lambda m: m.launched_at + m.type.boot_s):
        name = m.type.name
        if not m.alive or name not in means:
            continue
        kept = not m.marked and taken.get(name, 0) < counts.get(name, 0)
        taken[name] = taken.get(name, 0) + kept
        step = billing.cost(m.type.price, billing.step_s) if kept else math.inf
        free = max(now, m.launched_at + m.type.boot_s)
        lanes.append([free, m.paid_until - margin, m.type.slots / means[name], step])
    for name, count in state.fleet.pending_launches.values():
        if name in means:
            t = state.types[name]
            step = billing.cost(t.price, billing.step_s) if counts.get(name, 0) > 0 else math.inf
            first = now + billing.first_step_s - margin
            lanes.extend([now + t.boot_s, first, t.slots / means[name], step] for _ in range(count))
            taken[name] = taken.get(name, 0) + count
    for name, want in counts.items():
        if name not in means or want <= taken.get(name, 0):
            continue
        t = state.types[name]
        new = want - taken.get(name, 0)
        left -= new * billing.cost(t.price, billing.first_step_s)
        first = now + billing.first_step_s - margin
        step = billing.cost(t.price, billing.step_s)
        lanes.extend([now + t.boot_s, first, t.slots / means[name], step] for _ in range(new))
    return _run_out(lanes, float(state.tasks_left), now, left, billing.step_s)


def _run_out(
    lanes: list[list[float]], work: float, now: float, left: float, step_s: float
) -> tuple[float, bool]:
    """``money_end``'s fluid run: each lane (free, paid until, rate, price of a step)
    works from ``free`` while paid; at the end of its paid time it buys ``step_s`` more
    if ``left`` pays it, in the order the lanes need it. When the work is done and
    True, or when the last paid time ended with work left and False."""
    events: list[tuple[float, int, int]] = []  # (time, 0 start | 1 paid time ends, lane)
    for i, (free, paid, _, _) in enumerate(lanes):
        heapq.heappush(events, (free, 0, i))
        heapq.heappush(events, (paid, 1, i))
    working = [False] * len(lanes)
    rate, t, on = 0.0, now, 0
    while events:
        at = events[0][0]
        if at > t:
            if rate > 0 and t + work / rate <= at:
                return t + work / rate, True
            work -= rate * (at - t)
            t = at
        _, kind, i = heapq.heappop(events)
        free, paid, r, step = lanes[i]
        if kind == 0:
            if free < paid:
                working[i] = True
                on += 1
                rate += r
        elif step <= left + _EPS:
            left -= step
            lanes[i][1] = paid + step_s
            heapq.heappush(events, (paid + step_s, 1, i))
            if not working[i] and free < paid + step_s and free <= t:
                working[i] = True
                on += 1
                rate += r
        elif working[i]:
            working[i] = False
            on -= 1
            rate = rate - r if on else 0.0  # no float residue once every lane stops
    return (t + work / rate, True) if rate > 0 else (t, False)


def _paid_by_live(state: RunState, workers: list[tuple[str, float]], now: float) -> float:
    return sum(state.billing.cost(state.types[t].price, now - launched) for t, launched in workers)
