"""Slurm machines: each machine is a Slurm batch job that runs the worker agent.

As on Grid Engine (``sge``), a machine type maps onto a partition and a resource request
(``SlurmType``: partition, constraint, cpus, memory, more sbatch arguments); the ATU and
prices are the config's. A job's ``--time`` is one paid unit (whole minutes, at least
one): Slurm ends a machine at the latest when its unit does, so a machine the daemon
lost track of never runs on unpaid. Agents reach the dispatcher over the cluster network
and read their machine's token from ``--token-file`` (``agents/<machine>.token`` in the
run directory, on a filesystem the nodes share; never the run's secret); the token is
never on the sbatch command line. Jobs run with ``--export=NIL``: the user's own
environment on the node, nothing of the daemon's.

The tag is the job name, ``as.<run id>.<machine id>`` (``sge_output.job_name``). Machine
ids are ``<type>-<token>-<i>``, so a repeated launch of a token submits only its machines
that are not queued or running: ``launch`` is idempotent. ``describe`` reads one
``squeue --states=all`` of the user's jobs: Slurm keeps an ended job there for
``MinJobAge`` seconds with its end state; a job absent from it has ended long ago (no
``sacct``: the test cluster, like many small ones, has no accounting database). A job
pending for a reason it never leaves (a partition that cannot give what it asks) is
cancelled and reported TERMINATED, so the daemon replaces it.

Offers (paper 003): for a slice of n tasks, Slurm itself says when a job of that shape
would start (``sbatch --test-only``); the offer is that start plus the waves the n
tasks take on the processors it would get. Our code never sees the cluster's load.

Every command goes through one seam, a ``CommandRunner`` (``batch``); output is read by
the pure parsers of ``slurm_output``. A failing command is an ``AutoscalerError`` with
code ``"SlurmError"`` (retryable when slurmctld could not be reached); an sbatch that
Slurm refuses for the type's request (a partition or feature it does not have) is
``"Unsupported"``: plan without that type.
"""

from __future__ import annotations

import functools
import math
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoscaler.core.errors import AutoscalerError
from autoscaler.providers import slurm_output
from autoscaler.providers.base import Provider, ProviderState, split_machine_id
from autoscaler.providers.batch import (
    BatchProvider,
    CommandResult,
    CommandRunner,
    ListedJob,
    TaggedJob,
    build_provider,
    command_error,
    detail,
    run_checked,
    run_client,
    sweeper_of,
)
from autoscaler.providers.cost_tags import project_of
from autoscaler.providers.kind import (
    ProviderKind,
    RunContext,
    Sweeper,
    cores,
)
from autoscaler.providers.offer import Offer, OfferRequest
from autoscaler.providers.sge_output import job_name, parse_job_name
from autoscaler.providers.slurm_output import ERROR_CODE, SACCT_FORMAT, SQUEUE_FORMAT, Job

if TYPE_CHECKING:
    from autoscaler.config.platform import SlurmType as SlurmTypeConfig
    from autoscaler.config.schema import Platform

# What Slurm's clients print when slurmctld cannot be reached or is too busy: the same
# call may work later.
_UNREACHABLE = (
    "unable to contact slurm controller",
    "socket timed out",
    "zero bytes were transmitted",
    "temporarily unable",
    "timed out after",
)
# What sbatch prints when the request of a type cannot be met by this cluster at all.
_UNSUPPORTED = (
    "invalid partition",
    "invalid feature",
    "requested node configuration is not available",
    "memory specification can not be satisfied",
    "more processors requested than permitted",
)


def run_command(argv: Sequence[str]) -> CommandResult:
    """Run a Slurm client command; a missing binary or a timeout is a result too."""
    return run_client(argv, scheduler="Slurm")


def _failure(argv: Sequence[str], result: CommandResult) -> AutoscalerError:
    return command_error(argv, result, code=ERROR_CODE, unreachable=_UNREACHABLE)


def _run(runner: CommandRunner, argv: Sequence[str]) -> CommandResult:
    return run_checked(runner, argv, code=ERROR_CODE, unreachable=_UNREACHABLE)


# --- for `autoscaler cleanup` ---------------------------------------------------------------


SQUEUE_MINE = ("squeue", "--me", "--noheader", "--all", "--states=all", "-o", SQUEUE_FORMAT)


