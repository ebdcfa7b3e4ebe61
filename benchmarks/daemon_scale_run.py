"""One measured run of the real daemon on simulated agents (a row of ``daemon_scale``).

Run in a process of its own, so that its CPU time and peak memory are the daemon's::

    python -m benchmarks.daemon_scale_run SPEC.json

``SPEC.json`` says the row (``Spec``); the figures go to ``<out>/figures.json``. The
daemon (``autoscaler.run.daemon.Daemon``, the one ``autoscaler run`` uses) runs in this
process with its signal handlers (SIGTERM or SIGINT release every machine and end the
run); its machines are simulated agents in load-generator processes
(``benchmarks/sim_provider.py``), ended with it whatever happens.

What it measures, besides what the journal tells afterwards: this process's CPU time
(``RUSAGE_SELF``: the controller, the dispatcher's threads, the journal, start-up,
shutdown and report), the main thread's, its resident memory, and the generators' CPU
(``/proc/<pid>/stat``), sampled by the daemon's progress hook (every 0.2 s or so). With
``profile_s`` it runs ``py-spy record`` on itself for that long from 10 % of the bag done
(the stack of the thread that holds the GIL, 50 a second, without pausing it: what the
interpreter is busy with; C code that lets go of the GIL, such as SQLite's writes, is not
seen).
"""

from __future__ import annotations

import contextlib
import cProfile
import gc
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.config.bag import expand_bag
from autoscaler.config.schema import RunConfig
from autoscaler.core.state import RunState
from autoscaler.run.daemon import Daemon
from autoscaler.run.rundir import RunFiles
from benchmarks.dispatch import host_ticks, proc_cpu_s
from benchmarks.sim_provider import SimAgentsProvider, builder

PAGE = os.sysconf("SC_PAGE_SIZE")
PROFILE_RATE = 50
PROFILE_FROM = 0.10  # of the bag done


@dataclass(frozen=True)
class Spec:
    agents: int
    tasks: int
    task_s: float  # mean synthetic task time (real seconds: time scale 1)
    per_process: int  # simulated agents per load-generator process
    out: str  # this run's directory
    heartbeat_s: float = 2.0
    slots: int = 1
    profile_s: float = 0.0  # py-spy for this long (0: not)
    ramp_s: float = 0.0  # the agents come up over this long (0: all at once)
    switch_s: float = 0.0  # sys.setswitchinterval of the daemon's process (0: Python's)
    main_profile: bool = False  # cProfile the main thread (its CPU time) into main.prof
    # The main loop stalls on purpose for ``stall_s`` once ``stall_at_done`` tasks are done
    # (its progress hook sleeps; the dispatcher's threads go on): a daemon's own stall.
    stall_s: float = 0.0
    stall_at_done: int = 0


def time_scale(task_s: float) -> float:
    """1 for tasks of a second or more; else so that they last 10 emulated seconds (the
    emulator draws no runtime under one second)."""
    return 1.0 if task_s >= 1 else 10.0 / task_s


def run_config(spec: Spec, bag_tasks: int | None = None) -> RunConfig:
    """Round robin on one type of ``agents`` machines, a budget that never binds, one
    hour's ATU, synthetic tasks of ``task_s`` real seconds ± 10 % (normal)."""
    scale = time_scale(spec.task_s)
    mean = spec.task_s * scale
    return RunConfig.model_validate(
        {
            "name": "daemon-scale",
            "provider": "local",
            "policy": "round_robin",
            "machine_types": [
                {
                    "name": "w",
                    "price": 1,
                    "max_count": spec.agents,
                    "boot_s": 0,
                    "slots": spec.slots,
                }
            ],
            "billing": {"mode": "fixed", "atu_s": "1h"},
            "constraint": {"budget": 1000.0 * spec.agents},
            "bag": {"synthetic": bag_tasks or spec.tasks},
            "tail_replication": False,
            "emulator": {
                "seed": 0,
                "runtime": {"dist": "normal", "mean_s": mean, "sd_s": mean / 10},
            },
            "local": {"time_scale": scale},
            "daemon": {"heartbeat_s": spec.heartbeat_s},
        }
    )


def rss_mb() -> float:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * PAGE / 1e6


