"""``run.plan_real``: what a real plan's sampling rents, said before anything is."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.budget.controller import Controller
from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.core.model import Action, Event, Hold
from autoscaler.core.state import RunState
from autoscaler.run.assemble import make_controller
from autoscaler.run.plan_real import Frontiers, HeldFrontier, sampling_offer
from autoscaler.run.start import make_emulator, plan_dry

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


class _Stop(Exception):
    pass


def test_a_held_runs_frontier_is_the_dry_plans_and_comes_from_its_own_thread() -> None:
    cfg = load_config(EXAMPLES / "quickstart.yaml")
    tasks = expand_bag(cfg)
    shown: list[HeldFrontier] = []
    failed: list[str] = []
    frontiers = Frontiers(cfg.time_scale, shown.append, failed.append)
    controller = make_controller(cfg, hold=True)
    assert isinstance(controller, Controller)

    def on_step(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        if any(isinstance(a, Hold) for a in actions):
            frontiers.on_hold(controller, state, now)
            raise _Stop

    emulator = make_emulator(cfg, len(tasks), 1, on_step=on_step, controller=controller)
    with pytest.raises(_Stop):
        emulator.run()
    frontiers.join()
    assert failed == []
    [held] = shown
    assert held.frontier == plan_dry(cfg, tasks, seed=1)
    assert held.paid_left_s > 0
