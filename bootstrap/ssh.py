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
    token       the run token, mode 0600; the agent reads it with --token-file, so it is
                never on a command line (``ps`` shows command lines to every user)
    port        the tunnel port the agent's --url names
    agent.pid   the agent's pid;  agent.log its stderr;  agent.exit its exit status
    work/       the agent's --workdir

:meth:`SshBootstrap.ensure` is idempotent: a restarted daemon calls it again for every
machine of its run; it reconnects, asks sshd for the port stored in ``port`` (the running
agent's --url must stay valid), and starts an agent only if ``agent.pid`` does not name a
live one.

Host keys
=========

We never read ``~/.ssh/known_hosts`` and never add keys blindly (fabric's default
``AutoAddPolicy`` is replaced). Keys are checked per MACHINE ID, not per address: cloud
addresses get reused by other machines, and in tests (or behind a forward) several
machines share one address. Two policies:

* ``"pinned"`` (trust on first use): the first connection to a machine, right after its
  launch, records the key it offers in the run's ``known_hosts`` file (paramiko's
  HostKeys format with the machine id as the host name, mode 0600, replaced atomically).
  Every later connection to that machine, from this daemon or a restarted one, must offer
  the same key, else :class:`HostKeyMismatch`. The window of trust is the first
  connection only.
* ``"console"``: the key offered must be one of those the machine printed on its console
  (cloud-init writes them between ``-----BEGIN SSH HOST KEY KEYS-----`` and
  ``-----END SSH HOST KEY KEYS-----``; see :func:`parse_console_host_keys`). The console
  output comes from the provider's API, not from the network path to the machine, so no
  first use is trusted. The console appears minutes after boot: until it lists keys we
  retry with backoff for ``console_wait_s``, then fail. A key so verified is pinned too,
  so later connections do not depend on the console (which EC2 truncates).

A mismatch names the machine, its address and both fingerprints (SHA256, as
``ssh-keygen -l`` prints them), never key material. The private key file is only handed
to paramiko by path; it is never read, logged or copied here.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import re
import shlex
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import fabric
import paramiko
from paramiko.hostkeys import HostKeyEntry

from autoscaler.errors import AutoscalerError

AGENT_SOURCE = Path(__file__).resolve().parent / "agent.py"

BEGIN_KEYS = "-----BEGIN SSH HOST KEY KEYS-----"
END_KEYS = "-----END SSH HOST KEY KEYS-----"

# A machine id names a directory on the machine and a known_hosts entry: keep it to
# characters that are safe in both (and never "." or "..").
_MACHINE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_KEY_TYPE_RE = re.compile(r"(ssh|ecdsa|sk)-[A-Za-z0-9@.-]+")

BACKOFF_FIRST_S = 0.2
BACKOFF_MAX_S = 5.0
KEEPALIVE_S = 15
PIPE_CHUNK = 65536


class BootstrapError(AutoscalerError):
    """A machine could not be reached or its agent not started."""

    code = "BootstrapError"


class HostKeyMismatch(BootstrapError):
    """A machine offered a host key other than the one we trust for it."""

    code = "HostKeyMismatch"


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


# --- host keys ---------------------------------------------------------------------------


def parse_console_host_keys(text: str) -> list[str]:
    """The ``"<type> <base64>"`` host keys listed in a machine's console output.

    cloud-init prints the keys between ``-----BEGIN SSH HOST KEY KEYS-----`` and
    ``-----END SSH HOST KEY KEYS-----``, one ``type base64 [comment]`` per line; lines may
    carry a prefix (a timestamp, ``ec2:``) that is ignored, as are comments. The
    fingerprint block cloud-init also prints (``BEGIN SSH HOST KEY FINGERPRINTS``) is not
    a key list and is skipped. Keys that are not valid base64 are dropped, and so is a
    block without its END line (console output cut short could cut a key short). If the
    block appears more than once (a reboot), every listed key is returned, once.
    """
    keys: list[str] = []
    block: list[str] | None = None  # the keys of the block being read
    for raw in text.splitlines():
        line = raw.strip()
        if line.endswith(BEGIN_KEYS):
            block = []
        elif line.endswith(END_KEYS):
            for key in block or ():
                if key not in keys:
                    keys.append(key)
            block = None
        elif block is not None:
            found = _key_in(line)
            if found is not None:
                block.append(found)
    return keys


