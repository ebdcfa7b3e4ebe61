"""Shared helpers for building configs in tests; every test's own run registry."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoscaler.config.schema import RunConfig
from autoscaler.registry import STATE_DIR_ENV

# The integration tests' services as fixtures (moto, sshd, Grid Engine): registered here,
# the top-level conftest, so test modules use them by name without importing them.
pytest_plugins = ("tests.integration.services", "tests.integration.sge", "tests.integration.sshd")


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
