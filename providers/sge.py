"""Grid Engine machines: each machine is a Grid Engine job that runs the worker agent.

Paper 000 (§3) emulated clouds on a cluster this way: a machine is a batch job that holds
a slot and runs a worker; our machine types map onto queues and resource requests
(``SgeType``); the ATU and prices are the config's. Agents reach the dispatcher over the
cluster network and read the run's token from ``--token-file`` (the run directory's
``token``, mode 0600, on a filesystem the nodes share). The token is never on the qsub
command line nor in ``-v`` variables: ``qstat -j`` shows both to every user.

The tag is the job name: ``as.<run id>.<machine id>``, each part escaped so that any run
id survives Grid Engine's rules for names (``job_name``). A restarted daemon finds its
run's jobs by name in ``qstat``, as a cloud provider finds instances by tag. Machine ids
are ``<type>-<token>-<i>`` as in the local provider, so a repeated launch of a token
submits only its machines that are not queued or running: ``launch`` is idempotent.

States: a queued job (``qw``, ``hqw``) is PENDING; a running one (``r``, ``t``, ``Rr``,
also suspended ones, which still hold their slot) is RUNNING. A job absent from qstat
has ended or was deleted from outside: it is TERMINATED, a lost machine to the daemon.
A job in an error state (``Eqw``, e.g. its working directory does not exist on the
node) would wait forever without running: ``describe`` deletes it and reports it
TERMINATED, so the daemon replaces it instead of paying for a slot that never works. A
job being deleted (``d``) is TERMINATED too: nothing brings it back.

Every qsub, qstat and qdel goes through one seam, a ``CommandRunner``: ``run_command``
runs the real commands; unit tests replay captured outputs through a scripted runner.
A failing command is an ``AutoscalerError`` with code ``"SgeError"``, retryable when the
qmaster could not be reached.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from autoscaler.bootstrap.agent_start import AgentSettings
from autoscaler.errors import AutoscalerError
from autoscaler.providers.base import (
    Capabilities,
    MachineRecord,
    MachineStatus,
    ProviderState,
    check_launch,
    machine_ids,
    split_machine_id,
)

SGE_ROOT = "/var/lib/gridengine"
SGE_CELL = "default"
"""Defaults for the client commands' environment (Debian's layout), used when unset."""

COMMAND_TIMEOUT_S = 60.0
ERROR_CODE = "SgeError"
NAME_PREFIX = "as"

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


# --- job names: the tag -------------------------------------------------------------------

_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ESCAPE = re.compile(r"\+([0-9a-f]{2})")


def _escape(text: str) -> str:
    """Letters, digits, ``_`` and ``-`` as they are; any other byte as ``+xx`` (hex).

    Grid Engine refuses names with ``/ : @ \\ * ?`` or blanks; ``.`` separates our parts.
    """
    out = []
    for char in text:
        if char in _PLAIN:
            out.append(char)
        else:
            out.extend(f"+{byte:02x}" for byte in char.encode("utf-8"))
    return "".join(out)


def _unescape(text: str) -> str | None:
    try:
        raw = bytes(
            ord(c) if len(c) == 1 else int(c[1:], 16)
            for c in re.findall(r"\+[0-9a-f]{2}|.", text, flags=re.DOTALL)
        )
        return raw.decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return None


def job_name(run_id: str, machine: str) -> str:
    """The Grid Engine job name that tags ``machine`` of run ``run_id``."""
    if not run_id or not machine:
        raise AutoscalerError(
            f"a job name needs a run id and a machine id (got {run_id!r}, {machine!r})"
        )
    return f"{NAME_PREFIX}.{_escape(run_id)}.{_escape(machine)}"


def parse_job_name(name: str) -> tuple[str, str] | None:
    """(run id, machine id) from a name ``job_name`` made; None for any other job's name."""
    parts = name.split(".")
    if len(parts) != 3 or parts[0] != NAME_PREFIX:
        return None
    run_id, machine = _unescape(parts[1]), _unescape(parts[2])
    if not run_id or not machine or job_name(run_id, machine) != name:
        return None  # not our canonical spelling: someone else's job
    return run_id, machine


# --- parsers of the commands' output ------------------------------------------------------

_SUBMITTED = re.compile(r'^Your job(?:-array)? (\d+)(?:\.\S+)? \(".*"\) has been submitted', re.M)
_TERSE = re.compile(r"(\d+)(?:\.\S+)?")


def parse_qsub(stdout: str) -> str:
    """The job id qsub printed, with or without ``-terse``."""
    match = _SUBMITTED.search(stdout)
    if match:
        return match.group(1)
    lines = stdout.strip().splitlines()
    if len(lines) == 1 and (terse := _TERSE.fullmatch(lines[0].strip())):
        return terse.group(1)
    raise AutoscalerError(
        f"cannot read a job id in qsub's output {stdout[:200]!r}", code=ERROR_CODE
    )


