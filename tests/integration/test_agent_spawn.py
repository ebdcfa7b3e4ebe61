"""How the worker agent starts a task's shell (``Spawner`` in bootstrap/agent.py): with
``os.posix_spawn``, and with ``subprocess.Popen`` where that cannot be used. Both must
give the shell the same world: a session of its own, stdin from /dev/null, SIGPIPE and
SIGXFSZ at their default (Python ignores them), the task's env and cwd, and no fd but
0, 1 and 2, not even one the agent was started with."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

SPAWN = """
import json, os, signal, sys
from autoscaler.bootstrap import agent
signal.pthread_sigmask(signal.SIG_BLOCK, agent.WAKE)  # as the agent runs: SIGCHLD blocked
spawner = agent.Spawner()
spawner.fast = spawner.fast and sys.argv[1] == "fast"
outputs = agent.Outputs.new()
process = spawner(sys.argv[2], sys.argv[3], {"GREETING": "hello world"}, outputs)
process.proc.wait()
code = process.proc.returncode
print(json.dumps({
    "fast": spawner.fast,
    "pid": process.proc.pid,
    "code": code,
    "stdout": agent.read_tail(outputs.out, 4096),
    "stderr": agent.read_tail(outputs.err, 4096),
}))
"""

COMMAND = (
    'set -- $(cat /proc/$$/stat); echo "pid=$1 pgrp=$5 sid=$6"; '
    "grep SigIgn /proc/$$/status; ls -m /proc/$$/fd; "
    'echo "stdin=$(readlink /proc/$$/fd/0)"; echo "greeting=$GREETING"; pwd; '
    # read by the shell itself: while it waits for a child (grep), dash blocks every signal
    'while read -r k v; do [ "$k" = SigBlk: ] && echo "$k $v"; done </proc/$$/status; '
    "echo to-stderr >&2; exit 3"
)

STANDARD = (1 << 31) - 1
"""Signals 1 to 31 in /proc's SigIgn mask. glibc's posix_spawn leaves its own two (32
and 33, which no program uses: glibc's threads library sets them up as it needs them)
ignored in the program it starts, as for every program started with posix_spawn."""


def inherited_ignores() -> int:
    """Signals 1 to 31 a task's shell may find ignored: those this test process was
    started with ignored (sh runs a job started with & with SIGINT and SIGQUIT
    ignored, and exec keeps that), less SIGPIPE and SIGXFSZ, which Python ignores and
    which the agent, as Popen, sets back to their default for the shell."""
    status = Path("/proc/self/status").read_text()
    mask = int(next(ln for ln in status.splitlines() if ln.startswith("SigIgn:")).split()[1], 16)
    python_own = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))
    return mask & STANDARD & ~python_own


def spawn(how: str, cwd: Path) -> tuple[dict[str, object], int]:
    """Spawner in a Python process started with an extra inheritable fd; its report."""
    extra_r, extra_w = os.pipe()
    os.set_inheritable(extra_w, True)
    try:
        out = subprocess.run(
            [sys.executable, "-c", SPAWN, how, COMMAND, str(cwd)],
            pass_fds=(extra_w,),
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
    finally:
        os.close(extra_r)
        os.close(extra_w)
    report: dict[str, object] = json.loads(out.stdout)
    return report, extra_w


@pytest.mark.parametrize("how", ["fast", "popen"])
def test_a_task_shell_gets_the_same_world_either_way(how: str, tmp_path: Path) -> None:
    report, extra = spawn(how, tmp_path)

    assert report["fast"] is (how == "fast")
    assert report["code"] == 3
    pid = report["pid"]
    stdout = str(report["stdout"]).splitlines()
    assert stdout[0] == f"pid={pid} pgrp={pid} sid={pid}"  # leads its group and session
    ignored = int(stdout[1].split()[1], 16)
    assert ignored & STANDARD == inherited_ignores(), f"SigIgn {ignored:#x}: SIGPIPE still ignored?"
    assert stdout[2] == "0, 1, 2", f"fd {extra} the agent inherited reached the task"
    assert stdout[3] == "stdin=/dev/null"
    assert stdout[4] == "greeting=hello world"
    assert stdout[5] == os.path.realpath(tmp_path)
    assert stdout[6].split() == ["SigBlk:", "0" * 16], "the agent's blocked SIGCHLD reached it"
    assert report["stderr"] == "to-stderr\n"


@pytest.mark.parametrize("how", ["fast", "popen"])
def test_a_missing_cwd_is_an_oserror_naming_it(how: str, tmp_path: Path) -> None:
    """The agent reports it as ``cannot start: <the error>``."""
    missing = tmp_path / "no-such-dir"
    script = SPAWN.replace("process.proc.wait()", "raise SystemExit(0)")
    out = subprocess.run(
        [sys.executable, "-c", script, how, "true", str(missing)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 1
    assert "FileNotFoundError" in out.stderr
    assert f"No such file or directory: '{missing}'" in out.stderr


# --- plain command lines run as their program, with no shell between ---------------------------

RUN_LINE = """
import json, sys
from autoscaler.bootstrap import agent
spawner = agent.Spawner()
outputs = agent.Outputs.new()
process = spawner(sys.argv[1], sys.argv[2], {"GREETING": "hello"}, outputs)
process.proc.wait()
print(json.dumps({
    "argv": spawner.plain(sys.argv[1], {}),
    "pid": process.proc.pid,
    "code": process.proc.returncode,
    "stdout": agent.read_tail(outputs.out, 8192),
    "stderr": agent.read_tail(outputs.err, 4096),
}))
"""


def run_line(line: str, cwd: Path) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", RUN_LINE, line, str(cwd)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    report: dict[str, object] = json.loads(out.stdout)
    return report


def test_a_plain_line_runs_as_its_program_in_the_same_world(tmp_path: Path) -> None:
    """``cat /proc/self/stat`` is words only: cat itself is the process spawned (its
    pid is the one the agent waits on), leads its session, has no signal ignored, and
    sees the task's env."""
    report = run_line("cat /proc/self/stat /proc/self/status /proc/self/environ", tmp_path)
    assert report["argv"] == [
        shutil.which("cat"),
        "/proc/self/stat",
        "/proc/self/status",
        "/proc/self/environ",
    ]
    assert report["code"] == 0
    stdout = str(report["stdout"])
    fields = stdout.split(")", 1)[1].split()
    pid = report["pid"]
    assert stdout.split()[0] == str(pid)
    assert "(cat)" in stdout.splitlines()[0]  # no shell in between
    assert (fields[2], fields[3]) == (str(pid), str(pid))  # its group's and session's leader
    ignored = next(ln for ln in stdout.splitlines() if ln.startswith("SigIgn:"))
    assert int(ignored.split()[1], 16) & STANDARD == inherited_ignores()
    assert "GREETING=hello" in stdout


@pytest.mark.parametrize(
    ("line", "stdout", "code"),
    [
        ("FOO=1 env", "FOO=1", 0),  # an assignment
        ("echo -e x", "-e x\n", 0),  # sh's echo, not /bin/echo's options
        ("ls *.txt", "a.txt\n", 0),  # a glob
        ("./script", "from a script with no #!\n", 0),  # ENOEXEC: sh runs it as a script
        ("no-such-program-here", "", 127),  # not on the PATH: sh says so
        ("cd sub", "", 0),  # a builtin with no program
    ],
)
def test_a_line_that_needs_the_shell_runs_in_it(
    tmp_path: Path, line: str, stdout: str, code: int
) -> None:
    (tmp_path / "a.txt").write_text("")
    (tmp_path / "sub").mkdir()
    script = tmp_path / "script"
    script.write_text("echo from a script with no '#!'\n")
    script.chmod(0o755)
    report = run_line(line, tmp_path)
    assert report["code"] == code, report
    assert stdout in str(report["stdout"])
    if code == 127:
        assert "not found" in str(report["stderr"])
