"""Saying what the runs taught (issue 22 §1): a job's declared time on a type that its
runs show far and surely off (``prior.Blend.deviates``) is said once per job and type
(``Learned``: the log, ``autoscaler status``, the report)."""

from __future__ import annotations

from autoscaler.core.model import Learned
from autoscaler.core.step import Step
from autoscaler.core.words import counted
from autoscaler.deadline.jobs import DeadlineSettings, learned


def say_learned(cfg: DeadlineSettings, s: Step) -> list[Learned]:
    """A ``Learned`` for each (arrived job with declared times, type) whose blend
    deviates and was not said yet; the ones said."""
    state = s.state
    said: list[Learned] = []
    if not cfg.learn_task_times:
        return said
    for job in state.work.jobs:
        if not job.task_s or job.name not in state.work.arrived:
            continue
        for tname in job.task_s:
            if tname not in state.types or (job.name, tname) in state.work.learned:
                continue
            b = learned(cfg, state.work, state.observed, job, tname)
            if not b.deviates(cfg.note_share, cfg.z, cfg.note_runs):
                continue
            change = b.mean_s / b.declared_s - 1.0
            note = Learned(
                job.name,
                tname,
                b.declared_s,
                b.mean_s,
                b.runs,
                f"job {job.name!r} on {tname}: tasks take {b.mean_s:.1f} s "
                f"({100 * change:+.0f}% against the declared {b.declared_s:g} s, "
                f"from {counted(b.runs, 'run')} of {job.application!r}); plans use the "
                "learned time",
            )
            s.do(note)
            said.append(note)
    return said
