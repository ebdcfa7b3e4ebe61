"""The test harness itself: private-range addresses are never connected to."""

from __future__ import annotations

import socket

import pytest

from tests.conftest import PrivateAddressConnect


@pytest.mark.parametrize("address", ["10.0.3.17", "172.20.1.5", "192.168.1.1"])
def test_a_connect_to_a_private_address_is_refused_before_it_leaves(address: str) -> None:
    with pytest.raises(PrivateAddressConnect, match=address):
        socket.create_connection((address, 22), timeout=0.5)


def test_loopback_still_connects() -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    try:
        with socket.create_connection(server.getsockname(), timeout=2):
            pass
    finally:
        server.close()
