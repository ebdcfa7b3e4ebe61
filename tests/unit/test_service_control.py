"""What a user's requests to a service mean, without a service: a job's line in the
``jobs`` table, a change of its constraint, how an ended job ended, and the signals that
stop ``serve`` (service.control, service.serving)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from autoscaler.core.errors import AutoscalerError
from autoscaler.service.control import (
    change,
    exit_code,
    job_line,
    list_jobs,
    new_deadline,
    outcome,
)
from autoscaler.service.serving import StopSignals

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC).timestamp()


def _view(**fields: Any) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": "j1",
        "name": "sweep",
        "state": "running",
        "done": 3,
        "tasks": 10,
        "failed": 0,
        "spend": 4.5,
        "budget": 20.0,
        "ended_at": None,
        "predicted_finish_at": NOW + 600,
        "deadline_at": None,
        "met_deadline": None,
        "stop_reason": None,
    }
    view.update(fields)
    return view


def test_a_running_jobs_line_finishes_at_its_forecast() -> None:
    line = job_line(_view(deadline_at=NOW + 900, ended_at=NOW))
    assert (line.finish_at, line.deadline_at, line.late) == (NOW + 600, NOW + 900, False)
    assert (line.done, line.tasks, line.spend, line.budget) == (3, 10, 4.5, 20.0)


def test_a_running_jobs_forecast_past_its_deadline_is_late() -> None:
    assert job_line(_view(deadline_at=NOW + 300)).late


def test_a_running_job_without_a_forecast_is_not_late() -> None:
    line = job_line(_view(predicted_finish_at=None, deadline_at=NOW + 300))
    assert line.finish_at is None
    assert not line.late


def test_an_ended_jobs_line_finishes_when_it_ended_and_is_late_only_if_it_missed() -> None:
    met = job_line(_view(state="done", ended_at=NOW, deadline_at=NOW - 60, met_deadline=True))
    assert (met.finish_at, met.late) == (NOW, False)
    missed = job_line(_view(state="done", ended_at=NOW, met_deadline=False))
    assert missed.late


def test_a_jobs_note_is_why_it_stopped_else_what_it_waits_for() -> None:
    assert job_line(_view(waiting="2 fast held by j2")).note == "2 fast held by j2"
    stopped = job_line(_view(state="stopped", stop_reason="budget", waiting="x"))
    assert stopped.note == "budget"
    assert job_line(_view()).note == ""


def test_a_change_is_a_budget_or_a_deadline_never_both_or_none() -> None:
    assert change(60.0, None, NOW).body == {"budget": 60.0}
    assert change(60.0, None, NOW).shown == "budget set to 60.00"
    for budget, deadline in ((None, None), (1.0, "2h")):
        with pytest.raises(AutoscalerError, match="give --budget B or --deadline D"):
            change(budget, deadline, NOW)


def test_a_deadline_as_a_duration_counts_from_now_in_run_time() -> None:
    moved = new_deadline(" 90m ", NOW)
    assert moved.body == {"deadline_s": 5400.0}
    assert moved.shown == "deadline set to 90m from now (run time)"


def test_a_deadline_as_a_date_is_utc_unless_it_says() -> None:
    naive = new_deadline("2026-12-02T15:00:00", NOW)
    assert naive.body == {"deadline_at": NOW + 3 * 3600}
    assert naive.shown == "deadline set to 2026-12-02 15:00:00 UTC"
    zoned = new_deadline("2026-12-02T15:00:00+01:00", NOW)
    assert zoned.body == {"deadline_at": NOW + 2 * 3600}
    assert zoned.shown == "deadline set to 2026-12-02 14:00:00 UTC"


def test_a_deadline_in_the_past_or_unreadable_is_refused_naming_it() -> None:
    with pytest.raises(AutoscalerError, match="--deadline 2026-12-02T11:00:00Z: that is in"):
        new_deadline("2026-12-02T11:00:00Z", NOW)
    with pytest.raises(AutoscalerError, match="--deadline 'soon': give a duration from now"):
        new_deadline("soon", NOW)


@pytest.mark.parametrize(
    ("state", "met", "said", "code"),
    [
        ("done", None, "done", 0),
        ("done", True, "done", 0),
        ("done", False, "late", 4),
        ("stopped", False, "stopped", 3),
        ("cancelled", None, "cancelled", 5),
        ("interrupted", None, "interrupted", 6),
        ("failed", None, "failed", 7),
    ],
)
def test_how_a_job_ended_and_waits_exit_code(
    state: str, met: bool | None, said: str, code: int
) -> None:
    view = _view(state=state, met_deadline=met)
    assert (outcome(view), exit_code(view)) == (said, code)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_only_asks_and_the_handlers_come_back(signum: int) -> None:
    before = signal.getsignal(signum)
    with StopSignals() as signals:
        os.kill(os.getpid(), signum)
        signals.wait()  # returns: the signal asked to stop, and the process lives on
        assert signal.getsignal(signum) is not before
    assert signal.getsignal(signum) is before


def test_a_state_directory_without_a_service_or_a_store_is_an_error_naming_it(
    tmp_path: Path,
) -> None:
    with pytest.raises(AutoscalerError, match=f"no service in {tmp_path}"):
        list_jobs(tmp_path)


def test_talking_to_a_running_service_loads_no_config_models_or_run_state() -> None:
    """``wait``, ``cancel``, ``update`` and ``jobs`` start without them (only reading a
    job file or a stopped service's store loads them)."""
    heavy = ("autoscaler.config.schema", "autoscaler.core.state", "numpy", "pulp")
    probe = (
        "import sys, autoscaler.service.control; "
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == ""