@dataclass(frozen=True, slots=True)
class Job:
    """A job as ``qstat -xml`` lists it."""

    job_id: str
    name: str
    state: str  # Grid Engine's letters: qw, hqw, r, t, Rr, Eqw, dr, ...
    queue: str | None  # the queue instance (``as_small.q@node``) once it runs
    submitted_at: float | None = None  # Unix time of submission (or start), if shown


def _xml(text: str, command: str) -> ET.Element:
    try:
        return ET.fromstring(text)
    except ET.ParseError as exc:
        raise AutoscalerError(
            f"{command}: output is not XML ({exc}): {text[:200]!r}", code=ERROR_CODE
        ) from exc


def _child(element: ET.Element, tag: str) -> str:
    return (element.findtext(tag) or "").strip()


def _timestamp(text: str) -> float | None:
    """qstat prints times as local ``2026-11-22T03:50:31``."""
    try:
        return datetime.fromisoformat(text).timestamp() if text else None
    except ValueError:
        return None


def parse_qstat_xml(xml: str) -> list[Job]:
    """Pending and running jobs from ``qstat -xml -u '*'`` (optionally with ``-r``)."""
    root = _xml(xml, "qstat -xml")
    if root.tag != "job_info":
        raise AutoscalerError(f"qstat -xml: unexpected document <{root.tag}>", code=ERROR_CODE)
    jobs = []
    for entry in root.iter("job_list"):
        job_id = _child(entry, "JB_job_number")
        if not job_id:
            continue
        name = _child(entry, "full_job_name") or _child(entry, "JB_name")
        when = _child(entry, "JB_submission_time") or _child(entry, "JAT_start_time")
        jobs.append(
            Job(
                job_id=job_id,
                name=name,
                state=_child(entry, "state"),
                queue=_child(entry, "queue_name") or None,
                submitted_at=_timestamp(when),
            )
        )
    return jobs


def parse_qstat_j(xml: str) -> set[str]:
    """The ids of the jobs that exist, from ``qstat -xml -j ID,ID,...``.

    Grid Engine answers ``<unknown_jobs>`` when none of them exists and lists only the
    existing ones otherwise, so the caller takes every other id it asked for as gone.
    """
    root = _xml(xml, "qstat -xml -j")
    if root.tag == "unknown_jobs":
        return set()
    if root.tag != "detailed_job_info":
        raise AutoscalerError(f"qstat -xml -j: unexpected document <{root.tag}>", code=ERROR_CODE)
    return {
        number
        for element in root.findall("./djob_info/element")
        if (number := _child(element, "JB_job_number"))
    }


_QDEL_DONE = re.compile(r"has (?:registered the job|deleted job) (\d+)")
_QDEL_GONE = re.compile(r'job "(\d+)" does not exist')


def parse_qdel(stdout: str) -> tuple[set[str], set[str]]:
    """(ids deleted or registered for deletion, ids that did not exist) from qdel."""
    return set(_QDEL_DONE.findall(stdout)), set(_QDEL_GONE.findall(stdout))


def provider_state(sge_state: str) -> ProviderState | None:
    """Our state for a Grid Engine state; None for an error state (the job never runs)."""
    if "E" in sge_state:
        return None
    if "d" in sge_state:
        return ProviderState.TERMINATED
    if "q" in sge_state:  # qw, hqw, hRwq: waiting for a slot
        return ProviderState.PENDING
    return ProviderState.RUNNING  # r, t, Rr, Rt; s, S, T: suspended, still holding a slot


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
    return parse_qstat_xml(_run(runner, QSTAT_ALL).stdout)


def list_tagged(runner: CommandRunner = run_command) -> list[TaggedJob]:
    """Every job of ours (any run), found by name; other jobs are left out."""
    out = []
    for job in list_jobs(runner):
        tag = parse_job_name(job.name)
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
    done, gone = parse_qdel(result.stdout + "\n" + result.stderr)
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
            tag = parse_job_name(job.name)
            if tag is not None and tag[0] == self.run_id:
                previous = ours.get(tag[1])
                if previous is None or int(job.job_id) > int(previous.job_id):
                    ours[tag[1]] = job  # a relaunched machine: the newest job counts
        broken: list[str] = []
        for mid, job in ours.items():
            machine = self._machines.get(mid)
            if machine is None or machine.job_id != job.job_id:
                machine = self._adopt(mid, job)
            state = provider_state(job.state)
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
        return parse_qstat_j(result.stdout)

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
            job_name(self.run_id, mid),
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
        job_id = parse_qsub(result.stdout)
        self._machines[mid] = _Machine(
            mid, type, token, job_id, self._clock(), ProviderState.PENDING
        )
