"""Grid Engine machines: each machine is a Grid Engine job that runs the worker agent.

Paper 000 (§3) emulated clouds on a cluster this way: a machine is a batch job that holds
a slot and runs a worker; our machine types map onto queues and resource requests
(``SgeType``); the ATU and prices are the config's. A type of several slots asks for its
slots times the bag's cpus in its parallel environment (``pe``) where the config names
one, and for nothing more where it does not (the job takes one queue slot). Agents reach
the dispatcher over the cluster network and read their machine's token from
``--token-file`` (``agents/<machine>.token`` in the run directory, mode 0600, on a
filesystem the nodes share; never the run's secret). The token is
never on the qsub command line nor in ``-v`` variables: ``qstat -j`` shows both to every
user.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from autoscaler.core.errors import AutoscalerError
from autoscaler.providers import sge_output
from autoscaler.providers.base import Provider, split_machine_id
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
from autoscaler.providers.sge_output import ERROR_CODE, Job

if TYPE_CHECKING:
    from autoscaler.config.schema import Platform

SGE_ROOT = "/var/lib/gridengine"
SGE_CELL = "default"
"""Defaults for the client commands' environment (Debian's layout), used when unset."""

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


def run_command(argv: Sequence[str]) -> CommandResult:
    """Run a Grid Engine client command; a missing binary or a timeout is a result too.

    ``SGE_ROOT`` and ``SGE_CELL`` default to Debian's layout when the environment lacks
    them, so the daemon works on a node set up by the packages without a login profile.
    """
    env = dict(os.environ)
    env.setdefault("SGE_ROOT", SGE_ROOT)
    env.setdefault("SGE_CELL", SGE_CELL)
    return run_client(argv, env, scheduler="Grid Engine")


def _failure(argv: Sequence[str], result: CommandResult) -> AutoscalerError:
    return command_error(argv, result, code=ERROR_CODE, unreachable=_UNREACHABLE)


def _run(runner: CommandRunner, argv: Sequence[str]) -> CommandResult:
    return run_checked(runner, argv, code=ERROR_CODE, unreachable=_UNREACHABLE)


# --- for `autoscaler cleanup` ---------------------------------------------------------------


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
    pe: tuple[str, int] | None = None  # qsub -pe NAME SLOTS: a machine's cores


class SgeProvider(BatchProvider[SgeType]):
    """Grid Engine jobs as machines; one qstat per describe or launch, whatever the count.

    A job that vanished from qstat is confirmed gone with ``qstat -j`` before it is
    reported TERMINATED, so one odd listing does not lose every machine.
    """

    section = "sge"
    error_code = ERROR_CODE

    def _run_real(self, argv: Sequence[str]) -> CommandResult:
        return run_command(argv)

    def _list(self) -> list[ListedJob]:
        out = []
        for job in list_jobs(self._runner):
            tag = sge_output.parse_job_name(job.name)
            if tag is not None and tag[0] == self.run_id:
                state = sge_output.provider_state(job.state)
                out.append(
                    ListedJob(
                        job.job_id, tag[1], state, job.submitted_at, int(job.job_id), job.state
                    )
                )
        return out

    def _cancel(self, job_ids: Sequence[str]) -> list[str]:
        return delete_jobs(job_ids, self._runner)

    def _existing(self, job_ids: Sequence[str]) -> set[str]:
        result = _run(self._runner, ["qstat", "-xml", "-j", ",".join(job_ids)])
        return sge_output.parse_qstat_j(result.stdout)

    def _never_reasons(self, jobs: Sequence[ListedJob]) -> dict[str, str]:
        """A job in an error state says why in ``qstat -j`` (its ``error reason``)."""
        states = {j.job_id: j.said for j in jobs}
        try:
            result = _run(self._runner, ["qstat", "-xml", "-j", ",".join(states)])
            errors = sge_output.parse_qstat_j_errors(result.stdout)
        except AutoscalerError as exc:
            errors = dict.fromkeys(states, f"(qstat -j: {exc.message[:200]})")
        return {i: f"{state}, {errors[i]}" if i in errors else state for i, state in states.items()}

    def _gone_reason(self, job_id: str) -> str:
        """What ``qacct -j`` keeps of the job's end (its failure, its exit status)."""
        result = self._runner(["qacct", "-j", job_id])
        said = sge_output.parse_qacct(result.stdout) if result.rc == 0 else None
        if said is None:
            return f"gone from qstat (qacct -j {job_id}: {detail(result)[:200]})"
        return f"gone from qstat, {said}"

    def _submit_args(self, mid: str, spec: SgeType, project: str | None = None) -> list[str]:
        """The qsub command line of machine ``mid``: it names the token file, never the
        token. ``project``: the run's, as the job's account string (``-A``, free-form:
        ``qstat -j`` and ``qacct`` show it)."""
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
            str(self.log_path(mid)),
            "-j",
            "y",
        ]
        if project:
            args += ["-A", project]
        if spec.queue:
            args += ["-q", spec.queue]
        if spec.resources:
            args += ["-l", spec.resources]
        if spec.pe is not None:
            args += ["-pe", spec.pe[0], str(spec.pe[1])]
        args += list(spec.extra_args)
        args += ["-wd", str(s.workdir or self.log_dir)]
        args += s.command(mid, token_file=self.token_path(mid), type=split_machine_id(mid)[0]).argv
        return args

    def _submit_job(self, mid: str, type: str, spec: SgeType, tags: Mapping[str, str]) -> str:
        result = _run(self._runner, self._submit_args(mid, spec, project_of(tags)))
        return sge_output.parse_qsub(result.stdout)


# --- the kind -------------------------------------------------------------------------------


def build(cfg: Platform, ctx: RunContext) -> Provider:
    """The Grid Engine provider of a real run of ``cfg`` (its ``sge`` section)."""
    sge = cfg.sge
    if sge is None:
        raise AutoscalerError("provider is sge but the config has no sge section")
    types = {
        name: SgeType(
            t.queue,
            t.resources,
            tuple(t.extra_args),
            None if t.pe is None else (t.pe, cores(cfg, name)),
        )
        for name, t in sge.types.items()
    }
    return build_provider(
        SgeProvider, KIND, cfg, ctx, types, python=sge.python, workdir=sge.workdir
    )


def sweeper(cfg: Platform) -> Sweeper:
    return sweeper_of(list_tagged, delete_jobs)


KIND = ProviderKind("sge", build=build, sweeper=sweeper)
