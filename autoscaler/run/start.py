"""Runs: turn a config into a controller, a state and a driver; write the run directory.

A run directory holds ``config.yaml`` (the config as resolved), ``journal.jsonl`` (every
event and action, in order, with its virtual time), ``log.jsonl`` (structured logs),
``report.json``, ``report.md``, ``gantt.png`` and ``spend.png``, and when tasks were not
done, ``unfinished.txt`` (their commands: a bag file for a new run).
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TextIO

import structlog
import yaml

from autoscaler.budget.controller import Controller, ControllerSettings
from autoscaler.budget.estimate import sample_size
from autoscaler.config.load import expand_jobs, task_means
from autoscaler.config.schema import RunConfig
from autoscaler.config.service import ServiceConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.journal import JOURNAL_JSONL, Journal, JsonlJournal
from autoscaler.core.model import (
    Action,
    Configure,
    Event,
    Hold,
    JobAdded,
    JobSpec,
    Late,
    Launch,
    Move,
    Release,
    Shortfall,
    Stop,
    TaskSpec,
    TypeSpec,
)
from autoscaler.core.state import RunState
from autoscaler.deadline.controller import DeadlineController, DeadlineSettings
from autoscaler.providers.base import Capabilities
from autoscaler.providers.sim import SimProvider
from autoscaler.report.report import Report, build_report, write_report
from autoscaler.run.emulator import Emulator, StepHook

if TYPE_CHECKING:
    from autoscaler.budget.frontier import Frontier

REAL_SLACK_S = 0.5
"""Real seconds a time-scaled run keeps between a release decision and the boundary."""


def billing_model(cfg: RunConfig) -> BillingModel:
    """The config's billing; a time-scaled run widens the release margin to real slack."""
    b = cfg.billing
    model = BillingModel(b.mode, b.atu_s, b.min_charge_s, b.commit_s)
    if cfg.time_scale > 1:
        wide = max(model.boundary_margin_s(), REAL_SLACK_S * cfg.time_scale)
        model = dataclasses.replace(model, margin_s=min(wide, 0.1 * model.step_s))
    return model


def type_specs(cfg: RunConfig) -> list[TypeSpec]:
    return [TypeSpec(t.name, t.price, t.max_count, t.boot_s) for t in cfg.machine_types]


def controller_settings(cfg: RunConfig) -> ControllerSettings:
    return ControllerSettings(
        policy=cfg.policy,
        z=cfg.sampling.z,
        delta=cfg.sampling.delta,
        sampling_mode=cfg.sampling.mode,
        tail_replication=cfg.tail_replication,
        solver=cfg.solver,
        on_shortfall=cfg.constraint.on_shortfall,
    )


def planning_settings(cfg: RunConfig) -> ControllerSettings:
    """The settings of ``autoscaler plan``'s sampling: hold once the samples are in."""
    return dataclasses.replace(controller_settings(cfg), hold_after_sampling=True)


def deadline_settings(cfg: RunConfig) -> DeadlineSettings:
    d = cfg.deadline
    return DeadlineSettings(
        planner=d.planner,
        reassign=d.reassign,
        buy_when_late=d.buy_when_late,
        solver=cfg.solver,
        sample=d.sample,
        z=cfg.sampling.z,
        keep_open=d.keep_open,
    )


def make_controller(cfg: RunConfig, *, hold: bool = False) -> Controller | DeadlineController:
    """The controller ``cfg`` asks for: deadline mode's, or the budget controller (with
    ``hold``: ``autoscaler plan``'s, which holds once the samples are in)."""
    if cfg.deadline_mode:
        if hold:
            raise AutoscalerError(
                "plan offers budgets for a budget-mode bag; this config has deadlines (jobs, "
                "or constraint.deadline_s): `run --dry-run` shows what meeting them costs"
            )
        return DeadlineController(deadline_settings(cfg))
    return Controller(planning_settings(cfg) if hold else controller_settings(cfg))


def job_specs(cfg: RunConfig) -> list[JobSpec]:
    """Deadline mode's jobs with their task ids and absolute times; none in budget mode."""
    out = []
    for job, ids in expand_jobs(cfg):
        c = job.constraint
        assert c.deadline_s is not None  # the schema requires it of a job
        out.append(
            JobSpec(
                job.name,
                ids.start,
                len(ids),
                job.at,
                job.at + c.deadline_s,
                c.budget,
                dict(job.task_s),
            )
        )
    return out


def new_state(cfg: RunConfig, n_tasks: int, seed: int) -> RunState:
    """A fresh state; tasks leave the bag in an order shuffled by ``seed`` (paper 000 §2.3;
    in deadline mode within each job, so a sampled job's sample is drawn at random)."""
    jobs = job_specs(cfg)
    rng = random.Random(seed)
    if jobs:
        order = []
        for job in jobs:
            ids = list(range(job.first, job.first + job.count))
            rng.shuffle(ids)
            order.extend(ids)
    else:
        order = list(range(n_tasks))
        rng.shuffle(order)
    budget = cfg.constraint.budget if cfg.policy == "bats" or jobs else None
    n = sample_size(n_tasks, cfg.sampling.z, cfg.sampling.delta)
    return RunState.new(
        type_specs(cfg),
        billing_model(cfg),
        budget,
        n_tasks,
        order,
        max_retries=cfg.max_retries,
        sample_target=n,
        paired=min(cfg.sampling.replicated, n) if cfg.sampling.mode == "compact" else 0,
        jobs=jobs,
    )


