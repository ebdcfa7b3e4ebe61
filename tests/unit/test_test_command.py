"""The test command changes a machine only as it says: it installs packages, never stops
a service the machine runs and never kills a process by name (issue 19: `tests/run.sh`
stopped the system's sshd, falling back to ``pkill -x sshd``)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = [ROOT / "tests" / "run.sh", ROOT / ".ci" / "run", *sorted((ROOT / "infra").rglob("*.sh"))]


def commands(script: Path) -> list[list[str]]:
    """Each command of a shell script as words (comments dropped, pipelines and lists split)."""
    out: list[list[str]] = []
    for line in script.read_text(encoding="utf-8").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|()")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        try:
            words = list(lexer)
        except ValueError:  # an unfinished quote: a heredoc or a multi-line string
            continue
        current: list[str] = []
        for word in [*words, ";"]:
            if re.fullmatch(r"[;&|()]+", word):
                if current:
                    out.append(current)
                current = []
            else:
                current.append(word)
    return out


def stops_or_kills_by_name(words: list[str]) -> bool:
    name = Path(words[0]).name
    if name in {"pkill", "killall"}:
        return True
    if name == "service" and "stop" in words[1:]:
        return True
    return name in {"systemctl", "invoke-rc.d"} and any(w in words for w in ("stop", "kill"))


@pytest.mark.parametrize("script", SCRIPTS, ids=str)
def test_the_test_command_stops_no_service_and_kills_nothing_by_name(script: Path) -> None:
    found = [" ".join(words) for words in commands(script) if stops_or_kills_by_name(words)]
    assert not found, f"{script.relative_to(ROOT)} stops a service or kills by name: {found}"


def test_the_check_sees_a_stop_and_a_pkill(tmp_path: Path) -> None:
    script = tmp_path / "x.sh"
    script.write_text("(service ssh stop || pkill -x sshd || true) >/dev/null 2>&1\n")
    assert [w[0] for w in commands(script) if stops_or_kills_by_name(w)] == ["service", "pkill"]
