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


def test_no_slurm_machine_is_kept_past_its_job_time_limit(tmp_path: Path) -> None:
    """A Slurm job lives one paid unit (its --time): the controller never pays a Slurm
    machine a second unit, it launches another; the same run on Grid Engine keeps its
    machines for several units."""
    from autoscaler.config.bag import expand_bag
    from autoscaler.run.start import dry_run

    def lives(provider: str) -> list[float]:
        data = example()
        data["bag"] = {"synthetic": 400}
        data["constraint"] = {"budget": 60}
        if provider == "sge":
            data["provider"] = "sge"
            data["sge"] = {"types": {"small": {"queue": "a"}, "large": {"queue": "b"}}}
            del data["slurm"]
        cfg = load_config(write(tmp_path, data))
        report = dry_run(cfg, expand_bag(cfg)).report
        assert report.tasks_done == 400
        return [m.end_s - m.start_s for m in report.machines]

    atu = 120.0
    assert max(lives("slurm")) <= atu + 1e-6
    assert max(lives("sge")) > atu


def test_a_deadline_run_on_slurm_plans_within_the_job_time_limit(tmp_path: Path) -> None:
    """Deadline mode on Slurm machines that live one unit: at each machine's end its
    queue is planned again onto new jobs, and the job meets its deadline with no machine
    kept past its limit."""
    from autoscaler.config.bag import expand_bag
    from autoscaler.run.start import dry_run

    data = example()
    del data["bag"], data["constraint"]
    data["jobs"] = [
        {
            "name": "j",
            "bag": {"synthetic": 300},
            "constraint": {"deadline_s": "12m"},
            "task_s": {"small": 10, "large": 5},
        }
    ]
    cfg = load_config(write(tmp_path, data))
    report = dry_run(cfg, expand_bag(cfg)).report
    assert report.tasks_done == 300
    assert max(m.end_s - m.start_s for m in report.machines) <= 120 + 1e-6
    assert report.jobs[0].met_deadline
