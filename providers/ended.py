"""Why a machine ended by itself, as its provider can tell: the words of its scheduler (or
the agent's exit status) and the last lines of the machine's log.

A provider puts this in ``MachineStatus.reason``; the daemon names the lost machine
with it, so the report and the log say what the scheduler said (a job that failed to
launch, a working directory missing on the node, an agent that could not reach the
dispatcher) rather than only that a machine ended. A job whose log was never written
never started its agent: that is said too, with the path the scheduler was given.
"""

from __future__ import annotations

from pathlib import Path

TAIL_BYTES = 4096
"""How much of a log's end is read."""
TAIL_LINES = 3
"""How many of its last lines are kept."""
REASON_CHARS = 600
"""A reason is cut to this length (the report's machine table shows it)."""


def log_tail(path: Path) -> str:
    """The last few lines of the log at ``path`` on one line, or what its absence says."""
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            f.seek(max(0, size - TAIL_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return f"its log {path} was never written"
    except OSError as exc:
        return f"its log {path} cannot be read ({exc.strerror or exc})"
    lines = [line.strip() for line in text.splitlines() if line.strip()][-TAIL_LINES:]
    if not lines:
        return f"its log {path} is empty"
    return f"log {path}: " + " / ".join(lines)


def because(said: str, log: Path | None) -> str:
    """A reason: what the provider ``said``, then the tail of ``log`` (if any), cut to
    ``REASON_CHARS``."""
    text = said if log is None else f"{said}; {log_tail(log)}"
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 3] + "..."
