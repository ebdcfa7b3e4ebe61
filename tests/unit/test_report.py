"""The typed report: report.json as its serialisation, the shipped JSON Schema, the plots."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from typer.testing import CliRunner

from autoscaler.budget.frontier import Frontier, Option
from autoscaler.cli.main import app
from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.core.model import TaskState
from autoscaler.report.markdown import render_markdown
from autoscaler.report.plots import frontier_figure, gantt_figure, spend_figure
from autoscaler.report.records import (
    REPORT_JSON,
    REPORT_MD,
    UNFINISHED_TXT,
    FailedTask,
    LaunchProblem,
    Report,
    UnfinishedTask,
    read_report,
    report_json_schema,
)
from autoscaler.report.write import write_report
from autoscaler.run.start import DryRun, dry_run

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"
EXAMPLES = CONFIG_DIR / "examples"
SCHEMA_FILE = CONFIG_DIR / "report.schema.json"

KEYS = [
    "run_id",
    "mode",
    "policy",
    "provider",
    "seed",
    "budget",
    "cost",
    "committed",
    "within_budget",
    "makespan_s",
    "tasks_total",
    "tasks_done",
    "tasks_failed",
    "stop_reason",
    "predicted",
    "billing",
    "configurations",
    "machine_types",
    "machines",
    "failed_tasks",
    "launch_problems",
    "wall_s",
    "shortfall",
    "unfinished_tasks",
    "providers",
    "risk",
    "categories",
]
"""report.json's keys, in order, as every release so far has written them (a dry run's);
a new key comes after those already there."""


def run(tmp_path: Path, name: str = "quickstart.yaml", **changes: object) -> DryRun:
    """A dry run of an example (with top-level ``changes``), its run directory written."""
    path = EXAMPLES / name
    if changes:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        data.update(changes)
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
    cfg = load_config(path)
    return dry_run(cfg, expand_bag(cfg), seed=1, out_dir=tmp_path / "run", run_id="r")


@pytest.fixture(scope="module")
def quickstart(tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    return run(tmp_path_factory.mktemp("quickstart"))


def on_disk(d: DryRun) -> dict[str, object]:
    assert d.out_dir is not None
    data: dict[str, object] = json.loads((d.out_dir / REPORT_JSON).read_text(encoding="utf-8"))
    return data


# --- report.json and the dataclass ------------------------------------------------------


def test_the_machine_table_shows_zones_only_when_a_provider_said_where(
    quickstart: DryRun,
) -> None:
    head = "| machine | type | slots |"
    assert head in render_markdown(quickstart.report)
    first, *rest = quickstart.report.machines
    zoned = dataclasses.replace(
        quickstart.report,
        machines=(dataclasses.replace(first, zone="us-east-1b"), *rest),
    )
    md = render_markdown(zoned)
    assert "| machine | type | zone | slots |" in md
    assert f"| {first.id} | {first.type} | us-east-1b | {first.slots} |" in md
    assert f"| {rest[0].id} | {rest[0].type} | - | " in md
    assert zoned.to_json()["machines"][0]["zone"] == "us-east-1b"


def test_report_json_has_the_same_keys_as_ever(quickstart: DryRun) -> None:
    data = on_disk(quickstart)
    assert list(data) == KEYS
    assert list(data["machine_types"]) == ["small", "fast"]  # type: ignore[call-overload]
    assert set(data["predicted"]) == {  # type: ignore[arg-type]
        "cost",
        "makespan_s",
        "at_s",
        "cost_interval",
        "makespan_interval_s",
        "cost_inside",
        "makespan_inside",
        "best_effort",
        "replaced_best_effort_at_s",
        "resampled_at_s",
    }
    assert set(data["billing"]) == {"mode", "atu_s", "min_charge_s"}  # type: ignore[arg-type]


def test_report_json_is_the_dataclass_and_reads_back_into_it(quickstart: DryRun) -> None:
    """What is written is ``to_json()``; ``read_report`` gives back an equal ``Report``."""
    assert on_disk(quickstart) == quickstart.report.to_json()
    assert quickstart.out_dir is not None
    again = read_report(quickstart.out_dir)
    assert isinstance(again, Report)
    assert again == quickstart.report


def test_report_figures_add_up(quickstart: DryRun) -> None:
    r = quickstart.report
    assert r.tasks_done == r.tasks_total == 500
    assert sum(t.cost for t in r.machine_types.values()) == pytest.approx(r.cost)
    assert sum(m.tasks_run for m in r.machines) == r.tasks_done
    assert sum(t.machines for t in r.machine_types.values()) == len(r.machines)
    assert r.predicted is not None
    assert r.predicted.at_s == next(c.t_s for c in r.configurations if c.predicted_cost)


def test_a_real_runs_extras_come_last_and_only_when_set(quickstart: DryRun) -> None:
    """The daemon's ``time_scale`` and ``refused_agents`` follow ``wall_s``; a dry run has
    neither key (not even as null)."""
    real = dataclasses.replace(quickstart.report, time_scale=120.0, refused_agents=2)
    data = real.to_json()
    assert list(data) == [*KEYS, "time_scale", "refused_agents"]
    assert (data["time_scale"], data["refused_agents"]) == (120.0, 2)
    jsonschema.validate(data, report_json_schema())
    assert "time_scale" not in quickstart.report.to_json()


def test_a_stopped_run_and_per_second_billing_validate(tmp_path: Path) -> None:
    """The optional parts filled in: a stop reason and per-second billing's minimum."""
    d = run(tmp_path, "bats_s4_1.yaml", constraint={"budget": 500})
    assert d.report.stop_reason is not None
    jsonschema.validate(on_disk(d), report_json_schema())
    per_second = run(tmp_path, "commands.yaml")
    assert per_second.report.billing.min_charge_s == 60.0
    jsonschema.validate(on_disk(per_second), report_json_schema())


