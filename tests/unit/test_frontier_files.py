"""``report.frontier_files``: a plan's plan.json, written and read back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.core.errors import AutoscalerError
from autoscaler.report.frontier_files import (
    PLAN_JSON,
    frontier_json,
    option_budget,
    sampled_run,
    write_plan,
)
from autoscaler.run.start import plan_dry

EXAMPLES = Path(__file__).parents[2] / "config" / "examples"


def test_a_written_plan_gives_each_options_budget_and_its_samples_run(tmp_path: Path) -> None:
    cfg = load_config(EXAMPLES / "quickstart.yaml")
    frontier = plan_dry(cfg, expand_bag(cfg))
    data = frontier_json(frontier, tmp_path / "run")
    write_plan(frontier, data, tmp_path / "plan")
    assert (tmp_path / "plan" / "frontier.png").is_file()
    assert [o["option"] for o in data["options"]] == list(range(1, len(frontier.options) + 1))
    for i, o in enumerate(frontier.options, 1):
        assert option_budget(tmp_path / "plan", i) == o.budget
    assert sampled_run(tmp_path / "plan") == (tmp_path / "run").resolve()
    assert "run_dir" not in frontier_json(frontier)


def test_a_bad_option_or_plan_is_named(tmp_path: Path) -> None:
    (tmp_path / PLAN_JSON).write_text(json.dumps({"options": [{"budget": 5}]}))
    assert option_budget(tmp_path, 1) == 5.0
    assert sampled_run(tmp_path) is None
    with pytest.raises(AutoscalerError, match="--option 2: the plan has options 1 to 1"):
        option_budget(tmp_path, 2)
    with pytest.raises(AutoscalerError, match=f"cannot read the plan's options from .*{PLAN_JSON}"):
        option_budget(tmp_path / "none", 1)
    assert sampled_run(tmp_path / "none") is None
