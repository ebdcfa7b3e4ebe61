"""Answering agents: their polls become events, and the state becomes their answers.

A poll carries the results of the runs an agent finished and the runs it is running.
Results become ``TaskDone``/``TaskFailed`` events (a machine's first poll, ``MachineReady``),
each with its line of the run's outputs file (``outputs_of``), journaled with it. The
answer, sent once the step that took those events is journaled, gives the agent the runs
assigned to its machine that it does not have, the runs it should drop, and its lease
(``autoscaler.core.leases``). An idle agent's poll is parked until there is something
to tell it, or until it must renew its lease.

A result for a task the daemon never gave that machine (``given``) is refused: never
counted, logged, and named in the answer's ``refused`` beside an ``ack``, so an agent
that sent it by mistake drops it instead of sending it forever. Machine ids are checked
against the agent's own token by the dispatcher, so a machine can report only for itself
and only what it was given.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoscaler.config.schema import Daemon as DaemonSettings
from autoscaler.config.schema import JobMeans, RunConfig
from autoscaler.core.groups import stretched
from autoscaler.core.leases import Timeline, lease, renew_at
from autoscaler.core.model import (
    NOTICE_REASON,
    SETUP_REASON,
    Event,
    MachineLost,
    MachineReady,
    MachineState,
    RebalanceRecommended,
    TaskDone,
    TaskFailed,
    TaskSpec,
    TaskState,
)
from autoscaler.core.state import Machine, RunState
from autoscaler.core.task_files import Stored
from autoscaler.core.words import counted
from autoscaler.providers.sim import share_factor, type_runtime
from autoscaler.run import wire
from autoscaler.run.giveup import QUEUED_REASON, UNSEEN_REASON, give_up
from autoscaler.run.hearing import Hearing
from autoscaler.run.polls import AgentResult, Poll
from autoscaler.run.staging import Staging

_SETUP_LOST = -2
"""The run number that marks, in a step's ``seen``, a machine lost to its set-up."""


