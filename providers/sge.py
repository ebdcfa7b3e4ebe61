"""Grid Engine machines: each machine is a Grid Engine job that runs the worker agent.

Paper 000 (§3) emulated clouds on a cluster this way: a machine is a batch job that holds
a slot and runs a worker; our machine types map onto queues and resource requests
(``SgeType``); the ATU and prices are the config's. Agents reach the dispatcher over the
cluster network and read the run's token from ``--token-file`` (the run directory's
``token``, mode 0600, on a filesystem the nodes share). The token is never on the qsub
command line nor in ``-v`` variables: ``qstat -j`` shows both to every user.

The tag is the job name: ``as.<run id>.<machine id>``, each part escaped so that any run
id survives Grid Engine's rules for names (``sge_output.job_name``). A restarted daemon
finds its run's jobs by name in ``qstat``, as a cloud provider finds instances by tag.
Machine ids are ``<type>-<token>-<i>`` as in the local provider, so a repeated launch of
a token submits only its machines that are not queued or running: ``launch`` is
idempotent.

States: a queued job (``qw``, ``hqw``) is PENDING; a running one (``r``, ``t``, ``Rr``,
also suspended ones, which still hold their slot) is RUNNING. A job absent from qstat
has ended or was deleted from outside: it is TERMINATED, a lost machine to the daemon.
A job in an error state (``Eqw``, e.g. its working directory does not exist on the
node) would wait forever without running: ``describe`` deletes it and reports it
TERMINATED, so the daemon replaces it instead of paying for a slot that never works. A
job being deleted (``d``) is TERMINATED too: nothing brings it back.

Every qsub, qstat and qdel goes through one seam, a ``CommandRunner``: ``run_command``
runs the real commands; unit tests replay captured outputs through a scripted runner.
What the commands print is read by the pure parsers of ``sge_output``.
A failing command is an ``AutoscalerError`` with code ``"SgeError"``, retryable when the
qmaster could not be reached.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from autoscaler.bootstrap.agent_start import AgentSettings
from autoscaler.core.errors import AutoscalerError
from autoscaler.providers import sge_output
from autoscaler.providers.base import (
    Capabilities,
    MachineRecord,
    MachineStatus,
    Provider,
    ProviderState,
    check_launch,
    machine_ids,
    split_machine_id,
)
from autoscaler.providers.kind import (
    ProviderKind,
    RunContext,
    Sweeper,
    TaggedMachine,
    agent_settings,
)
from autoscaler.providers.sge_output import ERROR_CODE, Job

if TYPE_CHECKING:
    from autoscaler.config.schema import Platform

SGE_ROOT = "/var/lib/gridengine"
SGE_CELL = "default"
"""Defaults for the client commands' environment (Debian's layout), used when unset."""

COMMAND_TIMEOUT_S = 60.0

# What Grid Engine's clients print when the qmaster cannot be reached (down, restarting,
# network): the same call may work later.
_UNREACHABLE = (
    "unable to send message to qmaster",
    "unable to contact qmaster",
    "commlib error",
    "can't connect",
    "cannot connect",
    "got send error",
    "timed out after",
)


# --- the one seam: running commands -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CommandResult:
    rc: int
    stdout: str
    stderr: str


CommandRunner = Callable[[Sequence[str]], CommandResult]


def run_command(argv: Sequence[str]) -> CommandResult:
    """Run a Grid Engine client command; a missing binary or a timeout is a result too.

    ``SGE_ROOT`` and ``SGE_CELL`` default to Debian's layout when the environment lacks
    them, so the daemon works on a node set up by the packages without a login profile.
    """
    env = dict(os.environ)
    env.setdefault("SGE_ROOT", SGE_ROOT)
    env.setdefault("SGE_CELL", SGE_CELL)
    try:
        proc = subprocess.run(
            list(argv),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            env=env,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
    except FileNotFoundError:
        return CommandResult(127, "", f"{argv[0]}: command not found (is Grid Engine installed?)")
    except subprocess.TimeoutExpired:
        return CommandResult(124, "", f"timed out after {COMMAND_TIMEOUT_S:g}s")
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


def _show(argv: Sequence[str], limit: int = 160) -> str:
    text = shlex.join(argv)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _failure(argv: Sequence[str], result: CommandResult, what: str = "failed") -> AutoscalerError:
    detail = " ".join((result.stderr.strip() or result.stdout.strip()).split()) or "no output"
    unreachable = any(marker in detail.lower() for marker in _UNREACHABLE)
    return AutoscalerError(
        f"{_show(argv)} {what} (exit {result.rc}): {detail[:500]}",
        retryable=unreachable,
        code=ERROR_CODE,
    )


def _run(runner: CommandRunner, argv: Sequence[str]) -> CommandResult:
    result = runner(argv)
    if result.rc != 0:
        raise _failure(argv, result)
    return result


# --- for `autoscaler cleanup` ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaggedJob:
    job_id: str
    run_id: str
    machine: str
    state: str


QSTAT_ALL = ("qstat", "-xml", "-u", "*")


def list_jobs(runner: CommandRunner = run_command) -> list[Job]:
    """Every pending and running job of the cluster, of every user."""
    return sge_output.parse_qstat_xml(_run(runner, QSTAT_ALL).stdout)


def list_tagged(runner: CommandRunner = run_command) -> list[TaggedJob]:
    """Every job of ours (any run), found by name; other jobs are left out."""
    out = []
    for job in list_jobs(runner):
        tag = sge_output.parse_job_name(job.name)
        if tag is not None:
            out.append(TaggedJob(job.job_id, tag[0], tag[1], job.state))
    return out


def delete_jobs(job_ids: Sequence[str], runner: CommandRunner = run_command) -> list[str]:
    """qdel ``job_ids``; the ids deleted or already gone (a gone job is not an error)."""
    ids = list(dict.fromkeys(job_ids))
    if not ids:
        return []
    argv = ["qdel", *ids]
    result = runner(argv)
    done, gone = sge_output.parse_qdel(result.stdout + "\n" + result.stderr)
    if result.rc != 0 and not set(ids) <= done | gone:
        raise _failure(argv, result)
    return [i for i in ids if i in done or i in gone or result.rc == 0]


# --- the provider -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SgeType:
    """How one of our machine types maps onto the cluster."""

    queue: str | None = None  # qsub -q
    resources: str | None = None  # qsub -l, e.g. "h_vmem=2G,arch=lx-amd64"
    extra_args: tuple[str, ...] = ()  # more qsub arguments, as they are


@dataclass
class _Machine:
    id: str
    type: str
    token: str
    job_id: str
    launched_at: float
    state: ProviderState


class SgeProvider:
    """Grid Engine jobs as machines; one qstat per describe or launch, whatever the count."""

    def __init__(
        self,
        capabilities: Capabilities,
        run_id: str,
        agents: AgentSettings,
        types: Mapping[str, SgeType],
        log_dir: Path,
        clock: Callable[[], float],
        token_file: Path,
        runner: CommandRunner = run_command,
    ):
        self._capabilities = capabilities
        self.run_id = run_id
        self.settings = agents
        self.types = dict(types)
        self.log_dir = log_dir
        self._clock = clock
        self.token_file = token_file
        self._runner = runner
        self._machines: dict[str, _Machine] = {}

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    status_polling_interval = 3.0
    """One qstat a describe: cheap, but the qmaster serves every user of the cluster."""

    # --- the provider protocol ------------------------------------------------------

    def launch(
        self, type: str, count: int, token: str, tags: Mapping[str, str]
    ) -> list[MachineRecord]:
        """Submit the token's jobs that are not queued or running; all of them as records."""
        ids = machine_ids(type, token, count)
        live = self._refresh()
        missing = [mid for mid in ids if mid not in live]
        alive = sum(1 for mid in live if self._machines[mid].type == type)
        check_launch(self._capabilities, type, alive, len(missing))
        if missing:
            spec = self.types.get(type)
            if spec is None:
                raise AutoscalerError(
                    f"sge.types has no entry for machine type {type!r}", code="UnknownType"
                )
            if not self.token_file.is_file():
                raise AutoscalerError(
                    f"the agents' token file {self.token_file} does not exist", code=ERROR_CODE
                )
            self.log_dir.mkdir(parents=True, exist_ok=True)
            for mid in missing:
                self._submit(mid, type, token, spec)
        return [
            MachineRecord(mid, type, token, self._machines[mid].launched_at)
            for mid in ids
            if mid in self._machines
        ]

    def describe(self, ids: Sequence[str] | None = None) -> list[MachineStatus]:
        """Machines of this run (all of them, or ``ids``) as qstat shows their jobs.

        One qstat for all; it also adopts jobs of the run that an earlier daemon submitted
        (found by name). A job that vanished is confirmed gone with ``qstat -j`` before it
        is reported TERMINATED, so one odd listing does not lose every machine.
        """
        self._refresh()
        chosen = list(self._machines) if ids is None else list(ids)
        return [
            MachineStatus(mid, m.type, m.state)
            for mid in chosen
            if (m := self._machines.get(mid)) is not None
        ]

    def terminate(self, ids: Sequence[str], *, now: bool = False) -> list[str]:
        """qdel the jobs of those machines (only this run's); the ids terminated. qdel never
        waits for a job's end: ``now`` changes nothing."""
        if any(mid not in self._machines for mid in ids):
            self._refresh()  # adopt first: after a restart the ids may be new to us
        targets = [self._machines[mid] for mid in ids if mid in self._machines]
        alive = [m for m in targets if m.state is not ProviderState.TERMINATED]
        deleted = set(delete_jobs([m.job_id for m in alive], self._runner))
        for machine in alive:
            if machine.job_id in deleted:
                machine.state = ProviderState.TERMINATED
        return [m.id for m in targets if m.state is ProviderState.TERMINATED]

    # --- jobs ---------------------------------------------------------------------------

    def _refresh(self) -> set[str]:
        """Bring every machine's state up to date from one qstat; the ids alive.

        Jobs of this run unknown to us are adopted; jobs in an error state are deleted.
        """
        ours: dict[str, Job] = {}
        for job in list_jobs(self._runner):
            tag = sge_output.parse_job_name(job.name)
            if tag is not None and tag[0] == self.run_id:
                previous = ours.get(tag[1])
                if previous is None or int(job.job_id) > int(previous.job_id):
                    ours[tag[1]] = job  # a relaunched machine: the newest job counts
        broken: list[str] = []
        for mid, job in ours.items():
            machine = self._machines.get(mid)
            if machine is None or machine.job_id != job.job_id:
                machine = self._adopt(mid, job)
            state = sge_output.provider_state(job.state)
            if state is None:
                broken.append(job.job_id)
                state = ProviderState.TERMINATED
            machine.state = state
        vanished = [
            m
            for m in self._machines.values()
            if m.id not in ours and m.state is not ProviderState.TERMINATED
        ]
        if vanished:
            present = self._existing([m.job_id for m in vanished])
            for machine in vanished:
                if machine.job_id not in present:
                    machine.state = ProviderState.TERMINATED
        if broken:
            delete_jobs(broken, self._runner)
        return {mid for mid, m in self._machines.items() if m.state is not ProviderState.TERMINATED}

    def _existing(self, job_ids: Sequence[str]) -> set[str]:
        result = _run(self._runner, ["qstat", "-xml", "-j", ",".join(job_ids)])
        return sge_output.parse_qstat_j(result.stdout)

    def _adopt(self, mid: str, job: Job) -> _Machine:
        """Take over a job of this run submitted by an earlier daemon (found by name)."""
        mtype, token = split_machine_id(mid)
        age = 0.0 if job.submitted_at is None else max(0.0, time.time() - job.submitted_at)
        machine = _Machine(
            mid, mtype, token, job.job_id, self._clock() - age, ProviderState.PENDING
        )
        self._machines[mid] = machine
        return machine

    def _submit_args(self, mid: str, spec: SgeType) -> list[str]:
        """The qsub command line of machine ``mid``: it names the token file, never the token."""
        s = self.settings
        args = [
            "qsub",
            "-terse",
            "-b",
            "y",
            "-shell",
            "no",  # exec the agent directly: no shell reads its arguments
            "-N",
            sge_output.job_name(self.run_id, mid),
            "-o",
            str(self.log_dir / f"{mid}.log"),
            "-j",
            "y",
        ]
        if spec.queue:
            args += ["-q", spec.queue]
        if spec.resources:
            args += ["-l", spec.resources]
        args += list(spec.extra_args)
        args += ["-wd", str(s.workdir or self.log_dir)]
        args += s.command(mid, token_file=self.token_file).argv
        return args

    def _submit(self, mid: str, type: str, token: str, spec: SgeType) -> None:
        result = _run(self._runner, self._submit_args(mid, spec))
        job_id = sge_output.parse_qsub(result.stdout)
        self._machines[mid] = _Machine(
            mid, type, token, job_id, self._clock(), ProviderState.PENDING
        )


# --- the kind -------------------------------------------------------------------------------


def build(cfg: Platform, ctx: RunContext) -> Provider:
    """The Grid Engine provider of a real run of ``cfg`` (its ``sge`` section)."""
    sge = cfg.sge
    if sge is None:
        raise AutoscalerError("provider is sge but the config has no sge section")
    settings = agent_settings(cfg, ctx, python=sge.python, workdir=sge.workdir)
    types = {
        name: SgeType(t.queue, t.resources, tuple(t.extra_args)) for name, t in sge.types.items()
    }
    caps = KIND.capabilities(cfg, ctx.billing)
    return SgeProvider(
        caps, ctx.run_id, settings, types, ctx.run_dir / "agents", ctx.clock, ctx.run_dir / "token"
    )


def tagged_machines() -> list[TaggedMachine]:
    """Every job of ours in the cluster, of any run."""
    return [
        TaggedMachine(j.job_id, j.run_id, split_machine_id(j.machine)[0], j.state)
        for j in list_tagged()
    ]


def sweeper(cfg: Platform) -> Sweeper:
    return Sweeper(tagged_machines, delete_jobs)


KIND = ProviderKind("sge", build=build, sweeper=sweeper)
