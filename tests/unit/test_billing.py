"""Billing arithmetic: whole ATUs, per-second with a minimum, commitments."""

from __future__ import annotations

from statistics import NormalDist

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


def _per_instant(
    billing: BillingModel, times: list[float], machines: list[tuple[float, float, float]]
) -> list[float]:
    """The spend at each instant as the report once summed it: ``costs`` over every
    machine launched by then, instant by instant."""
    import numpy as np

    prices, launched, ended = (np.array(c, dtype=float) for c in zip(*machines, strict=True))
    out = []
    for t in times:
        on = launched <= t
        out.append(float(billing.costs(prices[on], np.minimum(t, ended[on]) - launched[on]).sum()))
    return out


_ATU = st.sampled_from([60.0, 600.0, 3600.0])
_FLEET = st.lists(
    st.tuples(
        st.sampled_from([0.5, 1.0, 3.0, 7.25]),  # price
        st.integers(0, 40).map(lambda k: k * 300.0) | st.floats(0.0, 12_000.0),  # launch
        st.integers(0, 40).map(lambda k: k * 300.0) | st.floats(0.0, 12_000.0),  # life
    ),
    min_size=1,
    max_size=40,
)


@given(
    mode=st.sampled_from(["fixed", "per_second"]),
    atu=_ATU,
    fleet=_FLEET,
    end=st.sampled_from([12_000.0, 24_000.0]) | st.floats(1.0, 30_000.0),
    points=st.sampled_from([1, 7, 40, 400]),
)
@settings(max_examples=300, deadline=None)
def test_spend_over_time_is_each_instants_sum_of_costs(
    mode: str, atu: float, fleet: list[tuple[float, float, float]], end: float, points: int
) -> None:
    """``spend_at`` (a sweep over the instants the sum changes) gives, at every instant,
    the sum of ``costs`` over the machines launched by then, billed up to it or to their
    end; instants on a unit's boundary (whole multiples of the ATU apart) included."""
    import numpy as np

    billing = BillingModel(mode, atu, min_charge_s=60.0)  # type: ignore[arg-type]
    machines = [(p, start, min(start + life, end)) for p, start, life in fleet if start <= end]
    times = [end * i / points for i in range(points + 1)]
    if not machines:
        return
    prices, launched, ended = (np.array(c, dtype=float) for c in zip(*machines, strict=True))
    got = billing.spend_at(np.array(times), prices, launched, ended).tolist()
    want = _per_instant(billing, times, machines)
    scale = max(want) or 1.0
    assert got == pytest.approx(want, rel=1e-9, abs=1e-9 * scale)


def test_spend_over_time_with_units_shorter_than_its_instants() -> None:
    """Many more paid units than instants times machines: summed per instant, same
    figures."""
    import numpy as np

    billing = BillingModel("fixed", 1.0)
    machines = [(2.0, 0.0, 5000.0), (1.0, 10.0, 4000.5)]
    times = [5000.0 * i / 4 for i in range(5)]
    prices, launched, ended = (np.array(c, dtype=float) for c in zip(*machines, strict=True))
    got = billing.spend_at(np.array(times), prices, launched, ended).tolist()
    assert got == _per_instant(billing, times, machines)


def test_a_machine_planned_to_fill_its_unit_pays_the_next_one_about_half_the_time() -> None:
    """The mean cost of a machine whose end is uncertain, not the cost of its mean end:
    planned to the end of its hour it pays the second hour as often as it runs over."""
    hourly = BillingModel("fixed", 3600)
    assert hourly.cost(1.0, 3599) == 1.0
    assert hourly.expected_cost(1.0, 3600, 160) == pytest.approx(1.5, abs=1e-6)
    assert hourly.expected_cost(1.0, 1800, 160) == pytest.approx(1.0, abs=1e-6)
    assert hourly.expected_cost(1.0, 1800, 0) == 1.0
    assert hourly.expected_cost(1.0, 1800, 100, paid_s=7200) == pytest.approx(2.0)


@settings(max_examples=60, deadline=None)
@given(
    mean=st.floats(0, 20_000),
    sd=st.floats(1, 3_000),
    paid=st.floats(0, 10_000),
    mode=st.sampled_from(["fixed", "per_second"]),
)
def test_the_expected_cost_is_the_mean_over_the_ends(
    mean: float, sd: float, paid: float, mode: str
) -> None:
    """Against the mean of the cost over a fine grid of the normal's quantiles."""
    b = BillingModel(mode, 3600)  # type: ignore[arg-type]
    dist = NormalDist(mean, sd)
    grid = 4000
    ends = [dist.inv_cdf((i + 0.5) / grid) for i in range(grid)]
    mean_cost = sum(b.cost(1.0, max(e, paid)) for e in ends) / grid
    assert b.expected_cost(1.0, mean, sd, paid) == pytest.approx(mean_cost, rel=0.01, abs=0.01)
