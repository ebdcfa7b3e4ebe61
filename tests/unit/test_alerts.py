"""The alerts' decision (``service.alerts.decide``): each budget threshold once per
subject, across restarts through the keys kept; a deadline job's turn to "will miss"
once per turn; the body signed as documented. And the config that sets them up."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from pathlib import Path
from typing import Any

import pytest

from autoscaler.config.service_schema import ServiceConfig, service_config
from autoscaler.core.errors import ConfigError
from autoscaler.service.alerting import Book, job_figures, next_try_in
from autoscaler.service.alerts import (
    Alert,
    BudgetFigure,
    DeadlineFigure,
    Figures,
    body,
    decide,
    sign,
    signed_by,
)
from autoscaler.service.job_states import JobState
from autoscaler.service.view import JobView, Progress

THRESHOLDS = (0.5, 0.8, 1.0)


def _budget(spent: float, budget: float = 10.0, subject: str = "job:j1") -> Figures:
    return Figures(budgets=(BudgetFigure(subject, budget, spent, "j1"),))


def _late(tasks: int) -> Figures:
    return Figures(deadlines=(DeadlineFigure("job:j2", "j2", 1000.0, 1200.0, tasks),))


def _run(steps: list[Figures], sent: frozenset[str] = frozenset()) -> list[list[Alert]]:
    """The alerts of each look in turn, each look starting from the keys the last left."""
    out = []
    for now, figures in enumerate(steps):
        d = decide(sent, figures, THRESHOLDS, float(now))
        out.append(list(d.alerts))
        sent = d.sent
    return out


def test_each_threshold_is_alerted_once_as_spend_grows() -> None:
    said = _run([_budget(s) for s in (1.0, 5.0, 6.0, 8.0, 9.0, 10.0, 10.0)])
    thresholds = [[a.threshold for a in look] for look in said]
    assert thresholds == [[], [0.5], [], [0.8], [], [1.0], []]
    assert said[1][0].kind == "budget_threshold"
    assert (said[1][0].spent, said[1][0].budget, said[1][0].job) == (5.0, 10.0, "j1")


def test_a_jump_past_two_thresholds_alerts_both() -> None:
    (first,) = _run([_budget(8.5)])
    assert [a.threshold for a in first] == [0.5, 0.8]
    assert len({a.id for a in first}) == 2


def test_a_restart_with_the_keys_kept_alerts_nothing_again() -> None:
    """The keys a service kept (``alerts.json``) are what a restarted one starts from."""
    d = decide(frozenset(), _budget(8.0), THRESHOLDS, 1.0)
    book = Book.from_json(json.loads(json.dumps(Book(0.0, d.sent).to_json())))
    again = decide(book.sent, _budget(8.0), THRESHOLDS, 2.0)
    assert again.alerts == ()
    assert [a.threshold for a in decide(book.sent, _budget(10.0), THRESHOLDS, 3.0).alerts] == [1.0]


def test_a_threshold_decided_twice_has_one_id() -> None:
    """A decision made again (its keys lost) gives the alert the id a receiver already saw."""
    a = decide(frozenset(), _budget(5.0), THRESHOLDS, 1.0).alerts
    b = decide(frozenset(), _budget(5.0), THRESHOLDS, 99.0).alerts
    assert [x.id for x in a] == [x.id for x in b]


def test_subjects_are_alerted_apart() -> None:
    both = Figures(
        budgets=(
            BudgetFigure("job:j1", 10.0, 5.0, "j1"),
            BudgetFigure("project:lab:2026-12", 100.0, 50.0),
        )
    )
    alerts = decide(frozenset(), both, THRESHOLDS, 0.0).alerts
    assert [(a.subject, a.threshold) for a in alerts] == [
        ("job:j1", 0.5),
        ("project:lab:2026-12", 0.5),
    ]


def test_spend_a_hair_below_a_threshold_is_not_past_it_and_the_budget_is() -> None:
    assert _run([_budget(4.9999)]) == [[]]
    assert [a.threshold for a in _run([_budget(10.0 - 1e-12)])[0]] == [0.5, 0.8, 1.0]


def test_a_job_without_money_has_no_threshold() -> None:
    assert _run([_budget(0.0, budget=0.0)]) == [[]]


def test_a_deadline_miss_is_alerted_once_per_turn() -> None:
    said = _run([_late(0), _late(3), _late(5), _late(0), _late(0), _late(2)])
    kinds = [[a.kind for a in look] for look in said]
    assert kinds == [
        [],
        ["deadline_miss"],
        [],
        ["deadline_recovered"],
        [],
        ["deadline_miss"],
    ]
    first, second = said[1][0], said[5][0]
    assert first.id != second.id
    assert (first.job, first.late_tasks, first.deadline_at, first.forecast_finish_at) == (
        "j2",
        3,
        1000.0,
        1200.0,
    )


def test_a_deadline_passed_with_tasks_left_is_a_miss_though_none_was_said_late() -> None:
    """A task that outlives its estimate may never be counted late by the controller."""
    running = DeadlineFigure("job:j2", "j2", 1000.0, 990.0, 0, tasks_left=1)
    before = decide(frozenset(), Figures(deadlines=(running,)), THRESHOLDS, 999.0)
    assert before.alerts == ()
    (miss,) = decide(before.sent, Figures(deadlines=(running,)), THRESHOLDS, 1001.0).alerts
    assert (miss.kind, miss.job, miss.late_tasks) == ("deadline_miss", "j2", 0)
    done = DeadlineFigure("job:j2", "j2", 1000.0, 990.0, 0, tasks_left=0)
    assert decide(frozenset(), Figures(deadlines=(done,)), THRESHOLDS, 1001.0).alerts == ()


def test_without_recovered_alerts_a_recovery_is_silent_and_a_new_miss_alerted() -> None:
    sent = decide(frozenset(), _late(1), THRESHOLDS, 0.0).sent
    back = decide(sent, _late(0), THRESHOLDS, 1.0, recovered=False)
    assert back.alerts == ()
    assert [a.kind for a in decide(back.sent, _late(1), THRESHOLDS, 2.0).alerts] == [
        "deadline_miss"
    ]


def test_the_body_is_signed_with_hmac_sha256_of_its_raw_bytes() -> None:
    (alert,) = decide(frozenset(), _budget(5.0), THRESHOLDS, 1.0).alerts
    raw = body(alert, "svc")
    data = json.loads(raw)
    assert data["service"] == "svc"
    assert {k: data[k] for k in ("kind", "subject", "threshold", "budget", "spent", "job")} == {
        "kind": "budget_threshold",
        "subject": "job:j1",
        "threshold": 0.5,
        "budget": 10.0,
        "spent": 5.0,
        "job": "j1",
    }
    expected = "sha256=" + hmac.new(b"s3cret", raw, hashlib.sha256).hexdigest()
    assert sign(raw, b"s3cret") == expected
    assert signed_by(raw, expected, b"s3cret")
    assert not signed_by(raw + b" ", expected, b"s3cret")
    assert not signed_by(raw, expected, b"other")


def test_retries_wait_twice_as_long_each_time_up_to_the_most(tmp_path: Path) -> None:
    cfg = _service(tmp_path, {"retry": {"first_delay_s": 1, "max_delay_s": 5}})
    assert cfg.settings.alerts is not None
    assert [next_try_in(cfg.settings.alerts, n) for n in (1, 2, 3, 4)] == [1, 2, 4, 5]


def _view(state: JobState, progress: Progress, ended_at: float | None = None) -> JobView:
    return JobView("j1", "n", state, 0.0, 0.0, ended_at, "/r", progress, None)


def _progress(mode: str, budget: float | None, late: int = 0) -> Progress:
    return Progress(mode, 10, 0, 0, 0, 4.0, 4.0, budget, 50.0, 60.0, (), None, late)


def test_job_figures_take_the_running_jobs_and_those_ended_since() -> None:
    running = _view(JobState.RUNNING, _progress("deadline", 8.0, late=2))
    figures = job_figures([running])
    assert figures.budgets == (BudgetFigure("job:j1", 8.0, 4.0, "j1"),)
    assert figures.deadlines == (DeadlineFigure("job:j1", "j1", 50.0, 60.0, 2, 10),)
    ended = _view(JobState.DONE, _progress("budget", 8.0), ended_at=100.0)
    assert job_figures([ended], since=50.0).budgets == (BudgetFigure("job:j1", 8.0, 4.0, "j1"),)
    assert job_figures([ended], since=150.0) == Figures()
    assert job_figures([ended]) == Figures()  # metrics: running jobs only


# --- the config ---------------------------------------------------------------------------


def _service(tmp: Path, alerts: dict[str, object], mode: int = 0o600) -> ServiceConfig:
    secret = tmp / "secret"
    secret.write_text("s3cret\n")
    secret.chmod(mode)
    data = {
        "machine_types": [{"name": "small", "price": 1, "max_count": 2}],
        "provider": "local",
        "service": {
            "alerts": {"webhook": "http://127.0.0.1:9/hook", "secret_file": "secret", **alerts}
        },
    }
    return service_config(data, source="svc.yaml", base_dir=tmp)


def test_alerts_are_off_without_their_section(tmp_path: Path) -> None:
    data = {"machine_types": [{"name": "small", "price": 1, "max_count": 2}], "provider": "local"}
    assert service_config(data, source="svc.yaml", base_dir=tmp_path).settings.alerts is None


def test_the_secret_file_is_read_relative_to_the_config(tmp_path: Path) -> None:
    cfg = _service(tmp_path, {})
    assert cfg.settings.alerts is not None
    assert cfg.settings.alerts.secret_file == tmp_path / "secret"
    assert cfg.settings.alerts.thresholds == [0.5, 0.8, 1.0]


@pytest.mark.parametrize(
    ("alerts", "mode", "said"),
    [
        ({"thresholds": [0.8, 0.5]}, 0o600, "service.alerts.thresholds"),
        ({"thresholds": [0.5, 0.5]}, 0o600, "not increasing"),
        ({"thresholds": [0.0, 0.5]}, 0o600, "in (0, 1.5]"),
        ({"thresholds": [0.5, 2.0]}, 0o600, "in (0, 1.5]"),
        ({"thresholds": []}, 0o600, "service.alerts.thresholds"),
        ({"webhook": "ftp://host/x"}, 0o600, "service.alerts.webhook"),
        ({"webhook": "http://"}, 0o600, "service.alerts.webhook"),
        ({"retry": {"attempts": 0}}, 0o600, "service.alerts.retry.attempts"),
        ({"secret_file": "nope"}, 0o600, "service.alerts.secret_file: cannot read"),
        ({}, 0o644, "open to its group or others (mode 0644): chmod 600 it"),
        ({"hook": "x"}, 0o600, "service.alerts.hook"),
    ],
)
def test_a_bad_alerts_section_is_refused_naming_the_field(
    tmp_path: Path, alerts: dict[str, object], mode: int, said: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _service(tmp_path, alerts, mode)
    assert said in str(caught.value)
    assert "\n" not in str(caught.value)


def test_an_empty_secret_is_refused(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    (tmp_path / "empty").chmod(0o600)
    with pytest.raises(ConfigError, match=r"secret_file: .* is empty"):
        _service(tmp_path, {"secret_file": "empty"})


def test_the_docs_snippet_verifies_what_the_service_signs() -> None:
    """docs/service.md's receiver-side check, run as written, on the service's signature."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "service.md").read_text()
    (snippet,) = re.findall(r"```python\n(.*?def verified.*?)```", doc, re.S)
    scope: dict[str, Any] = {}
    exec(compile(snippet, "docs/service.md", "exec"), scope)
    (alert,) = decide(frozenset(), _budget(5.0), THRESHOLDS, 1.0).alerts
    raw = body(alert, "svc")
    assert scope["verified"](raw, sign(raw, b"k"), b"k")
    assert not scope["verified"](raw, sign(raw, b"k"), b"other")
    assert not scope["verified"](raw.replace(b"5.0", b"6.0"), sign(raw, b"k"), b"k")
