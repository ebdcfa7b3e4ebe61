"""Deadline mode's report, Gantt chart, status and metrics, on small runs in the emulator:
the per-job figures against the run's segments, counted here independently."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import jsonschema
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_rgba
from typer.testing import CliRunner

from autoscaler.cli.main import app
from autoscaler.config.load import load_config
from autoscaler.config.schema import RunConfig
from autoscaler.core.model import Forecast, JobSpec, TaskState
from autoscaler.core.state import RunState
from autoscaler.report.build import build_report
from autoscaler.report.format import hms
from autoscaler.report.markdown import render_head, render_markdown
from autoscaler.report.plots import gantt_figure
from autoscaler.report.records import REPORT_JSON, REPORT_MD, DeadlineReport, read_report
from autoscaler.report.write import write_report
from autoscaler.run.gauges import Metrics
from autoscaler.run.live import status_lines
from tests.unit.deadline_runs import TASK_S, deadline_run, jobs, one_step_shares

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"


@pytest.fixture(scope="module")
def cfg() -> RunConfig:
    return load_config(CONFIG_DIR / "examples" / "quickstart.yaml")


@pytest.fixture(scope="module")
def on_time() -> RunState:
    return deadline_run(jobs(3, 20), slow=1.0)


@pytest.fixture(scope="module")
def late() -> RunState:
    """Tasks take three times what the jobs say, on too few machines to catch up."""
    return deadline_run(jobs(3, 20), slow=3.0)


def report_of(cfg: RunConfig, state: RunState) -> DeadlineReport:
    report = build_report(cfg, state, tasks=[], run_id="d", seed=1)
    assert isinstance(report, DeadlineReport)
    return report


def first_done(state: RunState) -> dict[int, float]:
    out: dict[int, float] = {}
    for seg in state.tasks.segments:
        if seg.outcome == "done":
            out[seg.task] = min(seg.end, out.get(seg.task, seg.end))
    return out


@pytest.mark.parametrize("which", ["on_time", "late"])
def test_per_job_figures_are_the_segments(
    cfg: RunConfig, which: str, request: pytest.FixtureRequest
) -> None:
    """Finish, late tasks and seconds late per job, from the done segments."""
    state: RunState = request.getfixturevalue(which)
    report = report_of(cfg, state)
    done = first_done(state)
    assert [j.name for j in report.jobs] == [j.name for j in state.work.jobs]
    for spec, out in zip(state.work.jobs, report.jobs, strict=True):
        ends = [done[t] for t in range(spec.first, spec.first + spec.count) if t in done]
        assert out.done == len(ends) == spec.count
        assert out.finish_s == pytest.approx(max(ends), abs=1e-3)
        assert out.tasks_late == sum(e > spec.deadline for e in ends)
        assert out.seconds_late == pytest.approx(max(0.0, max(ends) - spec.deadline), abs=1e-3)
        assert out.met_deadline == (out.tasks_late == 0)
        forecast = state.work.forecasts[spec.name]
        assert out.predicted_finish_s == pytest.approx(forecast.finish, abs=1e-3)
    assert report.jobs_met_deadline == sum(j.met_deadline for j in report.jobs)


@pytest.mark.parametrize("which", ["on_time", "late"])
def test_cost_shares_add_up_to_the_machines_cost(
    cfg: RunConfig, which: str, request: pytest.FixtureRequest
) -> None:
    """Each machine's cost (one hour each here) goes to the jobs that had come by its
    launch, by their seconds on it (jobs that came later ride in the hour already paid
    for); the shares and the unattributed cost add up to what the machines cost."""
    state: RunState = request.getfixturevalue(which)
    report = report_of(cfg, state)
    expected = {j.name: 0.0 for j in state.work.jobs}
    for m in state.fleet.machines.values():
        assert m.ended_at is not None
        cost = state.billing.cost(m.type.price, m.ended_at - m.launched_at)
        for name, share in one_step_shares(state, m).items():
            expected[name] += cost * share
    assert any(c > 0 for c in expected.values())
    for out in report.jobs:
        assert out.cost == pytest.approx(expected[out.name], abs=1e-3)
    total = sum(j.cost for j in report.jobs) + report.unattributed_cost
    assert total == pytest.approx(state.actual_cost(), abs=1e-3)
    assert total == pytest.approx(report.cost, abs=1e-3)


def test_a_late_run_reports_late_tasks_and_was_warned_before_the_deadline(
    cfg: RunConfig, late: RunState
) -> None:
    report = report_of(cfg, late)
    lateish = [j for j in report.jobs if j.tasks_late > 0]
    assert lateish, "the slow run finished every job in time"
    for out in lateish:
        spec = late.work.job_named(out.name)
        said = [t for t, note in late.work.late_log if note.job == out.name and note.tasks > 0]
        assert said
        assert said[0] < spec.deadline
        assert out.first_warning is not None
        assert out.first_warning.at_s == pytest.approx(said[0])
        assert out.first_warning.cause in ("deadline", "budget")
        assert out.warnings == len(said)
    assert report.jobs_met_deadline < len(report.jobs)


def test_the_on_time_run_meets_every_deadline_unwarned(cfg: RunConfig, on_time: RunState) -> None:
    report = report_of(cfg, on_time)
    assert report.jobs_met_deadline == len(report.jobs)
    assert all(j.first_warning is None and j.tasks_late == 0 for j in report.jobs)


def test_report_json_validates_and_reads_back(
    cfg: RunConfig, late: RunState, tmp_path: Path
) -> None:
    report = report_of(cfg, late)
    write_report(report, late, tmp_path)
    data = json.loads((tmp_path / REPORT_JSON).read_text(encoding="utf-8"))
    assert data["mode"] == "deadline"
    assert list(data)[-3:] == ["jobs", "jobs_met_deadline", "unattributed_cost"]
    schema = json.loads((CONFIG_DIR / "report.schema.json").read_text(encoding="utf-8"))
    jsonschema.validate(data, schema)
    assert read_report(tmp_path) == report
    data["jobs"][0].pop("tasks_late")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, schema)


def test_markdown_has_the_jobs_table_and_says_how_many_met_their_deadline(
    cfg: RunConfig, late: RunState, tmp_path: Path
) -> None:
    report = report_of(cfg, late)
    write_report(report, None, tmp_path)
    md = (tmp_path / REPORT_MD).read_text(encoding="utf-8")
    assert "## Jobs" in md
    rows = [line for line in md.splitlines() if line.startswith("| job")]
    assert len(rows) == 1 + len(report.jobs)  # the header and a row per job
    head = render_head(report)
    assert f"{report.jobs_met_deadline} of {len(report.jobs)} jobs met their deadline" in head
    assert "Warning at" in head
    assert "charged to the jobs that had arrived when it began" in md.split("## Jobs")[1]


def test_gantt_colours_tasks_by_job_and_draws_deadlines(cfg: RunConfig, late: RunState) -> None:
    fig = gantt_figure(late)
    FigureCanvasAgg(fig)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [f"{j.name}, due {hms(j.deadline)}" for j in late.work.jobs]
    ax = fig.axes[0]
    xs = {round(line.get_xdata()[0] * 3600, 3) for line in ax.get_lines()}
    assert {j.deadline for j in late.work.jobs} <= xs
    assert {j.at for j in late.work.jobs} <= xs


def test_gantt_deadlines_that_coincide_stay_distinct_and_each_is_named() -> None:
    """Two jobs due at once and a third due a minute later: each deadline is its own line
    in its job's colour, the two that coincide dashed in turn so both show, each named
    by a label at the top that overlaps no other, and each in the legend with its time."""
    specs = (
        JobSpec("a", 0, 10, 0.0, 900.0, None, TASK_S),
        JobSpec("b", 10, 10, 300.0, 900.0, None, TASK_S),
        JobSpec("c", 20, 10, 300.0, 960.0, None, TASK_S),
    )
    state = deadline_run(specs)
    fig = gantt_figure(state)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    due = {j.name: lines[f"deadline of {j.name}"] for j in specs}
    for j in specs:
        assert due[j.name].get_xdata()[0] * 3600 == pytest.approx(j.deadline)
    colours = {to_rgba(line.get_color()) for line in due.values()}
    assert len(colours) == len(specs)
    # matplotlib keeps a line's dash pattern as (offset, dashes): the two that coincide
    # are dashed, each starting where the other's gap does.
    a, b = (due[n]._unscaled_dash_pattern for n in ("a", "b"))
    assert a[1] is not None
    assert b[1] is not None
    assert a[0] != b[0]
    renderer = canvas.get_renderer()
    names = [t for t in ax.texts if t.get_text() in {"a", "b", "c"}]
    assert sorted(t.get_text() for t in names) == ["a", "b", "c"]
    boxes = [t.get_window_extent(renderer) for t in names]
    for x, y in itertools.combinations(boxes, 2):
        assert not x.overlaps(y)
    for box in boxes:
        assert fig.bbox.contains(box.x0, box.y0)
        assert fig.bbox.contains(box.x1, box.y1)
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    for j in specs:
        assert f"{j.name}, due {hms(j.deadline)}" in legend


def test_status_and_metrics_show_each_job_and_its_lateness(cfg: RunConfig, late: RunState) -> None:
    lines = status_lines("d", cfg, late, None)
    for spec in late.work.jobs:
        line = next(x for x in lines if f"job {spec.name}:" in x)
        assert f"{spec.count}/{spec.count} done" in line
        said = late.work.late.get(spec.name)
        assert ("expected late" in line) == (said is not None and said.tasks > 0)
    metrics = Metrics(cfg)
    metrics.update(late, None)
    from prometheus_client import generate_latest

    text = generate_latest(metrics.registry).decode()
    for spec in late.work.jobs:
        said = late.work.late.get(spec.name)
        tasks = 0 if said is None else said.tasks
        assert f'autoscaler_job_late_tasks{{job="{spec.name}"}} {float(tasks)}' in text
        assert (
            f'autoscaler_job_tasks{{job="{spec.name}",state="total"}} {float(spec.count)}' in text
        )
        assert (
            f'autoscaler_job_deadline_seconds{{job="{spec.name}"}} {float(spec.deadline)}' in text
        )


@pytest.fixture(scope="module")
def example_dry_run(tmp_path_factory: pytest.TempPathFactory) -> str:
    """``report.md`` of a dry run of the deadline example (provider local, no budget)."""
    out = tmp_path_factory.mktemp("deadline") / "run"
    example = CONFIG_DIR / "examples" / "deadline.yaml"
    result = CliRunner().invoke(app, ["run", str(example), "--dry-run", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return (out / REPORT_MD).read_text(encoding="utf-8")


def test_a_run_without_a_budget_says_it_had_none(example_dry_run: str) -> None:
    """Not "Budget -; ... (within budget)": there was no budget to be within."""
    assert "within budget" not in example_dry_run
    assert "Budget -" not in example_dry_run
    (line,) = [line for line in example_dry_run.splitlines() if "spent" in line]
    assert line.startswith("No budget; spent ")


def test_a_dry_runs_report_says_it_was_emulated(example_dry_run: str) -> None:
    """The example's provider is local, but no machine was rented: the head says so."""
    head = example_dry_run.split("\n\n")[1]
    assert "provider **local**" in head
    assert "emulated (a dry run" in head


