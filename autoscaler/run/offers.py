"""Offers when a run starts (paper 003): with several providers and ``deadline.offers``
set, each provider says what part of each job it would do by when, without revealing
its load, and the policy composes the offers into the job's ``split`` (tasks per
provider), which the planners then keep to.

A provider that answers offers itself (Slurm: ``sbatch --test-only``) is asked; any
other provider's offer follows from its types' boot time, limits and prices (a cloud's,
``offers.cloud``), as does every provider's in a dry run, where nothing is asked of a
real scheduler. The split goes into the run's config, so a resumed run keeps it, and
what the composition decided (and a deadline it cannot meet) is said at once.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from autoscaler.config.bag import expand_jobs
from autoscaler.config.schema import Job, RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.words import counted
from autoscaler.offers.allocation import OffersError
from autoscaler.offers.cheapest import SLICES, Rate, lane_life, lanes
from autoscaler.offers.cloud import CloudType, cloud_offers
from autoscaler.offers.decide import compose
from autoscaler.providers.offer import SLICES as PAPER_SLICES
from autoscaler.providers.offer import Offer, OfferRequest, slice_sizes
from autoscaler.report.format import hms
from autoscaler.run.assemble import type_specs, write_config
from autoscaler.run.cluster_load import LoadedCluster


def split_run(
    cfg: RunConfig, billing: BillingModel, provider: object, log: Any, run_dir: Path
) -> RunConfig:
    """A new real run's jobs split by its providers' offers, kept in the run's config
    (a resumed run keeps the split); what was decided is said on stderr and logged."""
    parts = getattr(provider, "parts", None) or {cfg.provider_names()[0]: provider}
    cfg, notes = compose_offers(cfg, billing, parts)
    say(notes, log)
    write_config(cfg, run_dir)
    return cfg


def say(notes: list[str], log: Any) -> None:
    """What the offers decided, on stderr (the user hears it at submission) and logged."""
    for note in notes:
        log.warning("offers", note=note)
        print(f"offers: {note}", file=sys.stderr, flush=True)


def wanted(cfg: RunConfig) -> bool:
    """Whether ``cfg`` asks for offers: several providers, a policy, a job to split."""
    return (
        cfg.providers is not None
        and cfg.deadline.offers != "none"
        and any(j.task_s and not j.split for j in cfg.jobs)
    )


def compose_offers(
    cfg: RunConfig, billing: BillingModel, parts: Mapping[str, Any] | None = None
) -> tuple[RunConfig, list[str]]:
    """``cfg`` with each job's split set from the providers' offers (``parts``: the run's
    built providers by name, asked where they answer offers; None: a dry run), and what
    was decided, a line per job."""
    if not wanted(cfg):
        return cfg, []
    notes: list[str] = []
    jobs: list[Job] = []
    for job, ids in expand_jobs(cfg):
        if not job.task_s or job.split:
            jobs.append(job)
            continue
        assert job.constraint.deadline_s is not None  # the schema requires it of a job
        deadline = job.at + job.constraint.deadline_s
        rates = type_rates(cfg, billing, job, reclaim_per_hour(cfg))
        offers = provider_offers(cfg, billing, job, len(ids), deadline, parts, rates)
        request = OfferRequest(len(ids), min(job.task_s.values()), deadline, job.at)
        try:
            decision = compose(cfg.deadline.offers, request, offers, rates)
        except OffersError as exc:
            notes.append(f"job {job.name}: offers not used ({exc.message})")
            jobs.append(job)
            continue
        parts_said = ", ".join(
            f"{p.provider} {counted(p.tasks, 'task')} by {hms(p.finish)}"
            + ("" if p.cost is None else f" for {p.cost:.2f} expected")
            for p in decision.allocation.parts
        )
        line = f"job {job.name}: {decision.allocation.policy} splits it: {parts_said}"
        if not decision.meets:
            earliest = decision.earliest if decision.earliest is not None else deadline
            line += (
                f"; its deadline {hms(deadline)} cannot be met: the earliest finish the "
                f"providers offer is {hms(earliest)}"
            )
        notes.append(line)
        jobs.append(job.model_copy(update={"split": decision.allocation.by_provider()}))
    return cfg.model_copy(update={"jobs": jobs}), notes


def reclaim_per_hour(cfg: RunConfig) -> dict[str, float]:
    """The rate each type's machines are taken back per hour, as the planners take it
    when a run starts: the config's prior (``RunConfig.reclaim_prior``; nothing is
    learned yet). A dry run's ``emulator.reclaim_per_hour`` is the world's, which the
    run does not know."""
    return {t.name: cfg.reclaim_prior(t.name) for t in cfg.machine_types}


def type_rates(
    cfg: RunConfig, billing: BillingModel, job: Job, reclaim: Mapping[str, float]
) -> list[Rate]:
    """What each type ``job`` names charges for its tasks (``offers.cheapest``), within
    its provider's machine limit, which each carries too: the limit holds for the
    provider's types together; ``reclaim``: per type, its machines taken back an hour."""
    out = []
    for t in type_specs(cfg):
        if t.name not in job.task_s:
            continue
        limit = cfg.limits(t.provider).max_machines
        out.append(
            Rate(
                t.provider,
                t.name,
                t.price,
                billing,
                t.boot_s,
                job.task_s[t.name],
                t.slots,
                t.max_count if limit is None else min(t.max_count, limit),
                reclaim_per_hour=reclaim.get(t.name, 0.0),
                max_life_s=t.max_life_s,
                provider_max=limit,
            )
        )
    return out


