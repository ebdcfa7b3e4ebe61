"""The cheapest split as a user asks for it: ``deadline.offers: cheapest`` on
config/examples/hybrid.yaml (a free campus cluster and EC2), dry-run by the command line
in a process of its own, against the paper's DPLB on the same config."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.cli.main import EXIT_STOPPED
from benchmarks.cheapest_split import scenario
from tests.integration.daemon_helpers import run_cli
from tests.integration.test_rehearse_cli import dry_run, example, split_of

pytestmark = pytest.mark.integration


def hybrid(policy: str, **emulator: Any) -> dict[str, Any]:
    data = example("hybrid", **emulator)
    data["deadline"] = {**data.get("deadline", {}), "offers": policy}
    return data


def test_the_cheapest_split_meets_the_deadline_for_less_than_dplb(tmp_path: Path) -> None:
    """hybrid.yaml as given (the campus cluster idle): every task done, the deadline
    met, the free cluster given at least DPLB's share, the run no dearer than DPLB's;
    the start says each part's expected cost and the report has a row per part with
    its forecast."""
    runs = {}
    for policy in ("cheapest", "dplb"):
        (tmp_path / policy).mkdir()
        runs[policy] = dry_run(tmp_path / policy, hybrid(policy))
    run_dir, report, out = runs["cheapest"]
    assert report["tasks_done"] == 600
    assert all(j["met_deadline"] for j in report["jobs"])
    split = split_of(run_dir)
    assert split.get("campus", 0) >= split_of(runs["dplb"][0]).get("campus", 0)
    assert report["cost"] <= runs["dplb"][1]["cost"] + 1e-9
    said = next(line for line in out.splitlines() if "Cheapest splits it" in line)
    for provider, tasks in split.items():
        assert f"{provider} {tasks} tasks by" in said
    assert "expected" in said
    parts = {j["name"]: j for j in report["jobs"]}
    assert set(parts) == {f"sweep@{p}" for p in split}
    assert all(j["predicted_cost"] is not None for j in parts.values())


def test_an_unknown_policy_is_named_with_the_choices(tmp_path: Path) -> None:
    config = tmp_path / "hybrid.yaml"
    config.write_text(yaml.safe_dump(hybrid("cheapskate")), encoding="utf-8")
    done = run_cli("validate", str(config))
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert "deadline.offers" in text
    assert "cheapskate" in text
    assert "'cheapest'" in text
    assert "Traceback" not in text


def test_a_part_whose_spot_is_refused_is_run_on_demand_in_time(tmp_path: Path) -> None:
    """benchmarks/cheapest_split's scenario (campus, on-demand c5, spot c5_spot; 600 tasks
    by 2 h) with c5_spot refused for 3 h: the spot part is planned on its fallback, the
    job's other types, and every task is done by the deadline. Before, the part could
    run only on c5_spot and the run stopped with 495 tasks left."""
    data = yaml.safe_load(scenario("cheapest", "2h", 1, 600))
    data["emulator"]["refusals"] = [{"type": "c5_spot", "from_s": 0, "until_s": "3h"}]
    _, report, _ = dry_run(tmp_path, data)
    assert report["tasks_done"] == 600
    parts = {j["name"]: j for j in report["jobs"]}
    assert "sweep@aws_spot" in parts, parts
    assert all(j["met_deadline"] for j in parts.values())
    used = {m["type"] for m in report["machines"]}
    assert "c5_spot" not in used
    assert "c5" in used


def test_a_part_its_provider_cannot_run_uses_the_others_until_their_hours_are_used(
    tmp_path: Path,
) -> None:
    """hybrid.yaml with c5 refused for good: the EC2 part's tasks run on the campus nodes
    until the campus's 40 machine hours are used; the run stops saying so (and that c5
    cannot be launched: the budget is not why), and the report
    says how many tasks were never done (exit 3: stopped early)."""
    data = example("hybrid", refusals=[{"type": "c5", "from_s": 0}])
    run_dir, report, _ = dry_run(tmp_path, data, code=EXIT_STOPPED)
    parts = {j["name"]: j for j in report["jobs"]}
    assert parts["sweep@aws"]["done"] > 0
    assert {m["type"] for m in report["machines"]} == {"node"}
    assert report["stop_reason"].endswith(
        "(the machine hours of campus are used; c5 cannot be launched now)"
    )
    undone = report["tasks_total"] - report["tasks_done"] - report["tasks_failed"]
    assert undone > 0
    text = " ".join((run_dir / "report.md").read_text(encoding="utf-8").split())
    assert f"; {undone} tasks were never done." in text
