"""Local machines: each machine is a worker-agent process on this host.

A launch starts ``count`` agents (``bootstrap/agent.py``) in their own sessions, so a
Ctrl-C at the terminal reaches the daemon, which releases them, and not the agents
directly. Each agent carries the run's tags in its environment
(``AUTOSCALER_RUN``, ``AUTOSCALER_LAUNCH``, ``AUTOSCALER_MACHINE``): that is how a
restarted daemon finds the machines of its run, as a cloud provider finds instances by
tag. Machine ids are ``<type>-<token>-<i>``, so a repeated launch of a token starts only
the machines of it that are not alive: ``launch`` is idempotent per token.

A machine boots for its type's boot time (the agent waits that long, time-scaled,
before it first reports). Its paid time is enforced by the agent's lease.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from autoscaler.bootstrap.agent_start import TOKEN_ENV, AgentSettings, compiled_agent
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
from autoscaler.providers.ended import because
from autoscaler.providers.kind import (
    ProviderKind,
    RunContext,
    Sweeper,
    TaggedMachine,
    agent_settings,
)

if TYPE_CHECKING:
    from autoscaler.config.schema import Platform

RUN_TAG = "AUTOSCALER_RUN"
LAUNCH_TAG = "AUTOSCALER_LAUNCH"
MACHINE_TAG = "AUTOSCALER_MACHINE"
GRACE_S = 2.0
"""How long a terminated agent has to end its task before it is killed."""


@dataclass
class _Agent:
    id: str
    type: str
    token: str
    pid: int
    launched_at: float
    proc: subprocess.Popen[bytes] | None  # None for an agent adopted after a restart
    ended: bool = False  # terminated by us


def _environ(pid: int) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    out = {}
    for item in raw.split(b"\0"):
        key, sep, value = item.partition(b"=")
        if sep and key.startswith(b"AUTOSCALER_") and key != TOKEN_ENV.encode():
            out[key.decode()] = value.decode(errors="replace")
    return out


def _alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


def tagged_processes() -> list[tuple[int, dict[str, str]]]:
    """Every live agent process on this host of any run: (pid, tags)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        tags = _environ(pid)
        if RUN_TAG in tags and MACHINE_TAG in tags and _alive(pid):
            out.append((pid, tags))
    return out


def run_processes(run_id: str) -> list[tuple[int, dict[str, str]]]:
    """Every live process on this host that carries ``run_id``'s tag: (pid, tags)."""
    return [(pid, tags) for pid, tags in tagged_processes() if tags.get(RUN_TAG) == run_id]