def test_only_a_dry_runs_report_says_emulated(cfg: RunConfig, on_time: RunState) -> None:
    """A real run's report has a time scale; a dry run's has none."""
    local = cfg.model_copy(update={"provider": "local"})
    real = build_report(local, on_time, tasks=[], run_id="d", seed=1, time_scale=1.0)
    dry = build_report(local, on_time, tasks=[], run_id="d", seed=1)
    assert "emulated" not in render_head(real)
    assert "emulated" in render_head(dry)


def test_each_jobs_forecast_has_an_interval_set_against_the_outcome(
    cfg: RunConfig, on_time: RunState
) -> None:
    """Issue 22: a job's forecast finish and cost carry intervals around the point; the
    report says whether the outcome fell inside, and the markdown shows them."""
    for f in on_time.work.forecasts.values():
        assert f.finish_interval is not None
        assert f.cost_interval is not None
        assert f.finish_interval[0] <= f.finish <= f.finish_interval[1]
        assert f.cost_interval[0] <= f.cost <= f.cost_interval[1]
        assert f.finish_interval[1] > f.finish_interval[0]
    report = report_of(cfg, on_time)
    for j in report.jobs:
        assert j.predicted_finish_interval_s is not None
        assert j.finish_inside is not None
        assert j.cost_inside is not None
    assert " – " in render_markdown(report).split("## Jobs")[1]