def list_jobs(runner: CommandRunner = run_command) -> list[Job]:
    """Every job of this user, queued, running or recently ended."""
    return slurm_output.parse_squeue(_run(runner, SQUEUE_MINE).stdout)


def list_tagged(runner: CommandRunner = run_command) -> list[TaggedJob]:
    """Every queued or running job of ours (any run), found by name."""
    out = []
    for job in list_jobs(runner):
        tag = parse_job_name(job.name)
        if tag is not None and slurm_output.provider_state(job) is not ProviderState.TERMINATED:
            out.append(TaggedJob(job.job_id, tag[0], tag[1], job.state))
    return out


def cancel_jobs(job_ids: Sequence[str], runner: CommandRunner = run_command) -> list[str]:
    """scancel ``job_ids``; the ids cancelled (a job already ended is not an error)."""
    ids = list(dict.fromkeys(job_ids))
    if ids:
        _run(runner, ["scancel", *ids])
    return ids


# --- the provider -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SlurmType:
    """How one of our machine types maps onto the cluster."""

    partition: str | None = None  # sbatch --partition
    constraint: str | None = None  # sbatch --constraint (node features)
    cpus: int = 1  # sbatch --cpus-per-task
    mem: str | None = None  # sbatch --mem, e.g. "2G"
    extra_args: tuple[str, ...] = ()  # more sbatch arguments, as they are

    def request(self) -> list[str]:
        """The sbatch arguments of this type's resource request."""
        args = [f"--cpus-per-task={self.cpus}"]
        if self.partition:
            args.append(f"--partition={self.partition}")
        if self.constraint:
            args.append(f"--constraint={self.constraint}")
        if self.mem:
            args.append(f"--mem={self.mem}")
        return args + list(self.extra_args)


def _order(job_id: str) -> int:
    """Submission order of a job id (``123``, or ``123_4`` for an array task)."""
    head = job_id.split("_", 1)[0]
    return int(head) if head.isdigit() else -1


