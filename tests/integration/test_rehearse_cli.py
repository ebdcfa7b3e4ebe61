"""Rehearsing what goes wrong, as a user does it: ``autoscaler run
config/examples/rehearse.yaml --dry-run`` (no c5 for half an hour, spot taken back at
20 % an hour) and variations of it, each a process of its own; what the run did is read
from its run directory (report, journal) as a user would.
"""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.config.load import load_config
from autoscaler.core.journal import JOURNAL_JSONL, JsonlJournal, replay
from autoscaler.report.format import hms
from autoscaler.run.assemble import new_state
from tests.integration.daemon_helpers import ROOT, run_cli
from tests.unit.test_rehearse import LOADED

pytestmark = pytest.mark.integration

EXAMPLES = ROOT / "config" / "examples"


def example(name: str = "rehearse", **emulator: Any) -> dict[str, Any]:
    """Example config ``name``, its ``emulator`` section's fields replaced by ``emulator``."""
    path = EXAMPLES / f"{name}.yaml"
    data: dict[str, Any] = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["emulator"] = {**data["emulator"], **emulator}
    return data


def dry_run(
    tmp_path: Path, data: dict[str, Any], code: int = 0
) -> tuple[Path, dict[str, Any], str]:
    """``autoscaler run CONFIG --dry-run --out DIR`` on ``data``, which must exit with
    ``code``: the run directory, its report and what the command printed."""
    config = tmp_path / "rehearse.yaml"
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = tmp_path / "run"
    done = run_cli("run", str(config), "--dry-run", "--out", str(out), timeout=300)
    assert done.returncode == code, done.stdout + done.stderr
    report: dict[str, Any] = json.loads((out / "report.json").read_text(encoding="utf-8"))
    return out, report, done.stdout + done.stderr


def journal(run_dir: Path) -> list[tuple[float, str, dict[str, Any]]]:
    with (run_dir / JOURNAL_JSONL).open(encoding="utf-8") as f:
        return [(r["t"], r["type"], r["data"]) for r in map(json.loads, f)]


def committed_over_time(run_dir: Path, report: dict[str, Any]) -> list[float]:
    """Committed spend after every step, by replaying the dry run's journal."""
    cfg = load_config(run_dir / "config.yaml")
    state = new_state(cfg, report["tasks_total"], report["seed"])
    stream = JsonlJournal(run_dir / JOURNAL_JSONL)
    try:
        out = []
        for _, step in itertools.groupby(stream.records(), key=lambda record: record.t):
            replay(state, step)
            out.append(state.money.committed)
    finally:
        stream.close()
    return out


def test_the_example_rehearses_an_outage_and_reclaims_and_says_what_they_cost(
    tmp_path: Path,
) -> None:
    """No c5 from minute 10 to 40: the launch of c5 the plan wants in the window is refused
    with EC2's code, and no c5 machine starts until the window closes; spot machines taken
    back have their tasks done elsewhere, every task once; the report lists both."""
    run_dir, report, out = dry_run(tmp_path, example())
    assert report["tasks_done"] == report["tasks_total"] == 2000
    refused = report["launch_problems"]
    assert refused
    assert {p["kind"] for p in refused} == {"capacity"}
    assert all("InsufficientInstanceCapacity" in p["reason"] for p in refused)
    assert all(600 <= p["t_s"] < 2400 for p in refused)
    c5 = [m["start_s"] for m in report["machines"] if m["type"] == "c5"]
    assert not [t for t in c5 if 600 <= t < 2400]
    taken = [m for m in report["machines"] if "interruption notice" in (m["end_reason"] or "")]
    assert taken
    assert {m["type"] for m in taken} == {"c5_spot"}
    rows = journal(run_dir)
    done = Counter(data["task"] for _, kind, data in rows if kind == "TaskDone")
    assert set(done) == set(range(2000))
    assert set(done.values()) == {1}
    lost = [data["machine"] for _, kind, data in rows if kind == "MachineLost"]
    assert sorted(lost) == sorted(m["id"] for m in taken)
    text = (run_dir / "report.md").read_text(encoding="utf-8")
    assert "## Launches the provider refused" in text
    assert "## Interruption notices" in text
    assert max(committed_over_time(run_dir, report)) <= report["budget"] + 1e-9
    rehearsal = report["rehearsal"]
    assert (rehearsal["refused"], rehearsal["reclaimed"]) == (len(refused), len(taken))
    assert "Rehearsed:" in out
    assert f"without them: cost {rehearsal['calm_cost']:.2f}" in " ".join(out.split())
    assert "Traceback" not in out


