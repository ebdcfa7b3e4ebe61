"""A run's outputs file made to agree with its journal after a crash (``run.results``)."""

from __future__ import annotations

import json
from pathlib import Path

from autoscaler.run.results import Settled, settle

JOURNALED = [json.dumps({"task": t, "run": t + 1, "exit_code": 0, "out": str(t)}) for t in range(6)]


def lines_of(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").split("\n")[:-1]


def test_a_prefix_cut_in_the_middle_of_a_line_is_completed(tmp_path: Path) -> None:
    """A kill while a line was written: the half line goes, the lines it lacked come."""
    path = tmp_path / "outputs.jsonl"
    path.write_text("".join(f"{line}\n" for line in JOURNALED[:3]) + JOURNALED[3][:10])
    assert settle(path, JOURNALED) == Settled(3, 3, 1, rewritten=False)
    assert lines_of(path) == JOURNALED


def test_missing_lines_a_duplicate_and_a_half_line_are_repaired(tmp_path: Path) -> None:
    """Lines lost (0, 4), one written twice (2), one the journal never took, and a half
    line at the end: each journaled result once, in the journal's order."""
    path = tmp_path / "outputs.jsonl"
    stray = json.dumps({"task": 9, "run": 99, "exit_code": 0, "stdout": ""})
    held = [JOURNALED[1], JOURNALED[2], JOURNALED[2], stray, JOURNALED[3]]
    path.write_text("".join(f"{line}\n" for line in held) + JOURNALED[5][:7])
    assert settle(path, JOURNALED) == Settled(3, 3, 3, rewritten=True)
    assert lines_of(path) == JOURNALED


def test_a_line_twice_after_a_good_prefix_is_dropped(tmp_path: Path) -> None:
    """The lines before the first that differs are kept, in the journal's order."""
    path = tmp_path / "outputs.jsonl"
    held = [*JOURNALED[:3], JOURNALED[0], JOURNALED[3]]
    path.write_text("".join(f"{line}\n" for line in held) + JOURNALED[4][:5])
    assert settle(path, JOURNALED) == Settled(4, 2, 2, rewritten=True)
    assert lines_of(path) == JOURNALED


def test_lines_past_the_journal_are_dropped(tmp_path: Path) -> None:
    """A whole file of which the journal holds only the first lines (steps not committed)."""
    path = tmp_path / "outputs.jsonl"
    path.write_text("".join(f"{line}\n" for line in JOURNALED))
    assert settle(path, JOURNALED[:4]) == Settled(4, 0, 2, rewritten=False)
    assert lines_of(path) == JOURNALED[:4]


def test_a_file_that_agrees_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "outputs.jsonl"
    path.write_text("".join(f"{line}\n" for line in JOURNALED))
    path.chmod(0o640)
    before = path.stat()
    assert settle(path, JOURNALED) == Settled(6, 0, 0, rewritten=False)
    assert path.stat().st_mtime_ns == before.st_mtime_ns
    assert path.stat().st_mode & 0o777 == 0o640


def test_a_missing_file_is_rebuilt_whole(tmp_path: Path) -> None:
    path = tmp_path / "outputs.jsonl"
    assert settle(path, JOURNALED) == Settled(0, 6, 0, rewritten=False)
    assert lines_of(path) == JOURNALED


def test_a_rewritten_file_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "outputs.jsonl"
    path.write_text(f"{JOURNALED[1]}\n")
    path.chmod(0o644)
    assert settle(path, JOURNALED).rewritten
    assert path.stat().st_mode & 0o777 == 0o644
    assert lines_of(path) == JOURNALED