@dataclass
class Agents:
    """What the daemon tells agents, and what it learns from them."""

    cfg: RunConfig
    tasks: Sequence[TaskSpec]
    runtimes: Sequence[float]  # synthetic tasks' run times, emulated seconds
    workdir: Path  # the daemon's work directory: shared-fs tasks' files are staged under it
    log: Any
    task_means: Sequence[JobMeans | None] = ()  # per task id, its job's (config.bag.task_means)
    parked: dict[str, Poll] = field(default_factory=dict)  # an idle agent's poll, by machine
    staging: Staging | None = None  # task files, when the run's tasks have any
    # A result's event (by id, kept alive so that no other takes its id) and its line.
    _lines: dict[int, tuple[Event, str]] = field(init=False, default_factory=dict)
    # Read of the config once: each poll's answer asks (``time_scale`` is worked out).
    _scale: float = field(init=False, default=1.0)
    _setups: dict[str, dict[str, Any]] = field(init=False, default_factory=dict)
    # The fleet's size when its agents' intervals were last worked out, and those intervals
    # (heartbeat_s, report_s): the same for every answer until the fleet changes.
    _said: tuple[int, float, float] = field(init=False, default=(-1, 0.0, 0.0))
    # (machine, task): every task ever sent to a machine's agent (or, resumed, held or
    # run by it in the journal): a result for any other pair is refused.
    given: set[tuple[str, int]] = field(init=False, default_factory=set)
    refused_results: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self._scale = self.cfg.time_scale

    def know_given(self, state: RunState) -> None:
        """A resumed run: the tasks each machine had before the restart count as given."""
        given = self.given
        given.update((s.machine, s.task) for s in state.tasks.segments)
        for m in state.fleet.machines.values():
            given.update((m.id, task) for task in (*m.run_no, *m.taken))

    def add_means(self, means: Sequence[JobMeans | None]) -> None:
        """Tasks added to the run (a job for a pool): their jobs' mean task times."""
        if len(self.task_means) < len(self.tasks) - len(means):
            self.task_means = [*self.task_means, *[None] * (len(self.tasks) - len(means))]
        self.task_means = [*self.task_means, *means]

    def poll_events(self, state: RunState, poll: Poll, seen: set[tuple[str, int]]) -> list[Event]:
        """The events a poll brings: the machine's first report, results not yet counted.

        ``seen`` holds (machine, run) pairs already taken in this step ((machine, 0): its
        first report): an agent repeats results until they are acknowledged. A machine
        lost meanwhile (its agent does not know yet) brings only the results of runs it
        had: they count (``core.state``), if nothing else ended their tasks first.
        """
        m = state.fleet.machines.get(poll.machine)
        if m is None:
            return []
        events: list[Event] = []
        if m.state is MachineState.BOOTING and (m.id, 0) not in seen:
            events += self._first_report(state, m, poll, seen)
        run_no, mid, paired = m.run_no, m.id, state.observed.paired_runs
        for r in poll.results:
            task, run = r.task, r.run
            ok = r.ok  # once per result (it was asked up to twice)
            if run_no.get(task) != run:
                # A task taken back from this agent's group, or from its machine lost,
                # that it had already run: its result counts once, if nothing else ended
                # the task first (core.state).
                late = (
                    ok
                    and task in m.taken
                    and state.tasks.task_state[task] in (TaskState.RUNNING, TaskState.PENDING)
                )
                if not late:
                    if (mid, task) not in self.given:
                        self._refuse(m, r, poll)
                    continue  # else a result already counted, or cancelled
            if (mid, run) in seen:
                continue  # a repeated result: already counted
            once = ok and task not in paired  # pairs: a result per type
            if once and ("", task) in seen:
                continue  # done by another machine's result in this step: that one wins
            seen.add((mid, run))
            if once:
                seen.add(("", task))
            runtime = float(r.runtime_s) * self._scale
            stored = self._stored(m, r) if self.staging is not None else None
            if isinstance(stored, str):  # it ran, but its outputs are not safely stored
                r, stored = dataclasses.replace(r, error=stored), None
                ok = r.ok
            result: Event
            if ok:
                result = TaskDone(task, mid, runtime, stored=stored)
            else:
                result = TaskFailed(task, mid, runtime, str(r.error or "failed")[:500])
                self.log.info("task failed", task=task, machine=mid, error=r.error)
            self._lines[id(result)] = (result, _output_line(m, r))
            events.append(result)
        if poll.notice is not None and m.alive and (m.id, -1) not in seen:
            # Taken back by its provider: the machine is gone for planning now, and its
            # tasks go back to the bag, not minutes later when it stops answering.
            seen.add((m.id, -1))
            n = poll.notice
            self.log.warning("interruption notice", machine=m.id, action=n.action, time=n.time)
            events.append(MachineLost(m.id, f"{NOTICE_REASON} ({n.action} at {n.time})"))
        elif poll.rebalance is not None and m.alive and not m.draining and (m.id, -2) not in seen:
            # At raised risk of a reclaim: no new work, its queue back to the bag.
            seen.add((m.id, -2))
            self.log.warning("rebalance recommendation", machine=m.id, time=poll.rebalance)
            events.append(RebalanceRecommended(m.id, poll.rebalance))
        return events

    def _refuse(self, m: Machine, r: AgentResult, poll: Poll) -> None:
        """A result for a task ``m`` was never given: not counted, said in the answer."""
        if r.run in poll.refused:
            return
        poll.refused.append(r.run)
        self.refused_results += 1
        self.log.warning(
            "result refused: task not given to this machine", machine=m.id, task=r.task, run=r.run
        )

    def _first_report(
        self, state: RunState, m: Machine, poll: Poll, seen: set[tuple[str, int]]
    ) -> list[Event]:
        """A booting machine's agent reports: ready, or (with a set-up) once its set-up is
        done; a failed set-up loses the machine (not a task failure: it ran none)."""
        said = poll.setup or {}
        if self.cfg.setup_for(m.type.name) and said.get("state") != "done":
            if said.get("state") != "failed":
                return []  # still setting up: its agent is in touch
            seen.add((m.id, 0))
            why = f"{said.get('command', '')[:200]}: {said.get('error', 'failed')}"
            tail = str(said.get("stderr") or said.get("stdout") or "")[-1000:]
            last = next((ln.strip() for ln in reversed(tail.splitlines()) if ln.strip()), "")
            if last:
                why += f" ({last[-200:]})"  # the report's machine table shows it
            self.log.error("set-up failed", machine=m.id, error=why, tail=tail)
            lost: list[Event] = [MachineLost(m.id, f"{SETUP_REASON}: {why}")]
            # Failures so far: machines already ended by it, and those this step lost to
            # it before this one (their MachineLost not folded yet: two set-ups failing
            # in one step would otherwise count one each and step past the limit).
            seen.add((m.id, _SETUP_LOST))
            failed = sum(
                1
                for x in state.fleet.machines.values()
                if x.type.name == m.type.name
                and (SETUP_REASON in (x.end_reason or "") or (x.id, _SETUP_LOST) in seen)
            )
            if failed == self.cfg.setup_failures_max:  # that type is not bought again
                said_why = (
                    f"set-up failed on {counted(failed, 'machine')} of {m.type.name}; last: {why}"
                )
                lost.append(give_up(m.type.name, "setup", said_why, self.log))
            return lost
        seen.add((m.id, 0))
        if said:
            self.log.info("set-up done", machine=m.id, seconds=said.get("seconds"))
        return [MachineReady(m.id)]

    def _stored(self, m: Machine, r: AgentResult) -> Stored | str | None:
        """A task with files that ran well: what it stored, or why that does not count."""
        if self.staging is None or not r.ok or self.tasks[r.task].files is None:
            return None
        return self.staging.check(r.task, m.id, r.run, r.stored)

    def outputs_of(self, events: Sequence[Event]) -> list[tuple[int, str]]:
        """The outputs file's lines of the results among a step's ``events``, as (index
        in ``events``, line); the lines of results polled before are forgotten."""
        lines = self._lines
        out = []
        for i, event in enumerate(events):
            held = lines.get(id(event))
            if held is not None and held[0] is event:
                out.append((i, held[1]))
        lines.clear()
        return out

    def answer(self, state: RunState, poll: Poll, timeline: Timeline) -> None:
        """Answer ``poll`` now, or park it: an idle agent hears nothing until there is
        work for it, its machine goes, or its lease needs renewing."""
        m = state.fleet.machines.get(poll.machine)
        if m is None or not m.alive:
            poll.reply.send({"ack": True, "tasks": [], "cancel": [], "release": True})
            return
        known = set(poll.running) | {r.run for r in poll.results}
        runs = sorted((run, task) for task, run in m.run_no.items())
        current = {run for run, _ in runs}
        tasks = [self._payload(m, run, task) for run, task in runs if run not in known]
        cancel = [run for run in poll.running if run not in current]
        margin = state.billing.boundary_margin_s()
        base = self._base(m, poll, timeline, margin, len(state.fleet.alive))
        setting_up = poll.setup is None and "setup" in base  # told of its set-up at once
        if tasks or cancel or poll.results or poll.running or poll.wait_s <= 0 or setting_up:
            base["tasks"], base["cancel"] = tasks, cancel
            if poll.refused:
                base["refused"] = poll.refused
            poll.reply.send(base)
            return
        parked = self.parked.get(m.id)
        if parked is not None and parked is not poll:
            parked.reply.send(base)
        self.parked[m.id] = poll
        renew = timeline.mono_at(renew_at(m.paid_until, margin))
        poll.reply.hold(base, min(poll.arrived + poll.wait_s, renew))

    def unpark(self, machine: str) -> Poll | None:
        """The parked poll of ``machine``, taken out to be answered again."""
        return self.parked.pop(machine, None)

    def _base(
        self, m: Machine, poll: Poll, timeline: Timeline, margin: float, fleet: int
    ) -> dict[str, Any]:
        floor = SCALED_LEASE_FLOOR_S if self._scale > 1 else 0.0
        held = lease(timeline, m.paid_until, margin, poll.arrived, floor)
        said = self._said
        if said[0] != fleet:  # the fleet changed size: the intervals it is told, again
            d = self.cfg.daemon
            said = self._said = (fleet, heartbeat_s(d, fleet), report_s(d, fleet))
        base = {
            "ack": True,
            "tasks": [],
            "cancel": [],
            "release": False,
            "lease_s": held.lease_s,
            "renew_in_s": held.renew_in_s,
            "heartbeat_s": said[1],
            "slots": m.type.slots,
            "report_s": said[2],
        }
        base.update(self._setup(m))
        return base

    def _setup(self, m: Machine) -> dict[str, Any]:
        """The set-up a booting machine's agent is to run, if its type has one."""
        if m.state is not MachineState.BOOTING:
            return {}
        said = self._setups.get(m.type.name)
        if said is None:
            commands = self.cfg.setup_for(m.type.name)
            timeout = self.cfg.setup_timeout_s
            said = {"commands": list(commands), "timeout_s": timeout} if commands else {}
            self._setups[m.type.name] = said
        return {"setup": said} if said else {}

    def _payload(self, m: Machine, run: int, task: int) -> dict[str, Any]:
        self.given.add((m.id, task))
        spec = self.tasks[task]
        if spec.command is None:
            means = self.task_means[task] if self.task_means else None
            runtime = type_runtime(self.cfg.emulator, self.runtimes[task], task, m.type.name, means)
            held = len(m.running) + len(m.queue)  # tasks on the machine as this run is sent
            slowdown = share_factor(self.cfg.emulator.share_slowdown, held, m.type.slots)
            return {
                "run": run,
                "task": task,
                "command": None,
                "sleep_s": runtime * slowdown / self._scale,
                "env": {},
                "cwd": None,
                "timeout_s": None,
            }
        payload = {
            "run": run,
            "task": task,
            "command": spec.command,
            "sleep_s": None,
            "env": dict(spec.env),
            "cwd": None,  # the agent's own working directory: on EC2 ours does not exist
            "timeout_s": spec.timeout_s
            if spec.timeout_s is not None
            else (self.cfg.bag.timeout_s if self.cfg.bag is not None else None),
        }
        if spec.files is not None and self.staging is not None:
            shared = self.cfg.shared_fs(m.type.name)
            cwd, files = self.staging.payload(spec.files, task, m.id, run, shared)
            payload.update(cwd=str(self.workdir / cwd) if shared else cwd, files=files)
        return payload


