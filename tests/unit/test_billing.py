"""Billing arithmetic: whole ATUs, per-second with a minimum, commitments."""

from __future__ import annotations

import pytest

from autoscaler.core.billing import BillingModel

HOURLY = BillingModel("fixed", 3600.0)
PER_SECOND = BillingModel("per_second", 3600.0, min_charge_s=60.0, commit_s=300.0)


def test_a_started_unit_is_paid_whole() -> None:
    assert HOURLY.units(1.0) == 1
    assert HOURLY.units(3600.0) == 1
    assert HOURLY.units(3600.5) == 2
    assert HOURLY.cost(3.0, 7300.0) == 9.0


def test_a_machine_that_never_ran_pays_one_unit() -> None:
    assert HOURLY.cost(3.0, 0.0) == 3.0


def test_float_noise_at_a_boundary_does_not_bill_an_extra_unit() -> None:
    assert HOURLY.units(3 * 1200.0 + 1e-10) == 1


def test_per_second_billing_has_a_minimum_charge() -> None:
    assert PER_SECOND.cost(3.6, 10.0) == pytest.approx(3.6 * 60 / 3600)
    assert PER_SECOND.cost(3.6, 1800.0) == pytest.approx(1.8)


def test_commit_steps() -> None:
    assert HOURLY.step_s == 3600.0
    assert HOURLY.first_step_s == 3600.0
    assert PER_SECOND.step_s == 300.0
    assert (
        BillingModel("per_second", 3600.0, min_charge_s=600.0, commit_s=300.0).first_step_s == 600.0
    )


def test_extension_cost_is_one_more_unit_or_step() -> None:
    assert HOURLY.extension_cost(3.0, launched_at=100.0, until=3700.0) == 3.0
    assert PER_SECOND.extension_cost(3.6, launched_at=0.0, until=300.0) == pytest.approx(0.3)


def test_next_boundary_is_the_end_of_the_current_unit() -> None:
    assert HOURLY.next_boundary(launched_at=100.0, now=200.0) == 3700.0
    assert HOURLY.next_boundary(launched_at=100.0, now=3800.0) == 7300.0


@pytest.mark.parametrize("billing", [HOURLY, PER_SECOND])
def test_costs_of_many_machines_are_each_ones_cost(billing: BillingModel) -> None:
    """``costs`` (the spend plot's, all machines at once) is ``cost`` of each."""
    import numpy as np

    prices = [3.0, 12.0, 0.5, 7.25, 1.0, 3.0]
    lives = [0.0, 1.0, 59.9, 3600.0, 3600.0 + 1e-12, 7300.5]
    got = billing.costs(np.array(prices), np.array(lives)).tolist()
    assert got == [billing.cost(p, d) for p, d in zip(prices, lives, strict=True)]
