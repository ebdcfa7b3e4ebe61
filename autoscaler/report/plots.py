"""The plots of a run's report: ``gantt.png`` (machines over time with their tasks) and
``spend.png`` (committed and actual spend against the budget over time).

Figures are made with matplotlib's object API (no pyplot): no global state, so a report
written from any thread leaves nothing behind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from autoscaler.core.job_ledger import Jobs
from autoscaler.core.model import JobSpec
from autoscaler.core.state import Machine, RunState
from autoscaler.core.words import counted
from autoscaler.report.activity import activity
from autoscaler.report.format import hms
from autoscaler.report.labels import Place, ladder, place_apart

if TYPE_CHECKING:
    from pathlib import Path

    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from autoscaler.budget.frontier import Frontier

_OUTCOME_COLOURS = (("done", None), ("failed", "red"), ("cancelled", "grey"), ("lost", "black"))
_HOUR = 3600.0

BIG_MACHINES = 200
BIG_RUNS = 20_000
"""A run with more machines or runs than these has its Gantt chart drawn as an image of
time buckets per machine (``activity``), not a bar per task: at 100,000 tasks a bar
each takes tens of seconds to draw and shows nothing a bucket would not."""
_BUCKETS = 1000


def gantt_figure(state: RunState) -> Figure:
    """Machines over time (one row each, coloured by type) with their tasks on them.

    The legend sits below the axes, where it hides no machine, and names only the types
    that had machines. In deadline mode the tasks are coloured by job instead, the legend
    names the jobs, and each job's deadline is a line in its colour (its arrival a thin
    dotted one); the machines' lives stay pale in their type's colour.
    """
    from matplotlib import colormaps
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    if len(state.fleet.machines) > BIG_MACHINES or len(state.tasks.segments) > BIG_RUNS:
        return _bucket_gantt(state)
    machines = sorted(state.fleet.machines.values(), key=lambda m: (m.type.name, m.launched_at))
    colours = colormaps["tab10"]
    type_colour = {name: colours(i % 10) for i, name in enumerate(sorted(state.types))}
    job_colour = _job_colours(state.work)
    life_grey = (0.5, 0.5, 0.5, 1.0)
    by_machine: dict[str, list[tuple[float, float, str, str]]] = {}
    for seg in state.tasks.segments:
        job = state.work.job_of(seg.task).name if state.work.deadline_mode else ""
        by_machine.setdefault(seg.machine, []).append((seg.start, seg.end, seg.outcome, job))
    fig = Figure(figsize=(12, min(40.0, 2.5 + 0.12 * len(machines))), layout="constrained")
    ax = fig.subplots()
    for row, m in enumerate(machines):
        end = m.ended_at if m.ended_at is not None else state.now
        ax.broken_barh(
            [(m.launched_at / _HOUR, (end - m.launched_at) / _HOUR)],
            (row - 0.45, 0.9),
            facecolors=[(*(life_grey if job_colour else type_colour[m.type.name])[:3], 0.25)],
        )
        segs = by_machine.get(m.id, [])
        for outcome, colour in _OUTCOME_COLOURS:
            done = [(s, e, j) for s, e, o, j in segs if o == outcome]
            if done:
                ax.broken_barh(
                    [(s / _HOUR, (e - s) / _HOUR) for s, e, _ in done],
                    (row - 0.35, 0.7),
                    facecolors=[
                        colour or job_colour.get(j) or type_colour[m.type.name] for _, _, j in done
                    ],
                    edgecolors="white",
                    linewidth=0.3,
                )
    ax.set_yticks(range(len(machines)))
    ax.set_yticklabels([m.id for m in machines], fontsize=max(3, 8 - len(machines) // 40))
    ax.set_ylim(-1, len(machines))
    ax.set_xlabel("hours since start")
    ax.set_title(
        "Machines over time: life (pale) and tasks (solid; red failed, grey cancelled, black lost)"
    )
    for spec in state.work.jobs:
        ax.axvline(spec.at / _HOUR, color=job_colour[spec.name], linewidth=0.8, linestyle=":")
    ran = sorted({m.type.name for m in machines})
    if state.work.deadline_mode:
        ax.set_title(
            "Machines over time: life (pale) and tasks (solid, by job; red failed, "
            "grey cancelled, black lost); deadlines solid, arrivals dotted"
        )
        _deadline_lines(ax, state, job_colour)
        fig.legend(  # a job's tasks (the square) and deadline (the line) in its colour
            [
                Line2D([], [], color=job_colour[j.name], linewidth=1.5, marker="s", markersize=7)
                for j in state.work.jobs
            ],
            [f"{j.name}, due {hms(j.deadline)}" for j in state.work.jobs],
            loc="outside lower center",
            ncol=min(len(state.work.jobs), 6),
            fontsize=8,
            frameon=False,
        )
        names = [
            ax.annotate(
                j.name,
                (j.deadline / _HOUR, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(3.0, -3.0),
                textcoords="offset points",
                color=job_colour[j.name],
                fontsize=8,
                annotation_clip=False,
                bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"},
            )
            for j in state.work.jobs
        ]
        # Below the top of the axes, right of the line (left of it at the right edge),
        # lower the more names share a place.
        places: list[Place] = []
        for k in range(2 * len(names) + 1):
            below = -3.0 - k * _NAME_STEP
            places += [(3.0, below, "left", "top"), (-3.0, below, "right", "top")]
        place_apart(fig, names, places)
    elif ran:
        _type_legend(fig, ran, type_colour)
    ax.grid(axis="x", alpha=0.3)
    return fig


def _bucket_gantt(state: RunState) -> Figure:
    """The Gantt chart of a big run: one pixel row per machine (by type, then launch),
    one column per time bucket, coloured by how much of the bucket its slots spent on
    runs (its type's colour for done runs; red failed, grey cancelled, black lost) on
    the pale colour of its life. Drawn as one rasterised image."""
    import numpy as np
    from matplotlib import colormaps
    from matplotlib.colors import to_rgb
    from matplotlib.figure import Figure

    act = activity(state, _BUCKETS)
    colours = colormaps["tab10"]
    type_colour = {name: colours(i % 10)[:3] for i, name in enumerate(sorted(state.types))}
    row_colour = np.array([type_colour[t] for t in act.types]).reshape(-1, 1, 3)
    used = sum(act.busy.values())
    life = np.clip(act.alive - used, 0.0, 1.0) * 0.25
    image = np.empty((*act.alive.shape, 3))  # a cell per machine, bucket and colour
    image[...] = (1.0 - life - np.clip(used, 0.0, 1.0))[..., None]
    image += life[..., None] * row_colour
    for outcome, colour in _OUTCOME_COLOURS:
        if not act.busy[outcome].any():  # no run ended so (most big runs lose none)
            continue
        share = np.clip(act.busy[outcome], 0.0, 1.0)[..., None]
        image += share * (row_colour if colour is None else np.array(to_rgb(colour)))
    n = len(act.machines)
    fig = Figure(figsize=(12, 8), layout="constrained")
    ax = fig.subplots()
    hours = state.now / _HOUR if state.now > 0 else 1.0
    ax.imshow(
        np.clip(image, 0.0, 1.0),
        aspect="auto",
        interpolation="antialiased",
        origin="lower",
        extent=(0.0, hours, -0.5, n - 0.5),
        rasterized=True,
    )
    firsts = [i for i, t in enumerate(act.types) if i == 0 or act.types[i - 1] != t]
    ax.set_yticks(firsts)
    ax.set_yticklabels(
        [f"{act.types[i]} ({act.types.count(act.types[i])})" for i in firsts], fontsize=8
    )
    ax.set_ylabel(f"{counted(n, 'machine', spec=',')}, by type then launch")
    ax.set_xlabel("hours since start")
    ax.set_title(
        f"Machines over time, {counted(len(state.tasks.segments), 'run', spec=',')} in buckets of "
        f"{hms(act.bucket_s)}:\n"
        "share of slot time busy (type colour; red failed, grey cancelled, black lost), "
        "life pale"
    )
    for spec in state.work.jobs:
        ax.axvline(spec.deadline / _HOUR, color="black", linewidth=0.8)
    ran = sorted(set(act.types))
    _type_legend(fig, ran, type_colour)
    return fig


def _deadline_lines(
    ax: Axes, state: RunState, job_colour: Mapping[str, tuple[float, float, float, float]]
) -> dict[str, Line2D]:
    """Each job's deadline as a line in its colour. Deadlines that would be drawn on one
    another (closer than a few pixels) are dashed in turn, so every colour shows."""
    span = max(state.now, max((j.deadline for j in state.work.jobs), default=0.0), 1.0)
    groups: list[list[JobSpec]] = []
    for spec in sorted(state.work.jobs, key=lambda j: j.deadline):
        if groups and spec.deadline - groups[-1][0].deadline <= _COINCIDE * span:
            groups[-1].append(spec)
        else:
            groups.append([spec])
    lines: dict[str, Line2D] = {}
    for group in groups:
        for i, spec in enumerate(group):
            dashes = (i * _DASH, (_DASH, (len(group) - 1) * _DASH)) if len(group) > 1 else "-"
            lines[spec.name] = ax.axvline(
                spec.deadline / _HOUR,
                color=job_colour[spec.name],
                linewidth=1.5,
                linestyle=dashes,
                label=f"deadline of {spec.name}",
            )
    return lines


_NAME_STEP = 11.0
"""How far apart, in points, the names of deadlines are stacked when they would collide."""
_COINCIDE = 0.004
"""Deadlines closer than this share of the time axis are drawn as one (a few pixels)."""
_DASH = 4.0
"""The length of a dash of a deadline drawn with others, in points (times the width)."""


def _job_colours(work: Jobs) -> dict[str, tuple[float, float, float, float]]:
    """A colour per job (deadline mode), in the jobs' order; none in budget mode. Reds
    and greys are left out: they mean failed and cancelled runs."""
    from matplotlib import colormaps

    many = len(work.jobs) > len(_TAB10_FOR_JOBS)
    name, picks = ("tab20", _TAB20_FOR_JOBS) if many else ("tab10", _TAB10_FOR_JOBS)
    colours = colormaps[name]
    return {j.name: colours(picks[i % len(picks)]) for i, j in enumerate(work.jobs)}


_TAB10_FOR_JOBS = (0, 1, 2, 4, 5, 6, 8, 9)
_TAB20_FOR_JOBS = (0, 1, 2, 3, 4, 5, 8, 9, 10, 11, 12, 13, 16, 17, 18, 19)


def spend_curve(state: RunState, points: int = 400) -> tuple[list[float], list[float]]:
    """Actual spend over time: every machine billed for its life up to each instant
    (``BillingModel.spend_at``); a spot machine of a market-priced type at the mean
    price it is billed over its life (``Fleet.billed``), so the curve ends at the
    report's cost."""
    import numpy as np

    end = max(state.now, 1.0)
    times = [end * i / points for i in range(points + 1)]
    machines = list(state.fleet.machines.values())
    launched = np.array([m.launched_at for m in machines], dtype=float)
    ended = np.array(
        [m.ended_at if m.ended_at is not None else state.now for m in machines], dtype=float
    )
    prices = np.array([_mean_price(state, m) for m in machines], dtype=float)
    spent = state.billing.spend_at(np.array(times), prices, launched, ended)
    return times, spent.tolist()


def _mean_price(state: RunState, m: Machine) -> float:
    """``m``'s price per ATU, or for a market-priced type what it is billed for its life
    over what a price of 1 would bill."""
    if m.type.cap is None:
        return m.type.price
    end = m.ended_at if m.ended_at is not None else state.now
    unit = state.billing.cost(1.0, end - m.launched_at)
    return state.fleet.billed(m, end) / unit if unit > 0 else m.type.price


_SPEND_LABELS = {
    "budget": "budget {budget:g}",
    "spent": "spent by the machines' lives so far",
    "committed": "committed (paid units incl. the current ones)",
}
"""The spend plot's legend entries (``budget`` formatted with the budget)."""


def spend_figure(state: RunState, budget: float | None) -> Figure:
    """Committed and actual spend over time, against the budget if there is one.

    The three often coincide (everything spent was committed; a run may spend its whole
    budget), so each is drawn to stay visible: the budget as a wide pale band at the
    bottom, spent as a thick line over it, committed as a thin dashed step on top.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 5), layout="constrained")
    ax = fig.subplots()
    if budget is not None:
        ax.axhline(
            budget,
            color="tab:red",
            linewidth=6,
            alpha=0.25,
            zorder=1,
            label=_SPEND_LABELS["budget"].format(budget=budget),
        )
    times, spent = spend_curve(state)
    ax.plot(
        [t / _HOUR for t in times],
        spent,
        color="tab:orange",
        linewidth=3.5,
        zorder=2,
        label=_SPEND_LABELS["spent"],
    )
    ax.step(
        [t / _HOUR for t, _ in state.money.spend_log] + [state.now / _HOUR],
        [v for _, v in state.money.spend_log] + [state.money.spend_log[-1][1]],
        where="post",
        color="tab:blue",
        linewidth=1.5,
        linestyle=(0, (4, 2)),
        zorder=3,
        label=_SPEND_LABELS["committed"],
    )
    ax.set_xlabel("hours since start")
    ax.set_ylabel("money")
    ax.set_title("Spend against budget" if budget is not None else "Spend over time (no budget)")
    fig.legend(loc="outside lower center", ncol=3, fontsize=9, frameon=False)
    ax.grid(alpha=0.3)
    return fig


def frontier_figure(frontier: Frontier) -> Figure:
    """The budget frontier: predicted cost against makespan per option, with both
    intervals as error bars, each point labelled with its option number and label.

    Options close together would have their labels on top of each other: each label
    takes the first free place beside its point, then further above or below it.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    labels = []
    for i, o in enumerate(frontier.options, 1):
        x = o.makespan_s / _HOUR
        xlo, xhi = o.makespan_interval_s[0] / _HOUR, o.makespan_interval_s[1] / _HOUR
        ax.errorbar(
            [x],
            [o.cost],
            xerr=[[x - xlo], [xhi - x]],
            yerr=[[o.cost - o.cost_interval[0]], [o.cost_interval[1] - o.cost]],
            fmt="o",
            color="tab:blue",
            capsize=3,
        )
        labels.append(
            ax.annotate(
                f"{i}: {o.label}",
                (x, o.cost),
                textcoords="offset points",
                xytext=(6, 6),
                fontsize=_FRONTIER_FONT,
            )
        )
    ax.set_xlabel("predicted makespan (hours)")
    ax.set_ylabel("predicted cost")
    ax.set_title("Budget options after sampling (intervals: the runtimes' uncertainty)")
    ax.grid(alpha=0.3)
    ax.margins(0.15)
    places = ladder(6, 6, 1.2 * _FRONTIER_FONT, 2 * len(labels) + 1)
    beside = places[:4]
    for label, place in zip(labels, place_apart(fig, labels, places), strict=True):
        if place not in beside:  # moved away from its point: a thin line back to it
            ax.annotate(
                "",
                label.xy,
                xytext=place[:2],
                textcoords="offset points",
                arrowprops={"arrowstyle": "-", "color": "0.6", "linewidth": 0.6},
            )
    return fig


_FRONTIER_FONT = 9.0
"""The size of the frontier's option labels, in points."""


def frontier_plot(frontier: Frontier, path: Path) -> None:
    frontier_figure(frontier).savefig(path, dpi=100)


def _type_legend(fig: Figure, ran: list[str], type_colour: Mapping[str, Any]) -> None:
    """One patch per machine type that ran, below the axes."""
    from matplotlib.patches import Patch

    fig.legend(
        [Patch(color=type_colour[name]) for name in ran],
        ran,
        loc="outside lower center",
        ncol=min(len(ran), 8),
        fontsize=8,
        frameon=False,
    )
