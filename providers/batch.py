"""Machines as batch jobs of a cluster's scheduler: what Grid Engine and Slurm share.

A machine is a job that runs the worker agent; its tag is the job's name (``as.<run
id>.<machine id>``, ``sge_output.job_name``), so a restarted daemon finds its run's jobs
in the scheduler's listing as a cloud provider finds instances by tag. Machine ids are
``<type>-<token>-<i>`` (``base.machine_ids``): a repeated launch of a token submits only
its machines that are not queued or running, so ``launch`` is idempotent.

``BatchProvider`` holds the machines and that logic; a scheduler's module subclasses it
with the three things that differ: how the run's jobs are listed, how one is submitted,
how jobs are ended (and, for a scheduler whose listing may miss a live job, how a job
that vanished is confirmed gone). Every command goes through one seam, a
``CommandRunner``: ``run_client`` runs the real commands; unit tests replay captured
outputs through a scripted runner.
"""

from __future__ import annotations

import shlex
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Generic, TypeVar

from autoscaler.bootstrap.agent_start import AgentSettings
from autoscaler.core.atomic import write_atomic
from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.base import (
    Capabilities,
    MachineRecord,
    MachineStatus,
    PartialLaunch,
    ProviderState,
    check_launch,
    machine_ids,
    split_machine_id,
)
from autoscaler.providers.ended import because
from autoscaler.providers.kind import (
    ProviderKind,
    RunContext,
    Sweeper,
    TaggedMachine,
    agent_settings,
)

if TYPE_CHECKING:
    from autoscaler.config.schema import Platform

COMMAND_TIMEOUT_S = 60.0


# --- the one seam: running commands -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommandResult:
    rc: int
    stdout: str
    stderr: str


CommandRunner = Callable[[Sequence[str]], CommandResult]


def run_client(
    argv: Sequence[str], env: Mapping[str, str] | None = None, *, scheduler: str
) -> CommandResult:
    """Run a client command of ``scheduler``; a missing binary or a timeout is a result
    too. ``env``: the whole environment (None: ours)."""
    try:
        proc = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            env=None if env is None else dict(env),
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        return CommandResult(127, "", f"{argv[0]}: command not found (is {scheduler} installed?)")
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"timed out after {COMMAND_TIMEOUT_S:g}s")
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


def detail(result: CommandResult) -> str:
    """What a command said, on one line (its stderr, else its stdout)."""
    return " ".join((result.stderr.strip() or result.stdout.strip()).split()) or "no output"


def command_error(
    argv: Sequence[str],
    result: CommandResult,
    *,
    code: str,
    unreachable: Collection[str],
    what: str = "failed",
) -> AutoscalerError:
    """A failed command as an error naming it; retryable when its output says the
    scheduler could not be reached (one of ``unreachable``, lower case)."""
    said = detail(result)
    shown = shlex.join(argv)
    shown = shown if len(shown) <= 160 else shown[:157] + "..."
    return AutoscalerError(
        f"{shown} {what} (exit {result.rc}): {said[:500]}",
        retryable=any(marker in said.lower() for marker in unreachable),
        code=code,
    )


def run_checked(
    runner: CommandRunner, argv: Sequence[str], *, code: str, unreachable: Collection[str]
) -> CommandResult:
    """Run ``argv`` through ``runner``; a non-zero exit is a ``command_error``."""
    result = runner(argv)
    if result.rc != 0:
        raise command_error(argv, result, code=code, unreachable=unreachable)
    return result


@dataclass(frozen=True, slots=True)
class TaggedJob:
    """A job of ours (any run's), as ``autoscaler cleanup`` lists it."""

    job_id: str
    run_id: str
    machine: str
    state: str  # in the scheduler's words


# --- the provider -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ListedJob:
    """A job of the run as the scheduler lists it."""

    job_id: str
    machine: str  # our machine id, from the job's name
    state: ProviderState | None  # None: it will never run (cancel it)
    submitted_at: float | None  # epoch seconds
    order: int  # submission order (the job number)
    said: str = ""  # its state in the scheduler's words (``FAILED (JobLaunchFailure)``)


@dataclass
class _Machine:
    id: str
    type: str
    token: str
    job_id: str
    launched_at: float
    state: ProviderState
    reason: str | None = None  # why it ended, when it ended by itself


GONE_LOOKUPS = 4
"""Jobs gone from the listing whose end is looked up in the scheduler's accounting at
one describe (a command each); the others say only that they are gone."""


SpecT = TypeVar("SpecT")


