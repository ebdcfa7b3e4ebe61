"""From a config to what a run is built of: its billing, machine types, controller and
settings, deadline jobs and first state; its id, its resolved config file, and its JSON
log lines. The emulator and the daemon build their runs from these alike."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import structlog
import yaml

from autoscaler.budget.category_order import CategoryChoice
from autoscaler.budget.controller import Controller
from autoscaler.budget.settings import ControllerSettings
from autoscaler.categories.of_config import categories_of
from autoscaler.categories.sort import Category, category_of
from autoscaler.config.bag import expand_jobs
from autoscaler.config.schema import RunConfig
from autoscaler.config.service_schema import ServiceConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import (
    NOTICE_REASON,
    Action,
    Assign,
    AssignGroup,
    Configure,
    Event,
    Hold,
    JobAdded,
    JobSpec,
    Late,
    Launch,
    Learned,
    MachineLost,
    Move,
    ProviderLimit,
    Release,
    Risk,
    Shortfall,
    Stop,
    Tick,
    TypeSpec,
)
from autoscaler.core.reclaims import ReclaimPolicy
from autoscaler.core.state import RunState
from autoscaler.deadline.deadline_controller import DeadlineController, DeadlineSettings
from autoscaler.learn.stats import sample_size
from autoscaler.providers import registry
from autoscaler.run.agents import stretch_from

REAL_SLACK_S = 1.0
"""Real seconds a time-scaled run keeps between a release decision and the boundary.

