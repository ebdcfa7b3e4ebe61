"""``run.plan_real``: what a real plan's sampling rents, said before anything is."""

from __future__ import annotations

from pathlib import Path

from autoscaler.config.load import expand_bag, load_config
from autoscaler.run.plan_real import sampling_offer
from autoscaler.run.start import plan_dry

EXAMPLES = Path(__file__).parents[2] / "config" / "examples"


def test_the_offer_prices_each_sampling_machines_first_hour() -> None:
    cfg = load_config(EXAMPLES / "quickstart.yaml")  # fixed billing, 1 h units
    offer = sampling_offer(cfg, len(expand_bag(cfg)), seed=1)
    prices = {t.name: t.price for t in cfg.machine_types}
    assert sum(offer.counts.values()) > 0
    assert offer.first_commit == sum(c * prices[n] for n, c in offer.counts.items())
    assert offer.budget == cfg.constraint.budget
    assert offer.reason


def test_the_offer_commits_no_more_at_first_than_the_dry_sampling_did() -> None:
    cfg = load_config(EXAMPLES / "quickstart.yaml")
    tasks = expand_bag(cfg)
    offer = sampling_offer(cfg, len(tasks), seed=1)
    assert offer.first_commit <= plan_dry(cfg, tasks, seed=1).sampling_cost
