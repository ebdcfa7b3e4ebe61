"""A real OpenSSH server on loopback for the SSH bootstrap tests.

Each server is ``/usr/sbin/sshd -D -e -f <config>`` on a free 127.0.0.1 port, with a
host key and a client key generated for the test; it lets the current user (root in CI)
in with that key only, and allows remote port forwarding (bound to loopback). Test files
take a ``sshd`` parameter: the fixture is registered by ``pytest_plugins`` in
``tests/conftest.py``.
"""

from __future__ import annotations

import getpass
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.integration.services import free_port, missing

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = "ssh-keygen"


def keygen(path: Path, comment: str) -> str:
    """Generate an ed25519 key pair at ``path``; return the public line ``type base64``."""
    if shutil.which(SSH_KEYGEN) is None:
        missing("ssh-keygen not installed: apt-get install openssh-client")
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    kind, blob = path.with_suffix(".pub").read_text().split()[:2]
    return f"{kind} {blob}"


@dataclass
class SshServer:
    """One running sshd; ``another()`` starts a second one with a different host key."""

    host: str
    port: int
    user: str
    client_key: Path  # the private key that logs in
    host_key_public: str  # "ssh-ed25519 AAAA..."
    log: Path
    proc: subprocess.Popen[bytes]
    factory: SshdFactory = field(repr=False)

    @property
    def connect(self) -> str:
        return f"{self.host}:{self.port}"

    def another(self) -> SshServer:
        """A second sshd (same user and client key) with a freshly generated host key."""
        return self.factory.start()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class SshdFactory:
    """Starts sshd servers sharing one client key; stops them all at ``close``."""

    def __init__(self, directory: Path) -> None:
        if not SSHD.exists():
            missing("sshd not installed: apt-get install openssh-server")
        self.directory = directory
        self.user = getpass.getuser()
        self.client_key = directory / "client_key"
        client_public = keygen(self.client_key, "autoscaler-test-client")
        self.authorized_keys = directory / "authorized_keys"
        self.authorized_keys.write_text(client_public + "\n")
        self.servers: list[SshServer] = []
        self._privsep_dir()

    @staticmethod
    def _privsep_dir() -> None:
        # sshd refuses to start without its privilege separation directory.
        privsep = Path("/run/sshd")
        if privsep.is_dir():
            return
        try:
            privsep.mkdir(mode=0o755, parents=True)
        except OSError as exc:
            missing(f"sshd needs {privsep}, which cannot be created: {exc}")

    def start(self) -> SshServer:
        n = len(self.servers)
        base = self.directory / f"sshd{n}"
        base.mkdir()
        host_key = base / "host_key"
        host_public = keygen(host_key, f"autoscaler-test-host-{n}")
        port = free_port()
        config = base / "sshd_config"
        config.write_text(
            "\n".join(
                [
                    "ListenAddress 127.0.0.1",
                    f"Port {port}",
                    f"HostKey {host_key}",
                    f"AuthorizedKeysFile {self.authorized_keys}",
                    f"PidFile {base / 'sshd.pid'}",
                    "UsePAM no",
                    "StrictModes no",
                    "PermitRootLogin prohibit-password",
                    "PubkeyAuthentication yes",
                    "PasswordAuthentication no",
                    "KbdInteractiveAuthentication no",
                    "AllowTcpForwarding yes",
                    "GatewayPorts no",
                    "UseDNS no",
                    "MaxStartups 50",
                    "MaxSessions 50",
                    "LogLevel VERBOSE",
                    "Subsystem sftp internal-sftp",
                    "",
                ]
            )
        )
        check = subprocess.run(
            [str(SSHD), "-t", "-f", str(config)], capture_output=True, text=True, check=False
        )
        if check.returncode != 0:
            missing(f"sshd refuses the test config: {check.stderr.strip()}")
        log = base / "sshd.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = SshServer(
            "127.0.0.1", port, self.user, self.client_key, host_public, log, proc, self
        )
        self.servers.append(server)
        self._wait_ready(server)
        return server

    @staticmethod
    def _wait_ready(server: SshServer) -> None:
        deadline = time.monotonic() + 15
        while True:
            try:
                with socket.create_connection((server.host, server.port), timeout=2) as s:
                    if s.recv(64).startswith(b"SSH-"):
                        return
            except OSError:
                pass
            if server.proc.poll() is not None or time.monotonic() > deadline:
                server.stop()
                missing(f"sshd did not start: {server.log.read_text()[-2000:]}")
            time.sleep(0.05)

    def close(self) -> None:
        for server in self.servers:
            # The listener only: a session sshd forked for a client ends with the client's
            # connection, which the tests close.
            server.stop()


@pytest.fixture(name="sshd")
def sshd_fixture(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """A running sshd on loopback; every server started through it stops at the end."""
    factory = SshdFactory(tmp_path_factory.mktemp("sshd"))
    try:
        yield factory.start()
    finally:
        factory.close()