def self_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def run(spec: Spec) -> dict[str, Any]:
    out = Path(spec.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = run_config(spec)
    tasks = expand_bag(cfg)
    run_id = f"daemon-scale-{spec.agents}-{os.getpid()}"
    files = RunFiles.create(cfg, tasks, out / "run", run_id, seed=0)
    samples: list[list[float]] = []  # mono, done, cpu, main cpu, rss, gens' cpu, busy, total, sys
    profiler: list[subprocess.Popen[bytes]] = []
    daemon: Daemon | None = None

    def hook(state: RunState, estimate: float | None) -> None:
        provider = daemon.provider if daemon is not None else None
        pids = provider.pids() if isinstance(provider, SimAgentsProvider) else []
        busy, total = host_ticks()
        samples.append(
            [
                time.monotonic(),
                state.tasks.done,
                self_cpu_s(),
                time.thread_time(),
                rss_mb(),
                proc_cpu_s(pids),
                busy,
                total,
                resource.getrusage(resource.RUSAGE_SELF).ru_stime,
            ]
        )
        if spec.profile_s > 0 and not profiler and state.tasks.done >= PROFILE_FROM * spec.tasks:
            profiler.append(start_profile(out, spec.profile_s))
        if spec.stall_s > 0 and "stalled" not in figures and state.tasks.done >= spec.stall_at_done:
            figures["stalled"] = [time.monotonic(), state.tasks.done]
            time.sleep(spec.stall_s)

    pauses: list[float] = []  # the garbage collector's full collections, seconds each
    began: list[float] = []

    def collected(phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            began[:] = [time.perf_counter()]
        elif began:
            pauses.append(time.perf_counter() - began[0])

    gc.callbacks.append(collected)
    if spec.switch_s > 0:
        sys.setswitchinterval(spec.switch_s)
    cpu0, main0, wall0 = self_cpu_s(), time.thread_time(), time.time()
    sys0 = resource.getrusage(resource.RUSAGE_SELF).ru_stime
    figures: dict[str, Any] = {"spec": asdict(spec), "run_dir": str(files.run_dir)}
    daemon = Daemon(
        files, progress=hook, provider_build=builder(spec.per_process, out, spec.ramp_s)
    )
    main_profiler = cProfile.Profile(time.thread_time) if spec.main_profile else None
    try:
        if main_profiler is not None:
            main_profiler.enable()
        try:
            outcome = daemon.run()
        finally:
            if main_profiler is not None:
                main_profiler.disable()
                main_profiler.dump_stats(str(out / "main.prof"))
        figures["stop_reason"] = outcome.report.stop_reason
    finally:
        figures["cpu_s"] = self_cpu_s() - cpu0
        figures["main_cpu_s"] = time.thread_time() - main0
        figures["sys_cpu_s"] = resource.getrusage(resource.RUSAGE_SELF).ru_stime - sys0
        figures["wall_s"] = time.time() - wall0
        figures["start_wall"] = files.start_wall
        figures["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3
        figures["polls"] = daemon.dispatcher.polls if hasattr(daemon, "dispatcher") else 0
        provider = getattr(daemon, "provider", None)
        if isinstance(provider, SimAgentsProvider):
            figures["generators"] = provider.close()
        for p in profiler:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(spec.profile_s + 30)
            if p.poll() is None:
                p.kill()
                p.wait()
        gc.callbacks.remove(collected)
        figures["gc_full"] = [len(pauses), sum(pauses), max(pauses, default=0.0)]
        figures["samples"] = samples
        (out / "figures.json").write_text(json.dumps(figures), encoding="utf-8")
    return figures


def py_spy() -> str | None:
    """The ``py-spy`` program: on the PATH or beside this Python; None without one."""
    beside = Path(sys.executable).parent / "py-spy"
    return shutil.which("py-spy") or (str(beside) if beside.exists() else None)


def start_profile(out: Path, seconds: float) -> subprocess.Popen[bytes]:
    """``py-spy record`` of this process (raw stacks to ``<out>/profile.txt``)."""
    spy = py_spy()
    if spy is None:
        raise RuntimeError("py-spy is not installed")
    argv = [spy, "record", "--pid", str(os.getpid()), "--duration", f"{seconds:.0f}"]
    argv += ["--rate", str(PROFILE_RATE), "--nonblocking", "--gil", "--format", "raw"]
    argv += ["-o", str(out / "profile.txt")]
    with (out / "profile.log").open("ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    with (out / "generators.pids").open("a", encoding="ascii") as f:
        f.write(f"{proc.pid}\n")
    return proc


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m benchmarks.daemon_scale_run SPEC.json", file=sys.stderr)
        return 2
    spec = Spec(**json.loads(Path(args[0]).read_text(encoding="utf-8")))
    run(spec)
    return 0


if __name__ == "__main__":
    sys.exit(main())