class SlurmProvider(BatchProvider[SlurmType]):
    """Slurm jobs as machines; one squeue per describe or launch, whatever the count."""

    section = "slurm"
    error_code = ERROR_CODE

    @property
    def time_limit_min(self) -> int:
        """A job's ``--time``: one paid unit."""
        return slurm_output.time_limit_minutes(self.capabilities.billing.atu_s)

    def _run_real(self, argv: Sequence[str]) -> CommandResult:
        return run_command(argv)

    def _list(self) -> list[ListedJob]:
        out = []
        for job in list_jobs(self._runner):
            tag = parse_job_name(job.name)
            if tag is not None and tag[0] == self.run_id:
                state = slurm_output.provider_state(job)
                said = slurm_output.job_words(job)
                out.append(
                    ListedJob(job.job_id, tag[1], state, job.submitted_at, _order(job.job_id), said)
                )
        return out

    def _gone_reason(self, job_id: str) -> str:
        """What ``sacct`` keeps of the job's end (a cluster without accounting has none)."""
        argv = ["sacct", "--parsable2", "--noheader", "-j", job_id, "-o", SACCT_FORMAT]
        result = self._runner(argv)
        said = slurm_output.parse_sacct(result.stdout, job_id) if result.rc == 0 else None
        if said is None:
            return f"gone from squeue (sacct: {detail(result)[:200]})"
        return f"gone from squeue, {said}"

    def _cancel(self, job_ids: Sequence[str]) -> list[str]:
        return cancel_jobs(job_ids, self._runner)

    def __init__(self, *args: Any, account_from_project: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.account_from_project = account_from_project

    def submit_args(self, mid: str, spec: SlurmType, project: str | None = None) -> list[str]:
        """The sbatch command line of machine ``mid``: it names the token file, never the
        token. ``project``: the run's, as the job's comment, and as its account too with
        ``account_from_project`` (Slurm keeps accounts in lower case)."""
        s = self.settings
        agent = s.command(mid, token_file=self.token_path(mid), type=split_machine_id(mid)[0]).argv
        charged = []
        if project:
            charged.append(f"--comment={project}")
            if self.account_from_project:
                charged.append(f"--account={project.lower()}")
        return [
            "sbatch",
            "--parsable",
            f"--job-name={job_name(self.run_id, mid)}",
            f"--output={self.log_path(mid)}",
            f"--time={self.time_limit_min}",
            "--ntasks=1",
            "--export=NIL",
            f"--chdir={s.workdir or self.log_dir}",
            *charged,
            *spec.request(),
            f"--wrap=exec {shlex.join(agent)}",
        ]

    def _submit_job(self, mid: str, type: str, spec: SlurmType, tags: Mapping[str, str]) -> str:
        argv = self.submit_args(mid, spec, project_of(tags))
        result = self._runner(argv)
        if result.rc != 0:
            said = detail(result)
            unsupported = any(m in said.lower() for m in _UNSUPPORTED)
            raise AutoscalerError(
                f"slurm: machine type {type!r}: sbatch refused the job: {said[:500]}",
                retryable=_failure(argv, result).retryable,
                code="Unsupported" if unsupported else ERROR_CODE,
            )
        return slurm_output.parse_sbatch(result.stdout)

    # --- offers (paper 003) ---------------------------------------------------------

    def offers(self, request: OfferRequest, sizes: Sequence[int]) -> list[Offer]:
        """For each size, the earliest finish over the types: when Slurm would start a job
        of that many machines of the type (``sbatch --test-only``), plus the waves of
        ``task_s`` the tasks take on them, each machine running its type's slots at once.
        A type Slurm cannot run at all is left out."""
        out = []
        for n in sizes:
            finishes = [f for t in self.types if (f := self._finish(t, n, request)) is not None]
            if finishes:
                finish = min(f for _, f in finishes)
                out.append(Offer(KIND.name, n, finish))  # a run names it after its config
        return out

    def _finish(self, type: str, n: int, request: OfferRequest) -> tuple[str, float] | None:
        """(type, finish on the driver's clock) of ``n`` tasks on jobs of ``type``; the
        job is narrowed (halved) until Slurm would run it at all."""
        spec = self.types[type]
        slots = max(1, self.settings.slots.get(type, 1))
        width = min(math.ceil(n / slots), self.capabilities.max_counts.get(type, n))
        while width >= 1:
            seconds = slurm_output.finish_after(n, width * slots, request.task_s)
            minutes = max(1, math.ceil(seconds / 60))
            argv = [
                "sbatch",
                "--test-only",
                f"--job-name={job_name(self.run_id, 'offer')}",
                f"--ntasks={width}",
                f"--time={minutes}",
                "--output=/dev/null",
                *spec.request(),
                "--wrap=true",
            ]
            result = self._runner(argv)
            answer = slurm_output.parse_test_only(result.stderr + "\n" + result.stdout)
            if answer is not None:
                got = max(1, answer.processors // max(1, spec.cpus))
                lanes = got * slots
                wait = max(0.0, answer.start - self._wall())
                return type, request.now + wait + slurm_output.finish_after(
                    n, lanes, request.task_s
                )
            if _failure(argv, result).retryable:
                raise _failure(argv, result)
            width //= 2
        return None


# --- the kind -------------------------------------------------------------------------------


def build(cfg: Platform, ctx: RunContext) -> Provider:
    """The Slurm provider of a real run of ``cfg`` (its ``slurm`` section)."""
    slurm = cfg.slurm
    if slurm is None:
        raise AutoscalerError("provider is slurm but the config has no slurm section")
    types = {
        name: SlurmType(t.partition, t.constraint, _cpus(cfg, name, t), t.mem, tuple(t.extra_args))
        for name, t in slurm.types.items()
    }
    provider = functools.partial(SlurmProvider, account_from_project=slurm.account_from_project)
    return build_provider(
        provider, KIND, cfg, ctx, types, python=slurm.python, workdir=slurm.workdir
    )


def _cpus(cfg: Platform, name: str, t: SlurmTypeConfig) -> int:
    """A job's ``--cpus-per-task``: the type's own ``cpus`` where given, else its slots
    times the bag's cpus per task."""
    return t.cpus if "cpus" in t.model_fields_set else cores(cfg, name)


def sweeper(cfg: Platform) -> Sweeper:
    return sweeper_of(list_tagged, cancel_jobs)


def max_life_s(atu_s: float) -> float:
    """A job lives at most its ``--time``: one paid unit in whole minutes."""
    return 60.0 * slurm_output.time_limit_minutes(atu_s)


KIND = ProviderKind("slurm", build=build, sweeper=sweeper, max_life_s=max_life_s)
