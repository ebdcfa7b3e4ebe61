"""``autoscaler run --dry-run`` and ``autoscaler report`` through the command line."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import matplotlib.image as mpimg
import pytest
import yaml
from typer.testing import CliRunner

from autoscaler.cli.main import EXIT_CONFIG, EXIT_STOPPED, app
from autoscaler.config.load import load_config
from tests.conftest import is_run_config

EXAMPLES = sorted(
    p
    for p in (Path(__file__).parents[2] / "config" / "examples").glob("*.yaml")
    if is_run_config(p)  # services, jobs: test_service_*
)
BUDGET_EXAMPLES = [p for p in EXAMPLES if not load_config(p).deadline_mode]
"""The examples the budget controller runs: deadline mode's controller comes separately."""
REPORT_FIELDS = {
    "run_id": str,
    "mode": str,
    "budget": float,
    "cost": float,
    "within_budget": bool,
    "makespan_s": float,
    "tasks_total": int,
    "tasks_done": int,
    "tasks_failed": int,
    "configurations": list,
    "machine_types": dict,
    "machines": list,
}


@pytest.fixture(scope="module")
def runner() -> CliRunner:
    return CliRunner()


@pytest.mark.parametrize("example", BUDGET_EXAMPLES, ids=lambda p: p.stem)
def test_every_example_dry_runs_to_a_full_run_directory(
    runner: CliRunner, example: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", str(example), "--dry-run", "--out", str(out)])
    assert result.exit_code == 0, result.output
    for name in ("config.yaml", "journal.jsonl", "log.jsonl", "report.json", "report.md"):
        assert (out / name).stat().st_size > 0, name
    report = json.loads((out / "report.json").read_text())
    for field, kind in REPORT_FIELDS.items():
        assert isinstance(report[field], kind), field
    assert report["mode"] == "budget"
    assert report["within_budget"] is True
    assert report["cost"] <= report["budget"]
    assert report["stop_reason"] is None
    assert report["tasks_done"] + report["tasks_failed"] == report["tasks_total"]
    assert set(report["predicted"]) >= {"cost", "makespan_s"}
    # Per-type and per-machine figures add up to the run's.
    assert sum(t["cost"] for t in report["machine_types"].values()) == pytest.approx(report["cost"])
    assert sum(m["tasks_run"] for m in report["machines"]) == report["tasks_done"]
    for m in report["machines"]:
        assert {"type", "start_s", "end_s", "units_paid", "tasks_run"} <= set(m)
        assert m["end_s"] >= m["start_s"]
    # The plots are real images with something drawn on them.
    for name in ("gantt.png", "spend.png"):
        image = mpimg.imread(out / name)
        assert image.shape[0] > 200
        assert image.shape[1] > 200
        assert image.std() > 0.01
    # The resolved config is the same run, with every default filled in.
    resolved = yaml.safe_load((out / "config.yaml").read_text())
    original = yaml.safe_load(example.read_text())
    assert resolved["name"] == original["name"]
    assert [t["name"] for t in resolved["machine_types"]] == [
        t["name"] for t in original["machine_types"]
    ]
    defaults = {"z": 1.96, "delta": 0.25, "mode": "plain", "replicated": 7}
    assert resolved["sampling"] == defaults or "sampling" in original


def test_journal_records_events_and_actions_in_time_order(
    runner: CliRunner, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    runner.invoke(app, ["run", str(EXAMPLES[0]), "--dry-run", "--out", str(out)])
    lines = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    times = [line["t"] for line in lines]
    assert times == sorted(times)
    kinds = {(line["kind"], line["type"]) for line in lines}
    assert ("action", "Launch") in kinds
    assert ("event", "TaskDone") in kinds
    assert ("action", "Stop") in kinds


def test_logs_are_json_lines_with_the_run_id(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "run"
    runner.invoke(app, ["run", str(EXAMPLES[0]), "--dry-run", "--out", str(out)])
    report = json.loads((out / "report.json").read_text())
    entries = [json.loads(line) for line in (out / "log.jsonl").read_text().splitlines()]
    assert entries
    assert all(e["run_id"] == report["run_id"] for e in entries)
    assert {"run start", "run end", "launch", "configure"} <= {e["event"] for e in entries}


def test_seed_option_changes_the_run_and_repeats_it(runner: CliRunner, tmp_path: Path) -> None:
    quickstart = next(p for p in EXAMPLES if p.stem == "quickstart")
    reports = []
    for i, seed in enumerate((7, 7, 8)):
        out = tmp_path / f"r{i}"
        runner.invoke(
            app, ["run", str(quickstart), "--dry-run", "--seed", str(seed), "--out", str(out)]
        )
        reports.append(json.loads((out / "report.json").read_text()))
    assert reports[0]["seed"] == 7
    assert reports[0]["makespan_s"] == reports[1]["makespan_s"]
    assert reports[0]["machines"] == reports[1]["machines"]
    assert reports[0]["machines"] != reports[2]["machines"]


def test_plots_false_writes_the_same_report_without_images(
    runner: CliRunner, tmp_path: Path
) -> None:
    """``plots: false``: report.json and report.md as with plots, no image."""
    quickstart = next(p for p in EXAMPLES if p.stem == "quickstart")
    data = yaml.safe_load(quickstart.read_text())
    bare = tmp_path / "bare.yaml"
    bare.write_text(yaml.safe_dump({**data, "plots": False}))
    reports = []
    for config, out in ((quickstart, tmp_path / "drawn"), (bare, tmp_path / "bare")):
        result = runner.invoke(app, ["run", str(config), "--dry-run", "--out", str(out)])
        assert result.exit_code == 0, result.output
        report = json.loads((out / "report.json").read_text())
        reports.append({k: v for k, v in report.items() if k not in ("run_id", "wall_s")})
    assert sorted(p.name for p in (tmp_path / "drawn").glob("*.png")) == ["gantt.png", "spend.png"]
    assert list((tmp_path / "bare").glob("*.png")) == []
    assert (tmp_path / "bare" / "report.md").stat().st_size > 0
    assert reports[0] == reports[1]
    assert yaml.safe_load((tmp_path / "bare" / "config.yaml").read_text())["plots"] is False


def test_report_command_prints_what_run_printed(runner: CliRunner, tmp_path: Path) -> None:
    """`report RUN` prints the rendered head and the run directory, as `run` did at its end."""
    out = tmp_path / "run"
    ran = runner.invoke(app, ["run", str(EXAMPLES[0]), "--dry-run", "--out", str(out)])
    result = runner.invoke(app, ["report", str(out)])
    assert result.exit_code == 0, result.output
    assert result.stdout == ran.stdout
    assert "predicted" in result.stdout
    assert "## Machine types" not in result.stdout  # rendered, not raw Markdown
    assert f"run directory: {out}" in result.stdout


def test_report_markdown_prints_report_md_as_it_is(runner: CliRunner, tmp_path: Path) -> None:
    out = tmp_path / "run"
    runner.invoke(app, ["run", str(EXAMPLES[0]), "--dry-run", "--out", str(out)])
    result = runner.invoke(app, ["report", str(out), "--markdown"])
    assert result.exit_code == 0
    assert result.stdout == (out / "report.md").read_text()
    assert "## Machine types" in result.stdout


def test_report_of_a_report_this_version_did_not_write_is_a_clear_error(
    runner: CliRunner, tmp_path: Path
) -> None:
    (tmp_path / "report.json").write_text('{"run_id": "x"}')
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == EXIT_CONFIG
    assert "not a report this version writes (mode: Field required" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("command", ["run", "cleanup"])
def test_help_reads_as_whole_sentences(runner: CliRunner, command: str) -> None:
    """A docstring's paragraphs are reflowed to the terminal's width: a line is broken
    only where the next word would not fit, never left as a stub where the source broke."""
    width = 72
    result = runner.invoke(app, [command, "--help"], terminal_width=width)
    assert result.exit_code == 0
    lines = [line.strip() for line in result.stdout.splitlines()]
    start = next(i for i, line in enumerate(lines) if line.startswith("Usage:")) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("╭"))
    prose = lines[start:end]
    assert sum(bool(line) for line in prose) >= 3
    for line, following in itertools.pairwise(prose):
        if line and following:
            assert len(line) + 1 + len(following.split()[0]) > width - 4, (line, following)


def test_report_of_a_directory_without_a_report_is_a_clear_error(
    runner: CliRunner, tmp_path: Path
) -> None:
    result = runner.invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == EXIT_CONFIG
    assert "no report.json" in result.output
    assert "Traceback" not in result.output


def test_run_without_dry_run_refuses_to_touch_anything(runner: CliRunner, tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", str(EXAMPLES[0]), "--out", str(tmp_path / "x")])
    assert result.exit_code == EXIT_CONFIG
    assert "--dry-run" in result.output
    assert not (tmp_path / "x").exists()


def test_a_budget_too_small_at_run_time_stops_cleanly_with_a_report(
    runner: CliRunner, tmp_path: Path
) -> None:
    cfg = yaml.safe_load(next(p for p in EXAMPLES if p.stem == "bats_s4_1").read_text())
    cfg["constraint"]["budget"] = 500  # the sampling phase alone costs 450
    path = tmp_path / "tight.yaml"
    path.write_text(yaml.safe_dump(cfg))
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", str(path), "--dry-run", "--out", str(out)])
    assert result.exit_code == EXIT_STOPPED, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["within_budget"] is True
    assert report["cost"] <= 500
    assert report["tasks_done"] < 1000
    assert "budget exhausted" in report["stop_reason"]
    assert report["shortfall"]["needed_budget"] > 500
    assert report["shortfall"]["at_s"] < 3600
    md = (out / "report.md").read_text()
    assert md.count("stopped early") == 1
    assert "budget unlikely to finish the bag" in md


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda c: c["machine_types"][0].update(price=-3), "machine_types[0].price"),
        (lambda c: c["machine_types"][1].update(max_count=0), "machine_types[1].max_count"),
        (lambda c: c["bag"].update(synthetic=0), "bag.synthetic"),
        (lambda c: c.update(colour="blue"), "colour"),
        (lambda c: c["constraint"].update(budget=1), "budget"),
    ],
)
def test_bad_configs_exit_2_naming_the_field(
    runner: CliRunner, tmp_path: Path, edit: object, field: str
) -> None:
    cfg = yaml.safe_load(next(p for p in EXAMPLES if p.stem == "bats_s4_1").read_text())
    edit(cfg)  # type: ignore[operator]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg))
    result = runner.invoke(app, ["run", str(path), "--dry-run", "--out", str(tmp_path / "r")])
    assert result.exit_code == EXIT_CONFIG
    assert field in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("example", BUDGET_EXAMPLES, ids=[p.stem for p in BUDGET_EXAMPLES])
