"""The service's memory of task times per application (issue 22 §1).

A deadline job's application is its ``app:`` label, else its name. When a job ends, the
runs of its tasks that ended with a result are added to the store per (application,
machine type) (``Store.remember``). A later job of the same application that declares
no ``task_s`` starts from them: its ``task_s`` becomes the remembered means, so it is
planned at once instead of sampling first, and the controller goes on learning from its
runs (``deadline.prior``). That holds when every machine type has at least
``deadline.sample`` runs remembered (what sampling would have measured); a job of
several deadline jobs, or with ``task_s`` of its own, is left as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from autoscaler.config.schema import RunConfig
from autoscaler.core.state import RunState
from autoscaler.core.words import counted


def application(cfg: RunConfig) -> str | None:
    """The application of a job file of one deadline job (None: any other job)."""
    if not cfg.deadline_mode or len(cfg.jobs) > 1:
        return None
    if cfg.jobs:
        return cfg.jobs[0].app or cfg.jobs[0].name
    return cfg.name


def admitted(
    cfg: RunConfig, remembered: Callable[[str], dict[str, list[float]]]
) -> tuple[RunConfig, dict[str, Any]] | None:
    """``cfg`` as the service starts it, with its application's task times from
    ``remembered`` (an application's runs per type: ``Store.remembered``), and the note
    of where they came from; None when memory does not apply. The service and its dry
    run both admit a job with it."""
    app = application(cfg)
    if app is None:
        return None
    return with_memory(cfg, remembered(app), cfg.deadline.sample)


def with_memory(
    cfg: RunConfig, remembered: dict[str, list[float]], sample: int
) -> tuple[RunConfig, dict[str, Any]] | None:
    """``cfg`` with its job's ``task_s`` from ``remembered`` (per type: count, sum, sum
    of squares), and a note of where they came from; None when they do not apply."""
    app = application(cfg)
    if app is None or (cfg.jobs and cfg.jobs[0].task_s):
        return None
    types = [t.name for t in cfg.machine_types]
    if any(remembered.get(t, [0.0])[0] < sample for t in types):
        return None
    means = {t: round(remembered[t][1] / remembered[t][0], 3) for t in types}
    data = cfg.model_dump(mode="json")
    if cfg.jobs:
        job = data["jobs"][0]
    else:
        job = {"name": cfg.name, "bag": data["bag"], "constraint": data["constraint"]}
        data.update(bag=None, constraint=None)
    job.update(task_s=means, app=app)
    data["jobs"] = [job]
    note = {"app": app, "task_s": means, "runs": {t: int(remembered[t][0]) for t in types}}
    return RunConfig.model_validate(data), note


def said(note: dict[str, Any]) -> str:
    """The note as a sentence (job view, log, report)."""
    per = ", ".join(
        f"{t} {s:g} s ({counted(note['runs'][t], 'run')})" for t, s in note["task_s"].items()
    )
    return f"task times of application {note['app']!r} from earlier jobs, no sampling: {per}"


def job_runs(state: RunState, job: str) -> tuple[str, dict[str, list[float]]]:
    """``job``'s application and the runs of its tasks per machine type."""
    app = state.work.job_named(job).application
    return app, {t: list(r) for (j, t), r in state.observed.job_runs.items() if j == job}
