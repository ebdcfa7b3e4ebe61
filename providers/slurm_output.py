"""Slurm's text: what sbatch, squeue and ``sbatch --test-only`` print, and the offer
arithmetic on top of it.

Pure functions over captured text: no command runs here (``providers/slurm.py`` runs them
through its ``CommandRunner`` seam). They are tested in ``tests/unit/test_slurm_parse.py``
on real outputs of the one-node Slurm of ``infra/slurm/setup.sh`` (Debian's 22.05), kept
in ``tests/unit/data/slurm``.

The tag of a machine is its job name, ``as.<run id>.<machine id>``, spelt as Grid Engine's
(``sge_output.job_name``), so one run's jobs read the same on both. Slurm's job states
become ours in one place, ``provider_state``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime

from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.base import ProviderState

ERROR_CODE = "SlurmError"
"""The code of every ``AutoscalerError`` about Slurm (the provider's too)."""

SQUEUE_FORMAT = "%i|%T|%V|%P|%r|%j"
"""squeue's ``--format``: id, state, submit time, partition, reason, and the name last
(the one field a user may fill with anything, ``|`` included)."""

_PENDING = frozenset({"PENDING", "CONFIGURING", "REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED"})
_RUNNING = frozenset(
    {"RUNNING", "SUSPENDED", "STOPPED", "SIGNALING", "RESIZING", "STAGE_OUT", "RESV_DEL_HOLD"}
)
# Reasons a pending job never runs for (it asks for what the partition cannot give): the
# provider cancels such a job and reports its machine TERMINATED, as Grid Engine's Eqw.
_NEVER_RUNS = frozenset({"PartitionConfig", "BadConstraints", "PartitionNodeLimit"})


@dataclass(frozen=True, slots=True)
class Job:
    """One line of squeue."""

    job_id: str
    state: str  # Slurm's, e.g. PENDING, RUNNING, COMPLETED, CANCELLED, TIMEOUT
    submitted_at: float | None  # epoch seconds
    partition: str
    reason: str  # why it is pending (``None`` when it is not)
    name: str


def _timestamp(text: str) -> float | None:
    """Epoch seconds of Slurm's local ``2026-11-25T15:20:56`` (None for N/A, Unknown)."""
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def parse_squeue(text: str) -> list[Job]:
    """The jobs of ``squeue -h -o SQUEUE_FORMAT``; a line of another shape is an error."""
    jobs = []
    for line in text.splitlines():
        if not line.strip():
            continue
        parts = line.split("|", 5)
        if len(parts) != 6 or not parts[0]:
            raise AutoscalerError(f"squeue: unexpected line {line[:200]!r}", code=ERROR_CODE)
        job_id, state, submitted, partition, reason, name = parts
        jobs.append(Job(job_id, state, _timestamp(submitted), partition, reason, name))
    return jobs


def parse_sbatch(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` (``ID`` or ``ID;cluster``)."""
    first = stdout.strip().split(";", 1)[0]
    if not first.isdigit():
        raise AutoscalerError(
            f"sbatch --parsable: no job id in {stdout.strip()[:200]!r}", code=ERROR_CODE
        )
    return first


def provider_state(job: Job) -> ProviderState | None:
    """Our state for a job; None for a pending job that will never run."""
    if job.state in _PENDING:
        return None if job.reason in _NEVER_RUNS else ProviderState.PENDING
    if job.state in _RUNNING:
        return ProviderState.RUNNING
    return ProviderState.TERMINATED  # COMPLETING, COMPLETED, CANCELLED, TIMEOUT, FAILED, ...


def job_words(job: Job) -> str:
    """A job's state in Slurm's words, with its reason when squeue gives one:
    ``FAILED (JobLaunchFailure)``, ``PENDING (PartitionConfig)``, ``TIMEOUT``."""
    return job.state if job.reason in ("", "None") else f"{job.state} ({job.reason})"


SACCT_FORMAT = "JobID,State,ExitCode,Reason"
"""sacct's ``--format`` (with ``--parsable2 --noheader``) for how a job ended."""


def parse_sacct(text: str, job_id: str) -> str | None:
    """How job ``job_id`` ended, from ``sacct -P -n -j ID -o SACCT_FORMAT``: its state,
    exit code (``exit:signal``) and reason, from the job's own line (its steps,
    ``ID.batch``, follow it); None when sacct has no record of it."""
    for line in text.splitlines():
        parts = line.strip().split("|")
        if len(parts) >= 3 and parts[0] == job_id:
            state, code = parts[1], parts[2]
            reason = parts[3] if len(parts) > 3 else ""
            said = f"{state}, exit code {code}"
            return said if reason in ("", "None") else f"{said} ({reason})"
    return None


# --- offers: sbatch --test-only ---------------------------------------------------------------

_WILL_RUN = re.compile(
    r"Job (\d+) to start at (\S+) using (\d+) processors on nodes (\S+)(?: in partition (\S+))?"
)


@dataclass(frozen=True, slots=True)
class WillRun:
    """What ``sbatch --test-only`` says of a job of some shape."""

    start: float  # epoch seconds
    processors: int
    nodes: str
    partition: str


def parse_test_only(text: str) -> WillRun | None:
    """Slurm's answer to ``sbatch --test-only`` (it prints to stderr); None when it says
    the job cannot run at all (``allocation failure: ...``)."""
    match = _WILL_RUN.search(text)
    if match is None:
        return None
    start = _timestamp(match.group(2))
    if start is None:
        raise AutoscalerError(
            f"sbatch --test-only: unreadable start time {match.group(2)!r}", code=ERROR_CODE
        )
    return WillRun(start, int(match.group(3)), match.group(4), match.group(5) or "")


def finish_after(tasks: int, width: int, task_s: float) -> float:
    """Seconds ``tasks`` take from their start on ``width`` machines: whole waves of
    ``task_s``."""
    if tasks <= 0:
        return 0.0
    return math.ceil(tasks / max(1, width)) * task_s


def time_limit_minutes(atu_s: float) -> int:
    """``sbatch --time`` for a machine: one paid unit in whole minutes, rounded down, at
    least one."""
    return max(1, int(atu_s // 60))
