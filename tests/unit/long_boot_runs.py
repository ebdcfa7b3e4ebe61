"""``benchmarks.estimates``' long-boot rows run once, as the benchmark runs them: two
types, 60 machines of each, 2,000 tasks, both types booting in ``boot`` of the hour,
at ``factor`` × that seed's least budget (B_min)."""

from __future__ import annotations

from autoscaler.config.schema import RunConfig
from autoscaler.report.records import Report
from autoscaler.run.start import dry_run, plan_dry
from benchmarks.estimates import _setup, with_budget


def long_boot_run(
    dist: str, billing: str, boot: float, factor: float, seed: int
) -> tuple[RunConfig, float, Report]:
    """The row's config, the budget it ran at, and its report."""
    cfg, bag = _setup(dist, billing, 2000, boot, 60)
    b_min = plan_dry(cfg, bag, seed=seed).minimum_budget
    assert b_min is not None
    budget = round(factor * b_min, 2)
    return cfg, budget, dry_run(with_budget(cfg, budget), bag, seed=seed, plots=False).report
