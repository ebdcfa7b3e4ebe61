"""Start the worker agent on a machine over SSH (fabric), through a reverse tunnel.

The dispatcher listens only on the controller's loopback, so the agent cannot reach it
directly. For each machine we keep one SSH connection open and ask its sshd for a remote
port forward: the machine's ``127.0.0.1:<tunnel port>`` leads to our
``127.0.0.1:<local_port>``. The agent is started with ``--url http://127.0.0.1:<tunnel
port>``; every HTTP connection it opens (long polls included, many at once) becomes an SSH
channel that we pipe to the dispatcher.

On the machine everything lives in ``<remote_dir>/<machine>/`` (mode 0700, owned by the
SSH user)::

    agent.py    a copy of bootstrap/agent.py (run with the remote ``python``)
    token       its machine's token (not the run's secret), mode 0600; the agent reads
                it with --token-file, so it is never on a command line (``ps`` shows
                command lines to every user)
    port        the tunnel port the agent's --url names
    agent.pid   the agent's pid;  agent.log its stderr;  agent.exit its exit status
    work/       the agent's --workdir

:meth:`SshBootstrap.ensure` is idempotent: a restarted daemon calls it again for every
machine of its run; it reconnects, asks sshd for the port stored in ``port`` (the running
agent's --url must stay valid), and starts an agent only if ``agent.pid`` does not name a
live one.

Host keys are checked per machine id, never blindly: the ``pinned`` and ``console``
policies are described in :mod:`autoscaler.bootstrap.hostkeys`. The private key file is
only handed to paramiko by path; it is never read, logged or copied here.
"""

from __future__ import annotations

import re
import shlex
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import fabric
import paramiko
from tenacity import (
    Retrying,
    retry_if_exception_type,
    retry_if_not_result,
    retry_if_result,
    stop_before_delay,
    wait_exponential,
)

from autoscaler.bootstrap.agent_start import AGENT, BootstrapError, agent_command
from autoscaler.bootstrap.credentials import machine_token
from autoscaler.bootstrap.hostkeys import (
    HostKeyCheck,
    HostKeyMismatch,
    KnownHosts,
    fingerprint,
    parse_console_host_keys,
)
from autoscaler.bootstrap.retries import BACKOFF_FIRST_S, BACKOFF_MAX_S, is_none, retrying
from autoscaler.bootstrap.sftp import read_remote, write_remote
from autoscaler.bootstrap.tunnel import TunnelPipes
from autoscaler.core.errors import AutoscalerError

# A machine id names a directory on the machine and a known_hosts entry: keep it to
# characters that are safe in both (and never "." or "..").
_MACHINE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

KEEPALIVE_S = 15


@dataclass(frozen=True, slots=True)
class SshSettings:
    """How to reach machines over SSH and where to put the agent on them."""

    user: str
    key_file: Path  # private key (never logged, never copied)
    known_hosts: Path  # the run's pinned host keys (file in the run dir, 0600)
    host_key_policy: Literal["pinned", "console"] = "pinned"
    connect: str | None = None  # "host:port" to connect to instead of the machine's address
    port: int = 22
    remote_dir: str = "/tmp/autoscaler"  # per machine: <remote_dir>/<machine>/
    python: str = "python3"
    poweroff_on_exit: bool = False  # power the machine off once its agent exits
    connect_timeout_s: float = 10.0
    console_wait_s: float = 600.0  # "console" policy: how long to wait for keys there
    ready_timeout_s: float = 600.0  # launch to SSH answering, at most


@dataclass
class _Session:
    conn: Any  # fabric.Connection (untyped)
    port: int
    pipes: TunnelPipes
    directory: str

    def alive(self) -> bool:
        transport = self.conn.transport
        return transport is not None and bool(transport.is_active())


def _nolog(event: str, **fields: Any) -> None:
    pass