@pytest.mark.parametrize("gap_s", [0.0, 300.0, 1200.0])
def test_a_job_s_forecast_cost_is_what_it_is_charged_when_the_plan_holds(
    cfg: RunConfig, gap_s: float
) -> None:
    """Jobs one every ``gap_s`` sharing machines, task times as planned (no noise): each
    job's last forecast of its cost is the cost the report charges it, whether it came
    into hours an earlier job had paid for or not. (Before the forecasts charged by the
    report's rule, a job that came later was forecast up to 2.9 times its cost.)"""
    state = deadline_run(jobs(3, 20, gap_s=gap_s), noise=0.0)
    report = report_of(cfg, state)
    for out in report.jobs:
        assert out.predicted_cost == pytest.approx(out.cost, abs=1e-3), out.name
    assert sum(j.cost for j in report.jobs) + report.unattributed_cost == pytest.approx(
        state.actual_cost(), abs=1e-3
    )


def test_a_job_whose_late_tasks_moved_is_forecast_again(late: RunState) -> None:
    """Moving late tasks to other machines changes what the plan expects of their job
    (and of the jobs it shares those machines with): each move is followed in its step
    by a new forecast, which the report then sets against the outcome."""
    moved = [(t, c) for t, c in late.decisions.configurations if "late tasks moved" in c.reason]
    assert moved
    for _, c in moved:
        named = c.reason.partition(": ")[2].removesuffix(")").split(", ")
        assert set(named) <= {j.name for j in late.work.jobs}


