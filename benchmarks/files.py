"""Task files (issue 23 §4): output collection's speed, and what staging costs a task.

**Throughput.** One file of each size goes from a worker's directory to the run
directory: by the agent's own upload code (``bootstrap/agent.py``, ``Agent._store``: a
``POST /v1/files``, then a ``PUT`` streamed in 1 MiB blocks) to the daemon's real
dispatcher and staging (``run/staging.py``: written as ``.part``, renamed when whole),
straight over loopback and through an SSH tunnel (``ssh -L`` through a real sshd on
loopback, as EC2 agents reach the daemon); against ``rsync`` over SSH to the same sshd
(its wall time, the SSH handshake included, as a user would copy a result back). Each
cell is the median of ``--repeats``; the agent's time is measured inside its process
(interpreter start-up left out).

**Per-task overhead.** The real daemon and a local agent (one machine, tasks one after
another) run ``--tasks`` tasks that copy an input of each size to an output of that
size (``cat in.bin > out.bin``: the input fetched over HTTP, the output uploaded,
checked and committed) against the same number of tasks ``true`` with no files; the
time per task is the journal's span from the first task done to the last, over the
tasks between them.

Run from the repository root (needs ``rsync``, ``ssh`` and ``sshd``)::

    .venv/bin/python -m benchmarks.files [--sizes-mb 10,100,500] [--repeats 3] [--tasks 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # ``python benchmarks/files.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import structlog
import yaml

from autoscaler.bootstrap.agent_start import AGENT
from autoscaler.config.schema import RunConfig
from autoscaler.core.model import TaskSpec
from autoscaler.core.task_files import FileSpec
from autoscaler.run.dispatch import Dispatcher
from autoscaler.run.staging import Staging
from benchmarks.bats_scenarios import library_state, render_table
from tests.integration.daemon_helpers import journal_rows, run_in_process
from tests.integration.services import free_port
from tests.integration.sshd import SshdFactory, SshServer

TOKEN = "files-bench-token"
SSH_OPTIONS = ["-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null"]
SSH_OPTIONS += ["-o", "LogLevel=ERROR", "-o", "BatchMode=yes"]

# The agent's upload, in its own process: its module from the file shipped to machines.
UPLOAD = """
import importlib.util, json, sys, time
spec = importlib.util.spec_from_file_location("agent", sys.argv[1])
agent = sys.modules["agent"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(agent)
port, cwd, run, size = int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
config = agent.Config("http", "127.0.0.1", port, "/v1/poll", "bench", cwd, 2.0, 60.0, 0.0, 0)
a = agent.Agent(config, sys.argv[6])
task = agent.Task(run, 0, "true", None, {}, None, None, {"outputs": ["*.bin"]})
started = time.perf_counter()
a._store(task, cwd, [["out.bin", size]])
print(json.dumps(time.perf_counter() - started))
"""


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def make_file(path: Path, size: int) -> None:
    """``size`` bytes of data that does not compress (rsync and SSH compress nothing)."""
    block = os.urandom(1 << 20)
    with path.open("wb") as out:
        left = size
        while left > 0:
            out.write(block[: min(left, len(block))])
            left -= len(block)


def wait_port(port: int) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on port {port}")


class Daemon:
    """The daemon's dispatcher and staging, as a run with one file task has them."""

    def __init__(self, run_dir: Path) -> None:
        cfg = RunConfig.model_validate(
            {
                "bag": {"command": "true"},
                "constraint": {"budget": 1},
                "machine_types": [{"name": "a", "price": 1, "max_count": 1}],
                "provider": "local",
            }
        )
        spec = FileSpec((), ("*.bin",), 1 << 40, None)
        log = structlog.wrap_logger(structlog.ReturnLogger())
        self.staging = Staging(cfg, run_dir, [TaskSpec(0, "true", files=spec)], log)
        self.spec = spec
        self.dispatcher = Dispatcher(TOKEN, __import__("queue").SimpleQueue())
        self.dispatcher.files = self.staging
        self.dispatcher.start()
        self.run = 0

    def upload(self, port: int, cwd: Path, size: int) -> float:
        """The agent's upload of ``cwd/out.bin`` to ``port``; its seconds."""
        self.run += 1
        self.staging.payload(self.spec, 0, "bench", self.run, False)
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                UPLOAD,
                str(AGENT),
                str(port),
                str(cwd),
                str(self.run),
                *[str(size), TOKEN],
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"the agent's upload failed: {done.stderr[-2000:]}")
        staged = self.staging.root / ".attempts" / f"0.bench-{self.run}" / "out.bin"
        assert staged.stat().st_size == size, "the upload did not arrive whole"
        staged.unlink()
        return float(json.loads(done.stdout))


def ssh_command(server: SshServer) -> list[str]:
    return ["ssh", "-i", str(server.client_key), "-p", str(server.port), *SSH_OPTIONS]