An agent's lease ends a quarter of the margin before the boundary and it asks again at
half (``core.leases``): with 0.5 s at 360x (a margin of 3 emulated minutes) a daemon
late by 0.13 s on a loaded host let leases lapse, and machines with a unit paid were
lost. 1 s leaves it a quarter of a second. At most a tenth of a unit (6 minutes of an
hour): a wider margin leaves each machine that much less of its paid time to take work
(2 s, 12 minutes of an hour, sent the pool test's second job to new machines).
"""


def billing_model(cfg: RunConfig) -> BillingModel:
    """The config's billing; a time-scaled run widens the release margin to real slack."""
    b = cfg.billing
    model = BillingModel(b.mode, b.atu_s, b.min_charge_s, b.commit_s)
    if cfg.time_scale > 1:
        wide = max(model.boundary_margin_s(), REAL_SLACK_S * cfg.time_scale)
        model = dataclasses.replace(model, margin_s=min(wide, 0.1 * model.step_s))
    return model


def type_specs(cfg: RunConfig) -> list[TypeSpec]:
    out = []
    for t in cfg.machine_types:
        provider = cfg.provider_of(t.name)
        life = registry.kind(cfg.kind_of(provider)).max_life_s
        limit = None if life is None else life(cfg.billing.atu_s)
        slots = t.slots or 1
        out.append(
            TypeSpec(
                t.name,
                t.price,
                t.max_count,
                t.boot_s,
                provider,
                limit,
                slots,
                t.group_max_s,
                t.group_max_tasks,
                cfg.price_cap(t.name),
                cfg.reclaim_prior(t.name),
            )
        )
    return out


def controller_settings(cfg: RunConfig) -> ControllerSettings:
    return ControllerSettings(
        policy=cfg.policy,
        z=cfg.sampling.z,
        delta=cfg.sampling.delta,
        sampling_mode=cfg.sampling.mode,
        tail_replication=cfg.tail_replication,
        solver=cfg.solver,
        on_shortfall=cfg.constraint.on_shortfall,
        group_s=cfg.daemon.group_s * cfg.time_scale,
        group_fleet=stretch_from(cfg.daemon),
    )


def provider_limits(cfg: RunConfig) -> tuple[ProviderLimit, ...]:
    """The limits of each provider that has some (``providers:``), as the planners take
    them; none in a run without limits, which then does no limit arithmetic at all."""
    out = []
    for name in cfg.provider_names():
        limit = cfg.limits(name)
        hours = limit.machine_hours
        if limit.max_machines is not None or hours is not None:
            seconds = None if hours is None else hours * 3600
            out.append(ProviderLimit(name, limit.max_machines, seconds))
    return tuple(out)


def planning_settings(cfg: RunConfig) -> ControllerSettings:
    """The settings of ``autoscaler plan``'s sampling: hold once the samples are in."""
    return dataclasses.replace(controller_settings(cfg), hold_after_sampling=True)


def deadline_settings(cfg: RunConfig) -> DeadlineSettings:
    d = cfg.deadline
    found, c = categories_of(cfg), cfg.categories
    return DeadlineSettings(
        categories=tuple(found or ()),
        category_per=c.benchmark_tasks if c is not None else 2,
        category_share=c.benchmark_share if c is not None else 0.2,
        planner=d.planner,
        reassign=d.reassign,
        buy_when_late=d.buy_when_late,
        solver=cfg.solver,
        sample=d.sample,
        z=cfg.sampling.z,
        learn_task_times=d.learn_task_times,
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
    settings = planning_settings(cfg) if hold else controller_settings(cfg)
    found = categories_of(cfg)
    if found is None:
        return Controller(settings)
    c = cfg.categories
    assert c is not None
    return Controller(settings, CategoryChoice(found, c.benchmark_tasks, c.benchmark_share))


def job_specs(cfg: RunConfig) -> list[JobSpec]:
    """Deadline mode's jobs with their task ids and absolute times; none in budget mode.
    A job ``split`` across providers is one job per part (``<job>@<provider>``), each
    on its provider's types (the others its fallback), its budget shared by its tasks."""
    out = []
    for job, ids in expand_jobs(cfg):
        c = job.constraint
        assert c.deadline_s is not None  # the schema requires it of a job
        whole = JobSpec(
            job.name,
            ids.start,
            len(ids),
            job.at,
            job.at + c.deadline_s,
            c.budget,
            job.task_s,
            job.app or "",
        )
        out += split_job(cfg, whole, job.split) if job.split else [whole]
    return out


def split_job(cfg: RunConfig, job: JobSpec, split: Mapping[str, int]) -> list[JobSpec]:
    """``job`` as one job per provider part of ``split`` (tasks per provider), each
    planned on its provider's types, with the job's other types as its fallback
    (``JobSpec.fallback``): a part whose provider cannot launch, or that is late there,
    is not left to miss its deadline while the other providers could run it."""
    if sum(split.values()) != job.count:
        raise AutoscalerError(
            f"job {job.name!r}: its split gives {sum(split.values())} tasks "
            f"({', '.join(f'{p} {n}' for p, n in split.items())}), it has {job.count}"
        )
    parts, first = [], job.first
    for provider, count in split.items():
        others = tuple(t for t in job.task_s if cfg.provider_of(t) != provider)
        budget = None if job.budget is None else job.budget * count / job.count
        parts.append(
            dataclasses.replace(
                job,
                name=f"{job.name}@{provider}",
                first=first,
                count=count,
                budget=budget,
                fallback=others,
            )
        )
        first += count
    return parts


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
        limits=provider_limits(cfg),
        categories=_category_ids(categories_of(cfg), n_tasks),
        launch_prefix=cfg.daemon.machine_prefix,
        reclaims=reclaim_policy(cfg),
    )


def reclaim_policy(cfg: RunConfig) -> ReclaimPolicy:
    """When ``cfg``'s repeated reclaims hold a type (``reclaims:``)."""
    r = cfg.reclaims
    return ReclaimPolicy(
        r.hold_after, r.within_s, r.prior_weight_h, r.hold_below, r.return_per_hour
    )


def _category_ids(found: list[Category] | None, n_tasks: int) -> tuple[int, ...]:
    if found is None:
        return ()
    of = category_of(found)
    return tuple(of.get(t, -1) for t in range(n_tasks))


def added_job(
    job: JobSpec, first: int, at: float, seed: int, categories: Sequence[int] = ()
) -> JobAdded:
    """``job`` joining a live pool at run time ``at`` with ``job.count`` tasks numbered
    from ``first``, of ``categories`` (per task, in id order; -1 for none); they leave the
    bag in an order shuffled by ``seed`` and the job's name, as ``new_state`` shuffles a
    job's tasks."""
    spec = dataclasses.replace(job, first=first, at=at)
    order = list(range(first, first + job.count))
    random.Random(f"{seed}:{job.name}").shuffle(order)
    return JobAdded(spec, tuple(order), tuple(categories))


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


_UNLOGGED = frozenset({Assign, AssignGroup})


def log_reclaim_holds(log: Any, state: RunState, events: Sequence[Event]) -> None:
    """Say when a step's reclaims hold a type (or hold it longer), and when a tick finds
    a held type's learned rate fallen back (``core.reclaims``)."""
    reclaims = state.capacity.reclaims
    if not reclaims.holds:
        return
    for event in events:
        match event:
            case MachineLost(machine=mid, reason=reason) if NOTICE_REASON in reason:
                m = state.fleet.machines[mid]
                name = m.type.name
                zone_hold = reclaims.holding(name, state.now, m.zone) if m.zone else None
                for hold in (reclaims.holding(name, state.now), zone_hold):
                    if hold is not None:
                        log.warning(
                            f"machine {'zone' if hold.zone else 'type'} held after reclaims",
                            t=state.now,
                            machine_type=name,
                            **({"zone": hold.zone} if hold.zone else {}),
                            reclaims=hold.reclaims,
                            until=round(hold.until, 3),
                            rate_per_hour=round(state.reclaim_rate(name), 4),
                        )
            case Tick():
                for hold in reclaims.holds:
                    if hold.until == state.now:
                        log.info(
                            f"machine {'zone' if hold.zone else 'type'} back after reclaims",
                            t=state.now,
                            machine_type=hold.type,
                            **({"zone": hold.zone} if hold.zone else {}),
                            rate_per_hour=round(state.reclaim_rate(hold.type), 4),
                        )


def log_action(log: Any, now: float, action: Action) -> None:
    """The actions worth a log line (not every task assignment)."""
    if type(action) in _UNLOGGED:  # one per task or group: not worth the match below
        return
    match action:
        case Launch(type=t, count=c, token=token):
            log.info("launch", t=now, machine_type=t, count=c, token=token)
        case Release(machine=m, reason=reason):
            log.info("release", t=now, machine=m, reason=reason)
        case Configure(counts=counts, reason=reason):
            log.info("configure", t=now, counts=dict(counts), reason=reason)
        case Shortfall(needed_budget=needed, message=message):
            log.warning("budget shortfall", t=now, needed_budget=needed, message=message)
        case Risk(needed_budget=needed, message=message):
            log.warning("budget at risk", t=now, needed_budget=needed, message=message)
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
        case Learned(job=job, type=t, declared_s=declared, learned_s=learned, runs=n):
            log.warning(
                "task times learned",
                t=now,
                job=job,
                machine_type=t,
                declared_s=declared,
                learned_s=round(learned, 1),
                runs=n,
                message=action.message,
            )
        case Move(tasks=tasks, source=src, target=dst):
            log.info("move", t=now, tasks=len(tasks), source=src, target=dst)
        case Stop(reason=reason):
            log.info("stop", t=now, reason=reason)
        case _:
            pass