def _key_in(line: str) -> str | None:
    """The ``"type base64"`` key on one console line, after any prefix, or None."""
    words = line.split()
    for i, word in enumerate(words[:-1]):
        if _KEY_TYPE_RE.fullmatch(word):
            blob = words[i + 1]
            try:
                base64.b64decode(blob, validate=True)
            except ValueError:
                return None
            return f"{word} {blob}"
    return None


def fingerprint(key: str | paramiko.PKey) -> str:
    """``SHA256:<unpadded base64>`` of a key, as ``ssh-keygen -l`` prints it.

    ``key`` is a ``"type base64 [comment]"`` line (a known_hosts or authorized_keys line
    without host names) or a paramiko key.
    """
    if isinstance(key, str):
        parts = key.split()
        if len(parts) < 2:
            raise ValueError(f"not a public key line: {key[:40]!r}")
        blob = base64.b64decode(parts[1])
    else:
        blob = key.asbytes()
    digest = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"


def _blob(key_line: str) -> bytes:
    return base64.b64decode(key_line.split()[1])


class _KnownHosts:
    """The run's pinned keys: paramiko HostKeys format keyed by machine id, 0600."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def get(self, machine: str) -> list[paramiko.PKey]:
        with self._lock:
            return list(self._load().get(machine, {}).values())

    def pin(self, machine: str, key: paramiko.PKey) -> None:
        """Record ``key`` for ``machine`` (replacing any earlier pin), atomically."""
        with self._lock:
            hosts = self._load()
            entries = [
                HostKeyEntry([name], k)
                for name in hosts
                if name != machine
                for k in hosts[name].values()
            ]
            entries.append(HostKeyEntry([machine], key))
            text = "".join(entry.to_line() or "" for entry in entries)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".known_hosts.", dir=self.path.parent)
            try:
                os.fchmod(fd, 0o600)
                with os.fdopen(fd, "w", encoding="ascii") as out:
                    out.write(text)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(tmp, self.path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise

    def _load(self) -> paramiko.HostKeys:
        hosts = paramiko.HostKeys()
        if self.path.exists():
            hosts.load(str(self.path))
        return hosts


class _HostKeyCheck(paramiko.MissingHostKeyPolicy):
    """Pin-or-compare (or console-compare) for one machine.

    paramiko calls this for every connection because the client's own HostKeys is empty:
    the comparison by machine id is ours.
    """

    def __init__(
        self,
        known: _KnownHosts,
        machine: str,
        address: str,
        console_keys: list[str] | None,
    ) -> None:
        self.known = known
        self.machine = machine
        self.address = address
        self.console_keys = console_keys
        self.accepted: str | None = None  # "pinned" / "matched pin" / "console"

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        offered = fingerprint(key)
        pinned = self.known.get(self.machine)
        if pinned:
            if any(p.asbytes() == key.asbytes() for p in pinned):
                self.accepted = "matched pin"
                return
            expected = ", ".join(fingerprint(p) for p in pinned)
            raise HostKeyMismatch(
                f"host key mismatch for machine {self.machine} at {self.address}: "
                f"it offered {key.get_name()} {offered}, expected {expected} "
                f"(pinned in {self.known.path})"
            )
        if self.console_keys is not None:
            if not any(_blob(line) == key.asbytes() for line in self.console_keys):
                expected = ", ".join(fingerprint(line) for line in self.console_keys)
                raise HostKeyMismatch(
                    f"host key mismatch for machine {self.machine} at {self.address}: "
                    f"it offered {key.get_name()} {offered}, not among the keys on its "
                    f"console: {expected}"
                )
            self.accepted = "console"
        else:
            self.accepted = "pinned"
        self.known.pin(self.machine, key)


# --- the reverse tunnel ------------------------------------------------------------------


class _Pipes:
    """Connections carried by one tunnel: each forwarded channel piped to a local socket.

    Every connection the agent opens to its --url arrives as a channel; it gets its own
    socket to the dispatcher and two threads, one per direction, so long polls on
    several keep-alive connections proceed at once. An end of stream on one side is
    passed on as a half-close; an error on either side closes both.
    """

    def __init__(self, local_port: int, log: Callable[..., None], machine: str) -> None:
        self.local_port = local_port
        self.log = log
        self.machine = machine
        self._lock = threading.Lock()
        self._open: set[_Pair] = set()
        self._closed = False

    def handler(
        self, channel: paramiko.Channel, origin: tuple[str, int], server: tuple[str, int]
    ) -> None:
        """paramiko's forward handler: runs on the transport thread, so it must not block."""
        threading.Thread(
            target=self._connect, args=(channel,), name=f"tunnel-{self.machine}", daemon=True
        ).start()

    def _connect(self, channel: paramiko.Channel) -> None:
        try:
            sock = socket.create_connection(("127.0.0.1", self.local_port), timeout=10)
        except OSError as exc:
            self.log("tunnel: dispatcher unreachable", machine=self.machine, error=str(exc))
            channel.close()
            return
        sock.settimeout(None)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        pair = _Pair(channel, sock, self._forget)
        with self._lock:
            if self._closed:
                pair.close()
                return
            self._open.add(pair)
        threading.Thread(
            target=pair.copy,
            args=(channel.recv, sock.sendall, lambda: sock.shutdown(socket.SHUT_WR)),
            daemon=True,
        ).start()
        pair.copy(sock.recv, channel.sendall, channel.shutdown_write)

    def _forget(self, pair: _Pair) -> None:
        with self._lock:
            self._open.discard(pair)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            pairs = list(self._open)
        for pair in pairs:
            pair.close()


