"""A run config's categories: the one sorting both the run's state and its report use."""

from __future__ import annotations

from collections.abc import Sequence

from autoscaler.categories.sort import (
    Category,
    ClassIntervals,
    by_label,
    categorise,
    key_of,
    requirements_of,
)
from autoscaler.config.bag import expand_bag
from autoscaler.config.schema import RunConfig
from autoscaler.core.model import TaskSpec


def categories_of(cfg: RunConfig) -> list[Category] | None:
    """The bag's tasks sorted into categories (paper 004 §4.1), if the config asks (in
    deadline mode the jobs' bags, numbered as ``expand_bag``)."""
    c = cfg.categories
    if c is None:
        return None
    needs = requirements_of(expand_bag(cfg))
    if c.by == "label":
        return by_label(needs)
    return categorise(needs, ClassIntervals(c.input_bytes, c.estimate_s, c.output_bytes))


def categories_of_tasks(
    cfg: RunConfig, found: Sequence[Category], tasks: Sequence[TaskSpec]
) -> tuple[int, ...]:
    """Each of ``tasks``' category among the run's (``found``, from its config), keyed as
    they were (a label, or the bins of what the task needs): a job joining a pool is
    planned and sampled by the categories its tasks share with the pool's; -1 where
    none has its key (it is planned with its job as a whole). Empty without categories."""
    c = cfg.categories
    if c is None or not found:
        return ()
    ids = {cat.key: cat.id for cat in found}
    needs = requirements_of(tasks)
    if c.by == "label":
        keys: list[tuple[int, int, int] | str] = [needs[t.id].label or "" for t in tasks]
    else:
        ci = ClassIntervals(c.input_bytes, c.estimate_s, c.output_bytes)
        keys = [key_of(needs[t.id], ci) for t in tasks]
    return tuple(ids.get(k, -1) for k in keys)
