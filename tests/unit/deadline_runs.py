"""Small deadline-mode runs in the emulator, for the report's, status's and metrics' tests.

The sim gives each task its job's time on the machine's type (``JobSpec.task_s``) times
``slow``, with some noise: ``slow`` above 1 makes the jobs take longer than their plans
assume, so they run late.
"""

from __future__ import annotations

import random
from collections.abc import Mapping

from autoscaler.config.schema import Emulator as EmulatorModel
from autoscaler.core.billing import BillingModel
from autoscaler.core.model import JobSpec, TypeSpec
from autoscaler.core.state import Machine, RunState
from autoscaler.deadline.deadline_controller import DeadlineController
from autoscaler.providers.base import Capabilities
from autoscaler.providers.sim import SimProvider
from autoscaler.run.emulator import Emulator, StepHook

# The machine types of config/examples/quickstart.yaml (so its config can be reported on),
# few enough that a slow run cannot buy its way back to its deadlines.
TYPES = (TypeSpec("small", 0.5, 3, 60.0), TypeSpec("fast", 1.5, 2, 60.0))
TASK_S = {"small": 90.0, "fast": 30.0}


def jobs(n_jobs: int = 3, tasks: int = 20, gap_s: float = 300.0, window_s: float = 900.0):
    """``n_jobs`` jobs of ``tasks`` tasks, one every ``gap_s``, each due ``window_s`` after."""
    return tuple(
        JobSpec(f"job{j}", j * tasks, tasks, j * gap_s, j * gap_s + window_s, None, TASK_S)
        for j in range(n_jobs)
    )


def deadline_run(
    specs: tuple[JobSpec, ...],
    *,
    slow: float = 1.0,
    noise: float = 0.1,
    seed: int = 1,
    on_step: StepHook | None = None,
    slower: Mapping[int, float] | None = None,
) -> RunState:
    """The finished state of a deadline-mode run of ``specs`` in the emulator
    (``on_step``: the emulator's hook, after each step; ``slower``: tasks that take that
    many times longer still)."""
    billing = BillingModel("fixed", 3600, 60, 300)
    n = sum(j.count for j in specs)
    state = RunState.new(TYPES, billing, None, n, list(range(n)), jobs=specs)

    class Sim(SimProvider):
        def run_time(self, task: int, machine: str) -> float:
            job = state.work.job_of(task)
            r = random.Random(f"{task}:{machine}:{seed}")
            base = job.task_s[self.machines[machine].type]
            factor = (slower or {}).get(task, 1.0)
            return factor * slow * base * (1 + r.uniform(-noise, noise))

    caps = Capabilities(
        billing=billing,
        max_counts={t.name: t.max_count for t in TYPES},
        boot_estimate_s={t.name: t.boot_s for t in TYPES},
    )
    clock: list[Emulator] = []
    sim = Sim(caps, EmulatorModel(), n, clock=lambda: clock[0].now, seed=seed)
    emulator = Emulator(DeadlineController(), state, sim, 60.0, on_step=on_step)
    clock.append(emulator)
    return emulator.run()


def one_step_shares(state: RunState, m: Machine) -> dict[str, float]:
    """The share of ``m``'s cost each job bears, for a machine that lived one billing
    step (``core.cost_shares``, said plainly for that case): the jobs that had come by
    its launch and ran on it, by their seconds there; if none, every job that ran on it."""
    assert m.ended_at is not None
    assert m.ended_at - m.launched_at <= state.billing.step_s
    seconds = {j.name: 0.0 for j in state.work.jobs}
    for seg in state.tasks.segments:
        if seg.machine == m.id:
            seconds[state.work.job_of(seg.task).name] += seg.end - seg.start
    there = {j.name for j in state.work.jobs if j.at <= m.launched_at}
    payers = {n: s for n, s in seconds.items() if n in there and s > 0}
    payers = payers or {n: s for n, s in seconds.items() if s > 0}
    return {n: s / sum(payers.values()) for n, s in payers.items()}