HEARTBEATS_PER_S = 500.0
"""The most heartbeats a second the daemon asks of its whole fleet. A busy agent reports
every ``heartbeat_s`` even with nothing to say; at 10,000 agents and the default 2 s that
is 5,000 requests a second, six for every 10 s task, and the daemon's CPU goes on them.
Past ``HEARTBEATS_PER_S × heartbeat_s`` machines (1,000 with the defaults) each agent is
told to report less often, and silence is judged against the longer interval."""


def heartbeat_s(d: DaemonSettings, machines: int) -> float:
    """How often each of ``machines`` agents is asked to report while busy: the config's
    ``heartbeat_s``, stretched past ``stretch_from`` machines in proportion to them (so
    the fleet sends at most ``HEARTBEATS_PER_S``), by the same rule as the task groups'
    horizon (``core.groups.stretched``)."""
    return stretched(d.heartbeat_s, stretch_from(d), machines)


def stretch_from(d: DaemonSettings) -> float:
    """The fleet past which the heartbeat stretches, in proportion to the machines: the
    task groups' horizon stretches with it (``ControllerSettings.group_fleet``)."""
    return HEARTBEATS_PER_S * d.heartbeat_s


def report_s(d: DaemonSettings, machines: int) -> float:
    """How long an agent of a fleet of ``machines`` with queued tasks holds a result before
    it sends it: the config's ``report_s`` while the heartbeat is the config's, and the
    heartbeat once it stretches. A busy agent's results then ride on its heartbeats, and
    its groups hold as much work (``core.groups.stretched``), so an agent sends about one
    request a heartbeat whatever its tasks' length: at 5,000 agents of 2 s tasks, one
    request every 10 s carrying five results instead of one a task (2,500 requests a
    second, each a poll through the main loop; issue 36 measured 0.39 requests a task
    and 44 % less CPU). Results come in up to a heartbeat late; the agent measures each
    run's time itself."""
    if machines <= stretch_from(d):
        return d.report_s
    return max(d.report_s, heartbeat_s(d, machines))


