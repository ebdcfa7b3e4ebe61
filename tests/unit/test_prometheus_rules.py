"""The alerting rules infra/ ships (infra/prometheus/alerts.yml) name only metrics the
service's ``/metrics`` exports: a rule on a name it does not export never fires, and
nothing says so. (promtool checks their syntax and fires them on sample series in
tests/integration/test_prometheus_rules.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from autoscaler.service.alerting import AlertStatus
from autoscaler.service.alerts import BudgetFigure, DeadlineFigure, Figures
from autoscaler.service.prometheus import render_metrics

RULES = Path(__file__).resolve().parents[2] / "infra" / "prometheus" / "alerts.yml"
_NAME = re.compile(r"\bautoscaler_[a-z_]+\b")


def exported() -> set[str]:
    """The metric names in ``/metrics`` with every alert gauge and counter set."""
    figures = Figures(
        budgets=(BudgetFigure("job:j1", 10.0, 6.0, "j1"),),
        deadlines=(DeadlineFigure("job:j2", "j2", 100.0, 120.0, 3),),
    )
    text, _ = render_metrics([], (), AlertStatus(figures, 0.0, 2, 1, 1))
    return {
        line.split("{")[0].split(" ")[0]
        for line in text.decode().splitlines()
        if line and not line.startswith("#")
    }


def test_each_rule_names_a_metric_the_service_exports() -> None:
    rules = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    names = exported()
    assert {
        "autoscaler_budget_used_ratio",
        "autoscaler_deadline_forecast_miss",
        "autoscaler_alerts_sent_total",
        "autoscaler_alerts_failed_total",
    } <= names
    assert rules
    for rule in rules:
        used = set(_NAME.findall(rule["expr"]))
        assert used, f"{rule['alert']}: no autoscaler metric in {rule['expr']!r}"
        assert used <= names, f"{rule['alert']}: {sorted(used - names)} not exported"


def test_the_alert_gauges_carry_the_figures() -> None:
    figures = Figures(
        budgets=(BudgetFigure("project:lab:2026-12", 200.0, 50.0),),
        deadlines=(DeadlineFigure("job:j2", "j2", 100.0, 120.0, 0),),
    )
    text = render_metrics([], (), AlertStatus(figures, 0.0, 4, 0, 0))[0].decode()
    assert 'autoscaler_budget_used_ratio{subject="project:lab:2026-12"} 0.25' in text
    assert 'autoscaler_deadline_forecast_miss{job="j2"} 0.0' in text
    assert "autoscaler_alerts_sent_total 4.0" in text
