"""Real servers for integration tests, each a process on loopback.

Under ``CI=true`` a service that cannot start fails the test; elsewhere it skips it, so
a developer without the Debian packages can still run the rest.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

IN_CI = os.environ.get("CI", "").lower() == "true"

# Credentials for the emulator only: never real ones, and never the environment's.
FAKE_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_CONFIG_FILE": "/dev/null",
    "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
}


def missing(what: str) -> None:
    """A service the test needs is not here: fail under CI, skip elsewhere."""
    if IN_CI:
        pytest.fail(f"{what} (CI=true: services must run, not skip)")
    pytest.skip(what)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def fake_aws_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in FAKE_AWS_ENV.items():
        monkeypatch.setenv(key, value)


@dataclass
class MotoServer:
    """A moto server process: boto3 talks HTTP to ``endpoint``."""

    endpoint: str
    proc: subprocess.Popen[bytes]
    log: Path

    def reset(self) -> None:
        """Forget every resource (moto's own reset endpoint)."""
        req = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=10):
            pass

    def alive(self) -> bool:
        return self.proc.poll() is None


@contextlib.contextmanager
def moto_server(log_dir: Path) -> Iterator[MotoServer]:
    """Start ``moto.server`` on a free loopback port; stop it at the end."""
    try:
        import moto.server  # noqa: F401
    except ImportError:
        missing("moto[server] is not installed")
    port = free_port()
    log = log_dir / "moto.log"
    env = {**os.environ, **FAKE_AWS_ENV}
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    server = MotoServer(f"http://127.0.0.1:{port}", proc, log)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{server.endpoint}/moto-api/", timeout=2):
                    break
            except (urllib.error.URLError, ConnectionError, OSError):
                if proc.poll() is not None or time.monotonic() > deadline:
                    missing(f"moto server did not start: {log.read_text()[-2000:]}")
                time.sleep(0.1)
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def moto(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoServer]:
    """One moto server for the session; tests that need a clean account call ``reset``."""
    with moto_server(tmp_path_factory.mktemp("moto")) as server:
        yield server
