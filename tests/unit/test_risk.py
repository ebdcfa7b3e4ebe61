"""The budget at risk (issue 22 §2, issue 34 §6): when no mix finishes the tasks left at
the runtimes the planner keeps a reserve for, the run says so in the journal, the report
(with whether the run bore it out), its markdown and ``status``; a generous budget says
nothing, nor does sampling that commits much of the budget before any runtime is known.
And the report's prediction on a knife-edge budget: the plan the run followed, or
plainly a best-effort one. How often the warnings are right over many seeded runs:
``test_risk_calibration``."""

from __future__ import annotations

import bisect
import dataclasses
import math
from typing import Any

import pytest

from autoscaler.config.bag import expand_bag
from autoscaler.config.schema import RunConfig
from autoscaler.core.model import Configure, Risk
from autoscaler.report.build import build_report
from autoscaler.report.markdown import render_markdown
from autoscaler.report.records import ShortfallNote
from autoscaler.run.live import summary_rows
from autoscaler.run.start import DryRun, dry_run


def _lognormal_bag(budget: float) -> RunConfig:
    """The estimates benchmark's lognormal σ = 1 bag (mean 600 s on speed 1) under
    per-second billing, seed 0; 139.02 is 1.1 x the minimum budget its samples give."""
    sd = 600.0 * math.sqrt(math.e - 1.0)
    data: dict[str, Any] = {
        "name": "risk",
        "bag": {"synthetic": 1000},
        "constraint": {"budget": budget},
        "machine_types": [
            {"name": "small", "price": 1.0, "max_count": 20, "boot_s": 120.0},
            {"name": "fast", "price": 3.0, "max_count": 20, "boot_s": 120.0},
        ],
        "billing": {"mode": "per_second", "atu_s": 3600.0, "min_charge_s": 60.0},
        "emulator": {
            "seed": 0,
            "runtime": {"dist": "lognormal", "mean_s": 600.0, "sd_s": sd},
            "speed": {"small": 1.0, "fast": 4.0},
        },
        "policy": "bats",
    }
    return RunConfig.model_validate(data)


def _run(budget: float, fixed: bool = False) -> tuple[RunConfig, DryRun]:
    cfg = _fixed(_lognormal_bag(budget)) if fixed else _lognormal_bag(budget)
    return cfg, dry_run(cfg, expand_bag(cfg), seed=0, plots=False)


def _first_risk(d: DryRun) -> ShortfallNote:
    """The report's risk of a run that did not finish."""
    assert d.report.tasks_done < d.report.tasks_total
    assert d.report.risk is not None
    return d.report.risk


def _committed_at(d: DryRun, t: float) -> float:
    log = d.state.money.spend_log
    i = bisect.bisect_right([s for s, _ in log], t + 1e-9)
    return log[i - 1][1] if i else 0.0


@pytest.fixture(scope="module")
def knife_edge() -> tuple[RunConfig, DryRun]:
    return _run(139.02)


def test_a_budget_that_then_does_not_finish_is_said_at_risk_and_borne_out(
    knife_edge: tuple[RunConfig, DryRun],
) -> None:
    """1.1 x the minimum: the estimates after sampling say it suffices (the risk is not
    said then: on such budgets most seeds finish); once they move, the risk is said
    before the money runs out, and the report says the run bore it out."""
    _cfg, d = knife_edge
    risk = _first_risk(d)
    assert risk.committed is not None
    assert risk.committed < 139.02
    assert risk.needed_budget is not None
    assert risk.needed_budget > 139.02
    assert "budget at risk" in risk.message
    assert risk.borne_out is True
    if d.report.shortfall is not None:  # the risk comes first, the shortfall says more
        assert d.report.shortfall.at_s >= risk.at_s
    assert d.report.cost <= 139.02 + 1e-9
    assert "Borne out: the budget ran out with tasks left." in render_markdown(d.report)


def test_the_risk_is_said_once_in_the_state_status_and_markdown(
    knife_edge: tuple[RunConfig, DryRun],
) -> None:
    cfg, d = knife_edge
    assert len(d.state.decisions.risks) == 1
    assert isinstance(d.state.decisions.risks[0][1], Risk)
    rows = dict(summary_rows(cfg, d.state, None))
    assert "budget at risk" in rows["risk"]
    assert "**Risk at" in render_markdown(d.report)


def test_a_generous_budget_is_not_said_at_risk() -> None:
    _, d = _run(2 * 139.02)
    assert d.report.tasks_done == d.report.tasks_total
    assert d.report.risk is None
    assert not d.state.decisions.risks
    assert not d.state.decisions.shortfalls


