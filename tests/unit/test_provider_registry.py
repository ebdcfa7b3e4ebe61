"""The provider registry: one table from a config's ``provider`` to its kind, and the
daemon's and cleanup's use of it (they name no kind themselves)."""

from __future__ import annotations

import os
import subprocess
import sys
import typing
from pathlib import Path

import pytest

from autoscaler.config.load import load_config
from autoscaler.config.schema import RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.providers import registry
from autoscaler.providers.base import Provider
from autoscaler.providers.ec2 import Ec2Provider
from autoscaler.providers.local import MACHINE_TAG, RUN_TAG, LocalProvider
from autoscaler.providers.sge import SgeProvider, SgeType
from autoscaler.run.cleanup import find_strays, terminate_strays
from autoscaler.run.wiring import make_bootstrap, make_provider

EXAMPLES = Path(__file__).parents[2] / "config" / "examples"
BILLING = BillingModel("fixed", 60.0)


def config(name: str, **changes: object) -> RunConfig:
    return load_config(EXAMPLES / f"{name}.yaml").model_copy(update=changes)


def build(cfg: RunConfig, tmp_path: Path) -> Provider:
    return make_provider(
        cfg,
        billing=BILLING,
        run_id="r-1",
        run_dir=tmp_path,
        token="t0ken",
        url="http://127.0.0.1:9",
        workdir=tmp_path / "work",
        clock=lambda: 0.0,
    )


# --- the table -------------------------------------------------------------------------------


def test_the_table_has_the_kinds_a_config_may_name() -> None:
    annotation = RunConfig.model_fields["provider"].annotation
    assert set(registry.kinds()) == set(typing.get_args(annotation))


def test_each_kind_carries_the_name_it_is_filed_under() -> None:
    assert [registry.kind(name).name for name in registry.kinds()] == list(registry.kinds())


def test_an_unknown_kind_is_a_config_error_naming_it_and_the_known_ones() -> None:
    with pytest.raises(ConfigError) as info:
        registry.kind("slurmm")
    assert "'slurmm'" in info.value.message
    for name in registry.kinds():
        assert name in info.value.message


def test_only_the_emulator_is_emulated() -> None:
    assert registry.is_emulated("sim")
    assert set(registry.real_kinds()) == set(registry.kinds()) - {"sim"}
    assert registry.kind("sim").sweeper is None


def test_every_real_kind_can_be_built_and_swept() -> None:
    for name in registry.real_kinds():
        assert registry.kind(name).build is not None
        assert registry.kind(name).sweeper is not None


def test_capabilities_come_from_the_machine_types_and_the_kind() -> None:
    cfg = config("ec2")
    caps = registry.kind("ec2").capabilities(cfg, BILLING)
    assert caps.spot
    assert caps.max_counts == {"small": 20, "fast": 10}
    assert caps.boot_estimate_s == {"small": 120.0, "fast": 120.0}
    assert not registry.kind("local").capabilities(cfg, BILLING).spot


# --- building a run's provider ---------------------------------------------------------------


def test_a_local_run_gets_agent_processes_with_the_runs_settings(tmp_path: Path) -> None:
    provider = build(config("local"), tmp_path)
    assert isinstance(provider, LocalProvider)
    assert provider.settings.python == sys.executable
    assert provider.settings.workdir == tmp_path / "work"
    assert provider.settings.token == "t0ken"
    assert provider.log_dir == tmp_path / "agents"


def test_a_grid_engine_run_maps_its_types_onto_queues(tmp_path: Path) -> None:
    provider = build(config("sge"), tmp_path)
    assert isinstance(provider, SgeProvider)
    assert provider.types == {"small": SgeType("as_small.q"), "large": SgeType("as_large.q")}
    assert provider.token_file == tmp_path / "token"


def test_an_ec2_run_gets_its_sections_settings(tmp_path: Path) -> None:
    provider = build(config("ec2"), tmp_path)
    assert isinstance(provider, Ec2Provider)
    assert provider.capabilities.spot
    assert provider.settings.subnets == ("subnet-aaaa", "subnet-bbbb")
    assert provider.settings.instances["fast"].spot
    assert provider.settings.user_data is None  # agents start over SSH


def test_an_emulated_kind_cannot_run_for_real(tmp_path: Path) -> None:
    with pytest.raises(AutoscalerError, match="cannot run for real") as info:
        build(config("quickstart"), tmp_path)
    for name in registry.real_kinds():
        assert name in info.value.message


def test_only_ec2_with_ssh_has_a_bootstrapper(tmp_path: Path) -> None:
    local = config("local")
    assert make_bootstrap(local, tmp_path, "t0ken", 9, build(local, tmp_path)) is None
    ec2 = config("ec2")
    with pytest.raises(AutoscalerError, match="key_file: no such file"):
        make_bootstrap(ec2, tmp_path, "t0ken", 9, build(ec2, tmp_path))


# --- cleanup through the registry ------------------------------------------------------------


def test_cleanup_of_an_emulated_kind_says_there_is_nothing_to_clean(tmp_path: Path) -> None:
    with pytest.raises(AutoscalerError, match="starts no machines"):
        find_strays(config("quickstart"), [], tmp_path)


def test_cleanup_finds_and_ends_a_local_agent_no_run_owns(tmp_path: Path) -> None:
    run_id = f"r-stray-{os.getpid()}"
    env = {**os.environ, RUN_TAG: run_id, MACHINE_TAG: "small-t1-0"}
    proc = subprocess.Popen(["sleep", "60"], env=env)
    try:
        survey = find_strays(config("local"), [], tmp_path)
        ours = [m for m in survey.machines if m.run_id == run_id]
        assert [(m.id, m.type, m.owner) for m in ours] == [(str(proc.pid), "small", None)]
        assert terminate_strays(config("local"), ours) == [str(proc.pid)]
        assert proc.wait(timeout=10) != 0
    finally:
        proc.kill()
        proc.wait()
