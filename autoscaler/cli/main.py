"""The ``autoscaler`` command line.

Each command is a thin shell over library calls. ``_load_or_exit`` is the one way a
command reads a config: it prints a bad config's problems and exits with code 2, so
every command reports config errors alike and never with a traceback.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console

from autoscaler.config.load import config_json_schema, config_warnings, expand_bag, load_config
from autoscaler.config.schema import Billing, RunConfig
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.core.model import BudgetSet, TaskSpec
from autoscaler.providers import registry

if TYPE_CHECKING:
    from rich.console import RenderableType

    from autoscaler.budget.frontier import Frontier
    from autoscaler.core.state import RunState
    from autoscaler.report.report import Report

EXIT_CONFIG = 2
"""Exit code for a config that cannot be used (and other errors we raise on purpose)."""
PLAN_JSON = "plan.json"
"""What `autoscaler plan --out DIR` writes: the options `run --option N` reads."""
EXIT_STOPPED = 3
"""Exit code for a run that stopped before the bag was finished (its report says why)."""

# Markdown mode reflows a docstring's paragraphs to the terminal's width; the default
# keeps the source's line breaks, and a narrow terminal then breaks lines mid-sentence.
app = typer.Typer(no_args_is_help=True, add_completion=False, rich_markup_mode="markdown")
_out = Console(highlight=False)
_err = Console(stderr=True, highlight=False)


@app.callback()
def _root() -> None:
    """Run a bag of independent tasks on rented machines within a money budget."""


def main() -> None:
    """Entry point of the ``autoscaler`` console script."""
    app()


def _aws_prices(
    instance_types: Sequence[str], region: str, endpoint: str | None
) -> Mapping[str, float]:
    """On-demand USD per hour from the AWS Pricing API (only for ``ec2.lookup_prices``)."""
    from autoscaler.providers.ec2_prices import lookup_prices

    return lookup_prices(instance_types, region, endpoint)


def _load_or_exit(path: Path) -> tuple[RunConfig, list[TaskSpec]]:
    """Load ``path`` and expand its bag; on a problem, print it and exit with code 2."""
    try:
        cfg = load_config(path, prices=_aws_prices)
        return cfg, expand_bag(cfg, source=str(path))
    except AutoscalerError as exc:
        _exit_with(exc)


def _exit_with(exc: AutoscalerError) -> NoReturn:
    if isinstance(exc, ConfigError):
        _err.print(f"error: {exc.source}", markup=False, soft_wrap=True)
        for problem in exc.problems:
            _err.print(f"  {problem}", markup=False, soft_wrap=True)
    else:
        _err.print(f"error: {exc.message}", markup=False, soft_wrap=True)
    raise typer.Exit(EXIT_CONFIG)


@app.command()
def validate(
    config: Annotated[Path, typer.Argument(help="the run's YAML file")],
) -> None:
    """Check a config file and expand its bag, without running anything.

    Problems are errors (exit code 2); what is valid but likely not meant, such as a
    machine type without an emulator speed, is a warning (exit code 0).
    """
    cfg, tasks = _load_or_exit(config)
    for warning in config_warnings(cfg):
        _err.print(f"warning: {warning}", markup=False, soft_wrap=True)
    _out.print(_summary(cfg, len(tasks)), markup=False, soft_wrap=True)


@app.command()
def schema(
    report: Annotated[
        bool, typer.Option("--report", help="the schema of report.json instead")
    ] = False,
    out: Annotated[Path | None, typer.Option("--out", help="write the schema to this file")] = None,
) -> None:
    """Print the JSON Schema of config files, or of report.json (or write it to a file)."""
    if report:
        from autoscaler.report.report import report_json_schema

        document = report_json_schema()
    else:
        document = config_json_schema()
    text = json.dumps(document, indent=2, sort_keys=True) + "\n"
    if out is None:
        typer.echo(text, nl=False)
    else:
        out.write_text(text, encoding="utf-8")


def _summary(cfg: RunConfig, n_tasks: int) -> str:
    """One line: the run's name, its tasks, machine types, budget and billing."""
    types = ", ".join(f"{t.name} ({t.price:g}/ATU, max {t.max_count})" for t in cfg.machine_types)
    budget = cfg.constraint.budget
    limit = "no budget" if budget is None else f"budget {budget:g}"
    return (
        f"ok {cfg.name}: {n_tasks} tasks; types {types}; {limit}; billing {_billing(cfg.billing)}"
    )


