"""The Gantt chart of a big run: time buckets per machine, one image (``report.activity``)."""

from __future__ import annotations

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.image import AxesImage

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.report import plots
from autoscaler.report.activity import activity, covered
from autoscaler.run.start import dry_run
from tests.unit.test_report import EXAMPLES


def test_covered_time_per_bucket_is_the_overlap_of_each_interval() -> None:
    """Each bucket gets the overlap of every interval with it, summed per row."""
    rows = np.array([0, 0, 1, 1])
    starts = np.array([0.25, 2.5, 1.0, 0.0])
    ends = np.array([1.5, 2.75, 3.0, 0.5])
    got = covered(rows, starts, ends, 2, 4)
    want = np.zeros((2, 4))
    for r, s, e in zip(rows, starts, ends, strict=True):
        for b in range(4):
            want[r, b] += max(0.0, min(e, b + 1) - max(s, b))
    assert np.allclose(got, want, atol=1e-12)


def _run(machines: int):  # type: ignore[no-untyped-def]
    cfg = load_config(EXAMPLES / "quickstart.yaml")
    cfg = cfg.model_copy(
        update={
            "policy": "round_robin",
            "machine_types": [
                t.model_copy(update={"max_count": machines}) for t in cfg.machine_types
            ],
        }
    )
    return dry_run(cfg, expand_bag(cfg), seed=1).state


def test_a_big_runs_chart_is_one_image_of_buckets_and_its_busy_time_adds_up() -> None:
    """Past BIG_MACHINES machines the chart is a single rasterised image, a row per
    machine, and the busy time in its buckets is the time the machines' runs took."""
    state = _run(plots.BIG_MACHINES // 2 + 1)
    assert len(state.fleet.machines) > plots.BIG_MACHINES
    fig = plots.gantt_figure(state)
    FigureCanvasAgg(fig).draw()
    (ax,) = fig.axes
    images = [a for a in ax.get_children() if isinstance(a, AxesImage)]
    assert len(images) == 1
    assert images[0].get_array().shape[:2] == (len(state.fleet.machines), plots._BUCKETS)
    assert not ax.collections  # no bar per task
    act = activity(state, 50)
    slots = np.array([state.fleet.machines[m].type.slots for m in act.machines])[:, None]
    busy_s = float((sum(act.busy.values()) * slots).sum() * act.bucket_s)
    assert np.isclose(busy_s, sum(s.end - s.start for s in state.tasks.segments), rtol=1e-9)
    alive_s = float(act.alive.sum() * act.bucket_s)
    lives = sum(
        (m.ended_at if m.ended_at is not None else state.now) - m.launched_at
        for m in state.fleet.machines.values()
    )
    assert np.isclose(alive_s, lives, rtol=1e-9)


def test_a_small_runs_chart_keeps_a_bar_per_task() -> None:
    """Up to BIG_MACHINES machines (and BIG_RUNS runs) the chart is drawn as before."""
    state = _run(10)
    fig = plots.gantt_figure(state)
    (ax,) = fig.axes
    assert not [a for a in ax.get_children() if isinstance(a, AxesImage)]
    assert len(ax.collections) >= len(state.fleet.machines)