def test_a_job_with_nothing_queued_is_forecast_while_its_tasks_run() -> None:
    """A job whose tasks all run (none queued) is still forecast when the machines it
    shares change: what they will charge it is not settled until its tasks end. A job
    that has ended is forecast again only while a machine it ran on is alive (tasks
    moved there change its share of that machine's hours), at the finish it had. A task
    run past its expected end is forecast to end in the tail it is in, not at once."""
    seen: list[tuple[str, int, int]] = []  # (job, its tasks not ended, of them running)
    ended_forecasts = 0

    def hook(now: float, events: list, actions: list, state: RunState) -> None:
        nonlocal ended_forecasts
        for a in actions:
            if isinstance(a, Forecast):
                job = state.work.job_named(a.job)
                ids = range(job.first, job.first + job.count)
                ended = (TaskState.DONE, TaskState.FAILED)
                left = sum(state.tasks.task_state[t] not in ended for t in ids)
                running = {t for m in state.fleet.alive_machines() for t in m.running}
                seen.append((a.job, left, sum(t in running for t in ids)))
                if left > 0:  # a task run past its expected time is not done now
                    lo, hi = a.finish_interval or (a.finish, a.finish)
                    assert lo <= a.finish <= hi
                    assert hi > now
                if left == 0:
                    ended_forecasts += 1
                    mine = [g for g in state.tasks.segments if g.task in ids]
                    alive = {m.id for m in state.fleet.alive_machines()}
                    assert any(g.machine in alive for g in mine)
                    assert a.finish == max(g.end for g in mine)
                    assert a.finish_interval == (a.finish, a.finish)

    deadline_run(jobs(3, 20), slow=3.0, on_step=hook)
    assert any(0 < left == running for _, left, running in seen)
    assert ended_forecasts > 0


def test_a_task_run_past_its_time_is_forecast_to_end_later_not_now() -> None:
    """One task of the first job runs eight times its time, after the job's others have
    ended: once its forecast finish has passed, the job is forecast again, to end in the
    tail the task is in (beyond now, within its interval), not at once; the last forecast
    interval holds its real end."""
    made: list[tuple[float, Forecast]] = []

    def hook(now: float, events: list, actions: list, state: RunState) -> None:
        made.extend((now, a) for a in actions if isinstance(a, Forecast) and a.job == "job0")

    state = deadline_run(jobs(3, 20), noise=0.05, slower={5: 8.0}, on_step=hook)
    end = max(g.end for g in state.tasks.segments if g.task == 5)
    late = [(now, f) for now, f in made if now > TASK_S["fast"] * 2 and now < end]
    assert late
    for now, f in late:
        assert f.finish > now
        assert f.finish_interval is not None
        assert f.finish_interval[1] > now
    lo, hi = made[-1][1].finish_interval or (0.0, 0.0)
    assert lo <= end <= hi


def test_an_ended_job_s_forecast_follows_tasks_moved_onto_its_machines(
    cfg: RunConfig, late: RunState
) -> None:
    """Late tasks of later jobs move onto the machines an ended job ran on and take part
    of the hours it was forecast to bear: its last forecast is what it is charged.
    (Before, the forecast made before the move stayed: job0 forecast 4.18, charged 3.83.)"""
    report = report_of(cfg, late)
    first = report.jobs[0]
    assert first.done == first.tasks
    assert first.finish_s is not None
    assert first.finish_s < max(j.finish_s or 0.0 for j in report.jobs)
    assert first.predicted_cost == pytest.approx(first.cost, rel=0.01)


def test_a_job_s_forecast_is_made_again_when_its_finish_passes_with_tasks_left(
    cfg: RunConfig,
) -> None:
    """Every task runs three times its declared time, all jobs come at once and the
    types' limits are reached at once, so the plan never changes: each job's forecast is
    still made again when what it rests on proves wrong (a learned time said, a forecast
    finish passed with tasks left), and the last ones are what happened. (Before, the
    forecasts of the run's third minute stayed: last finishes 1,500, 1,140 and 1,590 s
    for jobs done at 2,490, 2,340 and 2,490 s.)"""
    state = deadline_run(jobs(3, 20, gap_s=0.0), slow=3.0, noise=0.0)
    report = report_of(cfg, state)
    reasons = [c.reason for _, c in state.decisions.configurations]
    assert any("forecast outdated" in r for r in reasons)
    for j in report.jobs:
        assert j.finish_s is not None
        assert j.predicted_finish_s is not None
        assert j.predicted_finish_s == pytest.approx(j.finish_s, abs=1.0), j.name
        assert j.predicted_cost == pytest.approx(j.cost, rel=0.01), j.name