class SshBootstrap:
    """Start and keep agents on machines over SSH; one connection and tunnel per machine.

    ``local_port`` is the dispatcher's port on our loopback; ``token`` the run's secret:
    each agent is given its machine's token (``bootstrap.credentials``), never the
    secret; ``agent_args`` extra agent flags (``["--heartbeat-s", "2", ...]``);
    ``console(machine)`` returns a machine's console output (the "console" host-key
    policy needs it). ``log(event, **fields)`` receives one call per notable thing; it
    never sees the token or key material.

    Thread-safe: ``ensure`` may run for several machines at once (one lock per machine).
    """

    def __init__(
        self,
        settings: SshSettings,
        local_port: int,
        token: str,
        agent_args: Sequence[str] = (),
        console: Callable[[str], str] | None = None,
        log: Callable[..., None] | None = None,
    ) -> None:
        if settings.host_key_policy not in ("pinned", "console"):
            raise BootstrapError(
                f"unknown host key policy {settings.host_key_policy!r}: "
                "expected 'pinned' or 'console'"
            )
        if settings.host_key_policy == "console" and console is None:
            raise BootstrapError("host key policy 'console' needs a console reader")
        if not token or any(c.isspace() for c in token):
            raise BootstrapError("the run token must be non-empty, without whitespace")
        self.settings = settings
        self.local_port = local_port
        self._token = token
        self.agent_args = tuple(agent_args)
        self.console = console
        self._log = log or _nolog
        self._sessions: dict[str, _Session] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._known = KnownHosts(settings.known_hosts)

    def handles(self, machine: str) -> bool:
        """Whether ``machine``'s agent is started here (every machine of its run)."""
        return True

    def timeout_s(self, machine: str) -> float:
        """How long ``machine`` may take from launch to SSH answering."""
        return self.settings.ready_timeout_s

    def __repr__(self) -> str:  # never the token
        return f"SshBootstrap(user={self.settings.user!r}, local_port={self.local_port})"

    # --- public ---------------------------------------------------------------------

    def wait_ssh(self, machine: str, address: str, timeout_s: float) -> None:
        """Return once sshd answers for ``machine`` (TCP and an SSH banner).

        Retries with backoff (0.2 s doubling to 5 s); BootstrapError (retryable) when
        ``timeout_s`` passes, naming the last failure.
        """
        _check_machine(machine)
        host, port = self._target(address)
        deadline = time.monotonic() + timeout_s

        def probe() -> str | None:
            """None once sshd answers; else why not."""
            left = deadline - time.monotonic()
            try:
                with socket.create_connection((host, port), timeout=max(0.1, min(left, 5.0))) as s:
                    banner = s.recv(256)
            except OSError as exc:
                return str(exc) or type(exc).__name__
            return None if banner.startswith(b"SSH-") else f"no SSH banner (got {banner[:40]!r})"

        reason = retrying(timeout_s, retry_if_not_result(is_none))(probe)
        if reason is not None:
            raise BootstrapError(
                f"machine {machine}: sshd at {host}:{port} (address {address}) did not "
                f"answer within {timeout_s:g}s: {reason}",
                retryable=True,
            )
        self._log("ssh up", machine=machine, address=address)

    def ensure(self, machine: str, address: str) -> int:
        """Connect, copy, tunnel and start the agent on ``machine``; return the tunnel port.

        Idempotent: a machine whose connection is up just returns its port; otherwise
        each step is done only if needed (files that are there are kept, a live agent is
        not started again, the stored tunnel port is reused).
        """
        _check_machine(machine)
        with self._machine_lock(machine):
            session = self._sessions.get(machine)
            if session is not None:
                if session.alive():
                    return session.port
                self._log("ssh connection lost; reconnecting", machine=machine)
                self._drop(machine)
            session = self._open(machine, address)
            self._sessions[machine] = session
            return session.port

    def alive(self, machine: str) -> bool:
        """Whether the machine's connection (and so its tunnel) is up."""
        session = self._sessions.get(machine)
        return session is not None and session.alive()

    def close(self, machine: str) -> None:
        """Close the tunnel and connection of ``machine``; its agent keeps running."""
        with self._machine_lock(machine):
            self._drop(machine)

    def close_all(self) -> None:
        for machine in list(self._sessions):
            self.close(machine)

    # --- steps ----------------------------------------------------------------------

    def _machine_lock(self, machine: str) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(machine, threading.Lock())

    def _drop(self, machine: str) -> None:
        session = self._sessions.pop(machine, None)
        if session is None:
            return
        session.pipes.close()
        self._close_conn(session.conn, machine)
        self._log("ssh closed", machine=machine)

    def _close_conn(self, conn: Any, machine: str) -> None:
        """Close an SSH connection; a failure to close is logged, the machine goes anyway."""
        try:
            conn.close()
        except Exception as exc:
            self._log("ssh close failed", machine=machine, error=f"{type(exc).__name__}: {exc}")

    def _target(self, address: str) -> tuple[str, int]:
        """Where to connect for a machine at ``address`` (``connect`` overrides it)."""
        if self.settings.connect is None:
            return address, self.settings.port
        host, sep, port = self.settings.connect.rpartition(":")
        if not sep or not port.isdigit():
            raise BootstrapError(f"ssh connect {self.settings.connect!r} is not host:port")
        return host.strip("[]"), int(port)

    def _console_keys(self, machine: str) -> list[str]:
        """The keys on the console, waiting with backoff until it lists some."""
        console = self.console
        assert console is not None

        def read() -> tuple[list[str], str]:
            """The keys the console lists now, and why there are none if so."""
            try:
                keys = parse_console_host_keys(console(machine))
            except AutoscalerError as exc:
                return [], f"console output unavailable: {exc.message}"
            return keys, "no host keys in its console output yet"

        wait_s = self.settings.console_wait_s
        keys, reason = retrying(wait_s, retry_if_result(lambda found: not found[0]))(read)
        if not keys:
            raise BootstrapError(
                f"machine {machine}: cannot verify its host key: {reason} after {wait_s:g}s",
                retryable=True,
            )
        return keys

    def _connect(self, machine: str, address: str) -> Any:
        host, port = self._target(address)
        console_keys = None
        if self.settings.host_key_policy == "console" and not self._known.get(machine):
            console_keys = self._console_keys(machine)
        timeout = self.settings.connect_timeout_s
        conn = fabric.Connection(
            host,
            port=port,
            user=self.settings.user,
            connect_kwargs={
                "key_filename": str(self.settings.key_file),
                "look_for_keys": False,
                "allow_agent": False,
                "timeout": timeout,
                "banner_timeout": timeout,
                "auth_timeout": timeout,
            },
            config=fabric.Config(overrides={"load_ssh_configs": False}),
        )
        check = HostKeyCheck(self._known, machine, address, console_keys)
        conn.client.set_missing_host_key_policy(check)
        try:
            conn.open()
        except HostKeyMismatch as exc:
            conn.close()
            self._log("host key refused", machine=machine, address=address, error=exc.message)
            raise
        except (paramiko.SSHException, OSError, EOFError) as exc:
            conn.close()
            raise BootstrapError(
                f"machine {machine}: cannot connect over SSH to {host}:{port} "
                f"(address {address}) as {self.settings.user}: {exc or type(exc).__name__}",
                retryable=True,
            ) from None
        conn.transport.set_keepalive(KEEPALIVE_S)
        key = conn.transport.get_remote_server_key()
        self._log(
            "ssh connected",
            machine=machine,
            address=address,
            host_key=fingerprint(key),
            host_key_check=check.accepted,
        )
        return conn

    def _open(self, machine: str, address: str) -> _Session:
        conn = self._connect(machine, address)
        pipes = TunnelPipes(self.local_port, self._log, machine)
        try:
            directory = self._prepare(conn, machine)
            port = self._tunnel(conn, machine, directory, pipes)
            self._start_agent(conn, machine, directory, port)
        except BaseException:
            pipes.close()
            self._close_conn(conn, machine)
            raise
        return _Session(conn, port, pipes, directory)

    def _run(self, conn: Any, machine: str, command: str, what: str) -> str:
        """Run a shell command on the machine; BootstrapError naming ``what`` if it fails."""
        try:
            result = conn.run(command, hide=True, warn=True, in_stream=False, pty=False)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise BootstrapError(f"machine {machine}: {what}: {exc}", retryable=True) from None
        if result.exited != 0:
            detail = (result.stderr or result.stdout).strip()[-500:]
            raise BootstrapError(
                f"machine {machine}: {what} failed (exit {result.exited}): {detail}"
            )
        out: str = result.stdout
        return out

    def _prepare(self, conn: Any, machine: str) -> str:
        """Make ``<remote_dir>/<machine>/`` (0700, ours) and put agent.py and the token there."""
        directory = f"{self.settings.remote_dir.rstrip('/')}/{machine}"
        q = shlex.quote(directory)
        self._run(
            conn,
            machine,
            f"mkdir -p {q}/work && chmod 700 {q} && test -O {q} && test ! -L {q}",
            f"create {directory} (owned by {self.settings.user}, mode 0700)",
        )
        try:
            sftp = conn.sftp()
            source = AGENT.read_bytes()
            if read_remote(sftp, f"{directory}/agent.py") != source:
                write_remote(sftp, f"{directory}/agent.py", source, 0o644)
                self._log("agent copied", machine=machine, path=f"{directory}/agent.py")
            token = (machine_token(self._token, machine) + "\n").encode()
            if read_remote(sftp, f"{directory}/token") != token:
                write_remote(sftp, f"{directory}/token", token, 0o600)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise BootstrapError(
                f"machine {machine}: cannot copy files to {directory}: {exc}", retryable=True
            ) from None
        return directory

    def _tunnel(self, conn: Any, machine: str, directory: str, pipes: TunnelPipes) -> int:
        """Open the reverse tunnel on the stored port (or a new one); return the port."""
        sftp = conn.sftp()
        stored_text = read_remote(sftp, f"{directory}/port")
        stored = int(stored_text) if stored_text and stored_text.strip().isdigit() else None
        transport = conn.transport
        if stored is not None:
            # A running agent's --url names the stored port: only that one will do. After
            # a restart the old connection's listener may linger in sshd for a moment,
            # so retry it for a while. With no agent depending on it, any port will do.
            agent = self._agent_pid(conn, machine, directory) is not None
            reopen = Retrying(
                stop=stop_before_delay(self.settings.connect_timeout_s if agent else 0.0),
                wait=wait_exponential(multiplier=BACKOFF_FIRST_S, max=BACKOFF_MAX_S),
                retry=retry_if_exception_type(paramiko.SSHException),
                reraise=True,
            )
            try:
                port: int = reopen(
                    transport.request_port_forward, "127.0.0.1", stored, pipes.handler
                )
            except paramiko.SSHException as exc:
                if agent:
                    raise BootstrapError(
                        f"machine {machine}: its agent uses tunnel port {stored}, "
                        f"which sshd does not grant: {exc}",
                        retryable=True,
                    ) from None
            else:
                self._log("tunnel reopened", machine=machine, port=port)
                return port
        try:
            port = transport.request_port_forward("127.0.0.1", 0, pipes.handler)
        except paramiko.SSHException as exc:
            raise BootstrapError(
                f"machine {machine}: sshd refused the reverse tunnel (AllowTcpForwarding?): {exc}"
            ) from None
        try:
            write_remote(sftp, f"{directory}/port", f"{port}\n".encode(), 0o600)
        except (OSError, EOFError) as exc:
            raise BootstrapError(
                f"machine {machine}: cannot store the tunnel port: {exc}", retryable=True
            ) from None
        self._log("tunnel opened", machine=machine, port=port)
        return port

    def _agent_pid(self, conn: Any, machine: str, directory: str) -> int | None:
        """The pid in agent.pid if it is a live agent of this directory (not a reused pid)."""
        q = shlex.quote(directory)
        needle = shlex.quote(f"{directory}/agent.py")
        out = self._run(
            conn,
            machine,
            f'pid=$(cat {q}/agent.pid 2>/dev/null) || exit 0; [ -n "$pid" ] || exit 0; '
            f'tr "\\000" " " < /proc/"$pid"/cmdline 2>/dev/null | grep -qF -- {needle} '
            f'&& echo "$pid"; exit 0',
            "check the agent",
        )
        text = out.strip()
        return int(text) if text.isdigit() else None

    def _start_agent(self, conn: Any, machine: str, directory: str, port: int) -> None:
        pid = self._agent_pid(conn, machine, directory)
        if pid is not None:
            self._log("agent already running", machine=machine, pid=pid)
            return
        q = shlex.quote
        agent = agent_command(
            self.settings.python,
            f"{directory}/agent.py",
            url=f"http://127.0.0.1:{port}",
            machine=machine,
            flags=self.agent_args,
            token_file=f"{directory}/token",
            workdir=f"{directory}/work",
        ).argv
        # The inner shell starts the agent, records its pid (atomically), waits for it
        # and records its exit status, then powers off if asked. setsid + nohup detach
        # it from the SSH session, which returns at once (all output is redirected).
        inner = (
            f"{' '.join(q(a) for a in agent)} & "
            "echo $! > agent.pid.tmp && mv agent.pid.tmp agent.pid; "
            "wait $!; echo $? > agent.exit"
        )
        if self.settings.poweroff_on_exit:
            inner += '; if [ "$(id -u)" -eq 0 ]; then poweroff; else sudo -n poweroff; fi'
        command = (
            f"cd {q(directory)} && rm -f agent.pid agent.exit && "
            f"(setsid nohup sh -c {q(inner)} < /dev/null >> agent.log 2>&1 &) && "
            "i=0; while [ ! -s agent.pid ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; "
            "cat agent.pid"
        )
        out = self._run(conn, machine, command, "start the agent").strip()
        if not out.isdigit():
            raise BootstrapError(
                f"machine {machine}: the agent did not start (see {directory}/agent.log)",
                retryable=True,
            )
        self._log("agent started", machine=machine, pid=int(out), port=port)


def _check_machine(machine: str) -> None:
    if not _MACHINE_RE.fullmatch(machine):
        raise BootstrapError(
            f"machine id {machine!r} cannot name a directory: "
            "use letters, digits, '.', '_', '-' (at most 128, not starting with '.' or '-')"
        )