def test_plan_works_on_every_example(runner: CliRunner, example: Path) -> None:
    """Every example with a bag gets a frontier (or, where sampling alone finishes the
    bag, says so); options run from the minimum budget to the fastest, each with its
    prediction inside its interval."""
    result = runner.invoke(app, ["plan", str(example), "--json", "--dry-run"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    if data["tasks_left"] == 0:
        return
    options = data["options"]
    assert options[0]["label"] == "minimum"
    assert options[-1]["label"] == "fastest"
    assert options[0]["budget"] == data["minimum_budget"]
    budgets = [o["budget"] for o in options]
    assert budgets == sorted(budgets)
    for o in options:
        lo, hi = o["cost_interval"]
        assert lo <= o["cost"] <= hi <= o["budget"] + 0.01
        lo, hi = o["makespan_interval_s"]
        assert lo <= o["makespan_s"] <= hi


def test_run_with_a_plan_option_uses_its_budget_and_finishes_as_predicted(
    runner: CliRunner, tmp_path: Path
) -> None:
    """`plan --out` then `run --option 1`: the minimum budget finishes the bag within it."""
    example = next(p for p in EXAMPLES if p.stem == "quickstart")
    plan_dir = tmp_path / "plan"
    result = runner.invoke(app, ["plan", str(example), "--out", str(plan_dir)])
    assert result.exit_code == 0, result.output
    assert (plan_dir / "frontier.png").stat().st_size > 0
    options = json.loads((plan_dir / "plan.json").read_text())["options"]
    out = tmp_path / "run"
    result = runner.invoke(
        app,
        [
            "run",
            str(example),
            "--dry-run",
            "--option",
            "1",
            "--plan",
            str(plan_dir),
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["budget"] == pytest.approx(options[0]["budget"])
    assert report["tasks_done"] == report["tasks_total"]
    assert report["cost"] <= report["budget"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--option", "1"], "--plan"),
        (["--option", "9", "--plan", "PLAN"], "options"),
        (["--budget", "-3"], "positive"),
        (["--budget", "5", "--option", "1", "--plan", "PLAN"], "not both"),
    ],
)
def test_bad_budget_options_are_clear_errors(
    runner: CliRunner, tmp_path: Path, args: list[str], message: str
) -> None:
    example = next(p for p in EXAMPLES if p.stem == "quickstart")
    plan_dir = tmp_path / "plan"
    plan_dir.mkdir()
    (plan_dir / "plan.json").write_text(json.dumps({"options": [{"budget": 70}]}))
    args = [a.replace("PLAN", str(plan_dir)) for a in args]
    result = runner.invoke(app, ["run", str(example), "--dry-run", *args])
    assert result.exit_code == EXIT_CONFIG
    assert message in result.output


@pytest.mark.parametrize("example", [p for p in EXAMPLES if p.stem in ("local", "ec2", "sge")])
def test_plan_on_a_real_provider_asks_first_and_rents_nothing_unconfirmed(
    runner: CliRunner, tmp_path: Path, example: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a terminal to ask on and without --yes, `plan` says what sampling would
    rent and stops before any run directory (or machine) exists."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["plan", str(example)])
    assert result.exit_code == EXIT_CONFIG, result.output
    assert "--yes" in result.output
    assert "Sampling rents" in result.output
    assert not (tmp_path / "runs").exists()


DEADLINE_EXAMPLES = [p for p in EXAMPLES if p not in BUDGET_EXAMPLES]


@pytest.mark.parametrize("example", DEADLINE_EXAMPLES, ids=lambda p: p.stem)
def test_every_deadline_example_dry_runs_to_a_per_job_report(
    runner: CliRunner, example: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", str(example), "--dry-run", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    assert report["mode"] == "deadline"
    assert report["tasks_done"] == report["tasks_total"]
    names = [j["name"] for j in yaml.safe_load(example.read_text())["jobs"]]
    # A job split across providers by their offers reports a line per part: name@provider.
    jobs = [j["name"].split("@")[0] for j in report["jobs"]]
    assert list(dict.fromkeys(jobs)) == names
    for job in report["jobs"]:
        assert job["done"] == job["tasks"]
        assert job["predicted_finish_s"] is not None
    assert "## Jobs" in (out / "report.md").read_text()
    assert mpimg.imread(out / "gantt.png").std() > 0.01


def _deadline_config(tmp_path: Path, **constraint: float) -> Path:
    data = yaml.safe_load((EXAMPLES[0].parent / "quickstart.yaml").read_text())
    data["bag"] = {"synthetic": 200}
    data["constraint"] = constraint
    data["emulator"]["runtime"] = {"dist": "lognormal", "mean_s": 600, "sd_s": 300}
    path = tmp_path / "deadline.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_a_single_bag_with_a_deadline_is_sampled_then_planned_to_meet_it(
    runner: CliRunner, tmp_path: Path
) -> None:
    """One bag, `constraint: {deadline_s}` and no known task times: deadline mode
    samples each type, then plans the rest; the skewed bag finishes in time."""
    config = _deadline_config(tmp_path, deadline_s=4 * 3600)
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", str(config), "--dry-run", "--out", str(out)])
    assert result.exit_code == 0, result.output
    report = json.loads((out / "report.json").read_text())
    (job,) = report["jobs"]
    assert job["done"] == 200
    assert job["met_deadline"], job
    assert {m["type"] for m in report["machines"]} >= {"small", "fast"}  # both sampled


def test_a_budget_too_small_for_the_deadline_gives_way_and_holds(
    runner: CliRunner, tmp_path: Path
) -> None:
    """A deadline that needs more machines than the budget pays: spend stays within the
    budget, the run says early that the budget gave way, and the report says so."""
    config = _deadline_config(tmp_path, deadline_s=3600, budget=12)
    out = tmp_path / "run"
    result = runner.invoke(app, ["run", str(config), "--dry-run", "--out", str(out)])
    assert result.exit_code in (0, EXIT_STOPPED), result.output
    report = json.loads((out / "report.json").read_text())
    assert report["cost"] <= 12 + 1e-9
    (job,) = report["jobs"]
    assert job["tasks_late"] > 0
    assert job["first_warning"] is not None
    assert job["first_warning"]["cause"] == "budget"
    assert job["first_warning"]["at_s"] < job["deadline_s"]
    assert job["gave_way"] in ("deadline", "both")


@pytest.mark.parametrize("example", DEADLINE_EXAMPLES, ids=lambda p: p.stem)
def test_plan_on_a_deadline_config_says_what_to_use_instead(
    runner: CliRunner, example: Path
) -> None:
    result = runner.invoke(app, ["plan", str(example), "--dry-run"])
    assert result.exit_code == EXIT_CONFIG
    assert "run --dry-run" in result.output
    assert "Traceback" not in result.output