def lost_after_s(d: DaemonSettings, machines: int) -> float:
    """How long an agent of a fleet of ``machines`` may be silent: the config's
    ``lost_after_s``, stretched as the heartbeat is (the same number of missed reports)."""
    return stretched(d.lost_after_s, stretch_from(d), machines)


def describe_s(d: DaemonSettings, every_s: float, machines: int) -> float:
    """How often a fleet of ``machines`` is described to find the machines that ended by
    themselves: the provider's ``status_polling_interval`` (``every_s``), stretched as the
    heartbeat is. A describe lists every machine watched, so its cost grows with the
    fleet: at 10,000 machines a look each second cost the daemon about 30 µs a task at
    1,000 tasks a second (issue 36), and a cloud's API would count ten times the calls.
    Stretched, it costs the same per machine at any fleet, and an ended machine is still
    found long before its silence would find it (``lost_after_s`` stretches too)."""
    return stretched(every_s, stretch_from(d), machines)


SCALED_LEASE_FLOOR_S = 2.0
"""A time-scaled run's leases end at least this many real seconds after the agent asks
again: at 360x a release margin of a tenth of an hour is one real second, and a daemon
stalled longer than that on a loaded host let agents of machines it kept lose their
lease (local agents only: no money is real there, and the daemon, not the agent, decides
when a machine's paid time ends)."""


