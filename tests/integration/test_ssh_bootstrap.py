"""SSH bootstrap (bootstrap/ssh.py) against a real sshd on loopback and a scripted controller.

Every "machine" is this host, reached through the test's sshd (``SshSettings.connect``);
the address each machine is given is a private address that is never connected to. The
agents really run (with this interpreter) and poll the controller through the reverse
tunnel: the controller listens on one loopback port, the agents' --url names another,
the one sshd opened for the tunnel.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from autoscaler.bootstrap.agent_start import AGENT, BootstrapError
from autoscaler.bootstrap.credentials import machine_token
from autoscaler.bootstrap.hostkeys import HostKeyMismatch, fingerprint
from autoscaler.bootstrap.ssh import SshBootstrap, SshSettings
from tests.integration.agent_harness import FakeController, Reply, alive, gone_within
from tests.integration.services import free_port
from tests.integration.sshd import SshServer, keygen

pytestmark = pytest.mark.integration

TOKEN = "run-token-7d41c9e2b8"
ADDRESS = "10.0.3.17"  # what a provider would report; never connected to
AGENT_ARGS = ["--heartbeat-s", "0.2", "--orphan-after-s", "60"]


class Logged:
    """A ``log`` callback that keeps every call as text."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def __call__(self, event: str, **fields: Any) -> None:
        self.lines.append(f"{event} {fields!r}")

    def text(self) -> str:
        return "\n".join(self.lines)


class Bootstraps:
    """Makes SshBootstrap objects for a test; closes them and kills their agents at the end."""

    def __init__(self, sshd: SshServer, controller: FakeController, tmp: Path) -> None:
        self.sshd = sshd
        self.controller = controller
        self.remote_dir = tmp / "remote"
        self.known_hosts = tmp / "run" / "known_hosts"
        self.log = Logged()
        self.made: list[SshBootstrap] = []
        self.errors: list[str] = []

    def make(
        self,
        server: SshServer | None = None,
        console: Callable[[str], str] | None = None,
        **settings: Any,
    ) -> SshBootstrap:
        server = server or self.sshd
        values: dict[str, Any] = {
            "user": server.user,
            "key_file": server.client_key,
            "known_hosts": self.known_hosts,
            "connect": server.connect,
            "remote_dir": str(self.remote_dir),
            "python": sys.executable,
            **settings,
        }
        port = int(self.controller.url.rsplit(":", 1)[1])
        boot = SshBootstrap(
            SshSettings(**values), port, TOKEN, AGENT_ARGS, console=console, log=self.log
        )
        self.made.append(boot)
        return boot

    def directory(self, machine: str) -> Path:
        return self.remote_dir / machine

    def pid(self, machine: str) -> int:
        return int((self.directory(machine) / "agent.pid").read_text())

    def agents(self, machine: str) -> list[int]:
        """Pids of processes running this machine's agent.py (there must be one)."""
        needle = str(self.directory(machine) / "agent.py").encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                if needle in (entry / "cmdline").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
        return found

    def close(self) -> None:
        for boot in self.made:
            boot.close_all()
        if not self.remote_dir.exists():
            return
        for directory in self.remote_dir.iterdir():
            for pid in self.agents(directory.name):
                with_signal(pid, signal.SIGTERM)
                if not gone_within(pid, 5):
                    with_signal(pid, signal.SIGKILL)


def with_signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


@pytest.fixture
def controller() -> Iterator[FakeController]:
    ctl = FakeController()
    ctl.start()
    yield ctl
    ctl.stop()


@pytest.fixture
def boots(sshd: SshServer, controller: FakeController, tmp_path: Path) -> Iterator[Bootstraps]:
    made = Bootstraps(sshd, controller, tmp_path)
    try:
        yield made
    finally:
        made.close()


def polls_of(controller: FakeController, machine: str, after: float = 0.0) -> Any:
    """The first poll by ``machine`` received after ``after`` (monotonic), waiting for it."""
    return controller.wait_for(lambda r: r.body["machine"] == machine and r.at > after, timeout=15)


