"""What a new user hits at the service's API (issue 19 §4): a job too big for the
service's memory, SIGTERM while a request is in flight, and an unquoted ``deadline_at``."""

from __future__ import annotations

import signal
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from autoscaler.cli.main import EXIT_CONFIG
from autoscaler.config.service_schema import job_config, service_config
from autoscaler.core.errors import ConfigError
from autoscaler.service.client import ApiError
from tests.integration.daemon_helpers import local_fields, wait_for
from tests.integration.service_helpers import ServiceProcess, stored_states
from tests.integration.service_helpers import service_config as service_file

pytestmark = [pytest.mark.integration]


def _status(pid: int, key: str) -> int:
    """A ``/proc/PID/status`` amount in kB (``VmRSS``, ``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{key}:"):
            return int(line.split()[1])
    raise AssertionError(f"no {key} for pid {pid}")


# --- a job too big ----------------------------------------------------------------------


@pytest.mark.slow
def test_a_job_too_big_for_the_service_is_refused_at_once_naming_the_limit(
    tmp_path: Path,
) -> None:
    """``bag: {synthetic: 100000000}`` is refused before its bag is made: the answer names
    the limit and its setting, and the service never holds the tasks (its peak memory
    stays far below what 10^8 tasks take) and takes the next job."""
    svc = ServiceProcess(service_file(tmp_path), tmp_path / "state")
    try:
        job = tmp_path / "huge.yaml"
        job.write_text("name: huge\nbag: {synthetic: 100000000}\nconstraint: {budget: 50}\n")
        refused = svc.cli("submit", str(job), timeout=60)
        assert refused.returncode == EXIT_CONFIG, refused.stderr
        assert "bag.synthetic: 100,000,000 tasks" in refused.stderr
        assert "at most 1,000,000" in refused.stderr
        assert "service.max_job_tasks" in refused.stderr
        assert "Traceback" not in refused.stderr
        assert _status(svc.proc.pid, "VmHWM") < 1_000_000  # kB: under 1 GB at its peak
        assert svc.submit({"name": "small", "bag": {"synthetic": 2}, "constraint": {"budget": 5}})
    finally:
        assert svc.stop() == 0


def _config(max_job_tasks: int) -> Any:
    fields = {"name": "svc", **local_fields(), "service": {"max_job_tasks": max_job_tasks}}
    return service_config(fields, source="service.yaml", base_dir=Path("."))


@pytest.mark.parametrize(
    ("bag", "named"),
    [
        ({"synthetic": 6}, "bag.synthetic: 6 tasks"),
        ({"command": "t {a} {b}", "sweep": {"a": [1, 2, 3], "b": [1, 2]}}, "bag.sweep: 6 tasks"),
        (
            {"command": "t {a}", "sweep": {"a": {"start": 0, "stop": 10**30}}},
            f"bag.sweep: {10**30:,} tasks",
        ),
        ({"file": "commands.txt"}, "bag.file: more than 5 tasks"),
    ],
)
def test_every_kind_of_bag_is_counted_before_it_is_made(
    tmp_path: Path, bag: dict[str, Any], named: str
) -> None:
    """A synthetic count, a sweep's product (even past 2^63) and a bag file's commands
    (counted only up to the limit) are each held to ``service.max_job_tasks``."""
    (tmp_path / "commands.txt").write_text("# six\n" + "".join(f"t {i}\n\n" for i in range(6)))
    with pytest.raises(ConfigError) as refused:
        job_config(
            _config(5),
            {"bag": bag, "constraint": {"budget": 5}},
            source="job.yaml",
            base_dir=tmp_path,
            now_wall=0.0,
        )
    [problem] = refused.value.problems
    assert problem.startswith(named), problem
    assert "at most 5 in one job (its service.max_job_tasks setting)" in problem


def test_a_job_at_the_limit_is_taken(tmp_path: Path) -> None:
    (tmp_path / "commands.txt").write_text("".join(f"t {i}\n" for i in range(5)))
    for bag in ({"synthetic": 5}, {"file": "commands.txt"}):
        _, tasks = job_config(
            _config(5),
            {"bag": bag, "constraint": {"budget": 5}},
            source="job.yaml",
            base_dir=tmp_path,
            now_wall=0.0,
        )
        assert len(tasks) == 5


# --- SIGTERM with a request in flight ---------------------------------------------------


@pytest.mark.slow
def test_sigterm_stops_the_service_while_a_big_submit_is_in_flight(tmp_path: Path) -> None:
    """A million-task submit (the default limit) is being handled, its tasks growing in
    the service's memory, when SIGTERM comes: the service exits cleanly within a few
    seconds' grace; the submit is either refused (the connection drops) or, if it was
    answered within the grace, its job is journaled."""
    svc = ServiceProcess(service_file(tmp_path), tmp_path / "state")
    answers: list[object] = []

    def submit() -> None:
        try:
            answers.append(
                svc.submit({"bag": {"synthetic": 1_000_000}, "constraint": {"budget": 9}})
            )
        except ApiError as exc:
            answers.append(exc)

    before = _status(svc.proc.pid, "VmRSS")
    client = threading.Thread(target=submit, daemon=True)
    client.start()
    try:
        wait_for(
            lambda: _status(svc.proc.pid, "VmRSS") > before + 50_000 or bool(answers),
            120,
            "the service to be making the job's tasks",
        )
    except BaseException:
        svc.stop(signal.SIGKILL)
        raise
    assert not answers, f"the submit ended before the test could stop the service: {answers}"
    assert svc.stop(timeout=30) == 0
    client.join(timeout=40)
    assert not client.is_alive()
    [answer] = answers
    if isinstance(answer, str):
        assert answer in stored_states(svc.state_dir)
    else:
        assert isinstance(answer, ApiError), answer


# --- deadline_at as YAML reads it -------------------------------------------------------


def _job(tmp: Path, at: datetime) -> Path:
    path = tmp / f"dl-{at:%Y%m%d%H%M}.yaml"
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")  # unquoted, as the README writes it
    path.write_text(
        f"name: dl\nbag: {{synthetic: 4}}\ntask_s: {{small: 60, fast: 20}}\n"
        f"constraint: {{deadline_at: {stamp}}}\n",
        encoding="utf-8",
    )
    return path


@pytest.mark.slow
def test_an_unquoted_deadline_at_is_taken_and_a_past_one_refused_by_field(
    tmp_path: Path,
) -> None:
    """``deadline_at: 2026-12-01T09:00:00Z`` unquoted is a YAML timestamp: ``submit``
    sends it as the time it is; a time in the past is refused naming the field."""
    svc = ServiceProcess(
        service_file(tmp_path, service={"max_running_jobs": 1}), tmp_path / "state"
    )
    try:
        now = datetime.now(UTC).replace(microsecond=0)
        past = svc.cli("submit", str(_job(tmp_path, now - timedelta(days=3))))
        assert past.returncode == EXIT_CONFIG, past.stderr
        assert "Traceback" not in past.stderr
        assert "constraint.deadline_at:" in past.stderr
        assert "is in the past" in past.stderr

        taken = svc.cli("submit", str(_job(tmp_path, now + timedelta(hours=2))))
        assert taken.returncode == 0, taken.stderr
        job_id = taken.stdout.strip()
        assert svc.view(job_id)["mode"] == "deadline"
    finally:
        assert svc.stop() == 0
