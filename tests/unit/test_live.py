"""``autoscaler status`` lines: a run under way shows its estimate, a run over its finish."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.core.model import TaskState
from autoscaler.core.state import RunState
from autoscaler.report.format import hms
from autoscaler.run.live import jobs_done, status_lines
from autoscaler.run.start import dry_run

EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"


def rows(lines: list[str]) -> dict[str, str]:
    """The ``  key: value`` lines of ``status_lines`` as a mapping."""
    return dict(line.strip().split(": ", 1) for line in lines[1:] if line.startswith("  "))


def test_a_finished_run_shows_its_finish_not_an_estimate() -> None:
    cfg = load_config(EXAMPLES / "quickstart.yaml")
    under_way: list[list[str]] = []

    def watch(state: RunState) -> None:
        if state.tasks.done >= 250 and not under_way:
            under_way.append(status_lines("r", cfg, state, None))

    d = dry_run(cfg, expand_bag(cfg), seed=1, out_dir=None, run_id="r", progress=watch)
    assert d.report.stop_reason is None
    middle = rows(under_way[0])
    assert "estimated finish" in middle
    assert "finished at" not in middle
    over = rows(status_lines("r", cfg, d.state, None))
    assert "estimated finish" not in over
    assert over["finished at"] == hms(d.report.makespan_s)
    assert over["ended"] == "bag finished"
    assert not any("carry on" in line for line in status_lines("r", cfg, d.state, None))


def test_a_run_stopped_early_shows_when_and_why(tmp_path: Path) -> None:
    data = yaml.safe_load((EXAMPLES / "bats_s4_1.yaml").read_text(encoding="utf-8"))
    data["constraint"]["budget"] = 500  # the sampling phase alone costs 450
    path = tmp_path / "tight.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    cfg = load_config(path)
    d = dry_run(cfg, expand_bag(cfg), seed=1, out_dir=None, run_id="r")
    assert d.report.stop_reason is not None
    over = rows(status_lines("r", cfg, d.state, None))
    assert "estimated finish" not in over
    assert over["stopped at"] == hms(d.report.makespan_s)
    assert over["ended"] == d.report.stop_reason


def test_a_shortfall_shows_in_status_and_metrics_as_soon_as_it_is_said() -> None:
    """The step the run says its budget cannot finish the bag, `status` shows the warning
    with the budget needed and the Prometheus gauges turn to it."""
    from autoscaler.run.gauges import Metrics
    from tests.conftest import make_config

    cfg = make_config(
        bag={"synthetic": 1000},
        constraint={"budget": 30.0},
        emulator={"seed": 1, "runtime": {"dist": "normal", "mean_s": 900, "sd_s": 60}},
    )
    metrics = Metrics(cfg)
    seen: list[tuple[dict[str, str], float | None, float | None]] = []

    def watch(state: RunState) -> None:
        if state.decisions.shortfalls and not seen:
            metrics.update(state, None)
            needed = metrics.registry.get_sample_value("autoscaler_budget_needed")
            flag = metrics.registry.get_sample_value("autoscaler_budget_shortfall")
            seen.append((rows(status_lines("r", cfg, state, None)), needed, flag))

    result = dry_run(cfg, expand_bag(cfg), progress=watch, plots=False)
    assert seen, "no shortfall was said"
    status, needed, flag = seen[0]
    warning = result.state.decisions.shortfalls[0][1]
    assert warning.needed_budget is not None
    assert warning.needed_budget > 30.0
    assert "budget unlikely to finish the bag" in status["warning"]
    assert f"{warning.needed_budget:.2f}" in status["warning"]
    assert flag == 1.0
    assert needed == warning.needed_budget


def test_status_advises_what_carries_the_run_on_as_what_it_is() -> None:
    """A run under way with no daemon: a plain run carries on with `run --resume`; a
    service's job with its service (whether its machines were handed over or released,
    ``Interrupted``), never `run --plan`; a run held for a budget with `run --plan`."""
    from autoscaler.core.model import Hold, Interrupted, Resumed

    cfg = load_config(EXAMPLES / "quickstart.yaml")
    states: list[RunState] = []

    class UnderWay(Exception):
        """The run is stopped here, a hundred tasks done, as a killed daemon leaves it."""

    def watch(state: RunState) -> None:
        if state.tasks.done >= 100:
            states.append(state)
            raise UnderWay

    with pytest.raises(UnderWay):
        dry_run(cfg, expand_bag(cfg), seed=1, out_dir=None, run_id="r", progress=watch)
    (state,) = states
    service = Path("/srv/state")

    def advice(state: RunState, service: Path | None) -> str:
        return "\n".join(status_lines("r", cfg, state, None, service)[-1:])

    assert "autoscaler run --resume <run dir>" in advice(state, None)
    serve = f"autoscaler serve <its service config> --state-dir {service}"
    assert serve in advice(state, service)
    state.apply(state.now, Interrupted("the service stops"))
    assert serve in advice(state, service)
    assert "--plan" not in advice(state, service)
    state.apply(state.now, Resumed("the service started again"))
    state.apply(state.now, Hold("the samples are in"))
    assert "autoscaler run --plan <plan dir> --option N" in advice(state, None)


def test_each_jobs_tasks_done_as_the_live_view_counts_them_is_a_count_of_its_tasks() -> None:
    """``jobs_done`` counts from the runs ended since it last looked (kept on the state);
    asked at every step of a deadline run of several jobs, it is each job's tasks done."""
    cfg = load_config(EXAMPLES / "deadline.yaml")
    seen = 0

    def watch(state: RunState) -> None:
        nonlocal seen
        seen += 1
        assert jobs_done(state) == {
            j.name: sum(
                state.tasks.task_state[t] is TaskState.DONE
                for t in range(j.first, j.first + j.count)
            )
            for j in state.work.jobs
        }

    d = dry_run(cfg, expand_bag(cfg), seed=1, out_dir=None, run_id="r", progress=watch)
    assert seen > 100
    assert len(d.state.work.jobs) > 1
    assert sum(jobs_done(d.state).values()) == d.state.tasks.done > 0
