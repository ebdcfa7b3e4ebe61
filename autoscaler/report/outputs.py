"""The report's records of task outputs (``files.outputs``): where they are, how much."""

from __future__ import annotations

from autoscaler.report.json_record import record


@record
class TaskOutputs:
    """Where one task's outputs were stored (the attempt whose result counted)."""

    task: int
    """The task's id."""
    where: str
    """Its outputs' place: a folder of the run directory (``outputs/<task>/``) or a URL
    (``s3://bucket/prefix/<task>/``)."""
    files: int
    """Files stored (0: its output patterns matched nothing)."""
    bytes: int
    """Bytes stored."""


@record
class OutputsSummary:
    """The task files that came back (tasks with ``files.outputs``)."""

    tasks: int
    """Tasks whose outputs were stored."""
    files: int
    """Files stored, all tasks together."""
    bytes: int
    """Bytes stored, all tasks together."""
    empty: tuple[int, ...]
    """Tasks done whose output patterns matched no file."""
    stored: tuple[TaskOutputs, ...]
    """Each task done, by id."""
