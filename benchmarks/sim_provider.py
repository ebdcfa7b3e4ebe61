"""A provider whose machines are simulated agents (``benchmarks/sim_agents.py``).

For the real daemon at thousands of machines on one host: a machine is an agent in a
load-generator process that holds up to ``per_process`` of them, not a process of its
own as with ``providers/local.py``. A launch tells the generators which machine ids now
exist (``start <id>`` on a generator's standard input, a new generator once the others
are full; with ``ramp_s``, a generator starts them over that long, as a big launch's
machines come up over time); a terminate tells them to end those agents (``stop
<id>``). The daemon gets it through ``Daemon(provider_build=...)``: a benchmark's
provider, not a kind of the product (a config still says ``provider: local``, for its
time scale).

Generators end when their input closes: ``close`` (or this process's end, however it
ends) stops them all. Their pids are appended to ``pids_file`` as they start, so whoever
started this process can end any that outlive it, by pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING

from autoscaler.bootstrap.agent_start import TOKEN_ENV
from autoscaler.providers.base import (
    Capabilities,
    MachineRecord,
    MachineStatus,
    ProviderState,
    check_launch,
    machine_ids,
)
from autoscaler.providers.kind import RunContext
from autoscaler.providers.local import KIND as LOCAL

if TYPE_CHECKING:
    from collections.abc import Callable

    from autoscaler.config.schema import Platform

REPO = Path(__file__).resolve().parent.parent
STOP_WAIT_S = 15.0


@dataclass
class Generator:
    """One load-generator process and the machines it holds."""

    index: int
    proc: subprocess.Popen[str]
    stats: Path
    machines: set[str] = field(default_factory=set)

    @property
    def stdin(self) -> IO[str]:
        assert self.proc.stdin is not None
        return self.proc.stdin


class SimAgentsProvider:
    """Machines as simulated agents, ``per_process`` to a generator process."""

    status_polling_interval = 1.0

    def __init__(
        self,
        capabilities: Capabilities,
        ctx: RunContext,
        per_process: int,
        out_dir: Path,
        heartbeat_s: float,
        orphan_after_s: float,
        clock: Callable[[], float],
        ramp_s: float = 0.0,
    ) -> None:
        self._capabilities = capabilities
        self.ctx = ctx
        self.per_process = per_process
        self.out_dir = out_dir
        self.heartbeat_s = heartbeat_s
        self.orphan_after_s = orphan_after_s
        self._clock = clock
        self.ramp_s = ramp_s  # a generator starts its agents over this long (0: at once)
        self._lock = threading.Lock()
        self.generators: list[Generator] = []
        self._where: dict[str, Generator] = {}  # machine -> its generator
        self._types: dict[str, str] = {}  # machine -> type
        self._ended: set[str] = set()
        self.pids_file = out_dir / "generators.pids"

    @property
    def capabilities(self) -> Capabilities:
        return self._capabilities

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
            new = [mid for mid in ids if mid not in self._where]
            alive = sum(1 for m, t in self._types.items() if t == type and m not in self._ended)
            check_launch(self._capabilities, type, alive, len(new))
            now = self._clock()
            for mid in new:
                gen = self._room()
                gen.machines.add(mid)
                self._where[mid] = gen
                self._types[mid] = type
                gen.stdin.write(f"start {mid}\n")
            for gen in self.generators:
                gen.stdin.flush()
        return [MachineRecord(mid, type, token, now) for mid in ids]

    def describe(self, ids: Sequence[str] | None = None) -> list[MachineStatus]:
        with self._lock:
            chosen = list(self._where) if ids is None else [i for i in ids if i in self._where]
            gens = {id(g): g for g in self._where.values()}  # each generator asked once,
            dead = {k for k, g in gens.items() if g.proc.poll() is not None}  # not each agent
            where, ended, types = self._where, self._ended, self._types
            return [
                MachineStatus(
                    mid,
                    types[mid],
                    ProviderState.TERMINATED
                    if mid in ended or id(where[mid]) in dead
                    else ProviderState.RUNNING,
                )
                for mid in chosen
            ]

    def terminate(self, ids: Sequence[str], *, now: bool = False) -> list[str]:
        done = []
        with self._lock:
            touched = set()
            for mid in ids:
                gen = self._where.get(mid)
                if gen is None:
                    continue
                if mid not in self._ended and gen.proc.poll() is None:
                    with contextlib.suppress(BrokenPipeError):
                        gen.stdin.write(f"stop {mid}\n")
                    touched.add(gen.index)
                self._ended.add(mid)
                done.append(mid)
            for gen in self.generators:
                if gen.index in touched:
                    with contextlib.suppress(BrokenPipeError):
                        gen.stdin.flush()
        return done

    # --- the generators ------------------------------------------------------------------

    def _room(self) -> Generator:
        for gen in self.generators:
            if len(gen.machines) < self.per_process and gen.proc.poll() is None:
                return gen
        return self._spawn()

    def _spawn(self) -> Generator:
        index = len(self.generators)
        stats = self.out_dir / f"generator-{index}.json"
        self.out_dir.mkdir(parents=True, exist_ok=True)
        argv = [
            sys.executable,
            "-m",
            "benchmarks.sim_agents",
            "--url",
            self.ctx.url,
            "--stats",
            str(stats),
            "--heartbeat-s",
            f"{self.heartbeat_s:g}",
            "--orphan-after-s",
            f"{self.orphan_after_s:g}",
            "--start-rate",
            f"{self.per_process / self.ramp_s if self.ramp_s > 0 else 0:g}",
        ]
        with (self.out_dir / f"generator-{index}.log").open("ab") as log:
            proc = subprocess.Popen(
                argv,
                cwd=REPO,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env={**os.environ, TOKEN_ENV: self.ctx.token},
                text=True,
                start_new_session=True,  # a Ctrl-C reaches the daemon, which stops them
            )
        with self.pids_file.open("a", encoding="ascii") as f:
            f.write(f"{proc.pid}\n")
        gen = Generator(index, proc, stats)
        self.generators.append(gen)
        threading.Thread(target=self._read_ends, args=(gen,), daemon=True).start()
        return gen

    def _read_ends(self, gen: Generator) -> None:
        """``ended <machine> <code>``: an agent ended by itself (released, lease...)."""
        assert gen.proc.stdout is not None
        for line in gen.proc.stdout:
            verb, _, rest = line.strip().partition(" ")
            if verb == "ended":
                with self._lock:
                    self._ended.add(rest.split(" ")[0])

    def pids(self) -> list[int]:
        return [g.proc.pid for g in self.generators]

    def close(self) -> list[dict[str, object]]:
        """End every generator (their input closes) and return their figures."""
        for gen in self.generators:
            with contextlib.suppress(BrokenPipeError, OSError):
                gen.stdin.close()
        figures = []
        for gen in self.generators:
            try:
                gen.proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                gen.proc.kill()
                gen.proc.wait()
            with contextlib.suppress(OSError, ValueError):
                figures.append(json.loads(gen.stats.read_text(encoding="utf-8")))
        return figures


def builder(
    per_process: int, out_dir: Path, ramp_s: float = 0.0
) -> Callable[[Platform, RunContext], SimAgentsProvider]:
    """A ``provider_build`` for ``Daemon``: simulated agents, ``per_process`` a process,
    a full generator's agents coming up over ``ramp_s`` seconds."""

    def build(cfg: Platform, ctx: RunContext) -> SimAgentsProvider:
        caps = LOCAL.capabilities(cfg, ctx.billing)
        d = cfg.daemon
        return SimAgentsProvider(
            caps, ctx, per_process, out_dir, d.heartbeat_s, d.orphan_after_s, ctx.clock, ramp_s
        )

    return build
