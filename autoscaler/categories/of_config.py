"""A run config's categories: the one sorting both the run's state and its report use."""

from __future__ import annotations

from autoscaler.categories.sort import (
    Category,
    ClassIntervals,
    by_label,
    categorise,
    requirements_of,
)
from autoscaler.config.load import expand_bag
from autoscaler.config.schema import RunConfig


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
