"""The run commands: ``run``, ``status``, ``report`` and ``cleanup``. Each is a thin
shell over library calls; errors are raised as ``AutoscalerError`` and printed in one
place (``autoscaler.cli.app``). Each command imports the library it calls where it calls
it: the command group starts without the config models or numpy (start-up time)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from autoscaler.cli.app import (
    app,
    conclude,
    console,
    directory_to_write,
    err_console,
    load,
    print_head,
)
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.words import counted

if TYPE_CHECKING:
    from autoscaler.core.model import BudgetSet
    from autoscaler.core.state import RunState
    from autoscaler.run.session import Session


@app.command()
def run(
    config: Annotated[Path | None, typer.Argument(help="the run's YAML file")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="run against the virtual-time emulator")
    ] = False,
    seed: Annotated[int | None, typer.Option(help="emulator seed (default: the config's)")] = None,
    out: Annotated[
        Path | None,
        typer.Option(help="run directory (default: `runs/<run id>`)", callback=directory_to_write),
    ] = None,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="carry on the run in this run directory")
    ] = None,
    budget: Annotated[
        float | None, typer.Option(help="budget for this run (overrides the config's)")
    ] = None,
    option: Annotated[
        int | None,
        typer.Option(help="run with the budget of option N of `autoscaler plan --out DIR`"),
    ] = None,
    plan_dir: Annotated[
        Path | None, typer.Option("--plan", help="the plan directory --option refers to")
    ] = None,
    job: Annotated[
        list[str] | None,
        typer.Option(
            "--job",
            help="with a service config: a job file, arriving AT run seconds after the start "
            "(FILE or FILE@AT; repeatable)",
        ),
    ] = None,
    memory: Annotated[
        Path | None,
        typer.Option(
            "--memory",
            help="with a service config's --dry-run: start the dry run's memory of "
            "applications from this service state directory's (read, never written; "
            "default: empty)",
        ),
    ] = None,
) -> None:
    """Run a bag. With --dry-run nothing is rented: the emulator shows what it would cost.

    Without it the daemon runs in the foreground until the bag is done: it rents machines
    from the configured provider, hands tasks to their agents, and journals everything,
    so a killed daemon carries on with --resume RUN_DIR. Ctrl-C (SIGINT) or SIGTERM
    releases every machine and writes the report; a second one terminates them at once.
    (A service, `autoscaler serve`, hands its machines over to its next start instead: a
    run in the foreground has none to adopt them.)
    """
    chosen = _chosen_budget(budget, option, plan_dir)
    sampled = None
    if plan_dir is not None and not dry_run:
        from autoscaler.report.frontier_files import sampled_run

        sampled = sampled_run(plan_dir)
    if sampled is not None:
        if resume is not None:
            raise AutoscalerError("give --plan DIR or --resume RUN_DIR, not both")
        if config is not None:
            from autoscaler.run.session import check_same_bag

            check_same_bag(*load(config), sampled, str(config))
        resume = sampled
    if resume is not None:
        if (config is not None and sampled is None) or dry_run:
            raise AutoscalerError("--resume takes a run directory and no config file")
        if sampled is not None and chosen is None:
            raise AutoscalerError("--plan DIR needs --option N or --budget B")
        from autoscaler.run.session import check_budget_covers, take_over

        if chosen is not None:
            check_budget_covers(resume, chosen.budget)
        take_over(resume, _asking)
        _resume(resume, chosen)
        return
    if config is None:
        raise AutoscalerError("give a config file (or --resume RUN_DIR)")
    if memory is not None and not (job and dry_run):
        raise AutoscalerError(
            "--memory STATE_DIR starts a service dry run's memory: give it with --dry-run and --job"
        )
    if job:
        from autoscaler.cli.service_run import run_service_jobs
        from autoscaler.config.service_schema import load_service_config
        from autoscaler.run.assemble import new_run_id

        out_dir = out or Path("runs") / new_run_id(load_service_config(config))
        code = run_service_jobs(config, job, dry_run=dry_run, seed=seed, out=out_dir, memory=memory)
        raise typer.Exit(code)
    from autoscaler.config.summary import config_kind  # the config models: not at start

    kind = config_kind(config)
    if kind == "service":
        raise AutoscalerError(
            f"{config} is a service config: give the jobs it runs with --job JOB.yaml "
            f"(or JOB.yaml@AT, repeatable), or serve it: autoscaler serve {config}"
        )
    if kind == "job":
        raise AutoscalerError(
            f"{config} is a job file: run it with its service config, "
            f"autoscaler run SERVICE.yaml --job {config}"
        )
    cfg, tasks = load(config)
    if chosen is not None:
        constraint = cfg.constraint.model_copy(update={"budget": chosen.budget})
        cfg = cfg.model_copy(update={"constraint": constraint})
    from autoscaler.run.assemble import new_run_id

    run_id = new_run_id(cfg)
    out_dir = out if out is not None else Path("runs") / run_id
    if not dry_run:
        from autoscaler.providers import registry

        if registry.emulated(cfg):
            raise AutoscalerError(
                "provider 'sim' only emulates machines: add --dry-run, or set `provider:` "
                f"to one that rents them ({', '.join(registry.real_kinds())}) with its section"
            )
        from autoscaler.run.session import Session

        _foreground(Session.start("new", out_dir, cfg, tasks, run_id=run_id, seed=seed), out_dir)
        return
    from autoscaler.run.start import start_run

    with _progress(len(tasks)) as update:
        emulated = start_run(
            "dry",
            out_dir,
            cfg,
            tasks,
            run_id=run_id,
            seed=seed,
            progress=lambda state, _estimate: update(state),
        )
        result = emulated.run()
    conclude(result.report, out_dir)


def _chosen_budget(
    budget: float | None, option: int | None, plan_dir: Path | None
) -> BudgetSet | None:
    """The budget given on the command line, or the plan option's; None: the config's."""
    reason = "--budget"
    if option is not None:
        if budget is not None:
            raise AutoscalerError("give --budget or --option, not both")
        if plan_dir is None:
            raise AutoscalerError("--option N needs --plan DIR (from `autoscaler plan --out`)")
        from autoscaler.report.frontier_files import option_budget

        budget = option_budget(plan_dir, option)
        reason = f"option {option} of the plan in {plan_dir}"
    if budget is None:
        return None
    from autoscaler.config.budgets import check_budget
    from autoscaler.core.model import BudgetSet

    return BudgetSet(check_budget(budget, field="--budget"), reason)


def _asking(pid: int) -> None:
    err_console.print(f"asking the plan's daemon (pid {pid}) to hand its machines over")


def _resume(run_dir: Path, budget: BudgetSet | None) -> None:
    """Carry on the real run in ``run_dir`` from its journal, in the foreground."""
    from autoscaler.run.session import Session

    _foreground(Session.start("resume", run_dir, budget=budget), run_dir)


def _foreground(session: Session, run_dir: Path) -> None:
    """A real run's session in the foreground, its directory ``run_dir`` as the user gave
    it: its line, its live view, its report."""
    files = session.files
    console.print(
        f"run {files.run_id}: {counted(len(files.tasks), 'task')}, directory {run_dir}",
        markup=False,
        soft_wrap=True,
    )
    conclude(session.run(err_console).report, run_dir)


@app.command()
def status(
    run_dir: Annotated[Path, typer.Argument(help="a real run's directory")],
) -> None:
    """Show where a real run stands, from its journal (whether or not its daemon runs),
    and how to carry it on: a service's job with its service, a plain run with `run
    --resume`, a plan's held run with `run --plan`."""
    from autoscaler.run.live import status_lines
    from autoscaler.run.rundir import daemon_alive, read_run
    from autoscaler.service.service import service_of

    files, state = read_run(run_dir)
    pid = daemon_alive(run_dir)
    for line in status_lines(files.run_id, files.cfg, state, pid, service_of(run_dir)):
        console.print(line, markup=False, soft_wrap=True)


@app.command()
def cleanup(
    config: Annotated[
        Path, typer.Argument(help="a run's or a service's config naming the provider to search")
    ],
    runs: Annotated[
        list[Path] | None,
        typer.Option(
            "--runs",
            help="where more run directories live, besides the registered runs "
            "(repeatable; default: runs)",
        ),
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", help="terminate without asking")] = False,
) -> None:
    """Find machines carrying one of our run tags that no live run owns; terminate them.

    A run is live while a daemon holds its run directory's lock. Every run registers its
    directory in the state directory ($AUTOSCALER_STATE_DIR, else
    $XDG_STATE_HOME/autoscaler, else ~/.local/state/autoscaler), so a live run is found
    wherever its directory is; run directories under --runs are looked at too. Untagged
    machines and machines of a live run are never touched.
    """
    from autoscaler.config.schema import Platform
    from autoscaler.config.service_schema import WORK_FIELDS, load_service_config, load_yaml
    from autoscaler.run.cleanup import find_strays, terminate_strays

    cfg: Platform
    if not any(k in load_yaml(config, "fields") for k in WORK_FIELDS):
        cfg = load_service_config(config).platform
    else:
        cfg, _ = load(config)
    survey = find_strays(cfg, runs or [Path("runs")])
    for note in survey.notes:
        err_console.print(note, markup=False, soft_wrap=True)
    found = survey.machines
    for m in found:
        if m.owner is None:
            owner = "stray"
        elif m.owner.pid is None:
            owner = f"kept: {m.owner.source}"
        else:
            owner = f"live run (daemon pid {m.owner.pid})"
        console.print(
            f"{m.id}  run {m.run_id}  type {m.type}  {m.state}  {owner}",
            markup=False,
            soft_wrap=True,
        )
    strays = [m for m in found if m.owner is None]
    if not strays:
        console.print(f"no stray machines of ours in {cfg.provider_label()}", markup=False)
        return
    if not yes:
        if not console.is_terminal:
            raise AutoscalerError(f"{len(strays)} stray machines: pass --yes to terminate")
        if not typer.confirm(f"terminate {len(strays)} stray machines?"):
            raise typer.Exit(1)
    gone = terminate_strays(cfg, strays)
    console.print(f"terminated {len(gone)}: {' '.join(gone)}", markup=False, soft_wrap=True)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="a run directory")],
    markdown: Annotated[
        bool, typer.Option("--markdown", help="print the whole report.md as it is")
    ] = False,
) -> None:
    """Print a finished run's report again, as `run` printed it at its end."""
    from autoscaler.report.records import REPORT_JSON, REPORT_MD, read_report

    path = run_dir / REPORT_JSON
    if not path.is_file():
        raise AutoscalerError(f"{run_dir}: no {REPORT_JSON} here; is it a run directory?")
    if markdown:
        try:
            text = (run_dir / REPORT_MD).read_text(encoding="utf-8")
        except OSError as exc:
            raise AutoscalerError(f"{run_dir / REPORT_MD}: cannot read it ({exc})") from None
        typer.echo(text, nl=False)
        return
    data = read_report(run_dir)
    print_head(data, run_dir)


@contextlib.contextmanager
def _progress(total: int) -> Iterator[Callable[[RunState], None]]:
    """A progress bar on a terminal (tasks done, machines, committed spend); else nothing."""
    if not err_console.is_terminal:
        yield lambda state: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} tasks"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err_console, transient=True) as bar:
        job = bar.add_task("dry run", total=total)
        last = [0.0]

        def update(state: RunState) -> None:
            now = time.monotonic()
            if now - last[0] < 0.1:
                return
            last[0] = now
            machines = sum(1 for _ in state.fleet.alive_machines())
            bar.update(
                job,
                completed=state.tasks.done + state.tasks.failed,
                description=f"t={state.now / 3600:.1f}h machines={machines} "
                f"committed={state.money.committed:.2f}",
            )

        yield update
