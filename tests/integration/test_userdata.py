"""The user-data script (bootstrap/userdata.py) run for real with ``sh`` on this host.

A small IMDSv2 server stands in for the instance metadata service (it insists on the
session-token dance); the scripted controller of test_agent.py stands in for the daemon.
The script's ``remote_dir`` is a temporary directory and it never powers off here.
"""

from __future__ import annotations

import ast
import base64
import gzip
import os
import shlex
import signal
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from autoscaler.bootstrap.agent_start import BootstrapError, agent_source
from autoscaler.bootstrap.userdata import USER_DATA_LIMIT, render_user_data, shipped_agent
from tests.integration.agent_harness import FakeController, Reply

pytestmark = pytest.mark.integration

INSTANCE_ID = "i-0f1e2d3c4b5a69788"
TOKEN = "userdata-run-token-3e8a1f"


class FakeImds:
    """IMDSv2: PUT /latest/api/token (needs the TTL header), then GETs with that token."""

    def __init__(self, instance_id: str = INSTANCE_ID) -> None:
        self.session = "imds-session-" + base64.b16encode(os.urandom(6)).decode()
        self.seen: list[tuple[str, str, int]] = []  # (method, path, status)
        imds = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def answer(self, status: int, body: str) -> None:
                imds.seen.append((self.command, self.path, status))
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_PUT(self) -> None:
                ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
                if self.path != "/latest/api/token" or not ttl.isdigit():
                    self.answer(400, "")
                else:
                    self.answer(200, imds.session)

            def do_GET(self) -> None:
                if self.headers.get("X-aws-ec2-metadata-token") != imds.session:
                    self.answer(401, "")
                elif self.path == "/latest/meta-data/instance-id":
                    self.answer(200, instance_id)
                else:
                    self.answer(404, "")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def imds() -> Iterator[FakeImds]:
    server = FakeImds()
    yield server
    server.stop()


@pytest.fixture
def controller() -> Iterator[FakeController]:
    ctl = FakeController()
    ctl.start()
    yield ctl
    ctl.stop()


def as_cloud_init_reads(user_data: str | bytes) -> str:
    """The script cloud-init runs: user data that is gzip (its magic bytes) uncompressed."""
    if isinstance(user_data, bytes):
        assert user_data[:2] == b"\x1f\x8b"
        return gzip.decompress(user_data).decode()
    return user_data


