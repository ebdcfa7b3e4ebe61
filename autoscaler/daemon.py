"""The real-time driver: the same ``Controller.step`` as a dry run, on a real clock.

Everything that happens reaches the daemon's one queue: agents' polls (through the
dispatcher), launches coming back from the provider, the monitoring tick and the
just-before-boundary checks (APScheduler jobs), the health check, and signals. The main
thread takes what is queued, turns it into events, calls ``Controller.step``, writes the
events and actions to the journal in one transaction, and only then carries the actions
out: the provider launches and terminates, the dispatcher hands tasks to agents.

Time: the controller's ``now`` is run time in emulated seconds, ``time_scale`` of them
per real second (1 but for a time-scaled local run). It is anchored to the wall clock at
the run's start, so a resumed daemon carries on the same timeline.

Money across a crash: every agent holds a lease that ends just before its machine's
paid time does, renewed only by a live daemon, so a machine never runs into a unit
nobody committed; a resumed daemon replays the journal (committed spend included),
adopts the machines of its run that still run, lets the provider launch again the
launches it had journaled without seeing their result (idempotent per token), and
terminates strays.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import json
import os
import queue
import random
import secrets
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from types import FrameType
from typing import IO, Any

import yaml
from apscheduler.schedulers.background import BackgroundScheduler

from autoscaler.config.schema import RunConfig
from autoscaler.controller import Controller
from autoscaler.dispatch import Dispatcher, Poll
from autoscaler.errors import AutoscalerError
from autoscaler.journal import JOURNAL_DB, SqliteJournal, replay
from autoscaler.live import machine_counts, planned_finish
from autoscaler.model import (
    Action,
    Assign,
    BoundaryNear,
    Cancel,
    Event,
    Extend,
    Launch,
    LaunchFailed,
    MachineLaunched,
    MachineLost,
    MachineReady,
    MachineState,
    Release,
    Replicate,
    Shutdown,
    Stop,
    TaskDone,
    TaskFailed,
    TaskSpec,
    Tick,
)
from autoscaler.providers.base import MachineRecord, Provider, ProviderState, failure_kind
from autoscaler.providers.local import LocalProvider
from autoscaler.providers.sim import draw_runtimes
from autoscaler.report import build_report, write_report
from autoscaler.runs import (
    CONFIG_FILE,
    controller_settings,
    json_logger,
    log_action,
    new_state,
    write_config,
)
from autoscaler.state import Machine, RunState
from autoscaler.wiring import holds, make_bootstrap, make_provider

TOKEN_FILE = "token"
TASKS_FILE = "tasks.jsonl"
OUTPUTS_FILE = "outputs.jsonl"
LOCK_FILE = "daemon.lock"
HEALTH_S = 0.25
"""Real seconds between health checks (silent machines, machines that never came up)."""
DESCRIBE_S = {"local": 0.25, "sge": 3.0, "ec2": 10.0}
"""Real seconds between asking the provider which machines ended: a local process list
is cheap, a cloud API call is rate-limited and counted against the account."""
RETRY_HOLD_S = 60.0
"""After a launch refused for a passing reason (throttling), scale-up waits this long."""
TERMINATE_TRIES = 8


# --- what reaches the queue besides polls ---------------------------------------------


@dataclass(frozen=True, slots=True)
class _LaunchDone:
    launch: Launch
    records: tuple[MachineRecord, ...]
    error: str | None
    code: str | None = None  # the provider's error code, if it refused
    retryable: bool = False  # the refusal may pass by itself (throttling)


@dataclass(frozen=True, slots=True)
class _BootFailed:
    """A machine's agent could not be started (SSH never answered, a host key mismatch)."""

    machine: str
    reason: str


@dataclass(frozen=True, slots=True)
class _Boundary:
    machine: str


@dataclass(frozen=True, slots=True)
class _Tick:
    pass


@dataclass(frozen=True, slots=True)
class _Health:
    pass


@dataclass(frozen=True, slots=True)
class _Ended:
    """The provider says these machines are gone (from a describe on a provider thread)."""

    machines: frozenset[str]


@dataclass(frozen=True, slots=True)
class _Signal:
    signum: int


@dataclass(frozen=True, slots=True)
class _Wake:
    """Nothing happened; makes the loop look at its exit condition."""


# --- a run directory ------------------------------------------------------------------


