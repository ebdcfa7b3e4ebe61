"""``autoscaler plan``: budget estimation before spending (sample, then the frontier).
The library is imported where it is called: the command group starts without it."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from autoscaler.cli.app import app, conclude, console, directory_to_write, err_console, load
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.words import counted

if TYPE_CHECKING:
    from rich.console import RenderableType

    from autoscaler.budget.frontier import Frontier
    from autoscaler.config.schema import RunConfig
    from autoscaler.core.model import TaskSpec


@app.command()
def plan(
    config: Annotated[Path, typer.Argument(help="the run's YAML file")],
    seed: Annotated[int | None, typer.Option(help="emulator seed (default: the config's)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the frontier as JSON")] = False,
    out: Annotated[
        Path | None,
        typer.Option(
            help="write plan.json and frontier.png here (for `run --option N`)",
            callback=directory_to_write,
        ),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="sample in the emulator, even for a real provider")
    ] = False,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="sample on the real provider without asking")
    ] = False,
) -> None:
    """Budget estimation before spending: sample, then print the budget frontier.

    Options go from the minimum budget that finishes the bag to the budget of the
    fastest mix, each with predicted cost and makespan and their intervals.

    With `provider: sim`, or --dry-run, the sampling runs in the emulator (the config's
    `emulator` section is the world it samples); `autoscaler run CONFIG --option N --plan
    DIR` (or `--budget B`) then runs one, sampling again alike (same seed).

    With a real provider the sampling is real: it says what sampling rents and asks
    first (--yes: do not ask). The config's budget caps it. Once the samples are in, the
    machines work on the bag until their paid time ends, and nothing more is committed.
    `autoscaler run --plan DIR --option N` carries the run on from the samples, adopting
    the sampling machines that still have paid time.
    """
    cfg, tasks = load(config)
    if cfg.policy != "bats":
        raise AutoscalerError("plan needs policy: bats (round robin has no budget to plan)")
    if cfg.deadline_mode:
        raise AutoscalerError(
            "plan offers budgets for a budget-mode bag; this config has deadlines (jobs, "
            "or constraint.deadline_s): `run --dry-run` shows what meeting them costs"
        )
    from autoscaler.providers import registry

    if not dry_run and not registry.emulated(cfg):
        _plan_real(cfg, tasks, seed, as_json=as_json, out=out, yes=yes)
        return
    from autoscaler.run.start import plan_dry

    frontier = plan_dry(cfg, tasks, seed=seed)
    _show_frontier(frontier, out, as_json)


def _show_frontier(
    frontier: Frontier, out: Path | None, as_json: bool, run_dir: Path | None = None
) -> None:
    """Print the frontier (a table, or JSON); with ``out`` also write plan.json and the
    plot there. ``run_dir``: the run whose samples it comes from (a real plan)."""
    from autoscaler.report.frontier_files import PLAN_JSON, frontier_json, write_plan

    data = frontier_json(frontier, run_dir)
    if out is not None:
        write_plan(frontier, data, out)
    if as_json:
        print(json.dumps(data, indent=2), flush=True)
        return
    console.print(_frontier_table(frontier))
    if out is not None:
        console.print(f"written: {out / PLAN_JSON}, {out / 'frontier.png'}")


def _plan_real(
    cfg: RunConfig,
    tasks: list[TaskSpec],
    seed: int | None,
    *,
    as_json: bool,
    out: Path | None,
    yes: bool,
) -> None:
    """``plan`` on a real provider: ask, sample for real, hold, print the frontier."""
    from autoscaler.report.format import hms
    from autoscaler.run.assemble import new_run_id
    from autoscaler.run.plan_real import Frontiers, HeldFrontier, sampling_offer
    from autoscaler.run.session import Ending, Session

    seed = cfg.emulator.seed if seed is None else seed
    offer = sampling_offer(cfg, len(tasks), seed)
    machines = ", ".join(f"{c} × {n}" for n, c in offer.counts.items() if c)
    err_console.print(
        f"Sampling rents {machines} from {cfg.provider_label()} ({offer.reason}). "
        f"Their first paid units commit {offer.first_commit:.2f}; sampling commits at most "
        f"the budget of {offer.budget:.2f} (`constraint.budget`) and stops committing once "
        "the samples are in.",
        markup=False,
        soft_wrap=True,
    )
    if not yes:
        if not sys.stdin.isatty():
            raise AutoscalerError(
                f"plan rents machines from {cfg.provider_label()}: confirm with --yes"
            )
        if not typer.confirm("Start sampling?", default=False, err=True):
            err_console.print("Nothing was rented.")
            raise typer.Exit(1)
    run_id = new_run_id(cfg)
    run_dir = Path("runs") / run_id
    plan_dir = out if out is not None else run_dir

    def shown(held: HeldFrontier) -> None:
        _show_frontier(held.frontier, plan_dir, as_json, run_dir)
        err_console.print(
            f"The samples are in. The sampling machines work on the bag until their paid "
            f"time ends (within {hms(held.paid_left_s)} of the samples); to carry the run "
            f"on with them: autoscaler run --plan {plan_dir} --option N",
            markup=False,
            soft_wrap=True,
        )

    def failed(reason: str) -> None:
        err_console.print(f"error: no frontier from these samples: {reason}", markup=False)

    frontiers = Frontiers(cfg.time_scale, shown, failed)
    try:
        session = Session.start(
            "plan", run_dir, cfg, tasks, run_id=run_id, seed=seed, on_hold=frontiers.on_hold
        )
        err_console.print(
            f"run {run_id}: sampling, directory {run_dir}", markup=False, soft_wrap=True
        )
        ended = session.run(err_console)
    finally:
        frontiers.join()
    if ended.ending is Ending.HANDED_OVER:
        err_console.print("The run was handed over with its machines to `autoscaler run`.")
    elif ended.ending is Ending.HELD:
        err_console.print(
            f"The sampling machines are released. The samples are kept in {run_dir}: "
            f"autoscaler run --plan {plan_dir} --option N carries the run on from them.",
            markup=False,
            soft_wrap=True,
        )
    else:
        conclude(ended.report, run_dir)


def _machines(name: str, count: int, slots: int) -> str:
    """``c5 3``, or ``c5 3 × 8 slots`` for machines that run several tasks at once."""
    return f"{name} {count}" if slots <= 1 else f"{name} {count} × {slots} slots"


def _frontier_table(frontier: Frontier) -> RenderableType:
    from rich.console import Group
    from rich.table import Table

    from autoscaler.report.format import hms

    head = (
        f"Sampling took {hms(frontier.sampled_at_s)} and committed "
        f"{frontier.sampling_cost:.2f}; {counted(frontier.tasks_left, 'task')} "
        f"{'was' if frontier.tasks_left == 1 else 'were'} left then."
    )
    if frontier.tasks_left == 0:
        return f"{head} The samples finish the bag: it costs {frontier.sampling_cost:.2f}."
    if frontier.minimum_budget is None:
        return f"{head}\nNo budget the planner can search finishes the bag."
    table = Table(title=f"Minimum budget that finishes the bag: {frontier.minimum_budget:.2f}")
    for name, justify in (
        ("#", "right"),
        ("option", "left"),
        ("budget", "right"),
        ("machines", "left"),
        ("cost", "right"),
        ("interval", "right"),
        ("makespan", "right"),
        ("interval", "right"),
    ):
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for i, o in enumerate(frontier.options, 1):
        table.add_row(
            str(i),
            o.label,
            f"{o.budget:.2f}",
            ", ".join(_machines(n, c, frontier.slots.get(n, 1)) for n, c in o.counts.items() if c),
            f"{o.cost:.2f}",
            f"{o.cost_interval[0]:.2f} – {o.cost_interval[1]:.2f}",
            hms(o.makespan_s),
            f"{hms(o.makespan_interval_s[0])} – {hms(o.makespan_interval_s[1])}",
        )
    return Group(head, table)
