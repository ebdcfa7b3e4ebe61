"""A real local run killed (``kill -9``) at random moments and resumed each time: what a
user reads its results from (``outputs.jsonl``, the report) agrees with its journal."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.integration.daemon_helpers import (
    journal_rows,
    kill_agents,
    local_config,
    run_id_of,
    start_daemon,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.alone]

N_TASKS = 200


def outputs_lines(run_dir: Path) -> list[dict[str, object]]:
    """The outputs file's lines, each of which must be a whole JSON object."""
    text = (run_dir / "outputs.jsonl").read_text(encoding="utf-8")
    assert text.endswith("\n"), f"the outputs file ends in a half line: {text[-80:]!r}"
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        try:
            out.append(json.loads(line))
        except ValueError:
            pytest.fail(f"outputs.jsonl:{n} is not a JSON line: {line[:120]!r}")
    return out


def damage(path: Path) -> None:
    """What a kill in the middle of a write leaves, and what code that wrote a result's
    line before journaling it left after the agent sent it again: the last line cut in
    half, a line twice (the window for these is too narrow to hit by chance)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    assert lines, "no result written before the last kill"
    path.write_text("".join(lines[:-1]) + lines[0] + lines[-1][: len(lines[-1]) // 2])


def reached(run_dir: Path, target: int, daemon: subprocess.Popen[str]) -> Callable[[], bool]:
    """Whether ``target`` tasks are done, or the daemon ended."""
    return lambda: len(journal_rows(run_dir, "TaskDone")) >= target or daemon.poll() is not None


@pytest.mark.parametrize("seed", [1, 2])
def test_outputs_agree_with_the_journal_after_kills_at_random_moments(
    tmp_path: Path, seed: int
) -> None:
    """Three to five SIGKILLs of the daemon, each after a random number of results and a
    random fraction of a second, each followed by ``run --resume``: at the end every task
    is done, its result is in ``outputs.jsonl`` exactly once, and the file holds exactly
    the results the journal holds (the report's done count is the journal's)."""
    rng = random.Random(seed)
    # A budget with room for the paid minutes that pass while no daemon runs (360x).
    config = local_config(tmp_path, constraint={"budget": 400})
    run_dir = tmp_path / "run"
    kills = rng.randint(3, 5)
    daemon = start_daemon(str(config), "--out", str(run_dir))
    try:
        for k in range(kills):
            done = len(journal_rows(run_dir, "TaskDone"))
            target = min(N_TASKS - 10, done + rng.randint(5, (N_TASKS - 20) // kills))
            wait_for(
                reached(run_dir, target, daemon), 120, f"{target} tasks done before kill {k + 1}"
            )
            assert daemon.poll() is None, f"the run ended before kill {k + 1}"
            time.sleep(rng.uniform(0.0, 0.5))
            os.kill(daemon.pid, signal.SIGKILL)
            daemon.wait(10)
            if k == kills - 1:
                damage(run_dir / "outputs.jsonl")
            daemon = start_daemon("--resume", str(run_dir))
        out, _ = daemon.communicate(timeout=300)
        assert daemon.returncode == 0, out
    finally:
        if daemon.poll() is None:
            daemon.kill()
        if (run_dir / "journal.sqlite").exists():
            kill_agents(run_id_of(run_dir))
    report = json.loads((run_dir / "report.json").read_text())
    done = Counter(d["task"] for _, _, d in journal_rows(run_dir, "TaskDone"))
    failed = journal_rows(run_dir, "TaskFailed")
    lines = outputs_lines(run_dir)
    succeeded = Counter(
        line["task"] for line in lines if line["exit_code"] == 0 and not line["error"]
    )
    assert sorted(done) == list(range(N_TASKS)), "a task was lost"
    assert report["tasks_done"] == N_TASKS
    twice = sorted(t for t, n in succeeded.items() if n > 1)
    assert not twice, f"results in outputs.jsonl more than once: tasks {twice}"
    missing = sorted(set(done) - set(succeeded))
    assert not missing, f"results the journal counts missing from outputs.jsonl: {missing}"
    assert set(succeeded) == set(done)
    assert len(lines) == sum(done.values()) + len(failed)