def run_script(user_data: str | bytes, tmp_path: Path, timeout: float = 30) -> int:
    """Run the script with sh in its own process group; kill the group if it hangs."""
    path = tmp_path / "user-data.sh"
    path.write_text(as_cloud_init_reads(user_data))
    with (tmp_path / "script.out").open("wb") as out:
        proc = subprocess.Popen(
            ["sh", str(path)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        return proc.wait(timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def render(controller: FakeController, imds: FakeImds, remote: Path, **kw: Any) -> str | bytes:
    return render_user_data(
        agent_source(),
        controller.url,
        TOKEN,
        agent_args=["--heartbeat-s", "0.2", "--orphan-after-s", "20"],
        poweroff_on_exit=False,
        remote_dir=str(remote),
        python=sys.executable,
        imds_url=imds.url,
        **kw,
    )


def test_script_starts_the_agent_as_the_instance_and_ends_when_released(
    controller: FakeController, imds: FakeImds, tmp_path: Path
) -> None:
    """The agent polls as the instance id with the run token; release ends the script (0)."""
    remote = tmp_path / "var-lib-autoscaler"
    controller.script = lambda request: Reply(fields={"release": True})

    assert run_script(render(controller, imds, remote), tmp_path) == 0

    poll = controller.wait_for(lambda r: True)
    assert poll.body["machine"] == INSTANCE_ID
    assert poll.headers["Authorization"] == f"Bearer {TOKEN}"
    assert imds.seen[:2] == [
        ("PUT", "/latest/api/token", 200),
        ("GET", "/latest/meta-data/instance-id", 200),
    ]
    token = remote / "token"
    assert token.read_text().strip() == TOKEN
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert stat.S_IMODE(remote.stat().st_mode) == 0o700
    shipped = (remote / "agent.py").read_text()
    assert shipped == shipped_agent(agent_source())
    assert _code(shipped) == _code(agent_source())  # the same code, docstrings aside
    assert (remote / "work").is_dir()
    log = (remote / "agent.log").read_text()
    assert "released" in log
    assert TOKEN not in log
    out = (tmp_path / "script.out").read_text()
    assert INSTANCE_ID in out
    assert TOKEN not in out


def test_script_exits_with_the_agents_status(
    controller: FakeController, imds: FakeImds, tmp_path: Path
) -> None:
    """A refused token makes the agent exit 2, and the script with it."""
    controller.script = lambda request: Reply(status=401)

    assert run_script(render(controller, imds, tmp_path / "remote"), tmp_path) == 2
    assert "token refused" in (tmp_path / "remote" / "agent.log").read_text()


def _checked_script(script: str, shipped: str, poweroff: bool, path: Path) -> None:
    """``script`` passes ``sh -n``, and its unpacking gives back ``shipped`` byte for byte."""
    assert script.startswith("#!/bin/sh\n")
    body = script.split("<<'AUTOSCALER_AGENT'\n", 1)[1].split("AUTOSCALER_AGENT\n", 1)[0]
    writer = script.split("<<'AUTOSCALER_AGENT'\n", 1)[0].rsplit("\n", 1)[1]
    if writer.startswith("cat "):
        unpacked = body.encode()
    else:
        unpack = shlex.split(writer.split('"$PY" -c ', 1)[1].split(" > ", 1)[0])[0]
        unpacked = subprocess.run(
            [sys.executable, "-c", unpack], input=body.encode(), capture_output=True, check=True
        ).stdout
    assert unpacked == shipped.encode()
    assert ("poweroff" in script) == poweroff
    path.write_text(script)
    check = subprocess.run(["sh", "-n", str(path)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr


def test_the_agent_fits_the_user_data_limit_in_a_script_gzipped_whole(tmp_path: Path) -> None:
    """The real agent is too big for a text script even xz-compressed in base85: the
    script, with the agent in it as plain text, is gzip-compressed as a whole (cloud-init
    uncompresses it), within 16 KB."""
    source = agent_source()
    for poweroff in (True, False):
        user_data = render_user_data(
            source, "http://10.0.0.2:8080", TOKEN, ["--tail-bytes", "4096"], poweroff
        )
        assert isinstance(user_data, bytes)
        assert len(user_data) <= USER_DATA_LIMIT
        script = as_cloud_init_reads(user_data)
        assert "cat > " in script
        _checked_script(script, shipped_agent(source), poweroff, tmp_path / f"ud-{poweroff}.sh")


def test_a_smaller_agent_goes_in_a_text_script_compressed_if_need_be(tmp_path: Path) -> None:
    """An agent past 16 KB that compresses well is unpacked by the script from base85
    (gzip, else xz); a small one from base64."""
    source = "".join(
        f"def f{i}(x):\n    return x * {i} + {i * 7919 % 1000}\n\n" for i in range(700)
    )
    assert len(source.encode()) > USER_DATA_LIMIT
    for poweroff in (True, False):
        script = render_user_data(source, "http://10.0.0.2:8080", TOKEN, [], poweroff)
        assert isinstance(script, str)
        assert len(script.encode()) <= USER_DATA_LIMIT
        assert "gzip" in script or "lzma" in script
        _checked_script(script, shipped_agent(source), poweroff, tmp_path / f"mid-{poweroff}.sh")
    small = render_user_data("print('hi')\n", "http://10.0.0.2:8080", TOKEN)
    assert isinstance(small, str)
    assert "gzip" not in small
    _checked_script(small, shipped_agent("print('hi')\n"), True, tmp_path / "small.sh")


def test_an_agent_too_big_even_compressed_is_refused() -> None:
    """Incompressible content past the limit gives a clear error naming the sizes."""
    noise = base64.b64encode(os.urandom(20_000)).decode()
    with pytest.raises(BootstrapError, match=str(USER_DATA_LIMIT)):
        render_user_data(f"# {noise}\n", "http://10.0.0.2:8080", TOKEN)


def test_a_token_with_spaces_is_refused() -> None:
    with pytest.raises(BootstrapError, match="token"):
        render_user_data("print('hi')\n", "http://10.0.0.2:8080", "two words")


def _code(source: str) -> str:
    """The module's code with every string statement (docstrings, attribute docs)
    emptied, as an AST dump."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr):
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                value.value = ""
    return ast.dump(tree)


def test_a_launch_script_registers_and_pins_the_runs_ca_within_the_limit(tmp_path: Path) -> None:
    """The daemon's user data (a launch's token, the run's CA pinned) fits in 16 KB;
    its agent reads the launch's token with --launch-token-file and trusts only ca.pem."""
    from autoscaler.bootstrap.tls import run_ca

    ca_pem = run_ca(tmp_path, ["10.0.0.2"]).ca_pem
    user_data = render_user_data(
        agent_source(),
        "https://10.0.0.2:8443",
        "L12." + "a" * 64,
        ["--tail-bytes", "4096"],
        True,
        register=True,
        ca_pem=ca_pem,
    )
    raw = user_data if isinstance(user_data, bytes) else user_data.encode()
    assert len(raw) <= USER_DATA_LIMIT
    script = as_cloud_init_reads(user_data)
    assert f"<<'AUTOSCALER_CA'\n{ca_pem.strip()}\nAUTOSCALER_CA\n" in script
    command = script.rsplit("AUTOSCALER_AGENT\n", 1)[1]  # after the agent's text
    assert "--launch-token-file /var/lib/autoscaler/token" in command
    assert "--ca-file /var/lib/autoscaler/ca.pem" in command
    assert "--token-file" not in command.replace("--launch-token-file", "")
    (tmp_path / "ud.sh").write_text(script)
    check = subprocess.run(["sh", "-n", str(tmp_path / "ud.sh")], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
