"""Shared helpers for building configs in tests; every test's own run registry."""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.schema import RunConfig
from autoscaler.run.live_runs import STATE_DIR_ENV

# The integration tests' services as fixtures (moto, sshd, Grid Engine, the EC2 world, a
# browser): registered here, the top-level conftest, so test modules use them by name
# without importing them.
pytest_plugins = (
    "tests.integration.services",
    "tests.integration.sge",
    "tests.integration.slurm",
    "tests.integration.sshd",
    "tests.integration.browser",
    "tests.integration.ec2_world",
)


PRIVATE_NETWORKS = tuple(
    ipaddress.ip_network(n) for n in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16")
)
"""Where cloud emulators put machines: tests may name such addresses, never reach them."""


class PrivateAddressConnect(AssertionError):
    """A test tried to connect to a private-range address instead of loopback."""


def refuse_private(address: Any) -> None:
    """Raise if ``address`` (a socket address tuple) is in a private range."""
    if not isinstance(address, tuple) or not address:
        return
    try:
        ip = ipaddress.ip_address(str(address[0]).strip("[]"))
    except ValueError:
        return  # a host name: tests use loopback names only, resolved by the resolver
    if any(ip in net for net in PRIVATE_NETWORKS):
        raise PrivateAddressConnect(
            f"connection to {address[0]} refused by the test harness: map it to 127.0.0.1"
        )


@pytest.fixture(autouse=True, scope="session")
def _no_private_connects() -> Iterator[None]:
    """Every socket connect in the test process goes through ``refuse_private`` first, so
    a provider's private address can be data in a test but never a destination."""
    connect, connect_ex = socket.socket.connect, socket.socket.connect_ex

    def guarded_connect(self: socket.socket, address: Any) -> None:
        refuse_private(address)
        connect(self, address)

    def guarded_connect_ex(self: socket.socket, address: Any) -> int:
        refuse_private(address)
        return connect_ex(self, address)

    socket.socket.connect = guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = guarded_connect_ex  # type: ignore[method-assign]
    try:
        yield
    finally:
        socket.socket.connect = connect  # type: ignore[method-assign]
        socket.socket.connect_ex = connect_ex  # type: ignore[method-assign]


def make_config(**overrides: Any) -> RunConfig:
    """A small valid config: two types, a synthetic bag, a budget; override any field."""
    data: dict[str, Any] = {
        "name": "test",
        "bag": {"synthetic": 100},
        "constraint": {"budget": 100.0},
        "machine_types": [
            {"name": "slow", "price": 1.0, "max_count": 10, "boot_s": 60},
            {"name": "fast", "price": 4.0, "max_count": 10, "boot_s": 60},
        ],
        "billing": {"mode": "fixed", "atu_s": 3600},
        "emulator": {
            "seed": 1,
            "runtime": {"dist": "normal", "mean_s": 600, "sd_s": 60},
            "speed": {"slow": 1.0, "fast": 3.0},
        },
        "monitoring_interval_s": 300,
    }
    data.update(overrides)
    return RunConfig.model_validate(data)


@pytest.fixture
def config_factory() -> Any:
    return make_config


@pytest.fixture(autouse=True)
def autoscaler_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """A fresh state directory per test (daemons register there): never the real home."""
    path = tmp_path_factory.mktemp("state")
    monkeypatch.setenv(STATE_DIR_ENV, str(path))
    return path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``long`` (a minute or more of a real run; ``long(m)``: about m minutes)
    are collected first, longest first, so that the parallel workers start on them and the
    run ends on short ones. The start is the most loaded time: a test whose outcome
    depends on timing (a deadline, a prediction, a machine's paid time) is not marked."""

    def minutes(item: pytest.Item) -> float:
        mark = item.get_closest_marker("long")
        return 0.0 if mark is None else float(mark.args[0] if mark.args else 1)

    items.sort(key=lambda item: -minutes(item))


def is_run_config(path: Path) -> bool:
    """Whether the example ``path`` is a run config: machine types and work, not a
    service config (a ``service:`` section) nor a job file (no machine types)."""
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return isinstance(data, dict) and "machine_types" in data and "service" not in data
