"""A task as plain JSON beyond its command and env: its timeout, what it says it needs,
and its files. The run's tasks file and the service's store both keep it, so a task
read back (a resumed run, a job the service starts) is the task that was given."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autoscaler.core.model import TaskSpec
from autoscaler.core.task_files import spec_from_json, spec_json

NEEDS = ("input_bytes", "estimate_s", "output_bytes", "category")
"""What a task says it needs (paper 004's sizes and estimate, or a user's category)."""


def task_extra(task: TaskSpec) -> dict[str, object]:
    """What ``task`` has beyond its id, command and env; empty for a bare task."""
    out: dict[str, object] = {k: v for k in NEEDS if (v := getattr(task, k)) is not None}
    if task.timeout_s is not None:
        out["timeout_s"] = task.timeout_s
    if task.files is not None:
        out["files"] = spec_json(task.files)
    return out


def task_of(
    tid: int, command: str | None, env: Mapping[str, str], extra: Mapping[str, Any]
) -> TaskSpec:
    """The task ``task_extra`` wrote as ``extra``, with its id, command and env."""
    timeout = extra.get("timeout_s")
    return TaskSpec(
        tid,
        command,
        dict(env),
        None if timeout is None else float(timeout),
        files=spec_from_json(extra.get("files")),
        **{k: extra[k] for k in NEEDS if k in extra},
    )
