"""The deadline plan's forecast of each provider part against what it spent, in dry runs
of issue 37's hybrid scenario (``benchmarks.cheapest_split``: a free campus cluster,
EC2 on-demand and spot, hourly units). DPLB gives the on-demand part what EC2 offers on
all its machines; the plan packs it into machines that fill their hour, about half of
which then run into a second one. The forecast once costed each machine at its planned
end (1.87 forecast, 3.06 spent); it is now the mean over the spread of that end."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.run.start import dry_run
from benchmarks.cheapest_split import scenario


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_on_demand_parts_forecast_is_its_mean_cost(tmp_path: Path, seed: int) -> None:
    path = tmp_path / "hybrid.yaml"
    path.write_text(scenario("dplb", "2h", seed, 600), encoding="utf-8")
    cfg = load_config(path)
    done = dry_run(cfg, expand_bag(cfg), plots=False)
    part = next(j for j in done.report.jobs if j.name == "sweep@aws")
    assert part.met_deadline
    assert part.predicted_cost is not None
    assert part.predicted_cost == pytest.approx(part.cost, rel=0.2)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_each_cheapest_part_s_last_forecast_is_within_a_tenth_of_its_spend(
    tmp_path: Path, seed: int
) -> None:
    """The cheapest split at 1 h 30: the campus part's late tasks move onto the spot
    part's machines after the spot part has ended, and take a share of the hours it was
    forecast to bear; the spot part is forecast again then (it was not, and missed by
    14 % on seed 1). Each part that spent 0.10 or more was forecast within 10 %."""
    path = tmp_path / "cheapest.yaml"
    path.write_text(scenario("cheapest", "1.5h", seed, 600), encoding="utf-8")
    cfg = load_config(path)
    done = dry_run(cfg, expand_bag(cfg), plots=False)
    parts = [j for j in done.report.jobs if j.cost >= 0.10]
    assert len(parts) >= 2
    for part in parts:
        assert part.met_deadline, part.name
        assert part.predicted_cost is not None
        assert part.predicted_cost == pytest.approx(part.cost, rel=0.10), part.name
