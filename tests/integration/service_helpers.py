"""Helpers for tests of the service: its config, `autoscaler serve` as a process, its API."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import yaml

from autoscaler.service.client import Client
from tests.integration.daemon_helpers import ROOT, cli, local_fields, run_cli, wait_for


def service_config(tmp: Path, **overrides: Any) -> Path:
    """A time-scaled local service (one emulated hour in 10 real seconds), two types."""
    data: dict[str, Any] = {
        "name": "svc",
        **local_fields(max_count=4),
        "service": {"max_running_jobs": 4, "plots": False},  # as local_config: no plots
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp / "service.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def service_config_from(run_config: Path, max_count: int | None = None, **settings: Any) -> Path:
    """A run config file made a service's: its work (bag, constraint, jobs) left out, each
    type's ``max_count`` capped (jobs side by side share a provider's room), and a
    ``service:`` section of ``settings``; written beside it as ``service.yaml``."""
    data = yaml.safe_load(run_config.read_text(encoding="utf-8"))
    for work in ("bag", "constraint", "jobs"):
        data.pop(work, None)
    settings = {"plots": data.pop("plots", True), **settings}  # the run's, as the service's
    if max_count is not None:
        for t in data["machine_types"]:
            t["max_count"] = min(t["max_count"], max_count)
    data["service"] = settings
    path = run_config.parent / "service.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def budget_job(name: str, tasks: int = 40, budget: float = 30.0) -> dict[str, Any]:
    return {"name": name, "bag": {"synthetic": tasks}, "constraint": {"budget": budget}}


def write_job(tmp: Path, job: dict[str, Any]) -> Path:
    path = tmp / f"{job.get('name', 'job')}.yaml"
    path.write_text(yaml.safe_dump(job), encoding="utf-8")
    return path


class ServiceProcess:
    """``autoscaler serve CONFIG --state-dir DIR`` in its own session. It is started with
    ``--release-on-exit`` unless ``release_on_exit`` is False: a test's service releases
    its machines when it stops, so no agent outlives the test; the tests of a restart
    leave it out, as `serve` is run by default (its machines handed over)."""

    def __init__(
        self,
        config: Path,
        state_dir: Path,
        *,
        release_on_exit: bool = True,
        env: dict[str, str] | None = None,
    ) -> None:
        self.config = config
        self.state_dir = state_dir
        self.log = state_dir.parent / f"{state_dir.name}.serve.log"
        flags = ["--release-on-exit"] if release_on_exit else []
        with self.log.open("a", encoding="utf-8") as out:
            self.proc = subprocess.Popen(
                cli("serve", str(config), "--state-dir", str(state_dir), *flags),
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                start_new_session=True,
                env=None if env is None else {**os.environ, **env},
            )
        wait_for(self._answers, 30, f"the service to answer (log: {self.log})")
        self.client = Client(state_dir)

    def _answers(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"serve exited {self.proc.returncode}: {self.log.read_text()}")
        try:
            info = json.loads((self.state_dir / "api.json").read_text())
            if int(info["pid"]) != self.proc.pid:
                return False  # a previous service's file
            Client(self.state_dir).call("GET", "/api/v1/jobs", timeout=2)
            return True
        except (OSError, ValueError, KeyError, Exception):
            return False

    def submit(self, job: dict[str, Any]) -> str:
        return str(self.client.call("POST", "/api/v1/jobs", {"job": job})["id"])

    def view(self, job_id: str) -> dict[str, Any]:
        return dict(self.client.call("GET", f"/api/v1/jobs/{job_id}"))

    def views(self) -> list[dict[str, Any]]:
        return list(self.client.call("GET", "/api/v1/jobs")["jobs"])

    def cli(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return run_cli(*args, "--state-dir", str(self.state_dir), timeout=timeout)

    def stop(self, signum: int = signal.SIGTERM, timeout: float = 60) -> int:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signum)
        return self.proc.wait(timeout=timeout)

    def events(self, last: int = 40) -> str:
        """The service log's last events (for a failed test's message)."""
        try:
            lines = (self.state_dir / "service.log.jsonl").read_text().splitlines()[-last:]
        except OSError as exc:
            return f"no service log: {exc}"
        return "service log:\n" + "\n".join(lines)

    def kill9(self) -> None:
        """SIGKILL the service process alone (its local agents live on, as after a crash)."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


def stored_states(state_dir: Path) -> dict[str, str]:
    """Job id -> state, from the service's store (the service need not run)."""
    import sqlite3

    con = sqlite3.connect(f"file:{state_dir / 'service.db'}?mode=ro", uri=True, timeout=5)
    try:
        return dict(con.execute("SELECT id, state FROM jobs ORDER BY seq").fetchall())
    finally:
        con.close()