def test_failed_tasks_and_refused_launches_validate_and_read_back(
    quickstart: DryRun, tmp_path: Path
) -> None:
    """A real run's lists (a dry run has none of them) in the schema and back from disk."""
    real = dataclasses.replace(
        quickstart.report,
        failed_tasks=(FailedTask(task=3, attempts=3, error="exit 3"),),
        launch_problems=(
            LaunchProblem(t_s=12.5, type="fast", kind="capacity", reason="no capacity"),
        ),
        time_scale=60.0,
        refused_agents=0,
    )
    write_report(real, None, tmp_path)
    jsonschema.validate(json.loads((tmp_path / REPORT_JSON).read_text()), report_json_schema())
    assert read_report(tmp_path) == real
    md = (tmp_path / "report.md").read_text()
    assert "| 3 | 3 | exit 3 |" in md
    assert "type avoided for a while" in md


# --- the schema -------------------------------------------------------------------------


def test_report_schema_file_is_in_sync() -> None:
    """config/report.schema.json is the schema of the current dataclasses."""
    on_file = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert on_file == report_json_schema(), (
        "config/report.schema.json is stale: run "
        "`autoscaler schema --report --out config/report.schema.json`"
    )


def test_cli_schema_report_out(tmp_path: Path) -> None:
    out = tmp_path / "report.schema.json"
    result = CliRunner().invoke(app, ["schema", "--report", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert out.read_text(encoding="utf-8") == SCHEMA_FILE.read_text(encoding="utf-8")
    printed = CliRunner().invoke(app, ["schema", "--report"])
    assert json.loads(printed.stdout) == report_json_schema()


def test_a_dry_runs_report_validates_against_the_shipped_schema(quickstart: DryRun) -> None:
    schema = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(on_disk(quickstart), schema)


@pytest.mark.parametrize(
    "spoil",
    [
        lambda r: r.pop("cost"),
        lambda r: r.update(colour="blue"),
        lambda r: r["machines"][0].update(tasks_run="many"),
        lambda r: r["machine_types"]["small"].pop("idle_s"),
        lambda r: r.update(mode="deadline"),
    ],
    ids=["missing", "unknown", "wrong type", "nested missing", "unknown mode"],
)
def test_the_schema_refuses_what_is_not_a_report(quickstart: DryRun, spoil: object) -> None:
    data = on_disk(quickstart)
    spoil(data)  # type: ignore[operator]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, report_json_schema())


def test_read_report_names_what_is_wrong(tmp_path: Path) -> None:
    (tmp_path / REPORT_JSON).write_text('{"run_id": "x", "mode": "budget"}')
    with pytest.raises(AutoscalerError, match=r"policy: Field required.*more\)"):
        read_report(tmp_path)


# --- plots ------------------------------------------------------------------------------


def test_gantt_legend_is_below_the_axes_and_names_only_types_that_ran(tmp_path: Path) -> None:
    """A type too dear for the budget never gets a machine: it is not in the legend, and
    the legend covers no machine row."""
    types = [
        {"name": "small", "price": 1, "max_count": 10, "boot_s": "2m"},
        {"name": "fast", "price": 3, "max_count": 10, "boot_s": "2m"},
        {"name": "huge", "price": 200, "max_count": 5, "boot_s": "2m"},
    ]
    emulator = {
        "seed": 1,
        "runtime": {"dist": "normal", "mean_s": "10m", "sd_s": "2m"},
        "speed": {"small": 1, "fast": 4, "huge": 8},
    }
    d = run(tmp_path, machine_types=types, emulator=emulator, constraint={"budget": 120})
    assert d.report.machine_types["huge"].machines == 0
    fig = gantt_figure(d.state)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    (legend,) = fig.legends
    assert [t.get_text() for t in legend.get_texts()] == ["fast", "small"]
    (ax,) = fig.axes
    renderer = canvas.get_renderer()
    assert legend.get_window_extent(renderer).y1 < ax.get_window_extent(renderer).y0


def test_spend_plot_draws_committed_over_spent_over_the_budget(quickstart: DryRun) -> None:
    """Quickstart ends with spent and committed on one value next to the budget (its
    reserve for the end of the bag left a little over), so each is drawn differently
    and committed on top."""
    r = quickstart.report
    assert r.budget is not None
    assert r.cost == r.committed <= r.budget
    fig = spend_figure(quickstart.state, r.budget)
    (ax,) = fig.axes
    lines = {line.get_label().split()[0]: line for line in ax.get_lines()}
    budget, spent, committed = lines["budget"], lines["spent"], lines["committed"]
    assert budget.get_zorder() < spent.get_zorder() < committed.get_zorder()
    assert committed.get_linestyle() != spent.get_linestyle()
    assert committed.get_linewidth() < spent.get_linewidth() < budget.get_linewidth()
    colours = {to_rgba(line.get_color()) for line in (budget, spent, committed)}
    assert len(colours) == 3
    (legend,) = fig.legends
    assert len(legend.get_texts()) == 3


def test_spend_plot_without_a_budget_is_not_titled_against_one(quickstart: DryRun) -> None:
    """A run without a budget (a deadline run) has no budget line and no budget in the title."""
    with_budget = spend_figure(quickstart.state, 80.0).axes[0].get_title()
    (ax,) = spend_figure(quickstart.state, None).axes
    assert "against budget" in with_budget
    assert "against" not in ax.get_title()
    assert "no budget" in ax.get_title()
    assert all("budget" not in line.get_label() for line in ax.get_lines())


def close_options(n: int) -> Frontier:
    """``n`` options a few minutes and a few cents apart: their labels would all collide."""
    options = tuple(
        Option(
            label=f"between {i}",
            budget=50.0 + i,
            counts={"small": 10 - i, "fast": i},
            cost=40.0 + 0.05 * i,
            cost_interval=(38.0 + 0.05 * i, 42.0 + 0.05 * i),
            makespan_s=7200.0 - 60.0 * i,
            makespan_interval_s=(6800.0 - 60.0 * i, 7600.0 - 60.0 * i),
        )
        for i in range(n)
    )
    far = Option(
        "fastest", 90.0, {"small": 10, "fast": 10}, 80.0, (75.0, 85.0), 1800.0, (1700.0, 1900.0)
    )
    return Frontier(600.0, 5.0, 400, 45.0, (*options, far))


@pytest.mark.parametrize("n", [2, 6, 12])
def test_frontier_labels_do_not_overlap_and_stay_in_the_figure(n: int) -> None:
    """Options close together get labels placed apart, each still naming its option."""
    frontier = close_options(n)
    fig = frontier_figure(frontier)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    (ax,) = fig.axes
    texts = [t for t in ax.texts if t.get_text()]
    assert [t.get_text() for t in texts] == [
        f"{i}: {o.label}" for i, o in enumerate(frontier.options, 1)
    ]
    boxes = [t.get_window_extent(renderer) for t in texts]
    for (i, a), (j, b) in itertools.combinations(enumerate(boxes), 2):
        assert not a.overlaps(b), (texts[i].get_text(), texts[j].get_text())
    for t, box in zip(texts, boxes, strict=True):
        assert fig.bbox.contains(box.x0, box.y0), t.get_text()
        assert fig.bbox.contains(box.x1, box.y1), t.get_text()


# --- tasks not done ---------------------------------------------------------------------

TIGHT = """\
name: tight
bag:
  command: 'echo {a} {b}'
  sweep:
    a: [x, y]
    b: {start: 0, stop: 100}
  max_retries: 0
constraint: {budget: 6, on_shortfall: stop}
machine_types:
  - {name: small, price: 1, max_count: 4, boot_s: 60}
emulator:
  seed: 3
  runtime: {dist: normal, mean_s: 20m, sd_s: 5m}
  task_failure_prob: 0.1
"""
"""200 commands, a budget for a few machine-hours of 20-minute tasks that stops at once
when it cannot finish, and failures that
are not retried: the run stops early with tasks of every kind not done."""


def dry_run_of(tmp_path: Path, text: str) -> DryRun:
    path = tmp_path / "run.yaml"
    path.write_text(text, encoding="utf-8")
    cfg = load_config(path)
    return dry_run(cfg, expand_bag(cfg), out_dir=tmp_path / "run", run_id="r", plots=False)


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> DryRun:
    return dry_run_of(tmp_path_factory.mktemp("tight"), TIGHT)


def test_the_report_lists_every_task_not_done_with_its_command_and_why(tight: DryRun) -> None:
    state, report = tight.state, tight.report
    assert report.stop_reason is not None
    not_done = [tid for tid, st in enumerate(state.tasks.task_state) if st is not TaskState.DONE]
    assert [t.task for t in report.unfinished_tasks] == not_done
    assert len(not_done) == report.tasks_total - report.tasks_done
    ran = {seg.task for seg in state.tasks.segments}
    by_why = {
        why: {t.task for t in report.unfinished_tasks if t.why == why}
        for why in ("not_started", "cut_off", "failed")
    }
    assert all(by_why.values()), by_why  # this run has tasks of every kind
    assert by_why["failed"] == {f.task for f in report.failed_tasks}
    assert by_why["cut_off"] <= ran
    assert not by_why["not_started"] & ran
    for t in report.unfinished_tasks:
        a, b = divmod(t.task, 100)
        assert t.command == f"echo {'xy'[a]} {b}"
        assert (t.error is not None) == (t.why == "failed")


def test_unfinished_txt_is_a_bag_of_exactly_the_tasks_not_done(
    tight: DryRun, tmp_path: Path
) -> None:
    """Fed back as ``bag: {file: ...}`` through the config loader, the file gives the
    commands of the tasks not done, in bag order, and nothing else."""
    assert tight.out_dir is not None
    text = (tight.out_dir / UNFINISHED_TXT).read_text(encoding="utf-8")
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert text.startswith("#")
    assert any("run r:" in line for line in header)
    assert any("stopped early: budget unlikely to finish" in line for line in header)
    config = tmp_path / "again.yaml"
    config.write_text(
        f"bag: {{file: {tight.out_dir / UNFINISHED_TXT}}}\nconstraint: {{budget: 6}}\n"
        "machine_types: [{name: small, price: 1, max_count: 4}]\n",
        encoding="utf-8",
    )
    again = expand_bag(load_config(config))
    assert [t.command for t in again] == [t.command for t in tight.report.unfinished_tasks]
    done = {
        f"echo {'xy'[tid // 100]} {tid % 100}"
        for tid, st in enumerate(tight.state.tasks.task_state)
        if st is TaskState.DONE
    }
    assert len(again) + len(done) == 200
    assert not done & {t.command for t in again}


def test_report_md_shows_the_first_tasks_not_done_and_counts_the_rest(tight: DryRun) -> None:
    assert tight.out_dir is not None
    md = (tight.out_dir / REPORT_MD).read_text(encoding="utf-8")
    section = md.split("## Tasks not done")[1].split("\n## ")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + 20  # the heading row and the first 20
    n = len(tight.report.unfinished_tasks)
    assert f"… and {n - 20} more; see {UNFINISHED_TXT}." in section
    assert rows[1].split(" | ")[1] == "failed"  # failed and cut-off tasks come first
    assert UNFINISHED_TXT in md.split("## Machine types")[0]  # the head says where they are


def test_a_report_with_tasks_not_done_validates_and_reads_back(tight: DryRun) -> None:
    assert tight.out_dir is not None
    jsonschema.validate(on_disk(tight), report_json_schema())
    assert read_report(tight.out_dir) == tight.report


def test_synthetic_tasks_not_done_are_listed_by_id_and_said_not_re_runnable(
    tmp_path: Path,
) -> None:
    d = run(tmp_path, "bats_s4_1.yaml", constraint={"budget": 500})
    assert d.report.stop_reason is not None
    assert d.out_dir is not None
    ids = [t.task for t in d.report.unfinished_tasks]
    assert ids
    assert all(t.command is None for t in d.report.unfinished_tasks)
    lines = (d.out_dir / UNFINISHED_TXT).read_text(encoding="utf-8").splitlines()
    assert all(line.startswith("#") for line in lines)
    assert "run r:" in lines[0]
    assert any("cannot be re-run as commands" in line for line in lines[: len(lines) - len(ids)])
    assert [int(line.split()[2].rstrip(":")) for line in lines[-len(ids) :]] == ids
    config = tmp_path / "again.yaml"
    config.write_text(
        f"bag: {{file: {d.out_dir / UNFINISHED_TXT}}}\nconstraint: {{budget: 6}}\n"
        "machine_types: [{name: small, price: 1, max_count: 4}]\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match="no commands"):
        expand_bag(load_config(config))


def test_no_unfinished_txt_when_every_task_was_done(quickstart: DryRun, tmp_path: Path) -> None:
    """Nor a stale one: a resumed run that finished removes what its first part wrote."""
    assert quickstart.out_dir is not None
    assert quickstart.report.unfinished_tasks == ()
    assert not (quickstart.out_dir / UNFINISHED_TXT).exists()
    (tmp_path / UNFINISHED_TXT).write_text("# from before\necho again\n")
    write_report(quickstart.report, None, tmp_path)
    assert not (tmp_path / UNFINISHED_TXT).exists()


def test_commands_a_bag_file_cannot_hold_are_commented_out(
    quickstart: DryRun, tmp_path: Path
) -> None:
    """A command over several lines, or one a bag file would read as a comment, is named
    by id in a comment instead; a command's pipes do not break report.md's table."""
    tasks = (
        UnfinishedTask(task=0, command="printf 'a\nb'\necho two", why="cut_off", error=None),
        UnfinishedTask(task=1, command="  sort | uniq -c  ", why="not_started", error=None),
        UnfinishedTask(task=2, command="# nothing", why="failed", error="exit 1\nTraceback"),
    )
    report = dataclasses.replace(quickstart.report, stop_reason="stopped", unfinished_tasks=tasks)
    write_report(report, None, tmp_path)
    lines = (tmp_path / UNFINISHED_TXT).read_text(encoding="utf-8").splitlines()
    assert [line for line in lines if not line.startswith("#")] == ["sort | uniq -c"]
    assert "# task 0: cut off" in lines
    assert "# task 2: failed" in lines
    md = (tmp_path / REPORT_MD).read_text(encoding="utf-8")
    assert "| 1 | not started | sort \\| uniq -c | - |" in md
    assert "| 2 | failed | # nothing | exit 1 Traceback |" in md
