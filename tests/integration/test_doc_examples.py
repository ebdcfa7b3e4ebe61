"""Every shell example in README.md and docs/*.md runs as a user would run it.

The examples are read from the Markdown files themselves, so they cannot drift. Each
fenced block marked ``sh``, ``bash`` or ``console`` is one test, run in a fresh copy of
the repository (config/examples, infra/, ... at the same relative paths; no ``runs/``, no
``.venv``), with ``autoscaler`` on PATH from the tests' own environment and a state
directory of its own:

* ``sh`` and ``bash`` blocks run as one bash script under ``set -e``: every command must
  succeed. A command may run in the background (``&``); whatever the block leaves
  running is stopped by its pid when the block ends (SIGTERM, then waited for).
* ``console`` blocks are commands after ``$ `` and what they print below them: each
  command must succeed, and each line shown must appear in its output, in order (``...``
  in a line stands for any text).

An HTML comment on the line before a block says where it runs or that it does not:
``<!-- runs on: sge -->`` (the one-node Grid Engine), ``slurm`` (the one-node Slurm),
``ec2`` (a moto server on loopback, through ``AWS_ENDPOINT_URL``, with fake
credentials); ``<!-- runs alone: REASON -->`` runs it here with the tests marked
``alone`` (after the others, beside little load: a time-scaled run whose spend the host's
load would shift); ``<!-- not run: REASON -->`` keeps a block out, visibly in the source. Only
the test command itself (``bash tests/run.sh``, which CI runs) is kept out:
``test_only_the_test_command_is_not_run`` fails on any other. A fence without a language
fails ``test_every_block_says_what_it_is``, so no shell example hides as plain text.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.integration import sge, slurm
from tests.integration.services import FAKE_AWS_ENV, MotoServer

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"sh", "bash", "console"}
NOT_SHELL = {"yaml", "text", "json", "python", "ini", "markdown", "http"}
"""Fence languages that are not commands (configs, output, file trees)."""
WHERES = {"here": (), "sge": (sge.XDIST_GROUP,), "slurm": (slurm.XDIST_GROUP,), "ec2": ()}
"""Where a block may run, with the marks that keep tests of one service in turn."""
BLOCK_TIMEOUT_S = 900.0
"""A block that runs longer is stopped and fails (a guard against a hang, not a check)."""
TEST_COMMAND = "bash tests/run.sh"

pytestmark = pytest.mark.integration

_FENCE = re.compile(r"^\s*(`{3,})\s*([\w-]*)\s*$")
_MARK = re.compile(r"^<!--\s*(runs on|runs alone|not run):\s*(.*?)\s*-->$")


@dataclass(frozen=True)
class Block:
    """One fenced block of a document, with the comment before it, if any."""

    doc: Path
    line: int
    lang: str
    text: str
    mark: tuple[str, str] | None

    @property
    def name(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}"

    @property
    def where(self) -> str:
        return self.mark[1] if self.mark and self.mark[0] == "runs on" else "here"

    @property
    def alone(self) -> bool:
        return self.mark is not None and self.mark[0] == "runs alone"

    @property
    def run(self) -> bool:
        return self.lang in SHELL and not (self.mark and self.mark[0] == "not run")


def blocks(doc: Path) -> list[Block]:
    """The fenced blocks of ``doc``, in order."""
    out: list[Block] = []
    lines = doc.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        start, ticks, lang = i, fence.group(1), fence.group(2)
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == ticks)
        before = next((lines[j].strip() for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        mark = _MARK.match(before)
        text = "\n".join(lines[start + 1 : end]) + "\n"
        out.append(Block(doc, start + 1, lang, text, (mark[1], mark[2]) if mark else None))
        i = end + 1
    return out


ALL = [b for doc in DOCS for b in blocks(doc)]
RUN = [b for b in ALL if b.run]


def test_every_block_says_what_it_is() -> None:
    """A shell example always has a runner: its fence names a language we run or one that
    is not commands, and its comment names a known place."""
    unknown = [f"{b.name}: ```{b.lang}" for b in ALL if b.lang not in SHELL | NOT_SHELL]
    assert not unknown, f"fences without a known language (sh, console, yaml, text...): {unknown}"
    places = [f"{b.name}: {b.where}" for b in RUN if b.where not in WHERES]
    assert not places, f"blocks that run on no known place ({', '.join(WHERES)}): {places}"
    assert RUN, "no shell example found"


def test_only_the_test_command_is_not_run() -> None:
    kept_out = [b for b in ALL if b.lang in SHELL and not b.run]
    assert [b.text.strip().splitlines()[-1] for b in kept_out] == [TEST_COMMAND], [
        b.name for b in kept_out
    ]


def mirror(tmp: Path) -> Path:
    """A copy of the repository as a user's checkout looks before anything ran."""
    root = tmp / "checkout"
    # What git ignores is what a fresh clone lacks; it is also where other tests write
    # while this one copies (hypothesis's database, caches, runs/).
    ignored = [
        line.strip().strip("/")
        for line in (ROOT / ".gitignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    shutil.copytree(ROOT, root, symlinks=True, ignore=shutil.ignore_patterns(".git", *ignored))
    return root


def console_steps(text: str) -> list[tuple[str, list[str]]]:
    """The commands of a console block (after ``$ ``, joined across ``\\``) and the lines
    shown below each."""
    steps: list[tuple[str, list[str]]] = []
    command: str | None = None  # a command continued on the next line
    for line in text.splitlines():
        if command is not None or line.startswith("$ "):
            part = line[2:] if command is None else line.strip()
            joined = (f"{command} " if command else "") + part.removesuffix("\\").strip()
            if part.endswith("\\"):
                command = joined
            else:
                steps.append((joined, []))
                command = None
        elif steps and line.strip():
            steps[-1][1].append(line.strip())
    return steps


def shown_in(expected: list[str], output: str) -> list[str]:
    """The lines of ``expected`` not found in ``output`` in order (``...``: any text;
    runs of spaces count as one, as a table's columns widen with the terminal)."""
    lines = [" ".join(line.split()) for line in output.splitlines()]
    at, missing = 0, []
    for want in expected:
        pattern = re.compile(".*".join(re.escape(" ".join(p.split())) for p in want.split("...")))
        hit = next((k for k in range(at, len(lines)) if pattern.fullmatch(lines[k])), None)
        if hit is None:
            missing.append(want)
        else:
            at = hit + 1
    return missing


def run_script(script: str, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``script`` in bash, in its own session; what it leaves in its session is ended."""
    proc = subprocess.Popen(
        ["bash", "-c", script],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        out, _ = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        out += f"\n[stopped after {BLOCK_TIMEOUT_S:g} s]"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, "")


STOP_BACKGROUND = textwrap.dedent(
    """\
    stop_background() { for pid in $(jobs -p); do kill "$pid" 2>/dev/null || true; done; wait; }
    trap stop_background EXIT
    set -e
    """
)


def environment(block: Block, request: pytest.FixtureRequest) -> dict[str, str]:
    """The block's environment: ``autoscaler`` on PATH, and its service's settings."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    if "pip install" in block.text:
        # The dependencies are not compiled to bytecode (about half of an install's CPU,
        # botocore's thousands of modules): what is installed and run is the same.
        env["PIP_NO_COMPILE"] = "1"
    if block.where in ("sge", "slurm"):
        request.getfixturevalue(block.where)  # skips or fails (CI) when it is not running
    if block.where == "ec2":
        moto: MotoServer = request.getfixturevalue("moto")
        moto.reset()
        env.update(FAKE_AWS_ENV)
        env["AWS_ENDPOINT_URL"] = moto.endpoint
    return env


CLUSTER_JOBS = {"sge": sge.jobs_of, "slurm": slurm.jobs_of}
"""A cluster's jobs of one run (``{}`` once the run has ended them all)."""


def assert_cluster_runs_finished(
    cwd: Path, jobs_of: Callable[[str], dict[str, tuple[str, str]]], output: str
) -> None:
    """Each run a cluster block made (in ``runs/``, the default run directory) did its
    whole bag within its budget and left no job on the cluster."""
    run_dirs = sorted((cwd / "runs").glob("*/report.json"))
    assert run_dirs, f"the block made no run directory under runs/:\n{output}"
    for path in run_dirs:
        report = json.loads(path.read_text(encoding="utf-8"))
        assert report["stop_reason"] is None, output
        assert report["tasks_done"] == report["tasks_total"] > 0, output
        assert report["tasks_failed"] == 0, output
        if report["budget"] is not None:
            assert report["cost"] <= report["budget"] + 1e-6, output
        assert jobs_of(report["run_id"]) == {}, f"jobs left on the cluster by {path.parent}"


def _param(block: Block) -> object:
    marks = [*WHERES.get(block.where, ()), pytest.mark.slow]
    if block.alone:
        marks.append(pytest.mark.alone)
    if block.where in ("sge", "slurm") or "pip install" in block.text:
        marks.append(pytest.mark.long(2))  # a cluster's example run, or an installation
    return pytest.param(block, id=block.name, marks=marks)


@pytest.mark.parametrize("block", [_param(b) for b in RUN])
def test_the_example_works_as_written(
    block: Block, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    cwd = mirror(tmp_path)
    env = environment(block, request)
    if block.lang != "console":
        done = run_script(STOP_BACKGROUND + block.text, cwd, env)
        assert done.returncode == 0, f"{block.name} failed (exit {done.returncode}):\n{done.stdout}"
        if block.where in CLUSTER_JOBS:
            assert_cluster_runs_finished(cwd, CLUSTER_JOBS[block.where], done.stdout)
        return
    for command, expected in console_steps(block.text):
        done = run_script(command, cwd, env)
        assert done.returncode == 0, (
            f"{block.name}: `{command}` exit {done.returncode}:\n{done.stdout}"
        )
        missing = shown_in(expected, done.stdout)
        assert not missing, f"{block.name}: `{command}` did not print {missing}:\n{done.stdout}"


def test_console_steps_and_shown_lines() -> None:
    """The console convention itself: continued commands, shown lines with ``...``."""
    steps = console_steps("$ autoscaler run x.yaml \\\n    --dry-run\nok ... done\n\n$ ls\nA\n")
    assert steps == [("autoscaler run x.yaml --dry-run", ["ok ... done"]), ("ls", ["A"])]
    assert shown_in(["ok ... done"], "noise\nok 12 tasks done\n") == []
    assert shown_in(["b", "a"], "a\nb\n") == ["a"]
    assert shown_in(["cost  76.00   yes"], " cost 76.00         yes \n") == []


def anchors(doc: Path) -> set[str]:
    """The anchors of ``doc``'s headings, as GitHub makes them."""
    found: set[str] = set()
    inside = False
    for line in doc.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line):
            inside = not inside
        elif not inside and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def test_every_link_between_the_documents_leads_somewhere() -> None:
    broken = []
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            where = (doc.parent / path).resolve() if path else doc
            if not where.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and where.suffix == ".md" and anchor not in anchors(where):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, broken
