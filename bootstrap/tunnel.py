"""The far end of a reverse tunnel: each connection forwarded to us piped to a local port.

sshd on a machine listens on its loopback for us (a remote port forward) and hands every
connection made there to us as a channel; :class:`TunnelPipes` connects each one to the
dispatcher on our loopback and copies bytes both ways.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable
from typing import Any

import paramiko

PIPE_CHUNK = 65536


class TunnelPipes:
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
        # The SSH transport may be gone already (the tunnel closing under this copy):
        # closing the channel then has nothing to tell the server.
        with contextlib.suppress(OSError, EOFError):
            self.channel.close()
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self._forget(self)