@dataclass
class RunFiles:
    """What a run directory holds, for a new run and for a resumed one alike."""

    run_dir: Path
    run_id: str
    cfg: RunConfig
    tasks: list[TaskSpec]
    token: str
    seed: int
    start_wall: float  # time.time() at run time 0
    address: tuple[str, int] | None = None  # the dispatcher's, once bound

    @classmethod
    def create(
        cls, cfg: RunConfig, tasks: Sequence[TaskSpec], run_dir: Path, run_id: str, seed: int
    ) -> RunFiles:
        run_dir.mkdir(parents=True, exist_ok=True)
        if (run_dir / JOURNAL_DB).exists():
            raise AutoscalerError(f"{run_dir} already holds a run: use --resume {run_dir}")
        write_config(cfg, run_dir)
        with (run_dir / TASKS_FILE).open("w", encoding="utf-8") as f:
            for t in tasks:
                f.write(json.dumps({"id": t.id, "command": t.command, "env": dict(t.env)}) + "\n")
        token = secrets.token_urlsafe(32)
        fd = os.open(run_dir / TOKEN_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(token)
        return cls(run_dir, run_id, cfg, list(tasks), token, seed, time.time())

    @classmethod
    def open(cls, run_dir: Path) -> RunFiles:
        if not (run_dir / JOURNAL_DB).is_file():
            raise AutoscalerError(f"{run_dir}: no {JOURNAL_DB} here; is it a real run's directory?")
        try:
            data = yaml.safe_load((run_dir / CONFIG_FILE).read_text(encoding="utf-8"))
            cfg = RunConfig.model_validate(data)
            tasks = [
                TaskSpec(int(d["id"]), d["command"], d.get("env") or {})
                for d in map(json.loads, (run_dir / TASKS_FILE).open(encoding="utf-8"))
            ]
            token = (run_dir / TOKEN_FILE).read_text(encoding="utf-8").strip()
        except (OSError, ValueError, KeyError) as exc:
            raise AutoscalerError(f"{run_dir}: cannot read the run ({exc})") from None
        journal = SqliteJournal(run_dir / JOURNAL_DB)
        try:
            meta = journal.meta()
        finally:
            journal.close()
        try:
            address = (str(meta["host"]), int(meta["port"])) if "port" in meta else None
            return cls(
                run_dir,
                str(meta["run_id"]),
                cfg,
                tasks,
                token,
                int(meta["seed"]),
                float(meta["start_wall"]),
                address,
            )
        except KeyError as exc:
            raise AutoscalerError(f"{run_dir}: the journal lacks {exc}") from None


def rebuild_state(files: RunFiles, journal: SqliteJournal) -> RunState:
    """The run's state as its journal left it."""
    state = new_state(files.cfg, len(files.tasks), files.seed)
    replay(state, journal.records())
    return state


@contextlib.contextmanager
def run_lock(run_dir: Path) -> Iterator[None]:
    """Hold the run directory: one daemon per run (the lock dies with its holder)."""
    path = run_dir / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            other = os.pread(fd, 32, 0).decode(errors="replace").strip()
            raise AutoscalerError(
                f"{run_dir}: another daemon runs this run (pid {other or '?'})"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def daemon_alive(run_dir: Path) -> int | None:
    """The pid of the daemon holding ``run_dir``, if one does."""
    path = run_dir / LOCK_FILE
    if not path.exists():
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        return None
    finally:
        os.close(fd)


# --- the daemon ------------------------------------------------------------------------


@dataclass
class Outcome:
    run_id: str
    state: RunState
    report: dict[str, Any]
    run_dir: Path
    wall_s: float


ProgressHook = Callable[[RunState, float | None], None]


@dataclass
class _Machine:
    """What the daemon keeps about a machine beyond the state: real-time bookkeeping."""

    since: float  # monotonic: launched, or adopted
    parked: Poll | None = None


@dataclass
class Daemon:
    files: RunFiles
    resume: bool = False
    progress: ProgressHook | None = None
    install_signals: bool = True
    log: Any = None
    state: RunState = field(init=False)
    _inbox: queue.SimpleQueue[object] = field(init=False, default_factory=queue.SimpleQueue)

    def __post_init__(self) -> None:
        cfg = self.files.cfg
        self.cfg = cfg
        self.ts = cfg.time_scale
        self.controller = Controller(controller_settings(cfg))
        self.tasks = self.files.tasks
        synthetic = any(t.command is None for t in self.tasks)
        self.runtimes = (
            draw_runtimes(cfg.emulator, len(self.tasks), random.Random(self.files.seed))
            if synthetic
            else []
        )
        self._machines: dict[str, _Machine] = {}
        self._signals = 0  # SIGINT/SIGTERM received; the second means: kill, do not wait
        self._killed = False
        self._outputs: IO[str] | None = None
        self._executor = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="provider")
        # Bootstraps wait minutes for SSH: their own threads, so launches never queue behind.
        self._boot_executor = concurrent.futures.ThreadPoolExecutor(
            16, thread_name_prefix="bootstrap"
        )
        self._booting: set[str] = set()
        self._describing = threading.Lock()
        self._closing = threading.Event()
        self._futures: set[concurrent.futures.Future[Any]] = set()
        self._workdir = cfg.local.workdir or self.files.run_dir / "work"

    # --- the clock ------------------------------------------------------------------------

    def now(self) -> float:
        """Run time (emulated seconds) now."""
        return self._t0 + (time.monotonic() - self._mono0) * self.ts

    def _mono_at(self, t: float) -> float:
        return self._mono0 + (t - self._t0) / self.ts

    # --- the run ------------------------------------------------------------------------

    def run(self) -> Outcome:
        files = self.files
        with run_lock(files.run_dir):
            return self._run_locked()

    def _run_locked(self) -> Outcome:
        files, cfg = self.files, self.cfg
        started = time.perf_counter()
        log_file = (files.run_dir / "log.jsonl").open("a", encoding="utf-8")
        self.log = json_logger(log_file).bind(run_id=files.run_id)
        self._outputs = (files.run_dir / OUTPUTS_FILE).open("a", encoding="utf-8")
        self._workdir.mkdir(parents=True, exist_ok=True)
        self.journal = SqliteJournal(files.run_dir / JOURNAL_DB)
        if self.resume:
            self.state = rebuild_state(files, self.journal)
            gone = {m.id for m in self.state.machines.values() if not m.alive}
        else:
            self.state = new_state(cfg, len(self.tasks), files.seed)
        self._t0 = (time.time() - files.start_wall) * self.ts
        self._mono0 = time.monotonic()
        host, port = files.address if files.address else (cfg.daemon.host, cfg.daemon.port)
        try:
            self.dispatcher = Dispatcher(files.token, self._inbox, host, port, log=self.log)
        except OSError as exc:
            raise AutoscalerError(f"dispatcher cannot listen on {host}:{port}: {exc}") from None
        files.address = self.dispatcher.address
        if self.resume:
            self.dispatcher.gone.update(gone)
        self.journal.set_meta(
            run_id=files.run_id,
            seed=files.seed,
            start_wall=files.start_wall,
            host=files.address[0],
            port=files.address[1],
            time_scale=self.ts,
            n_tasks=len(self.tasks),
        )
        self.provider: Provider = make_provider(
            cfg,
            billing=self.state.billing,
            run_id=files.run_id,
            run_dir=files.run_dir,
            token=files.token,
            url=self.dispatcher.url,
            workdir=self._workdir,
            clock=self.now,
        )
        self.bootstrap = make_bootstrap(
            cfg, files.run_dir, files.token, files.address[1], self.provider
        )
        self.log.info(
            "daemon start",
            resume=self.resume,
            tasks=len(self.tasks),
            url=self.dispatcher.url,
            time_scale=self.ts,
            pid=os.getpid(),
        )
        scheduler = BackgroundScheduler(timezone="UTC")
        self.scheduler = scheduler
        old_handlers = self._install_signals() if self.install_signals else {}
        metrics = _Metrics.start(cfg) if cfg.daemon.metrics_port is not None else None
        error: BaseException | None = None
        try:
            self.dispatcher.start()
            scheduler.add_job(
                self._inbox.put,
                "interval",
                seconds=cfg.monitoring_interval_s / self.ts,
                args=[_Tick()],
                id="tick",
            )
            scheduler.add_job(self._inbox.put, "interval", seconds=HEALTH_S, args=[_Health()])
            scheduler.add_job(
                self._describe_soon, "interval", seconds=DESCRIBE_S.get(cfg.provider, 5.0)
            )
            scheduler.start()
            self._begin()
            self._loop(metrics)
        except BaseException as exc:
            error = exc
            self.log.error("daemon error", error=repr(exc))
            raise
        finally:
            self._finish(error)
            for signum, handler in old_handlers.items():
                signal.signal(signum, handler)
            if metrics is not None:
                metrics.close()
            with contextlib.suppress(Exception):
                scheduler.shutdown(wait=False)
            self.dispatcher.close()
            self._executor.shutdown(wait=True)
            self._boot_executor.shutdown(wait=True)
            if self.bootstrap is not None:
                self.bootstrap.close_all()
            self._outputs.close()
            log_file.close()
            self.journal.close()
        wall = time.perf_counter() - started
        report = build_report(cfg, self.state, run_id=files.run_id, seed=files.seed, wall_s=wall)
        report["time_scale"] = self.ts
        report["refused_agents"] = self.dispatcher.refused
        write_report(report, self.state, files.run_dir)
        return Outcome(files.run_id, self.state, report, files.run_dir, wall)

    # --- steps ----------------------------------------------------------------------------

    def _begin(self) -> None:
        """The first step: a fresh start, or the reconciliation of a resumed run."""
        events: list[Event] = []
        if self.resume:
            events = self._reconcile()
        self._step(events, [])

    def _reconcile(self) -> list[Event]:
        """Match the journal's machines with the provider's after a restart."""
        state = self.state
        events: list[Event] = []
        adopted: set[str] = set()
        for token, (tname, count) in list(state.pending_launches.items()):
            done = self._launch(Launch(tname, count, token))
            events.extend(self._launch_events(done))
            adopted.update(r.id for r in done.records)
        live = {s.id for s in self.provider.describe() if s.state is not ProviderState.TERMINATED}
        for m in state.alive_machines():
            if m.id in live:
                self._track(m)
                self._boot(m.id)
            else:
                events.append(MachineLost(m.id, "ended while the daemon was down"))
        known = {m.id for m in state.alive_machines()} | adopted
        strays = sorted(live - known)
        if strays:
            self.log.warning("terminating strays", machines=strays)
            self.provider.terminate(strays)
        self.log.info(
            "resumed",
            machines=sorted(m.id for m in state.alive_machines()),
            relaunched=sorted(adopted),
            committed=round(state.committed, 4),
            done=state.done,
        )
        return events

    def _loop(self, metrics: _Metrics | None) -> None:
        last_view = 0.0
        while not self._over():
            items = [self._inbox.get()]
            with contextlib.suppress(queue.Empty):
                while len(items) < 5000:
                    items.append(self._inbox.get_nowait())
            self._handle(items)
            mono = time.monotonic()
            if mono - last_view >= 0.2:
                last_view = mono
                estimate = planned_finish(self.state)
                if self.progress is not None:
                    self.progress(self.state, estimate)
                if metrics is not None:
                    metrics.update(self.state, estimate)

    def _over(self) -> bool:
        s = self.state
        return s.stopped and not s.pending_launches and not s.any_alive()

    def _handle(self, items: list[object]) -> None:
        events: list[Event] = []
        polls: list[Poll] = []
        seen: set[tuple[str, int]] = set()
        hard = False
        for item in items:
            match item:
                case Poll():
                    polls.append(item)
                    events.extend(self._poll_events(item, seen))
                case _Tick():
                    if not self.state.stopped:
                        events.append(Tick())
                case _Boundary(machine=mid):
                    events.extend(self._boundary_event(mid))
                case _LaunchDone():
                    events.extend(self._launch_events(item))
                case _Health():
                    events.extend(self._health())
                case _Ended(machines=ended):
                    for mid in sorted(ended):
                        m = self.state.machines.get(mid)
                        if m is not None and m.alive and mid in self._machines:
                            events.append(MachineLost(mid, "machine ended"))
                case _BootFailed(machine=mid, reason=reason):
                    m = self.state.machines.get(mid)
                    if m is not None and m.alive:
                        self.log.error("bootstrap failed", machine=mid, error=reason)
                        events.append(MachineLost(mid, f"bootstrap failed: {reason}"))
                case _Signal(signum=signum):
                    name = signal.Signals(signum).name
                    if not self.state.shutdown and not any(isinstance(e, Shutdown) for e in events):
                        self.log.warning("signal: releasing every machine", signal=name)
                        events.append(Shutdown(f"interrupted by {name}"))
                    else:
                        hard = True
                case _Wake():
                    pass
        # MachineReady before the results of the same machine, as they happened.
        events.sort(key=lambda e: not isinstance(e, MachineLaunched | MachineReady))
        self._step(events, polls)
        if hard:
            self._kill_now()
            self._terminate_all_now()

    def _step(self, events: list[Event], polls: list[Poll]) -> None:
        state = self.state
        if events or not state.configurations:
            now = self.now()
            actions = self.controller.step(state, events, now)
            self.journal.step(now, events, actions)
            touched = self._apply(events, actions)
        else:
            touched = set()
        for poll in polls:
            self._answer(poll)
        for mid in touched:
            box = self._machines.get(mid)
            if box is not None and box.parked is not None:
                parked, box.parked = box.parked, None
                self._answer(parked)

    # --- from the outside world to events -----------------------------------------------

    def _poll_events(self, poll: Poll, seen: set[tuple[str, int]]) -> list[Event]:
        m = self.state.machines.get(poll.machine)
        if m is None or not m.alive:
            return []
        events: list[Event] = []
        if m.state is MachineState.BOOTING and (m.id, 0) not in seen:
            seen.add((m.id, 0))
            events.append(MachineReady(m.id))
        for r in poll.results:
            run, task = int(r["run"]), int(r["task"])
            if m.run_no.get(task) != run or (m.id, run) in seen:
                continue  # a late or repeated result: already counted, or cancelled
            seen.add((m.id, run))
            runtime = float(r["runtime_s"]) * self.ts
            error = r.get("error")
            self._write_output(m, r)
            if r.get("exit_code") == 0 and not error:
                events.append(TaskDone(task, m.id, runtime))
            else:
                events.append(TaskFailed(task, m.id, runtime, str(error or "failed")[:500]))
                self.log.info("task failed", task=task, machine=m.id, error=error)
        return events

    def _write_output(self, m: Machine, r: dict[str, Any]) -> None:
        assert self._outputs is not None
        line = {
            "task": r["task"],
            "machine": m.id,
            "run": r["run"],
            "exit_code": r.get("exit_code"),
            "runtime_s": r.get("runtime_s"),
            "error": r.get("error"),
            "stdout": r.get("stdout", ""),
            "stderr": r.get("stderr", ""),
        }
        self._outputs.write(json.dumps(line) + "\n")

    def _boundary_event(self, mid: str) -> list[Event]:
        m = self.state.machines.get(mid)
        if m is None or not m.alive:
            return []
        due = m.paid_until - self.state.billing.boundary_margin_s()
        if self.now() < due:  # the timer fired early: ask again at the right moment
            self._schedule_boundary(m)
            return []
        return [BoundaryNear(mid)]

    def _launch(self, launch: Launch) -> _LaunchDone:
        """Run on a provider thread (or at resume): the provider's answer, never an exception."""
        try:
            records = self.provider.launch(
                launch.type, launch.count, launch.token, {"autoscaler:run": self.files.run_id}
            )
        except AutoscalerError as exc:
            return _LaunchDone(launch, (), exc.message, exc.code, exc.retryable)
        except Exception as exc:  # a provider's bug must not lose the launch's money
            return _LaunchDone(launch, (), f"{type(exc).__name__}: {exc}")
        return _LaunchDone(launch, tuple(records), None)

    def _launch_events(self, done: _LaunchDone) -> list[Event]:
        launch = done.launch
        if launch.token not in self.state.pending_launches:
            return []
        events: list[Event] = []
        for rec in done.records[: launch.count]:
            if rec.id in self.state.machines:
                continue
            events.append(MachineLaunched(rec.id, launch.type, launch.token, at=rec.launched_at))
        missing = launch.count - len(events)
        if missing > 0:
            reason = done.error or "the provider started fewer machines than asked"
            kind = failure_kind(done.code, done.retryable)
            unavailable_s, hold_s = holds(self.cfg)
            hold = {"capacity": unavailable_s, "limit": hold_s, "throttled": RETRY_HOLD_S * self.ts}
            until = self.now() + hold[kind] if kind in hold else None
            self.log.warning(
                "launch failed", machine_type=launch.type, count=missing, error=reason, kind=kind
            )
            events.append(LaunchFailed(launch.token, launch.type, missing, reason, kind, until))
        return events

    def _describe_soon(self) -> None:
        """Scheduler job: ask the provider which machines ended, unless a question is out."""
        if not self._describing.acquire(blocking=False):
            return
        try:
            self._submit(self._describe_alive)
        except RuntimeError:  # the executor is shutting down: the run is over
            self._describing.release()

    def _describe_alive(self) -> None:
        """On a provider thread: one describe of the machines alive; the ended ones queued."""
        try:
            ids = list(self._machines)  # a copy: the main thread changes it
            if not ids:
                return
            ended = frozenset(
                st.id for st in self.provider.describe(ids) if st.state is ProviderState.TERMINATED
            )
            if ended:
                self._inbox.put(_Ended(ended))
        except Exception as exc:  # throttled past botocore's retries: ask again next time
            self.log.warning("describe failed", error=str(exc)[:300])
        finally:
            self._describing.release()

    def _health(self) -> list[Event]:
        """Machines that went silent, or that never came up."""
        state = self.state
        alive = list(state.alive_machines())
        if not alive:
            return []
        mono = time.monotonic()
        d = self.cfg.daemon
        events: list[Event] = []
        for m in alive:
            box = self._machines.get(m.id)
            if box is None:
                continue
            boot = self.bootstrap
            if boot is not None and m.id not in self._booting and not boot.alive(m.id):
                self._boot(m.id)  # a tunnel dropped: open it again
            if m.state is MachineState.READY:
                silent = mono - max(box.since, self.dispatcher.last_seen.get(m.id, 0.0))
                if silent > d.lost_after_s:
                    events.append(MachineLost(m.id, f"no contact for {silent:.0f}s"))
            elif mono - box.since > m.type.boot_s / self.ts + d.lost_after_s:
                events.append(MachineLost(m.id, "never reported in"))
        return events

    # --- from actions to the outside world ------------------------------------------------

    def _apply(self, events: list[Event], actions: list[Action]) -> set[str]:
        touched: set[str] = set()
        for event in events:
            match event:
                case MachineLaunched(machine=mid):
                    self._track(self.state.machines[mid])
                    self._boot(mid)
                case MachineLost(machine=mid, reason=reason):
                    self.log.warning("machine lost", machine=mid, reason=reason)
                    self._forget(mid)
                    self._submit(self._end, mid)
        for action in actions:
            match action:
                case Launch():
                    future = self._submit(self._launch, action)
                    future.add_done_callback(lambda f: self._inbox.put(f.result()))
                case Extend(machine=mid):
                    self._schedule_boundary(self.state.machines[mid])
                    touched.add(mid)
                case Release(machine=mid):
                    self._forget(mid)
                    touched.add(mid)
                    self._submit(self._end, mid)
                case Assign(machine=mid) | Replicate(machine=mid) | Cancel(machine=mid):
                    touched.add(mid)
                case _:
                    pass
            log_action(self.log, self.state.now, action)
        return touched

    def _end(self, mid: str) -> None:
        """On a provider thread: terminate a machine; its SSH tunnel closes a little later.

        A refused terminate (throttling past botocore's retries) is tried again with
        backoff: a machine released but left running would cost money. ``_finish``
        terminates whatever is still up at the end in any case.
        """
        delay = 2.0
        try:
            for attempt in range(1, TERMINATE_TRIES + 1):
                try:
                    self.provider.terminate([mid])
                    return
                except Exception as exc:
                    self.log.warning(
                        "terminate failed", machine=mid, attempt=attempt, error=str(exc)[:300]
                    )
                if self._closing.wait(delay):
                    return  # the end of the run terminates what is left
                delay = min(delay * 2, 30.0)
            self.log.error("terminate kept failing; the end of the run tries again", machine=mid)
        finally:
            self._close_tunnel_later(mid)

    def _tunnel_grace_s(self) -> float:
        """How long a released machine's tunnel stays open: its agent's answer (release,
        or 410 at its next heartbeat) must get through before the tunnel goes."""
        return 2 * self.cfg.daemon.heartbeat_s + 0.5

    def _close_tunnel_later(self, mid: str) -> None:
        if self.bootstrap is None:
            return
        # If the scheduler has stopped, the end of the run closes every tunnel.
        with contextlib.suppress(Exception):
            self.scheduler.add_job(
                self.bootstrap.close,
                "date",
                run_date=datetime.now().astimezone() + timedelta(seconds=self._tunnel_grace_s()),
                args=[mid],
            )

    def _boot(self, mid: str) -> None:
        """Start ``mid``'s agent over SSH (EC2 runs with SSH bootstrap; else nothing)."""
        if self.bootstrap is None or mid in self._booting:
            return
        self._booting.add(mid)
        future = self._boot_executor.submit(self._bootstrap_machine, mid)
        self._futures.add(future)
        future.add_done_callback(self._futures.discard)
        future.add_done_callback(lambda _: self._booting.discard(mid))

    def _bootstrap_machine(self, mid: str) -> None:
        """On a bootstrap thread: wait for the instance's address and SSH, start the agent.

        Idempotent: after a restart it re-opens the tunnel to the agent already running.
        Failure becomes a lost machine (terminated, its tasks re-queued), never a crash.
        """
        boot = self.bootstrap
        ssh = self.cfg.ec2.ssh if self.cfg.ec2 is not None else None
        assert boot is not None
        assert ssh is not None
        deadline = time.monotonic() + ssh.timeout_s
        delay = 1.0
        try:
            while True:
                if self._closing.is_set() or mid in self.dispatcher.gone:
                    return
                status = next(iter(self.provider.describe([mid])), None)
                if status is None or status.state is ProviderState.TERMINATED:
                    return  # the health check reports it lost
                if status.state is ProviderState.RUNNING and status.address:
                    break
                if time.monotonic() > deadline:
                    raise AutoscalerError("no address before the SSH timeout")
                self._closing.wait(delay)
                delay = min(delay * 2, 10.0)
            boot.wait_ssh(mid, status.address, max(1.0, deadline - time.monotonic()))
            if self._closing.is_set() or mid in self.dispatcher.gone:
                return
            port = boot.ensure(mid, status.address)
            self.log.info("agent started over ssh", machine=mid, tunnel_port=port)
        except AutoscalerError as exc:
            self._inbox.put(_BootFailed(mid, exc.message))
        except Exception as exc:  # a bootstrap bug must not leave a paid machine idle
            self._inbox.put(_BootFailed(mid, f"{type(exc).__name__}: {exc}"))

    def _submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        future = self._executor.submit(fn, *args)
        self._futures.add(future)
        future.add_done_callback(self._futures.discard)
        future.add_done_callback(lambda _: self._inbox.put(_Wake()))
        return future

    def _track(self, m: Machine) -> None:
        self._machines[m.id] = _Machine(since=time.monotonic())
        self.dispatcher.allowed.add(m.id)
        self._schedule_boundary(m)

    def _forget(self, mid: str) -> None:
        self.dispatcher.gone.add(mid)
        self.dispatcher.allowed.discard(mid)
        with contextlib.suppress(Exception):
            self.scheduler.remove_job(f"boundary:{mid}")

    def _schedule_boundary(self, m: Machine) -> None:
        due = m.paid_until - self.state.billing.boundary_margin_s()
        delay = max(0.0, self._mono_at(due) - time.monotonic())
        self.scheduler.add_job(
            self._inbox.put,
            "date",
            run_date=datetime.now().astimezone() + timedelta(seconds=delay),
            args=[_Boundary(m.id)],
            id=f"boundary:{m.id}",
            replace_existing=True,
            misfire_grace_time=None,
        )

    # --- answering agents -------------------------------------------------------------------

    def _answer(self, poll: Poll) -> None:
        m = self.state.machines.get(poll.machine)
        if m is None or not m.alive:
            poll.reply.send({"ack": True, "tasks": [], "cancel": [], "release": True})
            return
        box = self._machines[m.id]
        known = set(poll.running) | {int(r["run"]) for r in poll.results}
        runs = sorted((run, task) for task, run in m.run_no.items())
        current = {run for run, _ in runs}
        tasks = [self._payload(m, run, task) for run, task in runs if run not in known]
        cancel = [run for run in poll.running if run not in current]
        base = self._base(m, poll)
        if tasks or cancel or poll.results or poll.running or poll.wait_s <= 0:
            poll.reply.send({**base, "tasks": tasks, "cancel": cancel})
            return
        if box.parked is not None and box.parked is not poll:
            box.parked.reply.send(base)
        box.parked = poll
        renew = self._mono_at(m.paid_until - self.state.billing.boundary_margin_s() / 2)
        poll.reply.hold(base, min(poll.arrived + poll.wait_s, renew))

    def _base(self, m: Machine, poll: Poll) -> dict[str, Any]:
        margin = self.state.billing.boundary_margin_s()
        hard = self._mono_at(m.paid_until - margin / 4) - poll.arrived
        renew = self._mono_at(m.paid_until - margin / 2) - poll.arrived
        return {
            "ack": True,
            "tasks": [],
            "cancel": [],
            "release": False,
            "lease_s": round(max(0.0, hard), 4),
            "renew_in_s": round(max(0.0, renew), 4),
            "heartbeat_s": self.cfg.daemon.heartbeat_s,
        }

    def _payload(self, m: Machine, run: int, task: int) -> dict[str, Any]:
        spec = self.tasks[task]
        if spec.command is None:
            speed = self.cfg.emulator.speed.get(m.type.name, 1.0)
            return {
                "run": run,
                "task": task,
                "command": None,
                "sleep_s": self.runtimes[task] / speed / self.ts,
                "env": {},
                "cwd": None,
                "timeout_s": None,
            }
        return {
            "run": run,
            "task": task,
            "command": spec.command,
            "sleep_s": None,
            "env": dict(spec.env),
            "cwd": str(self._workdir),
            "timeout_s": self.cfg.bag.timeout_s,
        }

    # --- the end --------------------------------------------------------------------------

    def _install_signals(self) -> dict[int, Any]:
        def handler(signum: int, frame: FrameType | None) -> None:
            # Only a count and a queue item: the interrupted code may hold any lock
            # (the log's, a provider's), so the work is done by the main loop or _finish.
            self._signals += 1
            self._inbox.put(_Signal(signum))

        old: dict[int, Any] = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            old[signum] = signal.signal(signum, handler)
        return old

    def _kill_now(self) -> None:
        """The second signal: every machine the run knows ends now, without grace."""
        if self._killed:
            return
        self._killed = True
        ids = sorted(self._machines)
        self.log.warning("second signal: terminating every machine now", machines=ids)
        with contextlib.suppress(Exception):
            if isinstance(self.provider, LocalProvider):
                self.provider.terminate(ids, grace_s=0.0)
            else:
                self.provider.terminate(ids)

    def _terminate_all_now(self) -> None:
        """After the second signal: the state learns that every machine is gone."""
        events: list[Event] = [
            MachineLost(m.id, "terminated on a second signal") for m in self.state.alive_machines()
        ]
        for token, (tname, count) in list(self.state.pending_launches.items()):
            events.append(LaunchFailed(token, tname, count, "abandoned on a second signal"))
        self._step(events, [])

    def _terminate_leftovers(self) -> None:
        """Every machine of the run the provider still lists ends now (tried with backoff)."""
        delay = 1.0
        for attempt in range(1, TERMINATE_TRIES + 1):
            try:
                left = [
                    s.id
                    for s in self.provider.describe()
                    if s.state is not ProviderState.TERMINATED
                ]
                if left:
                    self.log.warning("terminating machines left at the end", machines=left)
                    self.provider.terminate(left)
                return
            except Exception as exc:
                self.log.warning("end-of-run terminate failed", attempt=attempt, error=str(exc))
                time.sleep(delay)
                delay = min(delay * 2, 30.0)
        self.log.error(
            "machines of this run may still run: the provider kept refusing; "
            "run `autoscaler cleanup` with this config"
        )

    def _finish(self, error: BaseException | None) -> None:
        """Whatever happened: no machine of this run outlives the daemon."""
        self._closing.set()
        deadline = time.monotonic() + 30
        while self._futures and time.monotonic() < deadline:
            if self._signals > 1:  # a second signal while machines are being released
                self._kill_now()
            concurrent.futures.wait(list(self._futures), timeout=0.1)
        self._terminate_leftovers()
        if self.bootstrap is not None:
            time.sleep(self._tunnel_grace_s())  # released agents hear it before tunnels close
        if error is not None and not self.state.stopped:
            events: list[Event] = [
                MachineLost(m.id, "daemon error") for m in self.state.alive_machines()
            ]
            with contextlib.suppress(Exception):
                now = self.now()
                for event in events:
                    self.state.apply(now, event)
                self.state.apply(now, Stop(f"daemon error: {error!r}"))
        self.log.info(
            "daemon end",
            done=self.state.done,
            failed=self.state.failed,
            committed=round(self.state.committed, 4),
            stop_reason=self.state.stop_reason,
        )


# --- metrics ---------------------------------------------------------------------------


class _Metrics:
    """Prometheus gauges on their own port (prometheus_client, its own registry)."""

    def __init__(self, cfg: RunConfig) -> None:
        from prometheus_client import CollectorRegistry, Gauge

        self.registry = CollectorRegistry()
        r = self.registry
        self.tasks = Gauge("autoscaler_tasks", "tasks by state", ["state"], registry=r)
        self.machines = Gauge(
            "autoscaler_machines", "live machines by type and state", ["type", "state"], registry=r
        )
        self.spend = Gauge("autoscaler_spend_committed", "money committed", registry=r)
        self.budget = Gauge("autoscaler_budget", "the run's budget", registry=r)
        self.makespan = Gauge(
            "autoscaler_estimated_makespan_seconds", "the plan's predicted makespan", registry=r
        )
        if cfg.constraint.budget is not None:
            self.budget.set(cfg.constraint.budget)
        self._server: Any = None

    @classmethod
    def start(cls, cfg: RunConfig) -> _Metrics:
        from prometheus_client import start_http_server

        metrics = cls(cfg)
        port = cfg.daemon.metrics_port
        assert port is not None
        try:
            metrics._server, _ = start_http_server(
                port, addr=cfg.daemon.metrics_host, registry=metrics.registry
            )
        except OSError as exc:
            raise AutoscalerError(f"metrics cannot listen on port {port}: {exc}") from None
        return metrics

    def update(self, state: RunState, estimate: float | None) -> None:
        running = len(state.running_on)
        self.tasks.labels("done").set(state.done)
        self.tasks.labels("failed").set(state.failed)
        self.tasks.labels("running").set(running)
        self.tasks.labels("pending").set(len(state.pending))
        for name, counts in machine_counts(state).items():
            for key, n in counts.items():
                self.machines.labels(name, key).set(n)
        self.spend.set(state.committed)
        if estimate is not None:
            self.makespan.set(estimate)

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