class BatchProvider(Generic[SpecT]):
    """Jobs as machines; one listing per describe or launch, whatever the count.

    Subclasses give ``_run_real``, ``_list``, ``_submit_job`` and ``_cancel`` (and
    ``_existing`` if their listing may miss a live job).
    """

    section = "batch"
    """The config section that maps our types (for messages)."""
    error_code = "BatchError"
    """The code of the scheduler's errors."""

    def __init__(
        self,
        capabilities: Capabilities,
        run_id: str,
        agents: AgentSettings,
        types: Mapping[str, SpecT],
        log_dir: Path,
        clock: Callable[[], float],
        token_file: Path,
        runner: CommandRunner | None = None,
        wall: Callable[[], float] = time.time,
    ):
        self._capabilities = capabilities
        self.run_id = run_id
        self.settings = agents
        self.types = dict(types)
        self.log_dir = log_dir
        self._clock = clock
        self.token_file = token_file
        self._runner: CommandRunner = runner if runner is not None else self._run_real
        self._wall = wall  # epoch seconds, what schedulers' times are in
        self._machines: dict[str, _Machine] = {}
        # The daemon calls a provider from several threads (a launch beside a describe):
        # the machines' table is read and changed under this lock, and a launch's count
        # check and its submissions are one step (two launches cannot both pass the maximum).
        self._lock = threading.RLock()

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    status_polling_interval = 3.0
    """One listing a describe: cheap, but the scheduler serves every user of the cluster."""

    # --- what a scheduler gives --------------------------------------------------------

    def _run_real(self, argv: Sequence[str]) -> CommandResult:
        """Run the scheduler's client command ``argv`` (the runner unless one is given)."""
        raise NotImplementedError

    def _list(self) -> list[ListedJob]:
        """The run's jobs the scheduler lists now."""
        raise NotImplementedError

    def _submit_job(self, mid: str, type: str, spec: SpecT, tags: Mapping[str, str]) -> str:
        """Submit machine ``mid``'s job, saying what of the launch's ``tags`` the
        scheduler can keep (its project: ``cost_tags``); its id."""
        raise NotImplementedError

    def _cancel(self, job_ids: Sequence[str]) -> list[str]:
        """End these jobs; the ids ended or already gone."""
        raise NotImplementedError

    def _existing(self, job_ids: Sequence[str]) -> set[str]:
        """Which of these jobs, absent from the listing, still exist (default: none)."""
        return set()

    def _never_reasons(self, jobs: Sequence[ListedJob]) -> dict[str, str]:
        """Job id -> why these jobs, which will never run, will not (default: their
        state); asked before they are ended."""
        return {j.job_id: f"{j.said or 'held'}: it would never run" for j in jobs}

    def _gone_reason(self, job_id: str) -> str:
        """How job ``job_id``, gone from the listing, ended, as the scheduler's
        accounting keeps it (default: only that it is gone)."""
        return f"job {job_id} gone from the {self.section} listing"

    # --- the provider protocol ------------------------------------------------------

    def launch(
        self,
        type: str,
        count: int,
        token: str,
        tags: Mapping[str, str],
        *,
        avoid_zones: Collection[str] = (),
    ) -> list[MachineRecord]:
        """Submit the token's jobs that are not queued or running; all of them as records."""
        with self._lock:
            ids = machine_ids(type, token, count)
            live = self._refresh()
            missing = [mid for mid in ids if mid not in live]
            alive = sum(1 for mid in live if self._machines[mid].type == type)
            check_launch(self._capabilities, type, alive, len(missing))
            if missing:
                spec = self.types.get(type)
                if spec is None:
                    raise AutoscalerError(
                        f"{self.section}.types has no entry for machine type {type!r}",
                        code="UnknownType",
                    )
                if not self.token_file.is_file():
                    raise AutoscalerError(
                        f"the agents' token file {self.token_file} does not exist",
                        code=self.error_code,
                    )
                self.log_dir.mkdir(parents=True, exist_ok=True)
                for mid in missing:
                    held = self.token_path(mid)
                    try:
                        write_atomic(held, self.settings.machine_token(mid) + "\n")
                        job_id = self._submit_job(mid, type, spec, tags)
                    except (AutoscalerError, OSError) as exc:
                        # The jobs submitted before are the run's: it must own them.
                        records = self._records(ids, type, token)
                        if not records:
                            raise
                        err = (
                            exc
                            if isinstance(exc, AutoscalerError)
                            else AutoscalerError(f"{held}: {exc}", code=self.error_code)
                        )
                        raise PartialLaunch(
                            records, err.message, retryable=err.retryable, code=err.code
                        ) from None
                    self._machines[mid] = _Machine(
                        mid, type, token, job_id, self._clock(), ProviderState.PENDING
                    )
            return self._records(ids, type, token)

    def _records(self, ids: Sequence[str], type: str, token: str) -> list[MachineRecord]:
        return [
            MachineRecord(mid, type, token, self._machines[mid].launched_at)
            for mid in ids
            if mid in self._machines
        ]

    def describe(self, ids: Sequence[str] | None = None) -> list[MachineStatus]:
        """Machines of this run (all of them, or ``ids``) as the scheduler shows their jobs;
        jobs of the run an earlier daemon submitted are adopted (found by name)."""
        with self._lock:
            self._refresh()
            chosen = list(self._machines) if ids is None else list(ids)
            return [
                MachineStatus(mid, m.type, m.state, reason=m.reason)
                for mid in chosen
                if (m := self._machines.get(mid)) is not None
            ]

    def terminate(self, ids: Sequence[str], *, now: bool = False) -> list[str]:
        """End the jobs of those machines (only this run's); the ids terminated. The
        scheduler never waits for a job's end: ``now`` changes nothing."""
        with self._lock:
            if any(mid not in self._machines for mid in ids):
                self._refresh()  # adopt first: after a restart the ids may be new to us
            targets = [self._machines[mid] for mid in ids if mid in self._machines]
            alive = [m for m in targets if m.state is not ProviderState.TERMINATED]
            ended = set(self._cancel([m.job_id for m in alive])) if alive else set()
            for machine in alive:
                if machine.job_id in ended:
                    machine.state = ProviderState.TERMINATED
            return [m.id for m in targets if m.state is ProviderState.TERMINATED]

    # --- jobs ---------------------------------------------------------------------------

    def _refresh(self) -> set[str]:
        """Bring every machine's state up to date from one listing; the ids alive.

        Jobs of this run unknown to us are adopted; jobs that will never run are ended; a
        job gone from the listing (and not confirmed by ``_existing``) has ended; an
        ended machine stays ended (a listing may lag behind a cancel). A machine that
        ends here ended by itself: it keeps why (``ended.because``).
        """
        ours: dict[str, ListedJob] = {}
        for job in self._list():
            previous = ours.get(job.machine)
            if previous is None or job.order > previous.order:
                ours[job.machine] = job  # a relaunched machine: the newest job counts
        never: list[tuple[_Machine, ListedJob]] = []
        for mid, job in ours.items():
            machine = self._machines.get(mid)
            if machine is None or machine.job_id != job.job_id:
                machine = self._adopt(mid, job)
            elif machine.state is ProviderState.TERMINATED:
                continue
            if job.state is None:
                never.append((machine, job))
            elif job.state is ProviderState.TERMINATED:
                machine.reason = self._because(machine, job.said)
            machine.state = job.state or ProviderState.TERMINATED
        vanished = [
            m
            for m in self._machines.values()
            if m.id not in ours and m.state is not ProviderState.TERMINATED
        ]
        if vanished:
            present = self._existing([m.job_id for m in vanished])
            gone = [m for m in vanished if m.job_id not in present]
            for i, machine in enumerate(gone):
                machine.state = ProviderState.TERMINATED
                said = self._gone_reason(machine.job_id) if i < GONE_LOOKUPS else None
                machine.reason = self._because(machine, said or "gone from the listing")
        if never:
            reasons = self._never_reasons([job for _, job in never])
            for machine, job in never:
                machine.reason = self._because(machine, reasons.get(job.job_id, job.said))
            self._cancel([job.job_id for _, job in never])
        return {mid for mid, m in self._machines.items() if m.state is not ProviderState.TERMINATED}

    def _because(self, machine: _Machine, said: str) -> str:
        """Why ``machine`` ended: the scheduler's words on job ``said``, its log's tail."""
        return because(f"{self.section} job {machine.job_id}: {said}", self.log_path(machine.id))

    def token_path(self, mid: str) -> Path:
        """Where machine ``mid``'s token is (its agent's ``--token-file``, mode 0600)."""
        return self.log_dir / f"{mid}.token"

    def log_path(self, mid: str) -> Path:
        """Where machine ``mid``'s job writes its output (the agent's log)."""
        return self.log_dir / f"{mid}.log"

    def _adopt(self, mid: str, job: ListedJob) -> _Machine:
        """Take over a job of this run submitted by an earlier daemon (found by name)."""
        mtype, token = split_machine_id(mid)
        age = 0.0 if job.submitted_at is None else max(0.0, self._wall() - job.submitted_at)
        machine = _Machine(
            mid, mtype, token, job.job_id, self._clock() - age, ProviderState.PENDING
        )
        self._machines[mid] = machine
        return machine


# --- building one, sweeping ----------------------------------------------------------------


def build_provider(
    provider: Callable[..., BatchProvider[SpecT]],
    kind: ProviderKind,
    cfg: Platform,
    ctx: RunContext,
    types: Mapping[str, SpecT],
    *,
    python: str | None,
    workdir: Path | None,
) -> BatchProvider[SpecT]:
    """A run's provider of class ``provider``: agents as the section says, logs and the
    token file in the run directory."""
    return provider(
        kind.capabilities(cfg, ctx.billing),
        ctx.run_id,
        agent_settings(cfg, ctx, python=python, workdir=workdir),
        types,
        ctx.run_dir / "agents",
        ctx.clock,
        ctx.run_dir / "token",
    )


def sweeper_of(
    list_tagged: Callable[[], Sequence[TaggedJob]], end: Callable[[Sequence[str]], list[str]]
) -> Sweeper:
    """A sweeper over a scheduler's listing of our jobs (any run's) and its way to end them."""

    def tagged() -> list[TaggedMachine]:
        return [
            TaggedMachine(j.job_id, j.run_id, split_machine_id(j.machine)[0], j.state)
            for j in list_tagged()
        ]

    return Sweeper(tagged, end)
