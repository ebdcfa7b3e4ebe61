"""What `autoscaler plan` offers, the same planner does not warn about (issue 34 §6):
the minimum budget is its cheapest option's budget, both to the cent, no option below
it; `run --plan DIR --option 1` says no "budget at risk" of the plan's own minimum; and
the example configs, which finish within their budgets, are warned of nothing. Through
the command line, in a process of its own, as a user runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.unit.test_cli_process import EXAMPLES, autoscaler

WARNINGS = ("budget at risk", "budget unlikely")


def _cents(value: float) -> bool:
    return round(value, 2) == value


@pytest.mark.parametrize("example", ["quickstart", "bats_s1_1", "commands"])
def test_the_minimum_budget_is_the_cheapest_options_to_the_cent(example: str) -> None:
    """quickstart's `minimum_budget` was 74.00011323387814 and its option 1's budget 74.0,
    below the minimum; commands' 0.1627 and 0.16."""
    done = autoscaler("plan", str(EXAMPLES / f"{example}.yaml"), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    minimum, options = data["minimum_budget"], data["options"]
    assert _cents(minimum), minimum
    assert options[0]["label"] == "minimum"
    assert options[0]["budget"] == minimum
    for o in options:
        assert _cents(o["budget"]), o
        assert o["budget"] >= minimum
        assert o["cost_interval"][1] <= o["budget"]


def test_running_the_plans_minimum_says_no_risk(tmp_path: Path) -> None:
    """`run --plan DIR --option 1`: the plan's minimum finishes the bag, and the run is
    not said to be at risk (it said that sampling alone commits 40.00 of the budget of
    74.00 before any runtime is known)."""
    plan_dir = tmp_path / "plan"
    done = autoscaler("plan", str(EXAMPLES / "quickstart.yaml"), "--out", str(plan_dir))
    assert done.returncode == 0, done.stderr
    minimum = json.loads((plan_dir / "plan.json").read_text(encoding="utf-8"))["minimum_budget"]
    out = tmp_path / "run"
    done = autoscaler(
        "run",
        str(EXAMPLES / "quickstart.yaml"),
        "--dry-run",
        "--plan",
        str(plan_dir),
        "--option",
        "1",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    printed = " ".join((done.stdout + done.stderr).split())
    assert not [w for w in WARNINGS if w in printed], printed
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["budget"] == minimum
    assert report["risk"] is None
    assert report["shortfall"] is None
    assert report["tasks_done"] == report["tasks_total"]


REAL_PROVIDERS = ("local", "sge", "slurm")
"""Examples on these run for real in the integration tests (local agents, the clusters'
guides); the others are dry-run from the repository root there, and
``tests/integration/test_examples.py`` checks those dry runs are warned of nothing."""


def _budget_examples() -> list[str]:
    """Every example run config with a budget on a provider of ``REAL_PROVIDERS`` (job
    files, which have no machine types, run in the service's dry run below)."""
    out = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        budget = "budget" in (data.get("constraint") or {})
        if "machine_types" in data and budget and data.get("provider") in REAL_PROVIDERS:
            out.append(path.stem)
    return out


BUDGET_EXAMPLES = _budget_examples()


def test_the_budget_examples_are_found() -> None:
    assert {"local", "files", "sge", "slurm"} <= set(BUDGET_EXAMPLES)


@pytest.mark.parametrize("example", BUDGET_EXAMPLES)
def test_an_example_that_finishes_within_its_budget_is_warned_of_nothing(
    example: str, tmp_path: Path
) -> None:
    """Their dry runs: local was said at risk at the start (sampling commits 32.00 of
    60.00) and finished at 60.00 (bats_s1_1's and bats_s4_3's, in test_examples)."""
    done = autoscaler("run", str(EXAMPLES / f"{example}.yaml"), "--dry-run", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert report["tasks_done"] == report["tasks_total"]
    assert report["within_budget"]
    printed = " ".join(done.stdout.split())
    assert not [w for w in WARNINGS if w in printed], printed
    assert report["risk"] is None
    assert report["shortfall"] is None


def test_the_service_example_s_jobs_are_warned_of_nothing(tmp_path: Path) -> None:
    """The service example's dry run with its two job files (docs/service.md), each
    job done within its budget or by its deadline, and no warning said."""
    done = autoscaler(
        "run",
        str(EXAMPLES / "service.yaml"),
        "--dry-run",
        "--job",
        str(EXAMPLES / "job.yaml"),
        "--job",
        str(EXAMPLES / "job_deadline.yaml"),
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stdout + done.stderr
    printed = " ".join((done.stdout + done.stderr).split())
    assert not [w for w in WARNINGS if w in printed], printed
    budget_job = json.loads(next(tmp_path.glob("*-*/report.json")).read_text(encoding="utf-8"))
    assert budget_job["tasks_done"] == budget_job["tasks_total"]
    assert budget_job["risk"] is None
    assert budget_job["shortfall"] is None
