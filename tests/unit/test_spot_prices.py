"""Spot prices that move (issue 37 §1): the history a run has seen, what a machine costs
under it, the money committed at the caps and given back as the market is read, and a
dry run whose spot price rises to the cap mid-run within its budget."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.core.billing import BillingModel
from autoscaler.core.model import Event, Launch, MachineLaunched, PricesSeen, TypeSpec
from autoscaler.core.spot_prices import PriceHistory
from autoscaler.core.state import RunState
from autoscaler.report.build import build_report
from autoscaler.report.plots import spend_curve
from autoscaler.run.start import make_emulator

PER_SECOND = BillingModel("per_second", 3600.0, min_charge_s=60.0, commit_s=300.0)
FIXED = BillingModel("fixed", 3600.0)


def _seen(now: float, *points: tuple[str, float, float]) -> PricesSeen:
    return PricesSeen(
        tuple(p[0] for p in points), tuple(p[1] for p in points), tuple(p[2] for p in points)
    )


# --- the history --------------------------------------------------------------------------


def test_time_past_the_last_reading_costs_the_cap() -> None:
    h = PriceHistory()
    h.record(600.0, ("s",), (0.0,), (0.36,), "market")
    # 0..600 at 0.36 an hour, 600..1200 unknown: at the cap 3.6
    assert h.cost(PER_SECOND, "s", 3.6, 0.0, 1200.0) == pytest.approx(0.06 + 0.6)
    # the last price taken to hold since: what the machine is billed
    assert h.cost(PER_SECOND, "s", 3.6, 0.0, 1200.0, holds=True) == pytest.approx(0.12)


def test_a_price_change_bills_each_second_at_the_price_in_force() -> None:
    h = PriceHistory()
    h.record(3600.0, ("s", "s"), (0.0, 1800.0), (0.36, 0.72), "market")
    # launched at 900: 900 s at 0.36, 1800 s at 0.72 an hour
    assert h.cost(PER_SECOND, "s", 3.6, 900.0, 3600.0) == pytest.approx(0.09 + 0.36)


def test_the_minimum_charge_is_billed_at_the_prices_in_force() -> None:
    h = PriceHistory()
    h.record(3600.0, ("s",), (0.0,), (0.36,), "market")
    assert h.cost(PER_SECOND, "s", 3.6, 100.0, 110.0) == pytest.approx(0.36 * 60 / 3600)


def test_fixed_billing_pays_each_unit_at_the_price_when_it_begins() -> None:
    h = PriceHistory()
    h.record(7200.0, ("s", "s"), (0.0, 3000.0), (1.0, 2.0), "market")
    assert h.cost(FIXED, "s", 5.0, 0.0, 3600.0 + 1) == pytest.approx(1.0 + 2.0)
    # its third unit begins past the last reading: at the cap
    assert h.cost(FIXED, "s", 5.0, 0.0, 7200.0 + 1) == pytest.approx(1.0 + 2.0 + 5.0)


def test_a_price_dated_before_the_last_reading_takes_effect_at_it() -> None:
    """The market's answer repeats the price in force with the time it was set: the past
    already priced is not priced again."""
    h = PriceHistory()
    h.record(600.0, ("s",), (0.0,), (0.36,), "market")
    h.record(1200.0, ("s",), (300.0,), (0.72,), "market")
    assert h.price_at("s", 500.0, 9.0) == 0.36
    assert h.price_at("s", 700.0, 9.0) == 0.72
    assert h.times["s"] == [0.0, 600.0]


def test_before_any_price_a_type_costs_its_cap() -> None:
    assert PriceHistory().cost(PER_SECOND, "s", 3.6, 0.0, 600.0) == pytest.approx(0.6)


# --- the money ledger ---------------------------------------------------------------------


def _state(cap: float | None) -> RunState:
    spot = TypeSpec("spot", 0.36, 10, 60.0, cap=cap)
    return RunState.new([spot], PER_SECOND, 10.0, 10, list(range(10)))


def _launch(state: RunState, at: float) -> None:
    state.apply(at, Launch("spot", 1, "L0"))
    state.apply(at, MachineLaunched("spot-0", "spot", "L0"))


def test_a_market_priced_machine_is_committed_at_its_cap() -> None:
    state = _state(cap=3.6)
    _launch(state, 0.0)
    assert state.money.committed == pytest.approx(3.6 * 300 / 3600)


def test_without_a_cap_a_type_commits_its_price_as_before() -> None:
    state = _state(cap=None)
    _launch(state, 0.0)
    assert state.money.committed == pytest.approx(0.36 * 300 / 3600)


def test_reading_the_market_gives_back_what_the_cap_overcounted() -> None:
    state = _state(cap=3.6)
    state.apply(0.0, _seen(0.0, ("spot", 0.0, 0.36)))
    _launch(state, 0.0)
    before = state.money.committed
    state.apply(200.0, _seen(200.0))
    # 200 s priced at 0.36, the other 100 s of its paid time still at the cap
    assert state.money.committed == pytest.approx(0.36 * 200 / 3600 + 3.6 * 100 / 3600)
    assert state.money.committed < before
    assert state.types["spot"].price == 0.36  # what the planners see


def test_the_planners_see_the_last_price_read() -> None:
    state = _state(cap=3.6)
    state.apply(0.0, _seen(0.0, ("spot", 0.0, 0.5), ("spot", 0.0, 0.9)))
    assert state.types["spot"].price == 0.9
    assert state.types["spot"].cap == 3.6


def test_a_type_without_a_cap_keeps_its_price_whatever_is_read() -> None:
    state = _state(cap=None)
    state.apply(0.0, _seen(0.0, ("spot", 0.0, 0.9)))
    assert state.types["spot"].price == 0.36


# --- a dry run: the price rises to the cap mid-run ------------------------------------------


def _spot_config(tmp_path: Path, budget: float, trace: object) -> Path:
    data = {
        "name": "spot-rise",
        "bag": {"synthetic": 300},
        "constraint": {"budget": budget},
        "machine_types": [
            {"name": "od", "price": 1.0, "max_count": 5, "boot_s": 60},
            {"name": "spot", "price": 1.0, "max_count": 10, "boot_s": 60},
        ],
        "billing": {"mode": "per_second", "atu_s": 3600, "min_charge_s": 60},
        "monitoring_interval_s": 300,
        "emulator": {
            "seed": 3,
            "runtime": {"dist": "normal", "mean_s": 600, "sd_s": 120},
            "speed": {"od": 1, "spot": 1},
            "spot_prices": {"spot": trace},
        },
    }
    path = tmp_path / "spot.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_committed_spend_never_passes_the_budget_when_the_spot_price_rises_to_the_cap(
    tmp_path: Path,
) -> None:
    """The spot price is a fifth of on-demand at first and reaches the cap (1.0) after
    30 minutes: the plans made on the cheap price must not commit past the budget."""
    budget = 6.0
    cfg = load_config(_spot_config(tmp_path, budget, [[0, 0.2], [1800, 1.0]]))
    seen: list[float] = []
    peak: list[float] = []

    def watch(now: float, events: list[Event], actions: object, state: RunState) -> None:
        seen.extend(e.prices[-1] for e in events if isinstance(e, PricesSeen) and e.prices)
        peak.append(state.money.committed)
        assert state.money.committed <= budget + 1e-9, f"committed past the budget at {now}"
        fleet = state.fleet
        billed = sum(
            fleet.billed(m, now if m.ended_at is None else m.ended_at)
            for m in fleet.machines.values()
        )
        assert billed <= state.money.committed + 1e-9, f"billed past what is committed at {now}"

    emulator = make_emulator(cfg, 300, on_step=watch)
    state = emulator.run()
    assert seen[0] == 0.2
    assert 1.0 in seen
    assert max(peak) > 0.9 * budget  # the budget was what held it back
    spot = [m for m in state.fleet.machines.values() if m.type.name == "spot"]
    assert spot
    assert any(m.ended_at is None or m.ended_at > 1800 for m in spot)
    machines = state.fleet.machines.values()
    assert sum(state.fleet.billed(m, m.ended_at or state.now) for m in machines) <= budget


# --- whatever the market does ------------------------------------------------------------


@st.composite
def _markets(draw: st.DrawFn) -> tuple[list[tuple[float, float]], list[float], float, float]:
    """A price path at or below the cap (1.0), the times it is read, and a machine's life."""
    times = sorted(draw(st.sets(st.integers(0, 20_000), min_size=1, max_size=8)))
    path = [(float(t), draw(st.floats(0.0, 1.0))) for t in times]
    reads = sorted(draw(st.sets(st.integers(0, 20_000), min_size=1, max_size=6)))
    launched = float(draw(st.integers(0, 15_000)))
    life = float(draw(st.integers(0, 8_000)))
    return path, [float(r) for r in reads], launched, launched + life


