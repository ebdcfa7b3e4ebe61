"""Task files on the daemon's side: inputs served, outputs staged per attempt, the attempt
that counts committed, every other dropped (``core.task_files``).

Outputs go to ``<run dir>/outputs/<task>/`` (or ``s3://bucket/prefix/<task>/``, through
``providers.s3``). An agent asks where to put an attempt's files (``POST /v1/files``,
``plan``) and sends each (``PUT /v1/put/<attempt>/<path>``, ``receive``), written to
``outputs/.attempts/<attempt>/<path>.part`` and renamed once whole; an agent on a shared
file system moves them there itself. Its result says what it stored; the daemon checks
that against what arrived (``check``) before the result becomes a ``TaskDone`` carrying
``Stored``, journals it, and only then renames the attempt to the task's directory
(``settle``). A restarted daemon finishes the renames its journal holds and drops every
attempt not committed (``recover``); the run's end drops what is left (``sweep``).

``plan`` and ``receive`` run on the dispatcher's file threads, ``input_file`` on its loop;
the rest on the daemon's thread.
"""

from __future__ import annotations

import json
import os
import shutil
import urllib.parse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from autoscaler.config.schema import RunConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import Event, TaskDone, TaskSpec
from autoscaler.core.state import RunState
from autoscaler.core.task_files import (
    ATTEMPTS_DIR,
    FileSpec,
    Stored,
    attempt_name,
    megabytes,
    safe_relative,
)

if TYPE_CHECKING:
    # boto3 is imported only by a run that puts outputs in S3: about 0.4 s of CPU that
    # every other daemon process would pay at start.
    from autoscaler.providers.s3 import S3Store

OUTPUTS_DIR = "outputs"
PUT_PATH = "/v1/put/"
INPUT_PATH = "/v1/input/"
BLOCK = 1 << 20

Answer = tuple[int, dict[str, Any]]


class Body(Protocol):
    """A request's body as ``receive`` reads it: ``read(n)`` gives up to ``n`` bytes, and
    b"" at its end (a file, or the dispatcher's reads from its loop)."""

    def read(self, size: int, /) -> bytes: ...