def test_spot_reclaimed_often_falls_back_to_on_demand_and_the_report_says_so(
    tmp_path: Path,
) -> None:
    """Spot taken back at 2 an hour (no refusals): after 3 reclaims within an hour
    c5_spot is held, no c5_spot machine is launched while it is, the plan moves to the
    on-demand types, and the report says when and why; every task is done once, the
    budget holds, and the reclaimed tasks never count as retries."""
    data = example(refusals=[], reclaim_per_hour={"c5_spot": 2.0})
    data["bag"]["max_retries"] = 0
    # Any reclaim that costs work counts toward a hold (by default only those that
    # leave the machines at most half their work do: 4-minute tasks lose little).
    data["reclaims"] = {"hold_below": 1.0}
    run_dir, report, out = dry_run(tmp_path, data)
    assert report["tasks_done"] == report["tasks_total"] == 2000
    assert report["tasks_failed"] == 0
    holds = report["reclaim_holds"]
    assert holds
    assert {h["type"] for h in holds} == {"c5_spot"}
    assert all(h["reclaims"] >= 3 and h["window_s"] == 3600 for h in holds)
    rows = journal(run_dir)
    spot_launches = [t for t, kind, d in rows if kind == "Launch" and d["type"] == "c5_spot"]
    for h in holds:
        assert not [t for t in spot_launches if h["from_s"] <= t < h["until_s"]]
        assert h["moved_to"]
        assert set(h["moved_to"]) <= {"m5", "c5"}
    text = (run_dir / "report.md").read_text(encoding="utf-8")
    first = holds[0]
    assert (
        f"c5_spot held {hms(first['from_s'])}–{hms(first['until_s'])} after "
        f"{first['reclaims']} reclaims in 1h; plan moved to {', '.join(first['moved_to'])}."
    ) in text
    done = Counter(d["task"] for _, kind, d in rows if kind == "TaskDone")
    assert set(done) == set(range(2000))
    assert set(done.values()) == {1}
    assert max(committed_over_time(run_dir, report)) <= report["budget"] + 1e-9
    assert report["within_budget"]
    assert "Traceback" not in out


def test_a_quota_refusal_holds_every_type_of_the_provider(tmp_path: Path) -> None:
    """InstanceLimitExceeded on c5 from minute 10 to 40 holds scale-up of the provider's
    types (ec2.limit_hold_s): no launch of any type is made until the hold lifts."""
    refusals = [{"type": "c5", "from_s": "10m", "until_s": "40m", "code": "InstanceLimitExceeded"}]
    run_dir, report, _ = dry_run(tmp_path, example(refusals=refusals, reclaim_per_hour={}))
    assert report["launch_problems"]
    assert {p["kind"] for p in report["launch_problems"]} == {"limit"}
    rows = journal(run_dir)
    holds = [(t, data) for t, kind, data in rows if kind == "LaunchFailed"]
    for at, data in holds:
        assert set(data["types"]) == {"m5", "c5", "c5_spot"}
        assert data["until"] == pytest.approx(at + 900)
        assert not [t for t, kind, _ in rows if kind == "Launch" and at < t < data["until"]]
    assert report["tasks_done"] == report["tasks_total"]


