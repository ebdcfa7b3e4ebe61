"""Task files: what a task takes in and gives back, and where its outputs were stored.

A task with files runs in a work directory of its own, one per attempt (a run of the
task on a machine). Its ``inputs`` are put there before it starts; after it ends, the
files its ``outputs`` patterns match are stored under the attempt's name
(``<task>.<machine>-<run>``), and the attempt whose result the run counts is committed
(``Stored``, journaled with the ``TaskDone``): every other attempt is dropped, so a task
run twice (a replica, a machine lost mid-upload) leaves one copy, never a half one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

OUTPUTS_MAX_BYTES = 100 * 1000**2
"""A task's outputs may sum to this many bytes unless its bag says otherwise."""

ATTEMPTS_DIR = ".attempts"
"""Where attempts are staged, under the outputs' destination, until one is committed."""

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True, slots=True)
class InputFile:
    """A file put into a task's work directory before it runs."""

    source: str  # an absolute path on the daemon's host
    name: str  # where it goes, relative to the task's work directory


@dataclass(frozen=True, slots=True)
class FileSpec:
    """A task's files (its bag's ``files``, templates filled)."""

    inputs: tuple[InputFile, ...] = ()
    outputs: tuple[str, ...] = ()  # glob patterns, relative to the task's work directory
    max_bytes: int = OUTPUTS_MAX_BYTES  # the outputs' sum, at most
    to: str | None = None  # s3://bucket/prefix; None: the run directory's outputs/
    endpoint_url: str | None = None  # an S3-compatible endpoint; None: AWS's


@dataclass(frozen=True, slots=True)
class Stored:
    """Where a task's counted result left its outputs: the attempt committed."""

    attempt: str  # ``attempt_name``: staged under it, committed under the task's id
    files: int
    bytes: int


def spec_json(spec: FileSpec) -> dict[str, object]:
    """``spec`` as plain JSON (the run's tasks file)."""
    return {
        "inputs": [[i.source, i.name] for i in spec.inputs],
        "outputs": list(spec.outputs),
        "max_bytes": spec.max_bytes,
        "to": spec.to,
        "endpoint_url": spec.endpoint_url,
    }


def spec_from_json(data: dict[str, object] | None) -> FileSpec | None:
    """The spec ``spec_json`` wrote, or None."""
    if not data:
        return None
    inputs = data.get("inputs") or []
    outputs = data.get("outputs") or []
    to = data.get("to")
    if not isinstance(inputs, list) or not isinstance(outputs, list):
        raise ValueError(f"files: inputs and outputs must be lists, got {data!r}")
    return FileSpec(
        tuple(InputFile(str(a), str(b)) for a, b in inputs),
        tuple(str(o) for o in outputs),
        int(str(data.get("max_bytes", OUTPUTS_MAX_BYTES))),
        str(to) if to else None,
        str(data["endpoint_url"]) if data.get("endpoint_url") else None,
    )


def attempt_name(task: int, machine: str, run: int) -> str:
    """The name of one run of ``task`` on ``machine``: unique in the run, a safe path part."""
    return f"{task}.{_UNSAFE.sub('_', machine)}-{run}"


def task_location(spec: FileSpec, task: int) -> str:
    """Where a committed task's outputs are: a folder of the run directory, or a URL."""
    return f"{spec.to.rstrip('/')}/{task}/" if spec.to else f"outputs/{task}/"


def safe_relative(path: str) -> bool:
    """Whether ``path`` stays inside the directory it is relative to."""
    parts = path.replace("\\", "/").split("/")
    return bool(path) and not path.startswith("/") and ".." not in parts and "" not in parts[:-1]


def megabytes(n: float) -> str:
    """``123456789`` as ``123 MB``: a size for messages (the agent's words too)."""
    return f"{n / 1e6:.3g} MB"