class Staging:
    """The run's task files: ``tasks`` is the run's list (it grows as jobs are added)."""

    def __init__(self, cfg: RunConfig, run_dir: Path, tasks: Sequence[TaskSpec], log: Any):
        self.cfg = cfg
        self.run_dir = run_dir
        self.root = run_dir / OUTPUTS_DIR
        self.tasks = tasks
        self.log = log
        self._issued: dict[str, tuple[str, bool]] = {}  # attempt -> machine, shared file system
        self._expect: dict[str, dict[str, int]] = {}  # attempt -> path -> bytes
        # Set by the daemon thread before it removes an attempt's files, read by the
        # dispatcher's: an upload that ends after the mark removes its own.
        self._committed: set[int] = set()  # tasks
        self._dropped: set[str] = set()  # attempts
        self._over = False  # the run's end swept them all
        self._stores: dict[str, S3Store] = {}

    # --- what agents are told (daemon thread) ---------------------------------------------

    def payload(self, spec: FileSpec, task: int, machine: str, run: int, shared: bool) -> Any:
        """The ``cwd`` and ``files`` of a run's task record (``bootstrap/agent.py``)."""
        attempt = attempt_name(task, machine, run)
        self._issued[attempt] = (machine, shared)
        inputs = [
            [f.name, "link", f.source] if shared else [f.name, "get", f"{INPUT_PATH}{attempt}/{i}"]
            for i, f in enumerate(spec.inputs)
        ]
        cwd = f"files/{attempt}"
        files = {"inputs": inputs, "outputs": list(spec.outputs), "max_bytes": spec.max_bytes}
        return cwd, files

    # --- the agents' requests (the dispatcher's) ------------------------------------------

    def plan(self, body: bytes) -> Answer:
        """Where an attempt's files go: presigned or our own PUT URLs, or a directory."""
        try:
            ask = json.loads(body)
            task, run, machine = int(ask["task"]), int(ask["run"]), str(ask["machine"])
            files = [(str(p), int(n)) for p, n in ask["files"]]
            spec = self.tasks[task].files
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            return 400, {"error": f"files: bad request ({exc!r})"}
        attempt = attempt_name(task, machine, run)
        machine_shared = self._issued.get(attempt)
        if spec is None or machine_shared is None or machine_shared[0] != machine:
            return 410, {"error": f"attempt {attempt} is not one the daemon handed out"}
        total = sum(n for _, n in files)
        if total > spec.max_bytes:
            limit = megabytes(spec.max_bytes)
            return 413, {"error": f"outputs {megabytes(total)} exceed limit {limit}"}
        if not all(safe_relative(p) for p, _ in files):
            return 400, {"error": "files: paths must stay inside the work directory"}
        self._expect[attempt] = dict(files)
        store = self.store(spec)
        if store is not None:
            return 200, {"put": [store.presign_put(attempt, p) for p, _ in files]}
        if machine_shared[1]:
            folder = self.root / ATTEMPTS_DIR / attempt
            folder.mkdir(parents=True, exist_ok=True)
            return 200, {"dir": str(folder)}
        return 200, {"put": [f"{PUT_PATH}{attempt}/{urllib.parse.quote(p)}" for p, _ in files]}

    def receive(self, path: str, stream: Body, length: int, seen: Callable[[str], None]) -> Answer:
        """One file of an attempt, ``length`` bytes read from ``stream``: whole, or not at
        all under its name. ``seen(machine)`` as each block arrives: an agent uploading
        is in touch, however long it takes (it sends no poll meanwhile)."""
        attempt, _, quoted = path[len(PUT_PATH) :].partition("/")
        rel = urllib.parse.unquote(quoted)
        if self._expect.get(attempt, {}).get(rel) != length:
            return 400, {"error": f"{rel!r} of {length} bytes was not announced for {attempt}"}
        machine = self._issued.get(attempt, ("", False))[0]
        folder = self.root / ATTEMPTS_DIR / attempt
        target = folder / rel
        part = target.with_name(target.name + ".part")
        left = length
        if not self._gone(attempt):
            try:  # the daemon may remove the attempt meanwhile (a replica lost the race)
                target.parent.mkdir(parents=True, exist_ok=True)
                with part.open("wb") as out:
                    left = _copy(stream, out.write, left, lambda: seen(machine))
                if left == 0:
                    os.replace(part, target)
            except FileNotFoundError:
                part.unlink(missing_ok=True)
        # A loser's files, the task's outputs already kept: taken in and let go, so that
        # its result still counts as a run (a sample of its type), its files never.
        left = _copy(stream, lambda _: 0, left, lambda: seen(machine))
        if left > 0:
            part.unlink(missing_ok=True)
            return 400, {"error": f"{rel!r}: the body ended {left} bytes short"}
        if self._gone(attempt):
            shutil.rmtree(folder, ignore_errors=True)
        elif not target.is_file():
            return 409, {"error": f"{rel!r} of {attempt} was removed as it arrived"}
        return 200, {}

    def _gone(self, attempt: str) -> bool:
        """Whether the attempt's files are let go: dropped, its task's outputs kept from
        another attempt, or the run's end swept them."""
        task = attempt.partition(".")[0]
        if self._over or attempt in self._dropped:
            return True
        return task.isdigit() and int(task) in self._committed

    def owner(self, path: str) -> str | None:
        """The machine whose attempt ``GET /v1/input/<attempt>/<i>`` or ``PUT
        /v1/put/<attempt>/<path>`` names; None if no attempt of that name was handed out.
        Only that machine's token is let through."""
        for prefix in (INPUT_PATH, PUT_PATH):
            if path.startswith(prefix):
                issued = self._issued.get(path[len(prefix) :].partition("/")[0])
                return issued[0] if issued is not None else None
        return None

    def input_file(self, path: str) -> Path | None:
        """The file ``GET /v1/input/<attempt>/<i>`` asks for, or None (an attempt not
        handed out included)."""
        attempt, _, index = path[len(INPUT_PATH) :].partition("/")
        if attempt not in self._issued:
            return None
        task = attempt.partition(".")[0]
        try:
            spec = self.tasks[int(task)].files
            return Path(spec.inputs[int(index)].source) if spec is not None else None
        except (ValueError, IndexError):
            return None

    # --- results and commits (daemon thread) ----------------------------------------------

    def check(self, task: int, machine: str, run: int, said: Any) -> Stored | str:
        """What an attempt stored, if all it says it stored arrived whole; else why not."""
        spec = self.tasks[task].files
        attempt = attempt_name(task, machine, run)
        if spec is None:
            return "outputs: the task has none"
        try:
            files = {str(p): int(n) for p, n in said or []}
        except (TypeError, ValueError):
            return f"outputs: the agent said {said!r}"
        if self._gone(attempt):  # its files were let go (receive): the run still counts
            return Stored(attempt, len(files), sum(files.values()))
        store = self.store(spec)
        try:
            if store is not None:
                found = store.sizes(store.attempt_key(attempt))
            else:
                found = _sizes(self.root / ATTEMPTS_DIR / attempt)
        except AutoscalerError as exc:
            return f"outputs: {exc.message}"
        missing = [p for p, n in files.items() if found.get(p) != n]
        if missing:
            return (
                f"outputs: {len(missing)} of {len(files)} files did not arrive whole ({missing[0]})"
            )
        return Stored(attempt, len(files), sum(files.values()))

    def settle(self, state: RunState, events: Sequence[Event]) -> None:
        """After a step is journaled: commit the attempts whose results counted, drop the
        others."""
        try:
            for e in events:
                if isinstance(e, TaskDone) and e.stored is not None:
                    if state.tasks.stored.get(e.task) == e.stored:
                        self._commit(e.task, e.stored.attempt)
                    else:
                        self._drop(e.task, e.stored.attempt)
            if state.over:
                self._over = True
                self.sweep()
        except (AutoscalerError, OSError) as exc:  # journaled: a resumed run commits it
            self.log.error("outputs not committed: resume the run to retry", error=str(exc))

    def recover(self, state: RunState) -> None:
        """A resumed run: finish the commits the journal holds, drop every other attempt,
        and know again the attempts of the runs still going."""
        for task, stored in state.tasks.stored.items():
            self._commit(task, stored.attempt)
        self.sweep()
        for m in state.fleet.alive_machines():
            for task, run in m.run_no.items():
                if self.tasks[task].files is not None:
                    attempt = attempt_name(task, m.id, run)
                    self._issued[attempt] = (m.id, self.cfg.shared_fs(m.type.name))

    def sweep(self) -> None:
        """Drop every attempt not committed (the run's end)."""
        shutil.rmtree(self.root / ATTEMPTS_DIR, ignore_errors=True)
        for store in self._stores.values():
            store.delete(store.attempt_key("")[:-1])

    def store(self, spec: FileSpec) -> S3Store | None:
        if spec.to is None:
            return None
        key = f"{spec.to} {spec.endpoint_url}"
        store = self._stores.get(key)
        if store is None:
            from autoscaler.providers.s3 import s3_store

            store = self._stores[key] = s3_store(self.cfg, spec.to, spec.endpoint_url)
        return store

    def _commit(self, task: int, attempt: str) -> None:
        spec = self.tasks[task].files
        store = self.store(spec) if spec is not None else None
        if store is not None:
            store.commit(attempt, task)
            store.delete(store.attempt_key(f"{task}.")[:-1])
            return
        self._committed.add(task)
        final = self.root / str(task)
        staged = self.root / ATTEMPTS_DIR / attempt
        if not final.exists():
            if staged.is_dir():
                os.replace(staged, final)
            else:  # nothing matched its outputs
                final.mkdir(parents=True)
        for other in (self.root / ATTEMPTS_DIR).glob(f"{task}.*"):
            shutil.rmtree(other, ignore_errors=True)
        self.log.info("outputs committed", task=task, attempt=attempt)

    def _drop(self, task: int, attempt: str) -> None:
        spec = self.tasks[task].files
        store = self.store(spec) if spec is not None else None
        if store is not None:
            store.delete(store.attempt_key(attempt))
        else:
            self._dropped.add(attempt)
            shutil.rmtree(self.root / ATTEMPTS_DIR / attempt, ignore_errors=True)


def _copy(stream: Body, write: Callable[[bytes], Any], left: int, seen: Callable[[], None]) -> int:
    """Up to ``left`` bytes from ``stream`` to ``write``, block by block: what was short."""
    while left > 0:
        chunk = stream.read(min(BLOCK, left))
        if not chunk:
            break
        write(chunk)
        left -= len(chunk)
        seen()
    return left


def _sizes(folder: Path) -> dict[str, int]:
    """The regular files under ``folder``: path (relative) -> bytes; ``.part`` files are
    not whole yet."""
    if not folder.is_dir():
        return {}
    return {
        str(p.relative_to(folder)): p.stat().st_size
        for p in folder.rglob("*")
        if p.is_file() and not p.name.endswith(".part")
    }
