"""Starting a run: one function, ``start_run``, starts every run from a config and a
mode (a dry run in the emulator, a new real run, a real run carried on from its journal,
``autoscaler plan``'s sampling run); and the dry-run pieces it builds on.

A run directory holds ``config.yaml`` (the config as resolved), ``journal.jsonl`` (every
event and action, in order, with its virtual time), ``log.jsonl`` (structured logs),
``report.json``, ``report.md``, ``gantt.png`` and ``spend.png``, and when tasks were not
done, ``unfinished.txt`` (their commands: a bag file for a new run).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Literal, overload

import structlog

from autoscaler.budget.controller import Controller
from autoscaler.config.bag import expand_bag, task_means
from autoscaler.config.schema import JobMeans, RunConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.journal import JOURNAL_JSONL, Journal, JsonlJournal
from autoscaler.core.model import Action, Event, Hold, TaskSpec
from autoscaler.core.state import RunState
from autoscaler.deadline.deadline_controller import DeadlineController
from autoscaler.providers.base import Capabilities
from autoscaler.providers.sim import SimProvider
from autoscaler.report.build import build_report, with_rehearsal
from autoscaler.report.records import Report
from autoscaler.report.write import write_report

# Importers of these names from here (tests, benchmarks, the service) keep working; they
# live in ``autoscaler.run.assemble``, which the daemon and the run directory use.
from autoscaler.run.assemble import (
    billing_model,
    json_logger,
    log_action,
    log_reclaim_holds,
    make_controller,
    new_run_id,
    new_state,
    write_config,
)
from autoscaler.run.cluster_load import ClusterQueues
from autoscaler.run.emulator import Emulator, StepHook
from autoscaler.run.offers import compose_offers, say
from autoscaler.run.refusals import holds

if TYPE_CHECKING:
    from autoscaler.budget.frontier import Frontier
    from autoscaler.core.model import BudgetSet
    from autoscaler.providers.cost_tags import CostTags
    from autoscaler.run.daemon import Daemon, HoldHook, ProgressHook


def make_emulator(
    cfg: RunConfig,
    n_tasks: int,
    seed: int | None = None,
    on_step: StepHook | None = None,
    run_tag: str = "dry-run",
    controller: Controller | DeadlineController | None = None,
    world: Sequence[JobMeans | None] | None = None,
) -> Emulator:
    """Everything a dry run needs, wired together; ``seed`` overrides the config's;
    ``world``: per task, its mean times as the world runs them, when they are not what
    its job declares (a service's dry run plans on remembered times, ``service.memory``)."""
    seed = cfg.emulator.seed if seed is None else seed
    state = new_state(cfg, n_tasks, seed)
    caps = Capabilities(
        billing=state.billing,
        max_counts={t.name: t.max_count for t in cfg.machine_types},
        boot_estimate_s={t.name: t.boot_s for t in cfg.machine_types},
        provider_of=(
            {t.name: cfg.provider_of(t.name) for t in cfg.machine_types}
            if cfg.providers is not None
            else {}
        ),
    )
    holder: list[Emulator] = []
    sim = SimProvider(
        caps,
        cfg.emulator,
        n_tasks,
        clock=lambda: holder[0].now,
        seed=seed,
        task_means=task_means(cfg, n_tasks) if world is None else list(world),
        task_labels=[t.category for t in expand_bag(cfg)] if cfg.emulator.category_speed else None,
        queues=ClusterQueues(cfg, state.billing.atu_s) if cfg.emulator.local_load else None,
    )
    emulator = Emulator(
        controller or make_controller(cfg),
        state,
        sim,
        cfg.monitoring_interval_s,
        run_tag=run_tag,
        on_step=on_step,
        holds=lambda type_name: holds(cfg, type_name),
    )
    holder.append(emulator)
    return emulator


# --- a dry run ------------------------------------------------------------------------


@dataclass(frozen=True)
class Owner:
    """Who drives a dry run besides its world: a service's dry run, whose pool takes
    jobs as they arrive (``Emulator.run(until)`` and ``Emulator.tell``)."""

    added: Sequence[TaskSpec]  # the tasks it adds to the config's, in order (the report's)
    drive: Callable[[Emulator], RunState]  # runs the emulator to its end


@dataclass
class DryRun:
    run_id: str
    state: RunState
    report: Report
    out_dir: Path | None
    wall_s: float


def dry_run(
    cfg: RunConfig,
    tasks: Sequence[TaskSpec],
    *,
    seed: int | None = None,
    out_dir: Path | None = None,
    run_id: str | None = None,
    progress: Callable[[RunState], None] | None = None,
    plots: bool = True,
    world: Sequence[JobMeans | None] | None = None,
    owner: Owner | None = None,
) -> DryRun:
    """Run the bag against the emulator; write the run directory if ``out_dir`` is given.
    ``world``: as ``make_emulator``'s; ``owner``: drives the run, adding jobs to it."""
    run_id = run_id or new_run_id(cfg)
    seed = cfg.emulator.seed if seed is None else seed
    cfg, notes = compose_offers(cfg, billing_model(cfg))
    log_file: IO[str] | None = None
    journal: Journal | None = None
    log: Any = structlog.wrap_logger(structlog.ReturnLogger())
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        write_config(cfg, out_dir)
        journal = JsonlJournal(out_dir / JOURNAL_JSONL, fresh=True)
        log_file = (out_dir / "log.jsonl").open("w", encoding="utf-8")
        log = json_logger(log_file)
    log = log.bind(run_id=run_id)
    log.info("run start", tasks=len(tasks), seed=seed, policy=cfg.policy, provider="sim")
    say(notes, log)

    def on_step(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        if journal is not None:
            journal.step(now, events, actions)
        for action in actions:
            log_action(log, now, action)
        log_reclaim_holds(log, state, events)
        if progress is not None:
            progress(state)

    started = time.perf_counter()
    try:
        emulator = make_emulator(
            cfg, len(tasks), seed, on_step=on_step, run_tag=run_id, world=world
        )
        state = emulator.run() if owner is None else owner.drive(emulator)
        wall = time.perf_counter() - started
        if owner is not None:
            tasks = [*tasks, *owner.added]
        report = build_report(cfg, state, tasks=tasks, run_id=run_id, seed=seed, wall_s=wall)
        if cfg.emulator.rehearses:
            report = with_rehearsal(report, state, calm_report(cfg, tasks, run_id, seed))
        log.info(
            "run end",
            cost=report.cost,
            makespan_s=report.makespan_s,
            stop_reason=report.stop_reason,
        )
    finally:
        if journal is not None:
            journal.close()
        if log_file is not None:
            log_file.close()
    if out_dir is not None:
        write_report(report, state, out_dir, plots=plots and cfg.plots)
    return DryRun(run_id, state, report, out_dir, wall)


def calm_report(cfg: RunConfig, tasks: Sequence[TaskSpec], run_id: str, seed: int) -> Report:
    """The report of ``cfg``'s dry run without its refusals and reclaims: what a
    rehearsal's troubles are measured against."""
    calm = cfg.model_copy(update={"emulator": cfg.emulator.calm()})
    state = make_emulator(calm, len(tasks), seed, run_tag=run_id).run()
    return build_report(calm, state, tasks=tasks, run_id=run_id, seed=seed)


# --- `autoscaler plan`: sample in the emulator, then the budget frontier ----------------


class _Held(Exception):
    """Raised from the step hook to end the emulation once the samples are complete."""

    def __init__(self, frontier: Frontier):
        self.frontier = frontier


def plan_dry(cfg: RunConfig, tasks: Sequence[TaskSpec], *, seed: int | None = None) -> Frontier:
    """Run the sampling phase in the emulator and return the budget frontier at its end.

    The controller holds once the samples are in (``Hold``: nothing more is committed);
    the frontier is worked out on the state of that step, as a real ``plan`` does it.
    """
    from autoscaler.budget.frontier import frontier

    seed = cfg.emulator.seed if seed is None else seed
    controller = make_controller(cfg, hold=True)  # with categories: sampled, priced by them
    assert isinstance(controller, Controller)  # make_controller refuses a deadline config

    def on_step(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        if any(isinstance(a, Hold) for a in actions):
            raise _Held(frontier(controller, state, now))

    emulator = make_emulator(cfg, len(tasks), seed, on_step=on_step, controller=controller)
    try:
        emulator.run()
    except _Held as held:
        return held.frontier
    raise AutoscalerError(
        "the sampling phase never completed: the bag is too small to sample every type "
        "(or the budget cannot pay for sampling); plan needs a bag larger than the samples"
    )


# --- the one start path -----------------------------------------------------------------

Mode = Literal["dry", "new", "resume", "plan"]
"""How a run starts: ``dry``, in the emulator (nothing rented; ``run --dry-run``, a
service config's jobs dry-run); ``new``, on the config's provider (``run``, a service's
job); ``resume``, the run in ``run_dir`` carried on from its journal (``run --resume``,
a restarted service's job); ``plan``, a new real run that samples, then holds for a
budget (``autoscaler plan`` on a real provider)."""


@dataclass(frozen=True)
class EmulatedRun:
    """A dry run made ready by ``start_run``: ``run()`` emulates it to its end."""

    cfg: RunConfig
    tasks: Sequence[TaskSpec]
    run_id: str
    seed: int
    run_dir: Path | None
    progress: ProgressHook | None = None
    plots: bool = True
    world: Sequence[JobMeans | None] | None = None
    owner: Owner | None = None

    def run(self) -> DryRun:
        progress = self.progress
        return dry_run(
            self.cfg,
            self.tasks,
            seed=self.seed,
            out_dir=self.run_dir,
            run_id=self.run_id,
            progress=None if progress is None else lambda state: progress(state, None),
            plots=self.plots,
            world=self.world,
            owner=self.owner,
        )


@overload
def start_run(
    mode: Literal["dry"],
    run_dir: Path | None,
    cfg: RunConfig | None = None,
    tasks: Sequence[TaskSpec] = (),
    *,
    run_id: str | None = None,
    seed: int | None = None,
    progress: ProgressHook | None = None,
    plots: bool = True,
    world: Sequence[JobMeans | None] | None = None,
    owner: Owner | None = None,
) -> EmulatedRun: ...


@overload
def start_run(
    mode: Literal["new", "resume", "plan"],
    run_dir: Path | None,
    cfg: RunConfig | None = None,
    tasks: Sequence[TaskSpec] = (),
    *,
    run_id: str | None = None,
    seed: int | None = None,
    progress: ProgressHook | None = None,
    plots: bool = True,
    budget: BudgetSet | None = None,
    on_hold: HoldHook | None = None,
    resumed: str | None = None,
    cost_tags: CostTags | None = None,
) -> Daemon: ...


def start_run(
    mode: Mode,
    run_dir: Path | None,
    cfg: RunConfig | None = None,
    tasks: Sequence[TaskSpec] = (),
    *,
    run_id: str | None = None,
    seed: int | None = None,
    progress: ProgressHook | None = None,
    plots: bool = True,
    budget: BudgetSet | None = None,
    on_hold: HoldHook | None = None,
    resumed: str | None = None,
    world: Sequence[JobMeans | None] | None = None,
    owner: Owner | None = None,
    cost_tags: CostTags | None = None,
) -> EmulatedRun | Daemon:
    """Start the run of ``cfg`` and its ``tasks`` in ``mode``, in ``run_dir``: ready to
    ``run()`` to its end.

    A new run (every mode but ``resume``) takes ``run_id`` (default: a new one) and
    ``seed`` (default: the config's emulator seed), and writes its run directory; a dry
    run writes one only when ``run_dir`` is given. ``resume`` takes neither config nor
    tasks: the run directory holds them. A real run is a ``Daemon`` (``budget``: a new
    budget set in its first step; ``on_hold``: called when a ``plan`` run holds;
    ``resumed``: why an interrupted run carries on; ``cost_tags``: whom a new run's
    machines are charged to, default its config's project and name and the OS user), a
    dry run an ``EmulatedRun`` (``world`` and ``owner``: as ``dry_run``'s).
    """
    if mode == "resume":
        if cfg is not None or tasks:
            raise AutoscalerError("a run carried on takes its config and tasks from its directory")
        if run_dir is None:
            raise AutoscalerError("a run carried on needs its run directory")
        return _daemon(
            mode,
            run_dir,
            None,
            (),
            None,
            None,
            progress,
            plots,
            budget,
            on_hold,
            resumed,
            None,
        )
    if cfg is None:
        raise AutoscalerError(f"a {mode} run needs a config")
    run_id = run_id or new_run_id(cfg)
    seed = cfg.emulator.seed if seed is None else seed
    if mode == "dry":
        plots = plots and cfg.plots
        return EmulatedRun(cfg, tasks, run_id, seed, run_dir, progress, plots, world, owner)
    if run_dir is None:
        raise AutoscalerError(f"a {mode} run needs a run directory")
    return _daemon(
        mode,
        run_dir,
        cfg,
        tasks,
        run_id,
        seed,
        progress,
        plots,
        budget,
        on_hold,
        resumed,
        cost_tags,
    )


def with_files(cfg: RunConfig, tasks: Sequence[TaskSpec]) -> list[TaskSpec]:
    """``tasks`` with their bags' files (``config.files``) where none has any: the tasks
    of a job a service's store kept before it kept files (``core.task_json``) have lost
    them; its config gives them."""
    bags = [cfg.bag] if cfg.bag is not None else [j.bag for j in cfg.jobs]
    if all(b.files is None for b in bags) or any(t.files is not None for t in tasks):
        return list(tasks)
    given = expand_bag(cfg)
    if len(given) != len(tasks):
        raise AutoscalerError(f"the config gives {len(given)} tasks, the job {len(tasks)}")
    return [dataclasses.replace(t, files=g.files) for t, g in zip(tasks, given, strict=True)]


def _daemon(
    mode: Mode,
    run_dir: Path,
    cfg: RunConfig | None,
    tasks: Sequence[TaskSpec],
    run_id: str | None,
    seed: int | None,
    progress: ProgressHook | None,
    plots: bool,
    budget: BudgetSet | None,
    on_hold: HoldHook | None,
    resumed: str | None,
    cost_tags: CostTags | None,
) -> Daemon:
    """A real run's daemon: its run directory written (a new run) or opened (resumed)."""
    from autoscaler.run.daemon import Daemon
    from autoscaler.run.rundir import RunFiles

    if cfg is None:
        files = RunFiles.open(run_dir)
    else:
        assert run_id is not None
        assert seed is not None
        files = RunFiles.create(cfg, with_files(cfg, tasks), run_dir, run_id, seed, cost_tags)
    return Daemon(
        files,
        resume=mode == "resume",
        progress=progress,
        hold=mode == "plan",
        on_hold=on_hold,
        budget=budget,
        resumed=resumed,
        plots=plots,
    )