def _billing(billing: Billing) -> str:
    atu = _duration(billing.atu_s)
    if billing.mode == "fixed":
        return f"fixed, ATU {atu}"
    return f"per second, ATU {atu}, minimum {_duration(billing.min_charge_s)}"


def _duration(seconds: float) -> str:
    for unit, size in (("h", 3600.0), ("m", 60.0)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


@app.command()
def run(
    config: Annotated[Path | None, typer.Argument(help="the run's YAML file")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="run against the virtual-time emulator")
    ] = False,
    seed: Annotated[int | None, typer.Option(help="emulator seed (default: the config's)")] = None,
    out: Annotated[
        Path | None, typer.Option(help="run directory (default: `runs/<run id>`)")
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
) -> None:
    """Run a bag. With --dry-run nothing is rented: the emulator shows what it would cost.

    Without it the daemon runs in the foreground until the bag is done: it rents machines
    from the configured provider, hands tasks to their agents, and journals everything,
    so a killed daemon carries on with --resume RUN_DIR. Ctrl-C (SIGINT) or SIGTERM
    releases every machine and writes the report; a second one terminates them at once.
    """
    chosen = _chosen_budget(budget, option, plan_dir)
    sampled = _sampled_run(plan_dir) if plan_dir is not None and not dry_run else None
    if sampled is not None:
        if resume is not None:
            _exit_with(AutoscalerError("give --plan DIR or --resume RUN_DIR, not both"))
        if config is not None:
            _check_same_bag(config, sampled)
        resume = sampled
    if resume is not None:
        if (config is not None and sampled is None) or dry_run:
            _exit_with(AutoscalerError("--resume takes a run directory and no config file"))
        if sampled is not None and chosen is None:
            _exit_with(AutoscalerError("--plan DIR needs --option N or --budget B"))
        if chosen is not None:
            _check_budget_covers_commitments(resume, chosen.budget)
        _take_over(resume)
        _run_daemon(None, [], resume, seed, resume=True, budget=chosen)
        return
    if config is None:
        _exit_with(AutoscalerError("give a config file (or --resume RUN_DIR)"))
    if job:
        from autoscaler.cli.service import run_service_jobs

        out_dir = out if out is not None else Path("runs") / f"service-{int(time.time())}"
        try:
            code = run_service_jobs(config, job, dry_run=dry_run, seed=seed, out=out_dir)
        except AutoscalerError as exc:
            _exit_with(exc)
        raise typer.Exit(code)
    cfg, tasks = _load_or_exit(config)
    if chosen is not None:
        constraint = cfg.constraint.model_copy(update={"budget": chosen.budget})
        cfg = cfg.model_copy(update={"constraint": constraint})
    from autoscaler.run.start import new_run_id

    run_id = new_run_id(cfg)
    out_dir = out if out is not None else Path("runs") / run_id
    if not dry_run:
        if registry.is_emulated(cfg.provider):
            _exit_with(
                AutoscalerError(
                    "provider 'sim' only emulates machines: add --dry-run, or set `provider:` "
                    "to local (worker processes on this host), sge or ec2 with its section"
                )
            )
        from autoscaler.cli.service import run_as_service

        try:
            outcome = run_as_service(cfg, tasks, out_dir, run_id, seed)
        except AutoscalerError as exc:
            _exit_with(exc)
        _conclude(outcome.report, out_dir)
        return
    from autoscaler.run.start import dry_run as do_dry_run

    with _progress(len(tasks)) as update:
        try:
            result = do_dry_run(
                cfg, tasks, seed=seed, out_dir=out_dir, run_id=run_id, progress=update
            )
        except AutoscalerError as exc:
            _exit_with(exc)
    _conclude(result.report, out_dir)


def _chosen_budget(
    budget: float | None, option: int | None, plan_dir: Path | None
) -> BudgetSet | None:
    """The budget given on the command line, or the plan option's; None: the config's."""
    reason = "--budget"
    if option is not None:
        if budget is not None:
            _exit_with(AutoscalerError("give --budget or --option, not both"))
        if plan_dir is None:
            _exit_with(
                AutoscalerError("--option N needs --plan DIR (from `autoscaler plan --out`)")
            )
        path = plan_dir / PLAN_JSON
        try:
            options = json.loads(path.read_text(encoding="utf-8"))["options"]
        except (OSError, ValueError, KeyError) as exc:
            _exit_with(AutoscalerError(f"cannot read the plan's options from {path}: {exc}"))
        if not 1 <= option <= len(options):
            _exit_with(
                AutoscalerError(f"--option {option}: the plan has options 1 to {len(options)}")
            )
        budget = float(options[option - 1]["budget"])
        reason = f"option {option} of the plan in {plan_dir}"
    if budget is None:
        return None
    if budget <= 0:
        _exit_with(AutoscalerError(f"--budget must be positive (got {budget})"))
    return BudgetSet(budget, reason)


def _sampled_run(plan_dir: Path) -> Path | None:
    """The run directory whose samples a plan was made from, if it sampled for real."""
    try:
        data = json.loads((plan_dir / PLAN_JSON).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # _chosen_budget has said what is wrong, if anything is
    run_dir = data.get("run_dir") if isinstance(data, dict) else None
    return Path(run_dir) if run_dir else None


def _check_same_bag(config: Path, run_dir: Path) -> None:
    """A config given with a real plan must be the one it sampled (bag and machines)."""
    from autoscaler.run.rundir import RunFiles

    cfg, tasks = _load_or_exit(config)
    try:
        files = RunFiles.open(run_dir)
    except AutoscalerError as exc:
        _exit_with(exc)
    same = [(t.id, t.command) for t in tasks] == [(t.id, t.command) for t in files.tasks]
    if not same or cfg.machine_types != files.cfg.machine_types:
        _exit_with(
            AutoscalerError(
                f"{config} is not the config the plan sampled ({run_dir / 'config.yaml'}): "
                "give the plan's own config, or none"
            )
        )


def _check_budget_covers_commitments(run_dir: Path, budget: float) -> None:
    """Refuse a budget below what the run has committed, before anything is taken over
    (a held run commits nothing more, so its journal's figure holds)."""
    from autoscaler.run.rundir import read_run

    try:
        committed = read_run(run_dir)[1].committed
    except AutoscalerError as exc:
        _exit_with(exc)
    if budget < committed - 1e-9:
        _exit_with(
            AutoscalerError(
                f"budget {budget:.2f} is below the {committed:.2f} the run in {run_dir} "
                "has committed already"
            )
        )


def _take_over(run_dir: Path, wait_s: float = 60.0) -> None:
    """Ask the daemon holding ``run_dir`` after sampling (``autoscaler plan``) to hand its
    machines over, and wait until it has let the run go."""
    import os

    from autoscaler.run.daemon import HANDOVER_SIGNAL
    from autoscaler.run.rundir import daemon_alive

    pid = daemon_alive(run_dir)
    if pid is None:
        return
    if pid > 0:
        _err.print(f"asking the plan's daemon (pid {pid}) to hand its machines over")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, HANDOVER_SIGNAL)
    deadline = time.monotonic() + wait_s
    while daemon_alive(run_dir) is not None:
        if time.monotonic() > deadline:
            _exit_with(
                AutoscalerError(
                    f"{run_dir}: the daemon holding it (pid {pid}) did not hand it over within "
                    f"{wait_s:.0f} s; it hands over only a run that waits for a budget"
                )
            )
        time.sleep(0.1)


@app.command()
def plan(
    config: Annotated[Path, typer.Argument(help="the run's YAML file")],
    seed: Annotated[int | None, typer.Option(help="emulator seed (default: the config's)")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the frontier as JSON")] = False,
    out: Annotated[
        Path | None,
        typer.Option(help="write plan.json and frontier.png here (for `run --option N`)"),
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
    cfg, tasks = _load_or_exit(config)
    if cfg.policy != "bats":
        _exit_with(AutoscalerError("plan needs policy: bats (round robin has no budget to plan)"))
    if cfg.deadline_mode:
        _exit_with(
            AutoscalerError(
                "plan offers budgets for a budget-mode bag; this config has deadlines (jobs, "
                "or constraint.deadline_s): `run --dry-run` shows what meeting them costs"
            )
        )
    if not dry_run and not registry.is_emulated(cfg.provider):
        _plan_real(cfg, tasks, seed, as_json=as_json, out=out, yes=yes)
        return
    from autoscaler.run.start import plan_dry

    try:
        frontier = plan_dry(cfg, tasks, seed=seed)
    except AutoscalerError as exc:
        _exit_with(exc)
    _show_frontier(frontier, out, as_json)


def _show_frontier(
    frontier: Frontier, out: Path | None, as_json: bool, run_dir: Path | None = None
) -> None:
    """Print the frontier (a table, or JSON); with ``out`` also write plan.json and the
    plot there. ``run_dir``: the run whose samples it comes from (a real plan)."""
    data = _frontier_json(frontier)
    if run_dir is not None:
        data["run_dir"] = str(run_dir.resolve())
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        from autoscaler.core.atomic import write_atomic
        from autoscaler.report.plots import frontier_plot

        frontier_plot(frontier, out / "frontier.png")
        # Last and whole: `run --plan` may be waiting for it (a real plan's hand-over).
        write_atomic(out / PLAN_JSON, json.dumps(data, indent=2) + "\n")
    if as_json:
        print(json.dumps(data, indent=2), flush=True)
        return
    _out.print(_frontier_table(frontier))
    if out is not None:
        _out.print(f"written: {out / PLAN_JSON}, {out / 'frontier.png'}")


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
    import copy
    import signal
    import sys
    import threading

    from autoscaler.budget.controller import Controller
    from autoscaler.budget.frontier import frontier
    from autoscaler.report.report import hms
    from autoscaler.run.daemon import HANDOVER_SIGNAL, Daemon
    from autoscaler.run.live import live_view
    from autoscaler.run.rundir import RunFiles
    from autoscaler.run.start import new_run_id, new_state, planning_settings

    seed = cfg.emulator.seed if seed is None else seed
    state = new_state(cfg, len(tasks), seed)
    sampling = Controller(planning_settings(cfg)).sampling(state)
    billing = state.billing
    first = sum(
        c * billing.cost(state.types[n].price, billing.first_step_s)
        for n, c in sampling.counts.items()
    )
    machines = ", ".join(f"{c} × {n}" for n, c in sampling.counts.items() if c)
    _err.print(
        f"Sampling rents {machines} from provider {cfg.provider} ({sampling.reason}). "
        f"Their first paid units commit {first:.2f}; sampling commits at most the budget "
        f"of {state.budget:.2f} (`constraint.budget`) and stops committing once the "
        "samples are in.",
        markup=False,
        soft_wrap=True,
    )
    if not yes:
        if not sys.stdin.isatty():
            _exit_with(
                AutoscalerError(f"plan rents machines from {cfg.provider}: confirm with --yes")
            )
        if not typer.confirm("Start sampling?", default=False, err=True):
            _err.print("Nothing was rented.")
            raise typer.Exit(1)
    run_id = new_run_id(cfg)
    run_dir = Path("runs") / run_id
    plan_dir = out if out is not None else run_dir

    shown: list[threading.Thread] = []

    def show(controller: Controller, state: RunState, now: float) -> None:
        try:
            _show_frontier(frontier(controller, state, now), plan_dir, as_json, run_dir)
        except (AutoscalerError, ValueError) as exc:
            _err.print(f"error: no frontier from these samples: {exc}", markup=False)
            return
        paid = max((m.paid_until for m in state.alive_machines()), default=now)
        _err.print(
            f"The samples are in. The sampling machines work on the bag until their paid "
            f"time ends (within {hms((paid - now) / cfg.time_scale)} of the samples); to "
            f"carry the run on with them: autoscaler run --plan {plan_dir} --option N",
            markup=False,
            soft_wrap=True,
        )

    def on_hold(controller: Controller, state: RunState, now: float) -> None:
        # The solves and the plot take a while: the daemon goes on meanwhile (its
        # machines' boundaries come), so they work on a copy of the state in a thread.
        thread = threading.Thread(target=show, args=(controller, copy.deepcopy(state), now))
        thread.start()
        shown.append(thread)

    # A hand-over asked for just as the daemon ends must not kill this process.
    signal.signal(HANDOVER_SIGNAL, signal.SIG_IGN)
    try:
        files = RunFiles.create(cfg, tasks, run_dir, run_id, seed)
        _err.print(f"run {run_id}: sampling, directory {run_dir}", markup=False, soft_wrap=True)
        with live_view(_err, cfg, len(tasks)) as update:
            daemon = Daemon(files, progress=update, hold=True, on_hold=on_hold)
            outcome = daemon.run()
    except AutoscalerError as exc:
        _exit_with(exc)
    finally:
        for thread in shown:
            thread.join()
    if daemon.handed_over:
        _err.print("The run was handed over with its machines to `autoscaler run`.")
    elif outcome.state.awaiting_budget and not outcome.state.finished:
        _err.print(
            f"The sampling machines are released. The samples are kept in {run_dir}: "
            f"autoscaler run --plan {plan_dir} --option N carries the run on from them.",
            markup=False,
            soft_wrap=True,
        )
    else:
        _conclude(outcome.report, run_dir)


def _frontier_json(frontier: Frontier) -> dict[str, Any]:
    """The frontier as plain data, each option numbered as `run --option` takes it."""
    import dataclasses

    data = dataclasses.asdict(frontier)
    for i, o in enumerate(data["options"], 1):
        o["option"] = i
    return data


def _frontier_table(frontier: Frontier) -> RenderableType:
    from rich.console import Group
    from rich.table import Table

    from autoscaler.report.report import hms

    head = (
        f"Sampling took {hms(frontier.sampled_at_s)} and committed "
        f"{frontier.sampling_cost:.2f}; {frontier.tasks_left} tasks were left then."
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
            ", ".join(f"{n} {c}" for n, c in o.counts.items() if c),
            f"{o.cost:.2f}",
            f"{o.cost_interval[0]:.2f} – {o.cost_interval[1]:.2f}",
            hms(o.makespan_s),
            f"{hms(o.makespan_interval_s[0])} – {hms(o.makespan_interval_s[1])}",
        )
    return Group(head, table)


def _run_daemon(
    cfg: RunConfig | None,
    tasks: list[TaskSpec],
    run_dir: Path,
    seed: int | None,
    *,
    resume: bool,
    run_id: str = "",
    budget: BudgetSet | None = None,
) -> None:
    from autoscaler.run.daemon import Daemon
    from autoscaler.run.live import live_view
    from autoscaler.run.rundir import RunFiles

    try:
        if resume:
            files = RunFiles.open(run_dir)
        else:
            assert cfg is not None
            seed = cfg.emulator.seed if seed is None else seed
            files = RunFiles.create(cfg, tasks, run_dir, run_id, seed)
        _out.print(
            f"run {files.run_id}: {len(files.tasks)} tasks, directory {run_dir}",
            markup=False,
            soft_wrap=True,
        )
        with live_view(_err, files.cfg, len(files.tasks)) as update:
            outcome = Daemon(files, resume=resume, progress=update, budget=budget).run()
    except AutoscalerError as exc:
        _exit_with(exc)
    _conclude(outcome.report, run_dir)


def _conclude(report: Report, run_dir: Path) -> None:
    """The report's head and where the run directory is; exit 3 if the bag is unfinished."""
    _print_head(report, run_dir)
    if report.stop_reason is not None:
        raise typer.Exit(EXIT_STOPPED)


def _print_head(report: Report, run_dir: Path) -> None:
    """What ``run`` prints at its end: the report's head, rendered, and the run directory."""
    from rich.markdown import Markdown

    from autoscaler.report.report import render_head

    _out.print(Markdown(render_head(report)))
    _out.print(f"run directory: {run_dir}", markup=False, soft_wrap=True)


@app.command()
def status(
    run_dir: Annotated[Path, typer.Argument(help="a real run's directory")],
) -> None:
    """Show where a real run stands, from its journal (whether or not its daemon runs)."""
    from autoscaler.run.live import status_lines
    from autoscaler.run.rundir import daemon_alive, read_run

    try:
        files, state = read_run(run_dir)
    except AutoscalerError as exc:
        _exit_with(exc)
    pid = daemon_alive(run_dir)
    for line in status_lines(files.run_id, files.cfg, state, pid):
        _out.print(line, markup=False, soft_wrap=True)


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
    from autoscaler.config.service import (
        WORK_FIELDS,
        load_service_config,
        load_yaml,
        probe_run_config,
    )
    from autoscaler.run.cleanup import find_strays, terminate_strays

    try:
        is_service = not any(k in load_yaml(config, "fields") for k in WORK_FIELDS)
        cfg = probe_run_config(load_service_config(config)) if is_service else None
    except AutoscalerError as exc:
        _exit_with(exc)
    if cfg is None:
        cfg, _ = _load_or_exit(config)
    try:
        survey = find_strays(cfg, runs or [Path("runs")])
    except AutoscalerError as exc:
        _exit_with(exc)
    for note in survey.notes:
        _err.print(note, markup=False, soft_wrap=True)
    found = survey.machines
    for m in found:
        if m.owner is None:
            owner = "stray"
        elif m.owner.pid is None:
            owner = f"kept: {m.owner.source}"
        else:
            owner = f"live run (daemon pid {m.owner.pid})"
        _out.print(
            f"{m.id}  run {m.run_id}  type {m.type}  {m.state}  {owner}",
            markup=False,
            soft_wrap=True,
        )
    strays = [m for m in found if m.owner is None]
    if not strays:
        _out.print(f"no stray {cfg.provider} machines of ours", markup=False)
        return
    if not yes:
        if not _out.is_terminal:
            _exit_with(AutoscalerError(f"{len(strays)} stray machines: pass --yes to terminate"))
        if not typer.confirm(f"terminate {len(strays)} stray machines?"):
            raise typer.Exit(1)
    try:
        gone = terminate_strays(cfg, strays)
    except AutoscalerError as exc:
        _exit_with(exc)
    _out.print(f"terminated {len(gone)}: {' '.join(gone)}", markup=False, soft_wrap=True)


@app.command()
def report(
    run_dir: Annotated[Path, typer.Argument(help="a run directory")],
    markdown: Annotated[
        bool, typer.Option("--markdown", help="print the whole report.md as it is")
    ] = False,
) -> None:
    """Print a finished run's report again, as `run` printed it at its end."""
    from autoscaler.report.report import REPORT_JSON, REPORT_MD, read_report

    path = run_dir / REPORT_JSON
    if not path.is_file():
        _exit_with(AutoscalerError(f"{run_dir}: no {REPORT_JSON} here; is it a run directory?"))
    if markdown:
        try:
            text = (run_dir / REPORT_MD).read_text(encoding="utf-8")
        except OSError as exc:
            _exit_with(AutoscalerError(f"{run_dir / REPORT_MD}: cannot read it ({exc})"))
        typer.echo(text, nl=False)
        return
    try:
        data = read_report(run_dir)
    except AutoscalerError as exc:
        _exit_with(exc)
    _print_head(data, run_dir)


@contextlib.contextmanager
def _progress(total: int) -> Iterator[Callable[[RunState], None]]:
    """A progress bar on a terminal (tasks done, machines, committed spend); else nothing."""
    if not _err.is_terminal:
        yield lambda state: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} tasks"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=_err, transient=True) as bar:
        job = bar.add_task("dry run", total=total)
        last = [0.0]

        def update(state: RunState) -> None:
            now = time.monotonic()
            if now - last[0] < 0.1:
                return
            last[0] = now
            machines = sum(1 for _ in state.alive_machines())
            bar.update(
                job,
                completed=state.done + state.failed,
                description=f"t={state.now / 3600:.1f}h machines={machines} "
                f"committed={state.committed:.2f}",
            )

        yield update


# The service's commands (serve, submit, jobs, ...) register themselves on `app`.
from autoscaler.cli import service as _service  # noqa: E402, F401