def secrets_of(sshd: SshServer) -> list[str]:
    """The token and every line of the private key's body: none may leak anywhere."""
    body = [
        line.strip()
        for line in sshd.client_key.read_text().splitlines()
        if line.strip() and not line.startswith("-----")
    ]
    return [TOKEN, *body]


def assert_no_secrets(sshd: SshServer, *texts: str) -> None:
    for secret in secrets_of(sshd):
        for text in texts:
            assert secret not in text


def test_ensure_starts_an_agent_that_polls_through_the_tunnel(
    boots: Bootstraps, controller: FakeController
) -> None:
    """The agent runs in <remote_dir>/<machine>, polls with its machine's token (never the
    run's secret) via the tunnel."""
    boot = boots.make()
    port = boot.ensure("i-0001", ADDRESS)

    poll = polls_of(controller, "i-0001")
    assert poll.headers["Authorization"] == f"Bearer {machine_token(TOKEN, 'i-0001')}"
    assert port != int(controller.url.rsplit(":", 1)[1])  # so it came through sshd
    assert boot.alive("i-0001")
    directory = boots.directory("i-0001")
    pid = boots.pid("i-0001")
    assert poll.body["pid"] == pid
    assert (directory / "port").read_text().strip() == str(port)
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert f"http://127.0.0.1:{port}".encode() in cmdline
    assert TOKEN.encode() not in b" ".join(cmdline)
    token = directory / "token"
    assert token.read_text().strip() == machine_token(TOKEN, "i-0001")
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert (directory / "agent.py").read_bytes() == AGENT.read_bytes()


def test_ensure_twice_keeps_one_agent_and_one_port(
    boots: Bootstraps, controller: FakeController
) -> None:
    """A second ensure on a live machine changes nothing: same port, same single agent."""
    boot = boots.make()
    port = boot.ensure("i-0002", ADDRESS)
    polls_of(controller, "i-0002")
    pid = boots.pid("i-0002")

    assert boot.ensure("i-0002", ADDRESS) == port
    assert boots.pid("i-0002") == pid
    assert boots.agents("i-0002") == [pid]


