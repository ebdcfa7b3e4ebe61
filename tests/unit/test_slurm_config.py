"""``provider: slurm`` from a config: the section's checks, and the provider a run builds."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from autoscaler.cli.main import EXIT_CONFIG, app
from autoscaler.config.load import load_config
from autoscaler.core.errors import ConfigError
from autoscaler.providers import registry
from autoscaler.providers.slurm import SlurmProvider, SlurmType
from tests.unit.test_provider_registry import EXAMPLES, build, config


def write(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def example() -> dict[str, object]:
    data: dict[str, object] = yaml.safe_load((EXAMPLES / "slurm.yaml").read_text())
    return data


def test_a_slurm_run_maps_its_types_onto_partitions(tmp_path: Path) -> None:
    provider = build(config("slurm"), tmp_path)
    assert isinstance(provider, SlurmProvider)
    assert provider.types == {
        "small": SlurmType("as_small", cpus=1),
        "large": SlurmType("as_large", cpus=2, mem="1G"),
    }
    assert provider.token_file == tmp_path / "token"
    assert provider.time_limit_min == 1  # the registry test's one-minute ATU
    assert registry.kind("slurm").bootstrapper is None  # jobs start their own agents


def test_a_misspelt_slurm_type_is_named(tmp_path: Path) -> None:
    data = example()
    types = data["slurm"]["types"]  # type: ignore[index]
    types["lage"] = types.pop("large")
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, data))
    assert "slurm.types names unknown machine type 'lage'" in str(info.value)


def test_a_slurm_run_needs_its_section_and_sane_cpus(tmp_path: Path) -> None:
    data = example()
    section = data.pop("slurm")
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, data))
    assert "provider is slurm: give the slurm section" in str(info.value)
    section["types"]["small"]["cpus"] = 0  # type: ignore[index]
    data["slurm"] = section
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, data))
    assert "cpus" in str(info.value)


def test_plan_on_slurm_asks_first_and_submits_nothing_unconfirmed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a terminal and without --yes, `plan` on the Slurm example says what
    sampling would rent and stops before any run directory (or job) exists."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["plan", str(EXAMPLES / "slurm.yaml")])
    assert result.exit_code == EXIT_CONFIG, result.output
    assert "Sampling rents" in result.output
    assert not (tmp_path / "runs").exists()