def handshake_s(server: SshServer) -> float:
    """An SSH login that runs ``true``: what every rsync pays before its first byte."""
    started = time.perf_counter()
    subprocess.run(
        [*ssh_command(server), f"{server.user}@127.0.0.1", "true"],
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def rsync_s(server: SshServer, source: Path, target: Path) -> float:
    ssh = " ".join(ssh_command(server))
    started = time.perf_counter()
    subprocess.run(
        ["rsync", "-a", "-e", ssh, str(source), f"{server.user}@127.0.0.1:{target}/"],
        check=True,
        capture_output=True,
    )
    seconds = time.perf_counter() - started
    (target / source.name).unlink()
    return seconds


def throughput(sizes_mb: list[int], repeats: int, tmp: Path) -> str:
    (tmp / "ssh").mkdir()
    factory = SshdFactory(tmp / "ssh")
    server = factory.start()
    daemon = Daemon(tmp / "run")
    port = daemon.dispatcher.address[1]
    local_port = free_port()
    tunnel = subprocess.Popen(
        [
            *["ssh", "-N", "-o", "ExitOnForwardFailure=yes", "-i", str(server.client_key)],
            *["-p", str(server.port), *SSH_OPTIONS, "-L", f"{local_port}:127.0.0.1:{port}"],
            f"{server.user}@127.0.0.1",
        ],
        stdin=subprocess.DEVNULL,
    )
    rows = []
    try:
        wait_port(local_port)
        (tmp / "dest").mkdir()
        for mb in sizes_mb:
            size = mb * 1_000_000
            work = tmp / f"work-{mb}"
            work.mkdir()
            make_file(work / "out.bin", size)
            direct, tunnelled, rsynced, login = [], [], [], []
            for i in range(repeats):
                say(f"  {mb} MB, repeat {i + 1}/{repeats}")
                direct.append(daemon.upload(port, work, size))
                tunnelled.append(daemon.upload(local_port, work, size))
                rsynced.append(rsync_s(server, work / "out.bin", tmp / "dest"))
                login.append(handshake_s(server))
            cells = [statistics.median(x) for x in (direct, tunnelled, rsynced)]
            net = max(cells[2] - statistics.median(login), 1e-6)
            rows.append(
                [f"{mb} MB", str(repeats)]
                + [f"{mb / s:.0f}" for s in (*cells, net)]
                + [f"{cells[1] / net:.2f}"]
            )
            shutil.rmtree(work)
    finally:
        tunnel.terminate()
        tunnel.wait()
        daemon.dispatcher.close()
        factory.close()
    header = ["size", "repeats", "agent MB/s", "agent via ssh -L", "rsync over ssh"]
    header += ["rsync - login", "tunnel s / rsync s"]
    return render_table(header, rows)


def run_config(tmp: Path, name: str, tasks: int, size: int | None) -> Path:
    bag: dict[str, Any] = {"command": "true" if size is None else "cat in.bin > out.bin"}
    if size is not None:
        make_file(tmp / f"in-{name}.bin", size)
        bag["files"] = {
            "inputs": [{"path": f"in-{name}.bin", "as": "in.bin"}],
            "outputs": ["out.bin"],
            "max_bytes": "1GB",
        }
    data = {
        "name": f"files-{name}",
        "bag": {**bag, "command": bag["command"] + " # {i}", "sweep": {"i": list(range(tasks))}},
        "constraint": {"budget": 10},
        "machine_types": [{"name": "a", "price": 1, "max_count": 1, "boot_s": 1}],
        "billing": {"mode": "fixed", "atu_s": "1h"},
        "provider": "local",
        "tail_replication": False,
        "daemon": {"heartbeat_s": 0.5, "lost_after_s": 60, "orphan_after_s": 120},
        "emulator": {"runtime": {"dist": "uniform", "low_s": 1, "high_s": 2}},
    }
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def per_task_s(run_dir: Path) -> float:
    """From the first task handed out to the last done, per task (results come back in
    batches: the span between results would miss the batching)."""
    rows = journal_rows(run_dir)
    first = min(t for t, kind, _ in rows if kind in ("Assign", "AssignGroup"))
    done = [t for t, kind, _ in rows if kind == "TaskDone"]
    return (max(done) - first) / len(done)


def overhead(sizes: list[tuple[str, int]], tasks: int, tmp: Path) -> str:
    rows = []
    say("  no files")
    base = per_task_s(run_in_process(run_config(tmp, "none", tasks, None), tmp / "none").run_dir)
    rows.append(["no files", str(tasks), f"{base * 1000:.0f}", "-"])
    for label, size in sizes:
        say(f"  {label} in and out")
        n = tasks if size < 50_000_000 else max(3, tasks // 4)
        name = label.replace(" ", "")
        outcome = run_in_process(run_config(tmp, name, n, size), tmp / name)
        per = per_task_s(outcome.run_dir)
        assert outcome.report.tasks_done == n, f"{label}: {outcome.report.tasks_done} of {n}"
        rows.append([f"{label} in, {label} out", str(n), f"{per * 1000:.0f}"])
        rows[-1].append(f"{(per - base) * 1000:+.0f}")
    return render_table(["task files", "tasks", "ms per task", "overhead ms"], rows, left=1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes-mb", default="10,100,500")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tasks", type=int, default=20)
    args = parser.parse_args(argv)
    if shutil.which("rsync") is None:
        raise SystemExit("rsync not installed: apt-get install rsync")
    print(f"Library: {library_state()}")
    with tempfile.TemporaryDirectory(prefix="files-bench-") as name:
        tmp = Path(name)
        say("throughput")
        sizes = [int(s) for s in args.sizes_mb.split(",")]
        table = throughput(sizes, args.repeats, tmp)
        print("\nOutput collection to the run directory (MB = 10^6 bytes; median of repeats)\n")
        print(table)
        say("per-task overhead")
        table = overhead(
            [("1 KB", 1_000), ("1 MB", 1_000_000), ("100 MB", 100_000_000)], args.tasks, tmp
        )
        print("\nPer-task time, one local agent, tasks one after another (real daemon)\n")
        print(table)


if __name__ == "__main__":
    main()
