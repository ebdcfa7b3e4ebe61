"""Sampling a job without known task times: ``sample`` runs of it on each type that can
be launched, side by side, before the job is planned. With categories, each type takes
first the tasks of the large categories it has run fewer than ``category_per`` times
(``categories.sample_order``, as budget mode), and samples enough to cover them."""

from __future__ import annotations

import math

from autoscaler.core.limits import new_caps
from autoscaler.core.model import Assign, Launch, MachineState
from autoscaler.core.step import Step
from autoscaler.deadline.category_parts import sample_first
from autoscaler.deadline.jobs import EPS, DeadlineSettings, is_sampling, launchable, sample_want


def sample(cfg: DeadlineSettings, s: Step) -> None:
    state = s.state
    for job in state.work.jobs:
        if job.name not in state.work.arrived or not is_sampling(cfg, state, job):
            continue
        pending = [t for t in state.tasks.pending if job.owns(t)]
        for name in state.types:
            if not pending or not launchable(state, name):
                continue
            want = sample_want(cfg, state, job)
            have = (state.observed.job_runs.get((job.name, name)) or [0])[0]
            have += sum(
                1
                for m in state.fleet.alive_machines()
                if m.type.name == name
                for t in (*m.running, *m.queue)
                if job.owns(t)
            )
            have += sum(
                1
                for token, queues in state.work.launch_queues.items()
                if state.fleet.pending_launches.get(token, ("", 0))[0] == name
                for q in queues
                for t in q
                if job.owns(t)
            )
            give = min(want - int(have), len(pending))
            if give <= 0:
                continue
            pending = sample_first(cfg, state, name, pending)
            chosen, pending = pending[:give], pending[give:]
            spread_sample(s, name, chosen)


def spread_sample(s: Step, name: str, tasks: list[int]) -> None:
    """Run sample ``tasks`` on type ``name`` side by side, the deadline running: one
    each on its machines' free slots, then a machine's slots' worth each on new machines
    the limits and the budget allow, the rest queued on the least loaded machine of the
    type. Samples of a slotted type run beside each other, as the job's tasks will:
    their times are the times per task at that slot count."""
    state = s.state
    slots = state.types[name].slots
    mine = [m for m in state.fleet.alive_machines() if m.type.name == name and not m.marked]
    for m in mine:
        if m.state is not MachineState.READY:
            continue
        while tasks and len(m.running) + len(m.queue) < m.type.slots:
            s.do(Assign(tasks.pop(0), m.id))
    room = new_caps(state)[name]
    if state.money.budget is not None:
        unit = state.billing.cost(state.types[name].commit_price, state.billing.first_step_s)
        room = min(room, math.floor((state.money.budget - state.money.committed) / unit + EPS))
    count = min(room, -(-len(tasks) // slots))
    if count > 0 and state.capacity.launchable(name, s.now):
        queues = tuple(tuple(tasks[i * slots : (i + 1) * slots]) for i in range(count))
        s.do(Launch(name, count, state.fleet.next_token(), queues))
        tasks = tasks[count * slots :]
    host = min(mine, key=lambda m: len(m.queue) + len(m.running), default=None)
    if host is not None:
        for tid in tasks:
            s.do(Assign(tid, host.id))