@pytest.mark.parametrize("billing", [PER_SECOND, FIXED], ids=["per_second", "fixed"])
@settings(max_examples=300, deadline=None)
@given(market=_markets())
def test_what_is_counted_is_never_less_than_what_the_market_bills(
    billing: BillingModel, market: tuple[list[tuple[float, float]], list[float], float, float]
) -> None:
    """Read at any times, a machine's cost (what the ledger commits) is never below what
    it is billed at the prices in force, which the full path knows."""
    path, reads, launched, end = market
    known = PriceHistory()
    for read in reads:
        shown = [(t, p) for t, p in path if t <= read]
        known.record(
            read,
            tuple("s" for _ in shown),
            tuple(t for t, _ in shown),
            tuple(p for _, p in shown),
            "market",
        )
    truth = PriceHistory()
    truth.record(
        1e9,
        tuple("s" for _ in path),
        tuple(t for t, _ in path),
        tuple(p for _, p in path),
        "market",
    )
    assert (
        known.cost(billing, "s", 1.0, launched, end)
        >= truth.cost(billing, "s", 1.0, launched, end) - 1e-9
    )


def test_the_report_bills_spot_machines_at_the_trace_and_its_spend_curve_ends_there(
    tmp_path: Path,
) -> None:
    """The report's cost is each machine billed at the prices in force, below what the
    caps would have cost; the spend plot's curve ends at it."""
    cfg = load_config(_spot_config(tmp_path, 50.0, [[0, 0.2], [1800, 0.6]]))
    state = make_emulator(cfg, 300).run()
    report = build_report(cfg, state, tasks=expand_bag(cfg), run_id="r", seed=3)
    spot = report.spot_prices
    assert spot is not None
    assert spot.source == "trace"
    line = spot.types["spot"]
    assert line.cap == 1.0
    assert line.last_price == 0.6
    assert 0 < line.billed < line.at_cap
    od = sum(m.cost for m in report.machines if m.type == "od")
    assert report.cost == pytest.approx(od + line.billed, abs=1e-3)
    _, spent = spend_curve(state)
    assert spent[-1] == pytest.approx(report.cost, abs=1e-3)


def test_a_market_price_above_the_cap_is_billed_and_planned_at_the_cap() -> None:
    """EC2 bills no more than a spot request's MaxPrice (it takes the machine back
    instead): a reading above the cap commits no more money than the cap did."""
    state = _state(cap=3.6)
    _launch(state, 0.0)
    before = state.money.committed
    state.apply(200.0, _seen(200.0, ("spot", 0.0, 9.0)))
    assert state.money.committed == pytest.approx(before)
    assert state.types["spot"].price == 3.6
