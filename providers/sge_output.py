"""Grid Engine's text: the job names we give, and what its commands print.

Pure functions over captured text: no command runs here (``providers/sge.py`` runs them
through its ``CommandRunner`` seam and hands the output over). They are tested in
``tests/unit/test_sge_parse.py`` on real captured outputs in ``tests/unit/data/sge``.

A job name is the tag of a machine: ``as.<run id>.<machine id>``, each part escaped so
that any run id survives Grid Engine's rules for names (``job_name``, read back by
``parse_job_name``). Grid Engine's job states become ours in one place,
``provider_state``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from datetime import datetime

from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.base import ProviderState

ERROR_CODE = "SgeError"
"""The code of every ``AutoscalerError`` about Grid Engine (the provider's too)."""
NAME_PREFIX = "as"


# --- job names: the tag -------------------------------------------------------------------

_PLAIN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


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


_MESSAGE_STAMP = re.compile(r"^\d\d/\d\d/\d{4} \d\d:\d\d:\d\d \[[^\]]*\]:\s*")


def parse_qstat_j_errors(xml: str) -> dict[str, str]:
    """Job id -> why it is in an error state (``Eqw``), from ``qstat -xml -j ID,...``:
    the messages Grid Engine keeps on its tasks (``error reason`` in ``qstat -j``), e.g.
    ``error: can't chdir to /runs/x/work: No such file or directory``; jobs without
    one are left out."""
    root = _xml(xml, "qstat -xml -j")
    if root.tag == "unknown_jobs":
        return {}
    if root.tag != "detailed_job_info":
        raise AutoscalerError(f"qstat -xml -j: unexpected document <{root.tag}>", code=ERROR_CODE)
    out = {}
    for element in root.findall("./djob_info/element"):
        number = _child(element, "JB_job_number")
        said = [
            _MESSAGE_STAMP.sub("", message.text.strip())
            for message in element.iter("QIM_message")
            if message.text and message.text.strip()
        ]
        if number and said:
            out[number] = "; ".join(dict.fromkeys(said))
    return out


def parse_qacct(text: str) -> str | None:
    """How a job ended, from ``qacct -j ID``: its ``failed`` code with Grid Engine's
    words when it failed (``failed 26 : opening input/output file``), and its exit
    status (the last record, a job run again keeping several); None when qacct has no
    record of it."""
    failed = status = None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        value = " ".join(value.split())
        if key == "failed":
            failed = value
        elif key == "exit_status":
            status = value
    if failed is None and status is None:
        return None
    said = [] if failed in (None, "0") else [f"failed {failed}"]
    return ", ".join([*said, f"exit status {status if status is not None else '?'}"])


_QDEL_DONE = re.compile(
    r"has (?:registered the job|deleted job) (\d+)|job (\d+) is already in deletion"
)
_QDEL_GONE = re.compile(r'job "(\d+)" does not exist')


def parse_qdel(stdout: str) -> tuple[set[str], set[str]]:
    """(ids deleted or registered for deletion, ids that did not exist) from qdel."""
    done = {a or b for a, b in _QDEL_DONE.findall(stdout)}
    return done, set(_QDEL_GONE.findall(stdout))


def provider_state(sge_state: str) -> ProviderState | None:
    """Our state for a Grid Engine state; None for an error state (the job never runs)."""
    if "E" in sge_state:
        return None
    if "d" in sge_state:
        return ProviderState.TERMINATED
    if "q" in sge_state:  # qw, hqw, hRwq: waiting for a slot
        return ProviderState.PENDING
    return ProviderState.RUNNING  # r, t, Rr, Rt; s, S, T: suspended, still holding a slot