def terminate_tagged(pids: Sequence[int]) -> list[str]:
    """SIGTERM the agents ``pids`` (only processes that still carry a run tag)."""
    done = []
    for pid in pids:
        if RUN_TAG in _environ(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
                done.append(str(pid))
    return done


class LocalProvider:
    """Agent processes as machines. Boot time and speed per type come from the config."""

    def __init__(
        self,
        capabilities: Capabilities,
        run_id: str,
        agents: AgentSettings,
        log_dir: Path,
        clock: Callable[[], float],
        time_scale: float = 1.0,
    ):
        self._capabilities = capabilities
        self.run_id = run_id
        self.settings = agents
        self.log_dir = log_dir
        self._clock = clock
        self.time_scale = time_scale
        self._agents: dict[str, _Agent] = {}
        # The daemon calls a provider from several threads (a launch beside a describe):
        # the agents' table is read and changed under this lock, and a launch's count
        # check and its spawns are one step (two launches cannot both pass the maximum).
        self._lock = threading.RLock()

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

    status_polling_interval = 0.25
    """A process list is cheap."""

    # --- the provider protocol ------------------------------------------------------

    def launch(
        self,
        type: str,
        count: int,
        token: str,
        tags: Mapping[str, str],
        *,
        avoid_zones: Collection[str] = (),
    ) -> list[MachineRecord]:
        ids = machine_ids(type, token, count)
        with self._lock:
            self._adopt()
            missing = [mid for mid in ids if not self._running(mid)]
            alive = sum(1 for a in self._agents.values() if a.type == type and self._running(a.id))
            check_launch(self._capabilities, type, alive, len(missing))
            for mid in missing:
                self._spawn(mid, type, token)
            return [
                MachineRecord(mid, type, token, self._agents[mid].launched_at)
                for mid in ids
                if mid in self._agents
            ]

    def describe(self, ids: Sequence[str] | None = None) -> list[MachineStatus]:
        """Machines of this run (all of them, or ``ids``) as their processes stand.

        Asked for all, it also looks for agents of the run that an earlier daemon
        started (by their tags), as a cloud provider lists instances by tag.
        """
        with self._lock:
            if ids is None:
                self._adopt()
            chosen = list(self._agents) if ids is None else list(ids)
            out = []
            for mid in chosen:
                agent = self._agents.get(mid)
                if agent is None:
                    continue
                if self._running(mid):
                    out.append(MachineStatus(mid, agent.type, ProviderState.RUNNING))
                else:
                    why = None if agent.ended else self._why(agent)
                    out.append(MachineStatus(mid, agent.type, ProviderState.TERMINATED, reason=why))
            return out

    def _why(self, agent: _Agent) -> str:
        """Why an agent we did not end ended: its exit status, its log's tail."""
        code = None if agent.proc is None else agent.proc.returncode
        said = f"agent process {agent.pid} exited" + ("" if code is None else f" with {code}")
        return because(said, self.log_dir / f"{agent.id}.log")

    def terminate(self, ids: Sequence[str], *, now: bool = False) -> list[str]:
        """SIGTERM each agent, SIGKILL what is left after ``GRACE_S`` (at once if ``now``);
        wait for the ends."""
        with self._lock:
            targets = [self._agents[mid] for mid in ids if mid in self._agents]
        for agent in targets:
            agent.ended = True
        for agent in targets:
            if self._running(agent.id):
                self._signal(agent, signal.SIGTERM)
        deadline = time.monotonic() + (0.0 if now else GRACE_S)
        for agent in targets:
            while self._running(agent.id) and time.monotonic() < deadline:
                time.sleep(0.01)
            if self._running(agent.id):
                self._signal(agent, signal.SIGKILL)
        for agent in targets:
            while self._running(agent.id):
                time.sleep(0.01)
        return [a.id for a in targets]

    # --- processes ----------------------------------------------------------------------

    def _running(self, mid: str) -> bool:
        agent = self._agents.get(mid)
        if agent is None:
            return False
        if agent.proc is not None:
            return agent.proc.poll() is None
        return _alive(agent.pid) and _environ(agent.pid).get(MACHINE_TAG) == mid

    def _signal(self, agent: _Agent, sig: signal.Signals) -> None:
        if agent.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                agent.proc.send_signal(sig)
        elif _environ(agent.pid).get(MACHINE_TAG) == agent.id:  # never a recycled pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(agent.pid, sig)

    def _adopt(self) -> None:
        """Take over this run's agents started by an earlier daemon (found by tag)."""
        known = {a.pid for a in self._agents.values()}
        for pid, tags in run_processes(self.run_id):
            mid = tags[MACHINE_TAG]
            if pid in known or (mid in self._agents and self._running(mid)):
                continue
            mtype = split_machine_id(mid)[0]
            started = _start_time(pid)
            launched = self._clock() - (started or 0.0) * self.time_scale
            self._agents[mid] = _Agent(mid, mtype, tags.get(LAUNCH_TAG, ""), pid, launched, None)

    def _spawn(self, mid: str, type: str, token: str) -> None:
        boot = self._capabilities.boot_estimate_s.get(type, 0.0) / self.time_scale
        command = self.settings.command(mid, ready_at=time.time() + boot, type=type)
        env = {
            **os.environ,
            **command.env,
            RUN_TAG: self.run_id,
            LAUNCH_TAG: token,
            MACHINE_TAG: mid,
        }
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{mid}.log").open("ab") as log:
            proc = subprocess.Popen(
                command.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                env=env,
                start_new_session=True,
                close_fds=True,
            )
        self._agents[mid] = _Agent(mid, type, token, proc.pid, self._clock(), proc)


def _start_time(pid: int) -> float | None:
    """Seconds since ``pid`` started, from /proc (for agents adopted after a restart)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError):
        return None
    fields = stat.rpartition(")")[2].split()
    ticks = int(fields[19])  # field 22, starttime, counted after the command name
    return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))


# --- the kind -------------------------------------------------------------------------------


def build(cfg: Platform, ctx: RunContext) -> Provider:
    """The local provider of a real run of ``cfg``."""
    settings = agent_settings(cfg, ctx, python=cfg.local.python, workdir=None)
    settings = replace(settings, agent=compiled_agent(ctx.run_dir / "agents", settings.python))
    caps = KIND.capabilities(cfg, ctx.billing)
    return LocalProvider(
        caps, ctx.run_id, settings, ctx.run_dir / "agents", ctx.clock, cfg.time_scale
    )


def tagged_machines() -> list[TaggedMachine]:
    """Every agent process of ours on this host, of any run."""
    return [
        TaggedMachine(str(pid), tags[RUN_TAG], split_machine_id(tags[MACHINE_TAG])[0], "running")
        for pid, tags in tagged_processes()
    ]


def sweeper(cfg: Platform) -> Sweeper:
    return Sweeper(tagged_machines, lambda ids: terminate_tagged([int(i) for i in ids]))


KIND = ProviderKind("local", build=build, sweeper=sweeper)