def soonest(
    maker: Callable[[OfferRequest, Sequence[int]], list[Offer]],
    request: OfferRequest,
    tasks: int,
    rates: Sequence[Rate],
) -> list[Offer]:
    """A scheduler's offer of ``tasks`` as soon as it can (``rates``: the provider's
    types). A cluster's holds a part it fits to the deadline asked, so an offer by the
    deadline says nothing of how close to it the part ends; asked for it at once, it
    says when the part would end at the earliest. Where a machine is a job of a time
    limit, a lane runs its tasks as jobs one after the other
    (``offers.cheapest.lane_life``): the part is asked for as long as they take, so
    the processors the later jobs need are seen to be free (or not) as the first's."""
    asked = replace(request, deadline=request.now)
    if rates:
        waves = math.ceil(tasks / max(1, lanes(rates)))
        quickest = min(rates, key=lambda r: r.boot_s + waves * r.task_s)
        chain = lane_life(quickest, waves)
        if chain is None:
            return []
        first = quickest.max_life_s or 0.0
        asked = replace(
            asked,
            deadline=request.now + first,
            task_s=(chain[0] - quickest.boot_s) / waves,
        )
    return maker(asked, [tasks])


def provider_offers(
    cfg: RunConfig,
    billing: BillingModel,
    job: Job,
    tasks: int,
    deadline: float,
    parts: Mapping[str, Any] | None,
    rates: Sequence[Rate] = (),
) -> list[Offer]:
    """Every provider's offers for the paper's slices of ``job`` (a provider none of
    whose types the job names makes none). For the cheapest split, every 5 % of it,
    and a provider that answers itself is asked when it would end each at the earliest
    (``soonest``; ``rates``: what the job's types charge)."""
    cheapest = cfg.deadline.offers == "cheapest"
    sizes = slice_sizes(tasks, SLICES if cheapest else PAPER_SLICES)
    out: list[Offer] = []
    for name in cfg.provider_names():
        types = [t for t in cfg.machine_types if cfg.provider_of(t.name) == name]
        mine = [t for t in types if t.name in job.task_s]
        if not mine:
            continue
        limit = cfg.limits(name).max_machines
        power = sum(t.max_count * (t.slots or 1) for t in types)
        if limit is not None:
            power = min(power, limit * max(t.slots or 1 for t in types))
        maker = getattr(parts.get(name), "offers", None) if parts else None
        load = cfg.emulator.local_load.get(name) if parts is None else None
        if load is not None:  # a dry run of a cluster with its users' jobs: their queue
            maker = LoadedCluster(cfg, name, load, limit, mine).offers
        if maker is not None:  # the provider's own scheduler answers
            request = OfferRequest(tasks, min(job.task_s[t.name] for t in mine), deadline, job.at)
            if cheapest:
                own = [r for r in rates if r.provider == name]
                made = [o for n in sizes for o in soonest(maker, request, n, own)]
            else:
                made = maker(request, sizes)
            out += [replace(o, provider=name, power=o.power or power) for o in made]
            continue
        best: dict[int, Offer] = {}
        for t in mine:
            count = t.max_count if limit is None else min(t.max_count, limit)
            kind = CloudType(
                name, t.boot_s, count, t.price, billing, job.task_s[t.name], t.slots or 1
            )
            request = OfferRequest(tasks, job.task_s[t.name], deadline, job.at)
            for offer in cloud_offers(kind, request, sizes):
                if offer.tasks not in best or offer.finish < best[offer.tasks].finish:
                    best[offer.tasks] = replace(offer, power=power)
        out += best.values()
    return out