def lost_contact(
    alive: Sequence[Machine],
    since: Mapping[str, float],
    last_seen: Mapping[str, float],
    mono: float,
    cfg: RunConfig,
    queued: Container[str] = (),
    hearing: Hearing | None = None,
) -> list[MachineLost]:
    """Machines whose agents went silent, or never reported in, by monotonic time ``mono``.

    ``since``: when each machine the daemon tracks was launched or adopted; ``last_seen``:
    each agent's last request. A machine booting may take its type's boot time first;
    one its provider still queues then (``queued``) never started, which says nothing
    of its type (``giveup``). Silence is counted only while the daemon could hear
    (``hearing``): a daemon that stalled loses no machine for its own deafness.
    """
    limit = lost_after_s(cfg.daemon, len(alive))
    deaf = hearing.deaf_s if hearing is not None else _never_deaf
    events: list[MachineLost] = []
    for m in alive:
        start = since.get(m.id)
        if start is None:
            continue
        if m.state is MachineState.READY or m.id in last_seen:  # (a set-up in progress)
            heard = max(start, last_seen.get(m.id, 0.0))
            silent = mono - heard
            if silent > limit:
                silent -= deaf(heard, mono)
                if silent > limit:
                    events.append(MachineLost(m.id, f"no contact for {silent:.0f}s"))
        elif mono - start > m.type.boot_s / cfg.time_scale + limit:
            waited = mono - start - deaf(start, mono)
            if waited <= m.type.boot_s / cfg.time_scale + limit:
                continue
            if m.id in queued:
                events.append(MachineLost(m.id, f"{QUEUED_REASON}: queued for {waited:.0f}s"))
            else:
                events.append(MachineLost(m.id, UNSEEN_REASON))
    return events


def _never_deaf(start: float, end: float) -> float:
    return 0.0


def heard_since(
    alive: Sequence[Machine], since: Mapping[str, float], last_seen: Mapping[str, float]
) -> float | None:
    """The oldest time a health check of ``alive`` asks about (``Hearing.forget_before``):
    the earliest of their last contacts; None if none is tracked."""
    times = [max(since[m.id], last_seen.get(m.id, 0.0)) for m in alive if m.id in since]
    return min(times) if times else None


def _output_line(m: Machine, r: AgentResult) -> str:
    """A result's line of the run's outputs file (``runtime_s``: real seconds)."""
    line = {
        "task": r.task,
        "machine": m.id,
        "run": r.run,
        "exit_code": r.exit_code,
        "runtime_s": r.runtime_s,
        "error": r.error,
        "stdout": r.stdout,
        "stderr": r.stderr,
    }
    return wire.dumps_text(line)