@pytest.mark.parametrize(
    ("emulator", "named"),
    [
        ({"refusals": [{"type": "c5", "from_s": "40m", "until_s": "10m"}]}, "emulator.refusals[0]"),
        ({"refusals": [{"type": "c5", "from_s": "soon"}]}, "emulator.refusals[0].from_s"),
        ({"refusals": [{"type": "c6"}]}, "emulator.refusals names unknown machine type 'c6'"),
        ({"reclaim_per_hour": {"c9": 0.2}}, "emulator.reclaim_per_hour names unknown"),
        ({"reclaim_per_hour": {"c5_spot": -0.2}}, "emulator.reclaim_per_hour.c5_spot"),
        ({"reclaim_per_hour": {"c5": 0.2}}, "'c5', an on-demand EC2 type"),
        ({"refusals": [{"type": "c5", "code": "Nope"}]}, "emulator.refusals[0].code"),
        ({"local_load": {"slurm": LOADED}}, "emulator.local_load names 'slurm', not a cluster"),
    ],
)
@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_bad_rehearsal_is_one_line_naming_the_field(
    tmp_path: Path, emulator: dict[str, Any], named: str, command: str
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(example(**emulator)), encoding="utf-8")
    args = [command, str(config)] + (
        ["--dry-run", "--out", str(tmp_path / "r")] * (command == "run")
    )
    done = run_cli(*args)
    assert done.returncode == 2, done.stdout + done.stderr
    problems = [line for line in done.stderr.splitlines() if line.startswith("  ")]
    assert len(problems) == 1, done.stderr
    assert named in problems[0]
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("load", "named"),
    [
        ({"aws": LOADED}, "emulator.local_load names 'aws', not a cluster provider"),
        ({"nope": LOADED}, "emulator.local_load names 'nope'"),
        ({"campus": {**LOADED, "utilisation": 1}}, "emulator.local_load.campus.utilisation"),
        ({"campus": {**LOADED, "min_job_s": "5h"}}, "emulator.local_load.campus"),
    ],
)
def test_a_bad_local_load_is_one_line_naming_the_field(
    tmp_path: Path, load: dict[str, Any], named: str
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(yaml.safe_dump(example("hybrid", local_load=load)), encoding="utf-8")
    done = run_cli("validate", str(config))
    assert done.returncode == 2, done.stdout + done.stderr
    problems = [line for line in done.stderr.splitlines() if line.startswith("  ")]
    assert len(problems) == 1, done.stderr
    assert named in problems[0]


def split_of(run_dir: Path) -> dict[str, int]:
    cfg = load_config(run_dir / "config.yaml")
    return dict(cfg.jobs[0].split)


def test_a_dry_run_splits_less_onto_a_cluster_its_users_keep_busy(tmp_path: Path) -> None:
    """hybrid.yaml dry-run as given and with the campus cluster 90 % busy: the offers the
    run prints and keeps in its config give the busy cluster fewer of the job's tasks, and
    its machines wait in its queue before they boot (1 min)."""
    (tmp_path / "idle").mkdir()
    (tmp_path / "busy").mkdir()
    idle_dir, idle, _ = dry_run(tmp_path / "idle", example("hybrid"))
    busy_dir, busy, out = dry_run(
        tmp_path / "busy", example("hybrid", local_load={"campus": LOADED})
    )
    campus = split_of(busy_dir).get("campus", 0)
    assert campus < split_of(idle_dir)["campus"]
    assert f"campus {campus} tasks by" in out
    assert idle["tasks_done"] == 600

    def waits(report: dict[str, Any]) -> list[float]:
        return [
            m["ready_s"] - m["start_s"]
            for m in report["machines"]
            if m["type"] == "node" and m["ready_s"] is not None
        ]

    assert set(waits(idle)) == {60.0}
    assert max(waits(busy)) > 60.0
    assert busy["cost"] <= 12.0 + 1e-9


def test_a_type_refused_through_sampling_is_sampled_and_used_once_it_comes_back(
    tmp_path: Path,
) -> None:
    """No c5 (on-demand or spot) from the start to minute 30: the first plan is made
    on m5 alone, which the budget cannot finish the bag with. Once c5 may be launched
    again it is sampled, paid from the budget, and the next plan uses it: the bag is
    done, every task once, within budget, in a fraction of the time the m5 plan takes."""
    refusals = [
        {"type": name, "from_s": "0m", "until_s": "30m", "code": "InsufficientInstanceCapacity"}
        for name in ("c5", "c5_spot")
    ]
    run_dir, report, out = dry_run(tmp_path, example(refusals=refusals, reclaim_per_hour={}))
    rows = journal(run_dir)
    configures = [(t, data) for t, kind, data in rows if kind == "Configure"]
    first_plan = next(t for t, data in configures if data["predicted_makespan_s"] is not None)
    assert all(p["t_s"] < 1800 for p in report["launch_problems"])
    late = [
        (t, data)
        for t, data in configures
        if t > first_plan and data["predicted_makespan_s"] is None
    ]
    assert late, "no sampling after the first plan"
    assert "c5" in late[-1][1]["reason"]
    c5_starts = [m["start_s"] for m in report["machines"] if m["type"] == "c5"]
    assert c5_starts
    assert min(c5_starts) >= 1800
    used = [
        (t, data)
        for t, data in configures
        if t > late[-1][0] and data["predicted_makespan_s"] is not None
    ]
    assert used
    assert used[0][1]["counts"]["c5"] > 0
    done = Counter(data["task"] for _, kind, data in rows if kind == "TaskDone")
    assert set(done) == set(range(2000))
    assert set(done.values()) == {1}
    assert report["tasks_done"] == report["tasks_total"] == 2000
    assert max(committed_over_time(run_dir, report)) <= report["budget"] + 1e-9
    assert report["within_budget"]
    # m5 alone: over 12 h and out of money with tasks left; with c5 back: under 3 h
    assert report["makespan_s"] < 3 * 3600
    # The report holds the run to the plan made with c5's samples, the one it followed.
    predicted = report["predicted"]
    assert predicted["resampled_at_s"] == pytest.approx(late[-1][0], abs=1e-3)
    assert predicted["at_s"] == pytest.approx(used[0][0], abs=1e-3)
    assert predicted["makespan_inside"]
    assert "Traceback" not in out
