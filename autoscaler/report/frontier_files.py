"""A plan's files: ``plan.json`` (the budget frontier's options, numbered as ``run
--option N`` takes them, and for a real plan the run directory its samples are in) and
``frontier.png``; and what ``run --plan DIR`` reads back from them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from autoscaler.budget.frontier import Frontier
from autoscaler.core.atomic import write_atomic
from autoscaler.core.errors import AutoscalerError
from autoscaler.report.plots import frontier_plot

PLAN_JSON = "plan.json"
"""What `autoscaler plan --out DIR` writes: the options `run --option N` reads."""


def frontier_json(frontier: Frontier, run_dir: Path | None = None) -> dict[str, Any]:
    """The frontier as plain data, each option numbered as `run --option` takes it;
    ``run_dir``: the run whose samples it comes from (a real plan)."""
    data = dataclasses.asdict(frontier)
    for i, o in enumerate(data["options"], 1):
        o["option"] = i
    if run_dir is not None:
        data["run_dir"] = str(run_dir.resolve())
    return data


def write_plan(frontier: Frontier, data: dict[str, Any], out: Path) -> None:
    """``frontier.png`` and then ``plan.json`` (``data``) in ``out``: the JSON last and
    whole, as `run --plan` may be waiting for it (a real plan's hand-over)."""
    out.mkdir(parents=True, exist_ok=True)
    frontier_plot(frontier, out / "frontier.png")
    write_atomic(out / PLAN_JSON, json.dumps(data, indent=2) + "\n")


def option_budget(plan_dir: Path, option: int) -> float:
    """The budget of option ``option`` (from 1) of the plan in ``plan_dir``."""
    path = plan_dir / PLAN_JSON
    try:
        options = json.loads(path.read_text(encoding="utf-8"))["options"]
    except (OSError, ValueError, KeyError) as exc:
        raise AutoscalerError(f"cannot read the plan's options from {path}: {exc}") from None
    if not 1 <= option <= len(options):
        raise AutoscalerError(f"--option {option}: the plan has options 1 to {len(options)}")
    return float(options[option - 1]["budget"])


def sampled_run(plan_dir: Path) -> Path | None:
    """The run directory whose samples a plan was made from, if it sampled for real
    (None too for a plan that cannot be read: ``option_budget`` says what is wrong)."""
    try:
        data = json.loads((plan_dir / PLAN_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    run_dir = data.get("run_dir") if isinstance(data, dict) else None
    return Path(run_dir) if run_dir else None