class _Pair:
    """One forwarded connection: a channel, a socket, and the two copying directions."""

    def __init__(
        self, channel: paramiko.Channel, sock: socket.socket, forget: Callable[[_Pair], None]
    ) -> None:
        self.channel = channel
        self.sock = sock
        self._forget = forget
        self._lock = threading.Lock()
        self._running = 2

    def copy(
        self,
        read: Callable[[int], bytes],
        write: Callable[[bytes], Any],
        eof: Callable[[], None],
    ) -> None:
        """Copy one direction until its end of stream, then pass the half-close on."""
        try:
            while data := read(PIPE_CHUNK):
                write(data)
            eof()
        except (OSError, EOFError):
            self.close()  # unblocks the other direction too
        with self._lock:
            self._running -= 1
            last = self._running == 0
        if last:
            self.close()

    def close(self) -> None:
        self.channel.close()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._forget(self)


# --- bootstrap ---------------------------------------------------------------------------


@dataclass
class _Session:
    conn: Any  # fabric.Connection (untyped)
    port: int
    pipes: _Pipes
    directory: str

    def alive(self) -> bool:
        transport = self.conn.transport
        return transport is not None and bool(transport.is_active())


def _nolog(event: str, **fields: Any) -> None:
    pass


class SshBootstrap:
    """Start and keep agents on machines over SSH; one connection and tunnel per machine.

    ``local_port`` is the dispatcher's port on our loopback; ``token`` the run token the
    agents present; ``agent_args`` extra agent flags (``["--heartbeat-s", "2", ...]``);
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
        self._known = _KnownHosts(settings.known_hosts)

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
        delay = BACKOFF_FIRST_S
        while True:
            left = deadline - time.monotonic()
            try:
                with socket.create_connection((host, port), timeout=max(0.1, min(left, 5.0))) as s:
                    banner = s.recv(256)
                if banner.startswith(b"SSH-"):
                    self._log("ssh up", machine=machine, address=address)
                    return
                reason = f"no SSH banner (got {banner[:40]!r})"
            except OSError as exc:
                reason = str(exc) or type(exc).__name__
            left = deadline - time.monotonic()
            if left <= 0:
                raise BootstrapError(
                    f"machine {machine}: sshd at {host}:{port} (address {address}) did not "
                    f"answer within {timeout_s:g}s: {reason}",
                    retryable=True,
                )
            time.sleep(min(delay, left))
            delay = min(delay * 2, BACKOFF_MAX_S)

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
        with contextlib.suppress(Exception):
            session.conn.close()
        self._log("ssh closed", machine=machine)

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
        assert self.console is not None
        deadline = time.monotonic() + self.settings.console_wait_s
        delay = BACKOFF_FIRST_S
        reason = "no host keys in its console output yet"
        while True:
            try:
                keys = parse_console_host_keys(self.console(machine))
            except AutoscalerError as exc:
                keys, reason = [], f"console output unavailable: {exc.message}"
            if keys:
                return keys
            left = deadline - time.monotonic()
            if left <= 0:
                raise BootstrapError(
                    f"machine {machine}: cannot verify its host key: {reason} "
                    f"after {self.settings.console_wait_s:g}s",
                    retryable=True,
                )
            time.sleep(min(delay, left))
            delay = min(delay * 2, BACKOFF_MAX_S)

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
        check = _HostKeyCheck(self._known, machine, address, console_keys)
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
        pipes = _Pipes(self.local_port, self._log, machine)
        try:
            directory = self._prepare(conn, machine)
            port = self._tunnel(conn, machine, directory, pipes)
            self._start_agent(conn, machine, directory, port)
        except BaseException:
            pipes.close()
            with contextlib.suppress(Exception):
                conn.close()
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
            source = AGENT_SOURCE.read_bytes()
            if _read_remote(sftp, f"{directory}/agent.py") != source:
                _write_remote(sftp, f"{directory}/agent.py", source, 0o644)
                self._log("agent copied", machine=machine, path=f"{directory}/agent.py")
            token = (self._token + "\n").encode()
            if _read_remote(sftp, f"{directory}/token") != token:
                _write_remote(sftp, f"{directory}/token", token, 0o600)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise BootstrapError(
                f"machine {machine}: cannot copy files to {directory}: {exc}", retryable=True
            ) from None
        return directory

    def _tunnel(self, conn: Any, machine: str, directory: str, pipes: _Pipes) -> int:
        """Open the reverse tunnel on the stored port (or a new one); return the port."""
        sftp = conn.sftp()
        stored_text = _read_remote(sftp, f"{directory}/port")
        stored = int(stored_text) if stored_text and stored_text.strip().isdigit() else None
        transport = conn.transport
        if stored is not None:
            # A running agent's --url names the stored port: only that one will do. After
            # a restart the old connection's listener may linger in sshd for a moment,
            # so retry it for a while. With no agent depending on it, any port will do.
            agent = self._agent_pid(conn, machine, directory) is not None
            deadline = time.monotonic() + (self.settings.connect_timeout_s if agent else 0)
            delay = BACKOFF_FIRST_S
            while True:
                try:
                    port: int = transport.request_port_forward("127.0.0.1", stored, pipes.handler)
                    self._log("tunnel reopened", machine=machine, port=port)
                    return port
                except paramiko.SSHException as exc:
                    if time.monotonic() + delay > deadline:
                        if agent:
                            raise BootstrapError(
                                f"machine {machine}: its agent uses tunnel port {stored}, "
                                f"which sshd does not grant: {exc}",
                                retryable=True,
                            ) from None
                        break
                time.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX_S)
        try:
            port = transport.request_port_forward("127.0.0.1", 0, pipes.handler)
        except paramiko.SSHException as exc:
            raise BootstrapError(
                f"machine {machine}: sshd refused the reverse tunnel (AllowTcpForwarding?): {exc}"
            ) from None
        try:
            _write_remote(sftp, f"{directory}/port", f"{port}\n".encode(), 0o600)
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
        agent = [
            self.settings.python,
            f"{directory}/agent.py",
            "--url",
            f"http://127.0.0.1:{port}",
            "--machine",
            machine,
            "--token-file",
            f"{directory}/token",
            "--workdir",
            f"{directory}/work",
            *self.agent_args,
        ]
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


def _read_remote(sftp: paramiko.SFTPClient, path: str) -> bytes | None:
    """A small remote file's content, or None if it does not exist."""
    try:
        with sftp.open(path, "rb") as f:
            data: bytes = f.read()
            return data
    except FileNotFoundError:
        return None
    except OSError as exc:
        if getattr(exc, "errno", None) == 2:
            return None
        raise


def _write_remote(sftp: paramiko.SFTPClient, path: str, data: bytes, mode: int) -> None:
    """Write a remote file atomically: a temporary file with its mode set first, renamed."""
    tmp = f"{path}.tmp"
    with sftp.open(tmp, "wb") as f:
        f.chmod(mode)  # before any byte is written: the token is never readable by others
        f.write(data)
    sftp.posix_rename(tmp, path)