def test_two_machines_at_once_get_their_own_tunnels(
    boots: Bootstraps, controller: FakeController
) -> None:
    """Concurrent ensures through one sshd: distinct ports, both agents poll as themselves."""
    boot = boots.make()
    ports: dict[str, int] = {}
    errors: list[BaseException] = []

    def ensure(machine: str) -> None:
        try:
            ports[machine] = boot.ensure(machine, ADDRESS)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=ensure, args=(m,)) for m in ("i-000a", "i-000b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert ports["i-000a"] != ports["i-000b"]
    for machine in ports:
        poll = polls_of(controller, machine)
        assert poll.body["pid"] == boots.pid(machine)
    assert boot.alive("i-000a")
    assert boot.alive("i-000b")


def test_a_restarted_daemon_reopens_the_stored_port_for_the_same_agent(
    boots: Bootstraps, controller: FakeController
) -> None:
    """After close() and a new SshBootstrap, ensure() reuses the port; the agent lives on."""
    first = boots.make()
    port = first.ensure("i-0003", ADDRESS)
    polls_of(controller, "i-0003")
    pid = boots.pid("i-0003")

    first.close("i-0003")
    assert not first.alive("i-0003")
    closed = time.monotonic()
    assert alive(pid)  # close() leaves the agent running

    second = boots.make()
    assert second.ensure("i-0003", ADDRESS) == port
    reopened = time.monotonic()
    poll = polls_of(controller, "i-0003", after=reopened)
    assert poll.body["pid"] == pid
    assert boots.agents("i-0003") == [pid]
    assert closed < reopened
    events = [line.split(" {")[0] for line in boots.log.lines]
    assert events.count("agent started") == 1
    assert "tunnel reopened" in events
    assert "agent already running" in events


def children(pid: int) -> list[int]:
    """Pids whose parent is ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat_line = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat_line.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def test_a_dropped_connection_is_reestablished_by_ensure(
    boots: Bootstraps, sshd: SshServer, controller: FakeController
) -> None:
    """When sshd's side of the session dies, alive() says so; ensure() reconnects on the port."""
    boot = boots.make()
    port = boot.ensure("i-000c", ADDRESS)
    polls_of(controller, "i-000c")
    pid = boots.pid("i-000c")

    for session in children(sshd.proc.pid):  # the sessions this test's sshd forked
        with_signal(session, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while boot.alive("i-000c"):
        assert time.monotonic() < deadline, "the dead connection still looks alive"
        time.sleep(0.05)

    assert boot.ensure("i-000c", ADDRESS) == port
    assert boot.alive("i-000c")
    poll = polls_of(controller, "i-000c", after=time.monotonic())
    assert poll.body["pid"] == pid
    assert boots.agents("i-000c") == [pid]
    assert any(line.startswith("ssh connection lost") for line in boots.log.lines)


def test_many_concurrent_connections_through_one_tunnel(
    boots: Bootstraps, controller: FakeController
) -> None:
    """Requests held open on eight keep-alive connections at once all pass the tunnel.

    The controller answers a probe only once all eight probes are waiting together (a
    barrier), so a tunnel that carried one connection at a time would fail them (503).
    """
    boot = boots.make()
    port = boot.ensure("i-0004", ADDRESS)
    polls_of(controller, "i-0004")
    together = threading.Barrier(8, timeout=10)

    def script(request: Any) -> Reply:
        if request.body["machine"] != "probe":
            return Reply()
        try:
            together.wait()
        except threading.BrokenBarrierError:
            return Reply(status=503)
        return Reply()

    controller.script = script
    answers: list[tuple[int, bool]] = []
    lock = threading.Lock()

    def probe() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
        for _ in range(2):  # twice on the same keep-alive connection
            body = json.dumps({"machine": "probe"})
            conn.request("POST", "/v1/poll", body, {"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            with lock:
                answers.append((response.status, response.will_close))
        conn.close()

    threads = [threading.Thread(target=probe) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert answers == [(200, False)] * 16


def test_pinned_key_is_recorded_and_another_key_is_refused(
    boots: Bootstraps, sshd: SshServer, controller: FakeController
) -> None:
    """First use pins the key per machine id (0600); a different key for it is refused."""
    boots.make().ensure("i-0005", ADDRESS)
    known = boots.known_hosts
    assert stat.S_IMODE(known.stat().st_mode) == 0o600
    lines = known.read_text().splitlines()
    assert lines == [f"i-0005 {sshd.host_key_public}"]

    impostor = sshd.another()
    with pytest.raises(HostKeyMismatch) as refused:
        boots.make(server=impostor).ensure("i-0005", ADDRESS)
    message = refused.value.message
    assert refused.value.code == "HostKeyMismatch"
    assert "i-0005" in message
    assert ADDRESS in message
    assert fingerprint(sshd.host_key_public) in message
    assert fingerprint(impostor.host_key_public) in message
    assert sshd.host_key_public.split()[1] not in message
    assert known.read_text().splitlines() == lines  # the pin is unchanged

    # The pin is per machine id, not per address: another machine there is its own pin.
    boots.make(server=impostor).ensure("i-0006", ADDRESS)
    assert f"i-0006 {impostor.host_key_public}" in known.read_text().splitlines()
    assert_no_secrets(sshd, message, known.read_text(), boots.log.text())


def test_console_policy_accepts_the_listed_key_and_refuses_others(
    boots: Bootstraps, sshd: SshServer, controller: FakeController, tmp_path: Path
) -> None:
    """With the "console" policy the offered key must be listed in the console output."""
    other = keygen(tmp_path / "other_host_key", "other")

    def console_listing(*keys: str) -> Callable[[str], str]:
        block = "\n".join(f"{key} root@ip-10-0-3-17" for key in keys)
        text = (
            "[    8.41] cloud-init[601]: Cloud-init v. 22.4.2 running 'modules:final'\n"
            "-----BEGIN SSH HOST KEY KEYS-----\n"
            f"{block}\n"
            "-----END SSH HOST KEY KEYS-----\n"
        )
        return lambda machine: text

    with pytest.raises(HostKeyMismatch) as refused:
        boots.make(console=console_listing(other), host_key_policy="console").ensure(
            "i-0007", ADDRESS
        )
    assert fingerprint(sshd.host_key_public) in refused.value.message
    assert fingerprint(other) in refused.value.message
    assert not boots.known_hosts.exists() or "i-0007" not in boots.known_hosts.read_text()

    boot = boots.make(
        console=console_listing(other, sshd.host_key_public), host_key_policy="console"
    )
    boot.ensure("i-0007", ADDRESS)
    polls_of(controller, "i-0007")
    assert f"i-0007 {sshd.host_key_public}" in boots.known_hosts.read_text().splitlines()


def test_console_policy_gives_up_when_the_console_never_lists_keys(
    boots: Bootstraps, controller: FakeController
) -> None:
    """Until the console shows keys it retries; past console_wait_s it fails, saying why."""
    calls: list[str] = []

    def console(machine: str) -> str:
        calls.append(machine)
        return "[    3.20] cloud-init[412]: Cloud-init v. 22.4.2 running 'init-local'\n"

    boot = boots.make(console=console, host_key_policy="console", console_wait_s=1.0)
    with pytest.raises(BootstrapError) as failed:
        boot.ensure("i-0008", ADDRESS)
    assert "no host keys in its console output" in failed.value.message
    assert "i-0008" in failed.value.message
    assert len(calls) >= 2  # retried, not a single look
    assert not boots.directory("i-0008").exists()


def test_wait_ssh(boots: Bootstraps, sshd: SshServer) -> None:
    """wait_ssh returns once sshd answers, and times out on a closed port with BootstrapError."""
    boots.make().wait_ssh("i-0009", ADDRESS, timeout_s=10)

    closed = boots.make(connect=f"127.0.0.1:{free_port()}")
    with pytest.raises(BootstrapError) as failed:
        closed.wait_ssh("i-0009", ADDRESS, timeout_s=1.0)
    assert failed.value.retryable
    assert "i-0009" in failed.value.message
    assert "did not answer" in failed.value.message


def test_bad_machine_id_is_refused_before_connecting(boots: Bootstraps) -> None:
    """A machine id that could escape <remote_dir> is refused, naming it."""
    with pytest.raises(BootstrapError, match=r"'\.\./etc'"):
        boots.make().ensure("../etc", ADDRESS)


def test_secrets_never_leak(boots: Bootstraps, sshd: SshServer, controller: FakeController) -> None:
    """Neither the token nor the private key shows in agent.log, logs, known_hosts, errors."""
    boot = boots.make()
    boot.ensure("i-0010", ADDRESS)
    polls_of(controller, "i-0010")
    refused = boots.make(server=sshd.another())
    with pytest.raises(HostKeyMismatch) as mismatch:
        refused.ensure("i-0010", ADDRESS)
    with pytest.raises(BootstrapError) as unreachable:
        boots.make(connect=f"127.0.0.1:{free_port()}", connect_timeout_s=2).ensure(
            "i-0011", ADDRESS
        )
    texts = [
        (boots.directory("i-0010") / "agent.log").read_text(),
        boots.log.text(),
        boots.known_hosts.read_text(),
        str(mismatch.value),
        str(unreachable.value),
        repr(boot),
    ]
    assert boots.log.lines  # the callback did get lines
    assert_no_secrets(sshd, *texts)
