"""The service's webhook alerts, end to end: a real `autoscaler serve` (local provider,
time-scaled) posts to a receiver on loopback (an ``http.server`` in the test) that checks
each body's signature with the shared secret, as the docs tell a receiver to."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import signal
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.integration.daemon_helpers import wait_for
from tests.integration.service_helpers import ServiceProcess, budget_job, service_config
from tests.integration.services import free_port

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # a real serve, 10 to 30 s each

SECRET = b"a shared secret for the test"
THRESHOLDS = [0.5, 0.8, 1.0]


class Receiver:
    """A webhook receiver on a loopback port: keeps every body whose
    ``X-Autoscaler-Signature`` is the HMAC-SHA256 of the raw body under ``SECRET`` and
    gives it ``answer``; answers 401 to any other."""

    def __init__(self, port: int = 0, answer: int = 204) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.forged = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers["Content-Length"]))
                expected = "sha256=" + hmac.new(SECRET, raw, hashlib.sha256).hexdigest()
                given = self.headers.get("X-Autoscaler-Signature", "")
                if not hmac.compare_digest(given, expected):
                    outer.forged += 1
                    self.send_response(401)
                else:
                    data = json.loads(raw)
                    assert self.headers["X-Autoscaler-Delivery"] == data["id"]
                    outer.bodies.append(data)
                    self.send_response(answer)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def thresholds(self, subject: str) -> list[float]:
        return sorted(
            b["threshold"]
            for b in self.bodies
            if b["kind"] == "budget_threshold" and b["subject"] == subject
        )


def alerting_config(tmp: Path, port: int, **alerts: Any) -> Path:
    secret = tmp / "alerts.secret"
    secret.write_bytes(SECRET + b"\n")
    secret.chmod(0o600)
    settings = {
        "webhook": f"http://127.0.0.1:{port}/hook",
        "secret_file": "alerts.secret",
        "thresholds": THRESHOLDS,
        "check_every_s": 0.2,
        "retry": {"attempts": 50, "first_delay_s": 0.2, "max_delay_s": 1},
        **alerts,
    }
    return service_config(tmp, service={"alerts": settings})


def metrics(svc: ServiceProcess) -> str:
    request = urllib.request.Request(
        svc.client.url + "/metrics", headers={"Authorization": f"Bearer {svc.client.token}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return str(answer.read().decode())


def test_a_budget_job_alerts_each_threshold_once_across_a_restart(tmp_path: Path) -> None:
    """A budget job that spends its whole budget sends one alert per threshold, signed,
    though the service restarts (SIGTERM, then a new `serve` on the state directory)
    after the first: the restarted service knows what was sent (``alerts.json``)."""
    receiver = Receiver()
    config = alerting_config(tmp_path, receiver.port)
    state_dir = tmp_path / "state"
    svc = ServiceProcess(config, state_dir, release_on_exit=False)
    try:
        job_id = svc.submit(budget_job("sweep", 80, 6))
        subject = f"job:{job_id}"
        wait_for(
            lambda: receiver.thresholds(subject) != [],
            120,
            "the first alert",
            lambda: f"{svc.view(job_id)}; {svc.events()}",
        )
        running = metrics(svc)
    finally:
        assert svc.stop(signal.SIGTERM) == 0
    ratio = re.search(
        rf'^autoscaler_budget_used_ratio{{subject="{subject}"}} (\S+)$', running, re.M
    )
    assert ratio is not None, running
    assert float(ratio.group(1)) >= 0.5
    first = list(receiver.bodies)
    svc = ServiceProcess(config, state_dir, release_on_exit=False)
    try:
        waited = svc.cli("wait", job_id, timeout=240)
        view = svc.view(job_id)
        wait_for(
            lambda: receiver.thresholds(subject) == THRESHOLDS,
            60,
            "an alert at each threshold",
            lambda: f"received {receiver.bodies}; view {view}; {svc.events()}",
        )
        wait_for(
            lambda: "autoscaler_alerts_sent_total 3.0" in metrics(svc),
            30,
            "the deliveries counted",
            lambda: metrics(svc),
        )
        text = metrics(svc)
    finally:
        assert svc.stop() == 0
    assert waited.returncode in (0, 3), waited.stdout + waited.stderr
    assert view["spend"] == pytest.approx(view["budget"]), view
    assert receiver.bodies[: len(first)] == first
    for b in receiver.bodies:
        assert b["spent"] >= b["threshold"] * b["budget"] - 1e-6, b
        assert (b["job"], b["budget"], b["service"]) == (job_id, 6.0, "svc")
    assert len({b["id"] for b in receiver.bodies}) == len(receiver.bodies) == 3
    assert receiver.forged == 0
    assert "autoscaler_alerts_failed_total 0.0" in text
    assert f'subject="{subject}"' not in text  # the gauges show running jobs only

    again = ServiceProcess(config, state_dir)  # looks at once, and again as it stops
    assert again.stop() == 0
    receiver.close()
    assert len(receiver.bodies) == 3


def test_an_alert_is_retried_while_the_receiver_is_down_and_arrives_once(
    tmp_path: Path,
) -> None:
    port = free_port()  # nothing listens there yet: connections are refused
    config = alerting_config(tmp_path, port)
    svc = ServiceProcess(config, tmp_path / "state")
    receiver: Receiver | None = None
    log = svc.state_dir / "service.log.jsonl"
    try:
        job_id = svc.submit(budget_job("sweep", 80, 6))
        wait_for(
            lambda: "alert not delivered, will retry" in log.read_text(),
            120,
            "a delivery refused by the receiver that is down",
            svc.events,
        )
        receiver = Receiver(port)
        waited = svc.cli("wait", job_id, timeout=240)
        wait_for(
            lambda: receiver is not None and receiver.thresholds(f"job:{job_id}") == THRESHOLDS,
            60,
            "each alert, once the receiver is up",
            lambda: f"received {receiver and receiver.bodies}; {svc.events()}",
        )
    finally:
        assert svc.stop(signal.SIGTERM) == 0
        if receiver is not None:
            receiver.close()
    assert waited.returncode in (0, 3), waited.stdout + waited.stderr
    assert receiver is not None
    assert len({b["id"] for b in receiver.bodies}) == len(receiver.bodies) == 3


def test_a_deadline_job_forecast_to_miss_alerts_once(tmp_path: Path) -> None:
    """A one-task deadline job whose task takes ten hours, not the 200 s declared, will
    miss its 20-minute deadline: once the deadline passes with its task running (its
    controller, which expects the task's end at its estimate, need not say it late), one
    ``deadline_miss`` alert, with the job's deadline, and the gauge at 1 while it runs."""
    receiver = Receiver()
    svc = ServiceProcess(alerting_config(tmp_path, receiver.port), tmp_path / "state")
    try:
        job_id = svc.submit(
            {
                "name": "tight",
                "bag": {"synthetic": 1},
                "constraint": {"deadline_s": "20m"},
                "task_s": {"small": 600, "fast": 200},
                "emulator_task_s": {"small": 36000, "fast": 36000},
            }
        )
        misses = lambda: [b for b in receiver.bodies if b["kind"] == "deadline_miss"]  # noqa: E731
        wait_for(
            lambda: misses() != [],
            120,
            "a deadline_miss alert",
            lambda: f"received {receiver.bodies}; {svc.view(job_id)}; {svc.events()}",
        )
        gauge = metrics(svc)
        running = svc.view(job_id)["state"]
        cancelled = svc.cli("cancel", job_id)
    finally:
        assert svc.stop() == 0
        receiver.close()
    assert cancelled.returncode == 0, cancelled.stdout + cancelled.stderr
    assert running == "running"
    (miss,) = misses()
    assert (miss["subject"], miss["job"]) == (f"job:{job_id}", job_id)
    assert miss["deadline_at"] is not None
    assert miss["time"] >= miss["deadline_at"] or miss["late_tasks"] > 0
    assert receiver.forged == 0
    assert f'autoscaler_deadline_forecast_miss{{job="{job_id}"}} 1.0' in gauge, gauge


def test_alerts_pending_when_the_service_stops_are_delivered_by_the_next_once(
    tmp_path: Path,
) -> None:
    """Alerts the receiver (down) could not take wait in ``alerts.json`` through a
    restart; the next service delivers each of them once the receiver is up."""
    port = free_port()
    config = alerting_config(tmp_path, port)
    state_dir = tmp_path / "state"
    svc = ServiceProcess(config, state_dir)
    log = state_dir / "service.log.jsonl"
    try:
        svc.submit(budget_job("sweep", 80, 6))
        wait_for(
            lambda: "alert not delivered, will retry" in log.read_text(),
            120,
            "a delivery refused by the receiver that is down",
            svc.events,
        )
    finally:
        assert svc.stop(signal.SIGTERM) == 0
    book = json.loads((state_dir / "alerts.json").read_text())
    waiting = {p["alert"]["id"] for p in book["pending"]}
    assert waiting, book
    assert book["delivered"] == 0

    receiver = Receiver(port)
    svc = ServiceProcess(config, state_dir)
    try:
        wait_for(
            lambda: waiting <= {b["id"] for b in receiver.bodies},
            60,
            "the alerts left pending, delivered by the next service",
            lambda: f"received {receiver.bodies}; {svc.events()}",
        )
    finally:
        assert svc.stop(signal.SIGTERM) == 0
        receiver.close()
    ids = [b["id"] for b in receiver.bodies]
    assert len(ids) == len(set(ids)), receiver.bodies


def test_an_alert_the_receiver_keeps_failing_is_dropped_after_its_tries(tmp_path: Path) -> None:
    """A receiver that answers 503 to everything gets each alert ``attempts`` times, no
    more; then the alert is dropped, logged and counted, and the job runs on."""
    receiver = Receiver(answer=503)
    config = alerting_config(tmp_path, receiver.port, retry={"attempts": 2, "first_delay_s": 0.1})
    svc = ServiceProcess(config, tmp_path / "state")
    log = svc.state_dir / "service.log.jsonl"
    try:
        job_id = svc.submit(budget_job("sweep", 80, 6))
        waited = svc.cli("wait", job_id, timeout=240)
        wait_for(
            lambda: (
                '"alert dropped"' in log.read_text()
                and "autoscaler_alerts_pending 0.0" in metrics(svc)
            ),
            60,
            "the alerts dropped",
            svc.events,
        )
        text = metrics(svc)
    finally:
        assert svc.stop() == 0
        receiver.close()
    assert waited.returncode in (0, 3), waited.stdout + waited.stderr
    ids = [b["id"] for b in receiver.bodies]
    assert len(set(ids)) == 3
    assert all(ids.count(i) == 2 for i in ids), ids
    assert "autoscaler_alerts_sent_total 0.0" in text
    assert "autoscaler_alerts_pending 0.0" in text
    assert log.read_text().count('"alert dropped"') == 3
