"""Re-planning when a declared time proves wrong (issue 38): once the runs of a type show a
job's declared ``task_s`` there far and surely too short (the declared time outside the
learned time's interval: ``prior.Blend.deviates``, said as ``Learned``), the queues of
the plan in force are checked against the learned times in that very step, not at the
next monitoring tick: queued tasks the learned time makes late move to machines with
room (Algorithm 4, ``watch.move_late``). Machines for what stays late are bought at the
tick, as before.

What a plan knowing the truth would have done differently is only what is not bought
yet. Every plan made after the runs began already uses the learned time (the prior
weighs k = σ²/τ² pseudo-runs, a small fraction of one on runs as quiet as ±10 %:
``prior``), and a machine bought on the wrong time is paid to the end of its unit, so it
is kept and filled (paper 002's Algorithm 1) and goes at the end of its paid unit once
idle (``ends``). Two stronger re-plans were tried and cost more
(``benchmarks.deadline_learn``'s slow medium, and the same with a 2.5 h window): taking
every queued task back and planning it again from scratch (one or two machines more in
about half the seeds: Algorithm 1 packs the paid machines up to the deadlines, and the
tight queues then need machines for one or two tasks each), and buying for late tasks at
the note (8–10 % more on the long window: on the first five runs the learned time
carries a wide margin, and each note bought a machine for the five tasks it made late
where the tick, a minute of runs later, bought one for fifty). A type re-checks once per
application that learns it: a later job of the application was planned on the learned
time.
"""

from __future__ import annotations

from collections.abc import Iterable

from autoscaler.core.job_ledger import Jobs
from autoscaler.core.model import Learned


def proven_wrong(work: Jobs, said: Iterable[Learned]) -> set[str]:
    """The jobs whose plan ``said`` proves wrong: the arrived, not withdrawn jobs of the
    applications whose learned time on a type left the declared one for the first time,
    slower (a job's planning times blend its application's runs, ``jobs.learned``: a job
    that arrives after its application learned a type was planned on the learned time).

    Only slower: a declared time that proves pessimistic cannot make the plan in force
    late, and the next tick's moves use the faster time anyway; and the runs that end
    first are the short ones, so a note that a type is faster is the one a noisy start
    says wrongly (``benchmarks.deadline_cloud``, large.dyna ±0.3, seed 2: a check on
    such a note moved tasks that then needed two more machines)."""
    notes = [n for n in said if n.learned_s > n.declared_s]
    now = {(n.job, n.type) for n in notes}
    before = {
        (work.job_named(job).application, tname)
        for job, tname in work.learned
        if (job, tname) not in now
    }
    apps = {
        work.job_named(n.job).application
        for n in notes
        if (work.job_named(n.job).application, n.type) not in before
    }
    return {
        j.name
        for j in work.jobs
        if j.application in apps and j.name in work.arrived and j.name not in work.withdrawn
    }
