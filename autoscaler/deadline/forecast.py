"""What the plan in force expects: per job (``Forecast``: its last finish and its share
of the machines' cost) and for the run (``Configure``: machines per type, whole cost and
last finish), from each machine's queue, alive or being launched."""

from __future__ import annotations

from autoscaler.core.model import Configure, Forecast
from autoscaler.core.step import Step
from autoscaler.deadline.categories import job_of_key, key_of, planned_s
from autoscaler.deadline.jobs import DeadlineSettings, job_deadlines
from autoscaler.deadline.queues import queue_of
from autoscaler.deadline.reassign import Queue, finish_times
from autoscaler.deadline.slots import cushion, on_slots


def forecast(cfg: DeadlineSettings, s: Step, jobs: set[str], why: str) -> None:
    """What the plan in force expects: per job (``Forecast``) and for the run
    (``Configure``: machines per type, whole cost and last finish)."""
    state = s.state
    deadlines = job_deadlines(cfg, state)
    # Each machine, alive or being launched: (queue, launched, paid until, type).
    queues: list[tuple[Queue, float, float, str]] = []
    for m in state.alive_machines():
        queues.append((queue_of(cfg, state, m, s.now), m.launched_at, m.paid_until, m.type.name))
    for token, planned in state.launch_queues.items():
        tname = state.pending_launches.get(token, ("", 0))[0]
        if not tname:
            continue
        t = state.types[tname]
        for tasks in planned:
            named = [(tid, key_of(cfg, state, tid)) for tid in tasks]
            times = {name: planned_s(cfg, state, name, tname) for _, name in named}
            paid = s.now + state.billing.first_step_s
            margin = state.billing.boundary_margin_s()
            start = s.now + t.boot_s + cushion(t.slots, max(times.values(), default=0.0))
            times = on_slots(times, t.slots)
            q = Queue(f"{token}?", start, paid - margin, named, times)
            queues.append((q, s.now, paid, tname))
    finish: dict[str, float] = {}
    cost: dict[str, float] = {}
    total = (
        state.committed
        - sum(  # committed money of machines not counted below
            state.billing.cost(m.type.price, m.paid_until - m.launched_at)
            for m in state.alive_machines()
        )
        - sum(
            c * state.billing.cost(state.types[tn].price, state.billing.first_step_s)
            for tn, c in state.pending_launches.values()
        )
    )
    counts: dict[str, int] = {}
    for q, launched, paid_until, tname in queues:
        counts[tname] = counts.get(tname, 0) + 1
        ends = finish_times(q, deadlines)
        end = max([q.busy_until, *ends.values()])
        paid = max(paid_until, end) - launched
        machine_cost = state.billing.cost(state.types[tname].price, paid)
        total += machine_cost
        seconds: dict[str, float] = {}
        for _, key in q.tasks:
            name = job_of_key(state, key).name
            seconds[name] = seconds.get(name, 0.0) + q.task_s.get(key, 0.0)
        busy = sum(seconds.values())
        for name, sec in seconds.items():
            if busy > 0:
                cost[name] = cost.get(name, 0.0) + machine_cost * sec / busy
        for key, end_j in ends.items():
            name = job_of_key(state, key).name
            finish[name] = max(finish.get(name, 0.0), end_j)
    for name in sorted(jobs):
        if name in finish:
            s.do(Forecast(name, finish[name], cost.get(name, 0.0)))
    last = max(finish.values(), default=s.now)
    s.do(Configure(counts, total, last, f"deadline plan ({why})"))
