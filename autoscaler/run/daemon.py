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
terminates strays. A daemon asked to hand its run over (``hand_over``: a service that
restarts) ends that way on purpose: it journals ``HandedOver``, dispatches and releases
nothing more, and leaves the machines to the next daemon or to their leases.

A deadline pool (``deadline.keep_open``) takes jobs while it runs (``Daemon.add_job``,
from any thread): their tasks are written to the run's tasks file, then the job is
journaled (``JobAdded``) and planned in one step, and the caller learns its task ids.

The parts: ``rundir`` (the run directory and its lock), ``inbox`` (what the queue holds),
``timers`` (the APScheduler jobs), ``actions`` (a step carried out; reconciling after a
restart), ``owner`` (the owner's events and jobs let in or turned away), ``machines``
(provider and SSH calls on worker threads), ``agents`` (polls to events, the state to
answers), ``leases`` (the lease and clock arithmetic), ``metrics`` (Prometheus gauges),
``quota`` (the run's side of limits shared with other runs), ``hearing`` (when the daemon
itself could not hear its agents: no machine is lost for that). Its ``session`` runs it:
the process's signals, the live view, how it ended. This module is the loop that ties
them together.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import os
import queue
import random
import signal
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from autoscaler.bootstrap.tls import run_ca
from autoscaler.budget.controller import Controller
from autoscaler.config.budgets import check_budget
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.journal import JOURNAL_DB, SqliteJournal
from autoscaler.core.leases import Timeline
from autoscaler.core.model import (
    BudgetSet,
    Event,
    HandedOver,
    Hold,
    JobAdded,
    JobSpec,
    MachineLost,
    Resumed,
    Shutdown,
    Stop,
    TaskSpec,
    Tick,
)
from autoscaler.core.state import RunState
from autoscaler.providers.base import Provider
from autoscaler.providers.cost_tags import CostTags
from autoscaler.providers.sim import draw_runtimes
from autoscaler.report.build import build_report
from autoscaler.report.records import Report
from autoscaler.report.write import write_report
from autoscaler.run import offers
from autoscaler.run.agents import Agents, stretch_from
from autoscaler.run.assemble import json_logger, make_controller, new_state
from autoscaler.run.carry_out import Executor
from autoscaler.run.collector import long_run
from autoscaler.run.dispatch import REGISTRY_FILE, Dispatcher
from autoscaler.run.gauges import Metrics
from autoscaler.run.giveup import BOOT_REASON, ENDED_REASON, unready_give_ups
from autoscaler.run.hearing import Hearing
from autoscaler.run.inbox import (
    AddJob,
    ArrivalsDue,
    BoundaryDue,
    HealthDue,
    SignalReceived,
    TickDue,
    Told,
    take,
)
from autoscaler.run.live import planned_finish
from autoscaler.run.live_runs import register
from autoscaler.run.machines import (
    BootFailed,
    Ended,
    LaunchDone,
    MachineLifecycle,
    Wake,
    launch_events,
)
from autoscaler.run.market import MarketWatch, watch_market
from autoscaler.run.owner import (
    admit,
    all_gone,
    all_task_means,
    job_means,
    pool_job,
    step_order,
)
from autoscaler.run.polls import Poll
from autoscaler.run.quota import Quota, Share
from autoscaler.run.results import JOURNALED_META, OutputsFile, settle
from autoscaler.run.rundir import OUTPUTS_FILE, RunFiles, rebuild_state, run_lock
from autoscaler.run.staging import Staging
from autoscaler.run.timers import Timers
from autoscaler.run.wiring import ProviderBuild, direct_hosts, make_bootstrap, make_provider

# --- the daemon ------------------------------------------------------------------------


@dataclass
class Outcome:
    run_id: str
    state: RunState
    report: Report
    run_dir: Path
    wall_s: float


ProgressHook = Callable[[RunState, float | None], None]
HoldHook = Callable[[Controller, RunState, float], None]
FREEZE_S = 10.0
"""How often the main loop moves what has lived through a young collection out of the
garbage collector's reach (``gc.freeze``): the run's state grows for its whole length,
and each full collection walked all of it while holding the interpreter: 33 of them,
14 s in all and up to 0.7 s each, in a run of 200,000 tasks on 5,000 agents (the p99 of
the agents' round trips was 1.9 s; 0.19 s frozen every 10 s). Objects frozen are still
freed when nothing refers to them; only a cycle of them is kept, until the run ends."""

STEP_GATHER_S = 0.040
"""Past the fleet where the heartbeat stretches, the main loop's steps begin at least this
far apart: what arrives meanwhile waits for the next step, so each step's fixed work (the
controller's pass, the journal's transaction, the answers' wake-up of the dispatcher) is
paid for more polls. 5,000 agents of 2 s tasks took about 150 steps a second, each about
0.5 ms of the main thread's CPU besides its polls and results. Steady CPU a task on
100,000 tasks, runs in turn in the same minutes: none 121/118 µs against 10 ms 116/108;
10 ms 96/95 against 20 ms 84/84; 20 ms 88 against 40 ms 79. The round trips' p50 goes
from 11 to 35 ms and their p99 from 30 to 65 ms: an idle agent waits that much longer
for work, 2 % of a 2 s task, while a busy one has work queued ahead (``core.groups
.ahead``). Up to that fleet a step begins as soon as anything arrives."""


HANDOVER_SIGNAL = signal.SIGUSR1
"""Asks a daemon to end without releasing its machines, for another to adopt them."""


@dataclass
class Daemon:
    files: RunFiles
    resume: bool = False
    progress: ProgressHook | None = None
    log: Any = None
    hold: bool = False  # `autoscaler plan`: hold once the samples are in
    on_hold: HoldHook | None = None  # called in the step that holds
    budget: BudgetSet | None = None  # a new budget, set in the first step
    resumed: str | None = None  # an interrupted run carries on: why (Resumed, first step)
    plots: bool = True  # the report's plots (a service may leave them out; so may its config)
    provider_build: ProviderBuild | None = None  # None: the config's kind (wiring)
    quota: Quota | None = None  # the limits it shares with other runs (a service's jobs)
    holder: str = ""  # its name for ``quota``
    handed_over: bool = field(init=False, default=False)
    market: MarketWatch | None = field(init=False, default=None)  # the spot market read
    state: RunState = field(init=False)
    _inbox: queue.SimpleQueue[object] = field(init=False, default_factory=queue.SimpleQueue)

    def __post_init__(self) -> None:
        cfg = self.files.cfg
        self.cfg = cfg
        self.ts = cfg.time_scale
        self.controller = make_controller(cfg, hold=self.hold)
        self.tasks = self.files.tasks
        synthetic = any(t.command is None for t in self.tasks)
        self.runtimes = (
            draw_runtimes(cfg.emulator, len(self.tasks), random.Random(self.files.seed))
            if synthetic
            else []
        )
        self._since: dict[str, float] = {}  # machines tracked: monotonic launch or adoption
        self._signals = 0  # SIGINT/SIGTERM received; the second means: kill, do not wait
        self._workdir = (cfg.local.workdir or self.files.run_dir / "work").absolute()
        self._answers: list[tuple[Future[JobSpec], JobSpec]] = []  # jobs added, not answered
        self.cost_tags = self.files.cost_tags  # what its launches are tagged with

    def now(self) -> float:
        """Run time (emulated seconds) now."""
        return self.timeline.run_time(time.monotonic())

    def tell(self, event: Event) -> None:
        """Hand the run an event from outside (any thread): a ``BudgetSet`` or
        ``DeadlineSet`` of a user's update, ``Shutdown`` to cancel, ``Interrupted`` to
        stop it resumably. It is journaled and stepped like any other."""
        self._inbox.put(Told(event))

    def hand_over(self, reason: str) -> None:
        """End the run's daemon and leave its machines running, for the next daemon to
        adopt (from any thread): ``HandedOver`` is journaled once the step under way is
        done, and nothing is dispatched or released after it (a service restart)."""
        self._inbox.put(Told(HandedOver(reason)))

    def retag(self, tags: CostTags) -> None:
        """Charge the run's launches from now on to ``tags`` (any thread): a pool whose
        jobs changed. Machines launched before keep the tags they were launched with."""
        self.cost_tags = tags

    def add_job(self, job: JobSpec, tasks: Sequence[TaskSpec]) -> Future[JobSpec]:
        """Add a job to a live deadline-mode run (a pool, ``deadline.keep_open``), from
        any thread: ``tasks`` (their ids do not matter) become the job's, numbered on from
        the run's last; ``job`` gives its name, absolute ``deadline`` (run time), budget
        and known ``task_s`` (its ``first``, ``count`` and ``at`` are the run's to set).
        The answer is the job as journaled (its task ids ``first .. first + count - 1``),
        or an ``AutoscalerError`` if the run cannot take it."""
        answer: Future[JobSpec] = Future()
        self._inbox.put(AddJob(job, tuple(tasks), answer))
        return answer

    # --- the run ------------------------------------------------------------------------

    def run(self) -> Outcome:
        files = self.files
        with run_lock(files.run_dir), register(files.run_id, files.run_dir):
            return self._run_locked()

    def _run_locked(self) -> Outcome:
        files, cfg = self.files, self.cfg
        started = time.perf_counter()
        log_file = (files.run_dir / "log.jsonl").open("a", encoding="utf-8")
        self.log = json_logger(log_file).bind(run_id=files.run_id)
        self._workdir.mkdir(parents=True, exist_ok=True)
        self.journal = SqliteJournal(files.run_dir / JOURNAL_DB)
        if self.resume:
            self.state = rebuild_state(files, self.journal)
            files.keep_tasks(self.state.n_tasks)
            gone = {m.id for m in self.state.fleet.machines.values() if not m.alive}
            self._settle_outputs()
        else:
            self.state = new_state(cfg, len(self.tasks), files.seed)
        self.outputs = OutputsFile(files.run_dir / OUTPUTS_FILE)
        means = all_task_means(cfg, self.state, len(self.tasks), files.config_tasks)
        staging = Staging(cfg, files.run_dir, self.tasks, self.log)  # task files
        self.agents = Agents(
            cfg, self.tasks, self.runtimes, self._workdir, self.log, means, staging=staging
        )
        if self.resume:
            self.agents.know_given(self.state)
        self.timeline = Timeline.resume(files.start_wall, time.time(), time.monotonic(), self.ts)
        host, port = files.address if files.address else (cfg.daemon.host, cfg.daemon.port)
        direct = direct_hosts(cfg)
        server = run_ca(files.run_dir, [*direct, host]) if direct else None
        try:
            self.dispatcher = Dispatcher(
                files.token,
                self._inbox,
                host,
                port,
                log=self.log,
                tls=server.context() if server is not None else None,
                registry=files.run_dir / REGISTRY_FILE,
                gather_from=int(stretch_from(self.cfg.daemon)),
            )
        except OSError as exc:
            raise AutoscalerError(f"dispatcher cannot listen on {host}:{port}: {exc}") from None
        files.address, self.dispatcher.files = self.dispatcher.address, staging
        if self.resume:
            self.dispatcher.gone.update(gone)
        self.journal.set_meta(**files.journal_meta())
        self.provider: Provider = make_provider(
            cfg,
            billing=self.state.billing,
            run_id=files.run_id,
            run_dir=files.run_dir,
            token=files.token,
            url=self.dispatcher.url,
            workdir=self._workdir,
            clock=self.now,
            build=self.provider_build,
            ca_pem=server.ca_pem if server is not None else None,
        )
        if not self.resume and offers.wanted(cfg):  # the jobs split by the offers
            cfg = offers.split_run(cfg, self.state.billing, self.provider, self.log, files.run_dir)
            self.cfg = files.cfg = cfg
            self.state = new_state(cfg, len(self.tasks), files.seed)
        bootstrap = make_bootstrap(cfg, files.run_dir, files.token, files.address[1], self.provider)
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
        self.lifecycle = MachineLifecycle(
            cfg,
            self.provider,
            bootstrap,
            self._inbox,
            scheduler,
            self.log,
            watched=lambda: list(self._since),
            gone=self.dispatcher.gone,
            tags=lambda: self.cost_tags.tags(),
        )
        margin_s = self.state.billing.boundary_margin_s()
        self.timers = Timers(scheduler, self._inbox.put, self.timeline, margin_s)
        self.hearing = Hearing()
        self.dispatcher.on_tick = functools.partial(self.hearing.note, "dispatcher")
        self.executor = Executor(
            self.lifecycle,
            self.dispatcher,
            self.timers,
            self.log,
            self._since,
            hearing=self.hearing,
        )
        self.share = Share(self.quota, self.holder, lambda: self._inbox.put(Wake()), self.log)
        metrics = Metrics.start(cfg) if cfg.daemon.metrics_port is not None else None
        error: BaseException | None = None
        try:
            self.dispatcher.start()
            describe_s = self.provider.status_polling_interval
            tick_s = cfg.monitoring_interval_s / self.ts
            self.timers.checks(tick_s, describe_s, self.lifecycle.describe_soon)
            self.market = watch_market(self.provider, self.now, self.tell, self.log)
            if self.market is not None:
                self.market.start(scheduler, tick_s)
            scheduler.start()
            self._begin()
            with long_run():
                self._loop(metrics)
        except BaseException as exc:
            error = exc
            self.log.error("daemon error", error=repr(exc))
            raise
        finally:
            self._finish(error)
            if metrics is not None:
                metrics.close()
            if scheduler.running:
                scheduler.shutdown(wait=False)
            self.dispatcher.close()
            gc.unfreeze()  # the run's objects are the collector's again once it ends
            self.lifecycle.shutdown()
            self.outputs.close()
            log_file.close()
            self.journal.close()
        wall = time.perf_counter() - started
        report = build_report(
            cfg,
            self.state,
            tasks=self.tasks,
            run_id=files.run_id,
            seed=files.seed,
            wall_s=wall,
            time_scale=self.ts,
            refused_agents=self.dispatcher.refused,
        )
        if not self.handed_over:  # else the daemon it was handed to writes it
            write_report(report, self.state, files.run_dir, plots=self.plots and files.cfg.plots)
        return Outcome(files.run_id, self.state, report, files.run_dir, wall)

    # --- steps ----------------------------------------------------------------------------

    def _begin(self) -> None:
        """The first step: a fresh start, or the adoption of a resumed run's machines."""
        events: list[Event] = []
        if self.resume:
            events = self.executor.reconcile(self.state, self.now)
        if self.resumed is not None and self.state.money.interrupted:
            events.append(Resumed(self.resumed))
        if self.budget is not None:
            check_budget(
                self.budget.budget, committed=self.state.money.committed, holder="this run"
            )
            events.append(self.budget)
        events.extend(self.timers.arrivals(self.state, self.now()))
        if self.market is not None:
            events.extend(self.market.first())
        self._step([*self.share.news(self.state), *events], [])

    def _loop(self, metrics: Metrics | None) -> None:
        """Take what is queued, step, repeat; show progress at most five times a second."""
        last_view = frozen_at = began = 0.0
        crowd = stretch_from(self.cfg.daemon)
        while not self.state.over and not self.handed_over:
            crowded = 0 < crowd < len(self.state.fleet.alive)
            items = take(self._inbox, began + STEP_GATHER_S if crowded else 0.0)
            began = time.monotonic()
            self._listened(items, began)
            self._handle(items)
            mono = time.monotonic()
            if mono - frozen_at >= FREEZE_S:
                frozen_at = mono
                gc.collect(1)  # the young garbage first: only what lives on is frozen
                gc.freeze()
            if mono - last_view >= 0.2:
                last_view = mono
                estimate = planned_finish(self.state)
                if self.progress is not None:
                    self.progress(self.state, estimate)
                if metrics is not None:
                    metrics.update(self.state, estimate)

    def _listened(self, items: list[object], mono: float) -> None:
        """The main loop goes round at ``mono`` with ``items``: when it was deaf (a long
        step, the process stopped, polls left unread), known before a health check
        among the items judges any machine's silence (``run.hearing``)."""
        self.hearing.note("main", mono)
        arrived = [item.arrived for item in items if type(item) is Poll]
        if arrived:
            self.hearing.unread(min(arrived), mono)

    def _handle(self, items: list[object]) -> None:
        """Queued items to events, then one step; a second signal kills every machine."""
        events: list[Event] = []
        polls: list[Poll] = []
        seen: set[tuple[str, int]] = set()
        gone: set[str] = set()
        hard = health_checked = False  # health: once a step (checks queue up when busy)
        handing: str | None = None  # why the run is handed over after this step
        adding: list[tuple[Future[JobSpec], JobSpec]] = []
        for item in items:
            match item:
                case Poll():
                    polls.append(item)
                    events.extend(self.agents.poll_events(self.state, item, seen))
                case TickDue():
                    if not self.state.money.stopped:
                        events.append(Tick())
                case BoundaryDue(machine=mid):
                    events.extend(
                        self.timers.boundary_event(self.state.fleet.machines.get(mid), self.now())
                    )
                case LaunchDone():
                    events.extend(launch_events(item, self.state, self.cfg, self.now(), self.log))
                case HealthDue() if not health_checked:
                    health_checked = True
                    events.extend(self.executor.health(self.state, self.cfg, gone))
                case Ended(machines=ended, reasons=reasons):
                    for mid in sorted(ended):
                        m = self.state.fleet.machines.get(mid)
                        if m is not None and m.alive and mid in self._since and mid not in gone:
                            gone.add(mid)  # several reports of one end make one event
                            why = reasons.get(mid)
                            said = f"{ENDED_REASON}: {why}" if why else ENDED_REASON
                            events.append(MachineLost(mid, said))
                case BootFailed(machine=mid, reason=reason):
                    m = self.state.fleet.machines.get(mid)
                    if m is not None and m.alive and mid not in gone:
                        gone.add(mid)
                        self.log.error("bootstrap failed", machine=mid, error=reason)
                        events.append(MachineLost(mid, f"{BOOT_REASON}: {reason}"))
                case SignalReceived(signum=signum) if signum == HANDOVER_SIGNAL:
                    if self.state.money.awaiting_budget:
                        handing = "the plan's budget was chosen"
                    else:
                        self.log.warning("hand-over asked for a run that does not wait: ignored")
                case SignalReceived(signum=signum):
                    name = signal.Signals(signum).name
                    if not self.state.money.shutdown and not any(
                        isinstance(e, Shutdown) for e in events
                    ):
                        self.log.warning("signal: releasing every machine", signal=name)
                        events.append(Shutdown(f"interrupted by {name}"))
                    else:
                        hard = True
                case Told(event=HandedOver(reason=reason)):
                    handing = reason
                case Told(event=told):
                    events.extend(admit(self.state, told, self.log))
                case ArrivalsDue(jobs=arrivals):
                    events.extend(a for a in arrivals if a.job not in self.state.work.arrived)
                case AddJob():
                    added = self._add(item, [a for _, a in adding], events)
                    if added is not None:
                        events.append(added)
                        adding.append((item.answer, added.job))
                case Wake():
                    pass
        events.extend(unready_give_ups(self.state, events, self.log))
        self._answers.extend(adding)
        news = [*self.share.news(self.state), *self.share.refused()]
        self._step(step_order([*news, *events]), polls)
        for answer, job in self._answers:
            answer.set_result(job)
        self._answers.clear()
        if hard:
            self.executor.kill_all()
            self._terminate_all_now()
        elif handing is not None and not self.state.over:
            self._hand_over(handing)

    def _step(self, events: list[Event], polls: list[Poll]) -> None:
        """Controller.step, the journal, then the actions; then the agents' answers."""
        state = self.state
        if events or not state.decisions.configurations:
            now = self.now()
            actions = self.controller.step(state, events, now)
            outputs = self.agents.outputs_of(events)
            self.journal.step(now, events, actions, outputs)
            self.outputs.append([line for _, line in outputs])
            touched = self.executor.apply(state, events, self.share.granted(state, actions))
            held = any(isinstance(a, Hold) for a in actions)
            if self.on_hold is not None and held and isinstance(self.controller, Controller):
                self.on_hold(self.controller, state, now)
        else:
            touched = set()
        for poll in polls:
            self.agents.answer(state, poll, self.timeline)
        for mid in touched:
            parked = self.agents.unpark(mid)
            if parked is not None:
                self.agents.answer(state, parked, self.timeline)

    def _settle_outputs(self) -> None:
        """A resumed run's outputs file made to agree with its journal (``run.results``)."""
        path = self.files.run_dir / OUTPUTS_FILE
        if not self.journal.meta().get(JOURNALED_META):
            self.log.warning("outputs file left as it is: the journal holds no lines")
            return
        settled = settle(path, self.journal.outputs())
        if settled.appended or settled.dropped:
            self.log.warning(
                "outputs file completed from the journal",
                appended=settled.appended,
                dropped=settled.dropped,
                rewritten=settled.rewritten,
            )

    def _hand_over(self, reason: str) -> None:
        """Journal ``HandedOver`` in a step of its own, without the controller (it would
        dispatch), and end the loop: the machines stay as they are, paid and leased."""
        now = self.now()
        event = HandedOver(reason)
        self.journal.step(now, [event], [])
        self.state.apply(now, event)
        self.handed_over = True
        self.log.info(
            "handing the run over: its machines are kept",
            reason=reason,
            machines=sorted(m.id for m in self.state.fleet.alive_machines()),
        )

    # --- from the outside world to events -----------------------------------------------

    def _add(self, item: AddJob, batch: list[JobSpec], events: list[Event]) -> JobAdded | None:
        """A job for the pool as its event, its tasks written to the run's tasks file (and
        known to the agents) first; None, and the caller told why, if the run cannot take
        it. ``batch``: jobs added in this step already (their tasks come first)."""
        job = item.job
        event = pool_job(
            self.cfg, self.state, self.controller, item, batch, events, self.now(), self.files.seed
        )
        if event is None:
            return None
        first, count = event.job.first, event.job.count
        tasks = [dataclasses.replace(t, id=first + i) for i, t in enumerate(item.tasks)]
        self.files.add_tasks(job.name, tasks)  # self.tasks, the agents' too
        if any(t.command is None for t in tasks):
            rng = random.Random(self.files.seed)
            self.runtimes[:] = draw_runtimes(self.cfg.emulator, len(self.tasks), rng)
        self.agents.add_means([job_means(event.job)] * count)
        self.log.info("job added", job=job.name, first=first, tasks=count, deadline=job.deadline)
        return event

    # --- the end --------------------------------------------------------------------------

    def signal(self, signum: int) -> None:
        """A signal for the run (from the handler its session installs, on any thread):
        the first SIGINT or SIGTERM releases every machine, a second kills them;
        ``HANDOVER_SIGNAL`` hands a held run over. Only a count and a queue item: the
        interrupted code may hold any lock (the log's, a provider's), so the work is done
        by the loop or _finish."""
        if signum != HANDOVER_SIGNAL:
            self._signals += 1
        self._inbox.put(SignalReceived(signum))

    def _terminate_all_now(self) -> None:
        """After the second signal: the state learns that every machine is gone."""
        self._step(all_gone(self.state, "terminated on a second signal", launches=True), [])

    def _finish(self, error: BaseException | None) -> None:
        """Whatever happened: no machine of this run outlives the daemon, unless it was
        handed over (the next daemon adopts them; their leases end them otherwise)."""
        for answer, job in self._answers:
            answer.set_exception(AutoscalerError(f"job {job.name!r}: the daemon ended"))
        self._answers.clear()
        if self.handed_over and error is None:
            self.log.info("daemon end: handed over", committed=round(self.state.money.committed, 4))
            return
        # A second signal while machines are being released kills them all.
        self.lifecycle.wind_down(lambda: self._signals > 1, self.executor.kill_all)
        if error is not None and not self.state.money.stopped:
            try:
                now = self.now()
                for event in all_gone(self.state, "daemon error"):
                    self.state.apply(now, event)
                self.state.apply(now, Stop(f"daemon error: {error!r}"))
            except Exception as exc:  # the report still comes, with the state as it was
                self.log.error("the state could not record the daemon error", error=repr(exc))
        self.log.info(
            "daemon end",
            done=self.state.tasks.done,
            failed=self.state.tasks.failed,
            committed=round(self.state.money.committed, 4),
            stop_reason=self.state.money.stop_reason,
        )