def added_job(job: JobSpec, first: int, at: float, seed: int) -> JobAdded:
    """``job`` joining a live pool at run time ``at`` with ``job.count`` tasks numbered
    from ``first``; they leave the bag in an order shuffled by ``seed`` and the job's name,
    as ``new_state`` shuffles a job's tasks."""
    spec = dataclasses.replace(job, first=first, at=at)
    order = list(range(first, first + job.count))
    random.Random(f"{seed}:{job.name}").shuffle(order)
    return JobAdded(spec, tuple(order))


def make_emulator(
    cfg: RunConfig,
    n_tasks: int,
    seed: int | None = None,
    on_step: StepHook | None = None,
    run_tag: str = "dry-run",
    controller: Controller | DeadlineController | None = None,
) -> Emulator:
    """Everything a dry run needs, wired together; ``seed`` overrides the config's."""
    seed = cfg.emulator.seed if seed is None else seed
    state = new_state(cfg, n_tasks, seed)
    caps = Capabilities(
        billing=state.billing,
        max_counts={t.name: t.max_count for t in cfg.machine_types},
        boot_estimate_s={t.name: t.boot_s for t in cfg.machine_types},
    )
    holder: list[Emulator] = []
    sim = SimProvider(
        caps,
        cfg.emulator,
        n_tasks,
        clock=lambda: holder[0].now,
        seed=seed,
        task_means=task_means(cfg, n_tasks),
    )
    emulator = Emulator(
        controller or make_controller(cfg),
        state,
        sim,
        cfg.monitoring_interval_s,
        run_tag=run_tag,
        on_step=on_step,
    )
    holder.append(emulator)
    return emulator


# --- a dry run ------------------------------------------------------------------------


@dataclass
class DryRun:
    run_id: str
    state: RunState
    report: Report
    out_dir: Path | None
    wall_s: float


def new_run_id(cfg: RunConfig | ServiceConfig) -> str:
    """A run's id (and its directory's name under ``runs/``): name, UTC time, 4 hex."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{cfg.name}-{stamp}-{random.SystemRandom().randrange(16**4):04x}"


CONFIG_FILE = "config.yaml"


def write_config(cfg: RunConfig, run_dir: Path) -> None:
    """The config as resolved, into the run directory."""
    (run_dir / CONFIG_FILE).write_text(
        yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), encoding="utf-8"
    )


def json_logger(stream: TextIO) -> Any:
    """A structlog logger writing JSON lines (level, wall time) to ``stream``."""
    return structlog.wrap_logger(
        structlog.WriteLogger(stream),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="wall"),
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
    )


def log_action(log: Any, now: float, action: Action) -> None:
    """The actions worth a log line (not every task assignment)."""
    match action:
        case Launch(type=t, count=c, token=token):
            log.info("launch", t=now, machine_type=t, count=c, token=token)
        case Release(machine=m, reason=reason):
            log.info("release", t=now, machine=m, reason=reason)
        case Configure(counts=counts, reason=reason):
            log.info("configure", t=now, counts=dict(counts), reason=reason)
        case Shortfall(needed_budget=needed, message=message):
            log.warning("budget shortfall", t=now, needed_budget=needed, message=message)
        case Hold(reason=reason):
            log.info("hold", t=now, reason=reason)
        case Late(job=job, tasks=n, seconds=late_s, cause=cause, message=message):
            say = log.warning if n > 0 else log.info
            say(
                "job late" if n > 0 else "job on time",
                t=now,
                job=job,
                tasks=n,
                seconds=round(late_s, 1),
                cause=cause,
                message=message,
            )
        case Move(tasks=tasks, source=src, target=dst):
            log.info("move", t=now, tasks=len(tasks), source=src, target=dst)
        case Stop(reason=reason):
            log.info("stop", t=now, reason=reason)
        case _:
            pass


def dry_run(
    cfg: RunConfig,
    tasks: Sequence[TaskSpec],
    *,
    seed: int | None = None,
    out_dir: Path | None = None,
    run_id: str | None = None,
    progress: Callable[[RunState], None] | None = None,
    plots: bool = True,
) -> DryRun:
    """Run the bag against the emulator; write the run directory if ``out_dir`` is given."""
    run_id = run_id or new_run_id(cfg)
    seed = cfg.emulator.seed if seed is None else seed
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

    def on_step(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        if journal is not None:
            journal.step(now, events, actions)
        for action in actions:
            log_action(log, now, action)
        if progress is not None:
            progress(state)

    started = time.perf_counter()
    try:
        emulator = make_emulator(cfg, len(tasks), seed, on_step=on_step, run_tag=run_id)
        state = emulator.run()
        wall = time.perf_counter() - started
        report = build_report(cfg, state, tasks=tasks, run_id=run_id, seed=seed, wall_s=wall)
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
        write_report(report, state, out_dir, plots=plots)
    return DryRun(run_id, state, report, out_dir, wall)


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
    controller = Controller(planning_settings(cfg))

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