def test_a_replaced_best_effort_first_plan_gives_way_to_the_plan_the_run_followed(
    knife_edge: tuple[RunConfig, DryRun],
) -> None:
    """The first plan after sampling made best-effort (as on a budget the planner could
    not meet at the first estimates): the report's prediction is the next plan, the one
    the run followed, and the markdown says what the first was."""
    cfg, d = knife_edge
    state = d.state
    plans = [
        i for i, (_, c) in enumerate(state.decisions.configurations) if c.predicted_cost is not None
    ]
    assert len(plans) >= 2
    first, second = plans[0], plans[1]
    t0, c0 = state.decisions.configurations[first]
    state.decisions.configurations[first] = (
        t0,
        dataclasses.replace(c0, best_effort=True, predicted_makespan_s=1e6),
    )
    try:
        report = build_report(cfg, state, tasks=expand_bag(cfg), run_id="r", seed=0, wall_s=0.0)
    finally:
        state.decisions.configurations[first] = (t0, c0)
    t1, c1 = state.decisions.configurations[second]
    assert report.predicted is not None
    assert report.predicted.at_s == pytest.approx(t1, abs=1e-3)
    assert report.predicted.makespan_s == pytest.approx(c1.predicted_makespan_s, abs=1e-3)
    assert report.predicted.replaced_best_effort_at_s == pytest.approx(t0, abs=1e-3)
    assert not report.predicted.best_effort
    assert "was a best-effort plan" in render_markdown(report)
    assert report.configurations[first].best_effort


def test_a_best_effort_plan_never_replaced_is_said_plainly(
    knife_edge: tuple[RunConfig, DryRun],
) -> None:
    cfg, d = knife_edge
    state = d.state
    saved = list(state.decisions.configurations)
    state.decisions.configurations[:] = [
        (t, dataclasses.replace(c, best_effort=True) if c.predicted_cost is not None else c)
        for t, c in saved
    ]
    try:
        report = build_report(cfg, state, tasks=expand_bag(cfg), run_id="r", seed=0, wall_s=0.0)
    finally:
        state.decisions.configurations[:] = saved
    assert report.predicted is not None
    assert report.predicted.best_effort
    assert report.predicted.replaced_best_effort_at_s is None
    assert isinstance(saved[0][1], Configure)
    assert "a best-effort plan (the most profitable type only) for a budget" in render_markdown(
        report
    )


# --- sampling alone commits more than half the budget: no risk said for it -----------


def _fixed(cfg: RunConfig) -> RunConfig:
    """``cfg`` under fixed hourly billing: sampling's 20 + 20 machines commit 80.00 at
    the start (a whole hour each), more than half of a budget under 160."""
    return cfg.model_copy(
        update={"billing": cfg.billing.model_copy(update={"mode": "fixed", "min_charge_s": None})}
    )


@pytest.fixture(scope="module")
def fixed_knife_edge() -> tuple[RunConfig, DryRun]:
    """1.1 x the minimum budget seed 0's samples give under fixed billing (128.11): the
    bag does not finish, and every runtime is measured after 80.00 is committed."""
    return _run(140.92, fixed=True)


def test_sampling_past_half_the_budget_is_not_said_at_risk(
    fixed_knife_edge: tuple[RunConfig, DryRun],
) -> None:
    """Sampling commits 80.00 of 140.92 at once: that alone predicts nothing of the rest
    (most such runs finish), and is not said to be a risk. This one does not finish,
    and the shortfall says so once the runtimes are known, borne out by the run."""
    _cfg, d = fixed_knife_edge
    assert _committed_at(d, 0.0) == pytest.approx(80.0)
    assert not any(r.at_start for _, r in d.state.decisions.risks)
    assert d.report.tasks_done < d.report.tasks_total
    sf = d.report.shortfall
    assert sf is not None
    assert sf.at_s > 0.0
    assert sf.borne_out is True
    assert d.report.cost <= 140.92 + 1e-9


def test_a_shortfall_keeps_the_money_committed_when_it_was_said(
    fixed_knife_edge: tuple[RunConfig, DryRun],
) -> None:
    _cfg, d = fixed_knife_edge
    sf = d.report.shortfall
    assert sf is not None
    assert sf.committed is not None
    before = max((v for t, v in d.state.money.spend_log if t < sf.at_s), default=0.0)
    assert before - 0.01 <= sf.committed <= _committed_at(d, sf.at_s) + 0.01
    assert f"{sf.committed:,.2f} committed): budget unlikely" in render_markdown(d.report)
