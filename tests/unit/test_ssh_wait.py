"""Waiting for a machine's sshd: tried with backoff until it answers with an SSH banner,
or a clear error naming the last failure once the time is up (loopback sockets only)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from autoscaler.bootstrap.agent_start import BootstrapError
from autoscaler.bootstrap.ssh import SshBootstrap, SshSettings


def bootstrap(tmp_path: Path, port: int) -> SshBootstrap:
    settings = SshSettings(
        user="u",
        key_file=tmp_path / "key",  # never read while waiting
        known_hosts=tmp_path / "known_hosts",
        connect=f"127.0.0.1:{port}",
    )
    return SshBootstrap(settings, local_port=9, token="t0ken")


@pytest.fixture
def server() -> Iterator[tuple[int, list[bytes]]]:
    """A loopback server that greets each connection with the next of its banners."""
    listener = socket.create_server(("127.0.0.1", 0))
    banners: list[bytes] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(banners.pop(0) if banners else b"SSH-2.0-OpenSSH_9.6\r\n")

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1], banners
    listener.close()


def closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return int(s.getsockname()[1])


def test_an_answering_sshd_ends_the_wait(tmp_path: Path, server: tuple[int, list[bytes]]) -> None:
    port, _ = server
    bootstrap(tmp_path, port).wait_ssh("i-1", "10.0.0.1", timeout_s=10)


def test_a_wrong_banner_is_tried_again_until_sshd_answers(
    tmp_path: Path, server: tuple[int, list[bytes]]
) -> None:
    port, banners = server
    banners += [b"HTTP/1.1 400\r\n", b"HTTP/1.1 400\r\n"]
    bootstrap(tmp_path, port).wait_ssh("i-1", "10.0.0.1", timeout_s=30)
    assert banners == []


def test_a_closed_port_times_out_naming_the_last_failure(tmp_path: Path) -> None:
    with pytest.raises(BootstrapError) as info:
        bootstrap(tmp_path, closed_port()).wait_ssh("i-1", "10.0.0.1", timeout_s=0.5)
    assert info.value.retryable
    assert "did not answer within 0.5s" in info.value.message
    assert "refused" in info.value.message.lower()
