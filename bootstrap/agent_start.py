"""How the worker agent (``bootstrap/agent.py``) is started, whatever the machine.

Every way of starting an agent (a local process, a Grid Engine job, a command over SSH,
an EC2 user-data script) runs the same file with the same command line: the dispatcher's
``--url``, the ``--machine`` id, the token (from a ``--token-file``, or in the
environment when the agent is our own child process), the flags that say how it watches
the daemon, and its ``--workdir``. :func:`agent_command` builds that command line and
environment in one place, so the ways differ only in where the pieces are.

The token never appears on a command line: ``ps`` (and ``qstat -j``) show command lines
to every user.
"""

from __future__ import annotations

import os
import py_compile
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autoscaler.bootstrap.credentials import machine_token
from autoscaler.core.errors import AutoscalerError

AGENT = Path(__file__).resolve().parent / "agent.py"
"""The agent, shipped as this one file: run in place here, copied to remote machines."""

TOKEN_ENV = "AUTOSCALER_TOKEN"
"""The environment variable the agent reads the run token from, without --token-file."""


class BootstrapError(AutoscalerError):
    """A machine could not be reached or its agent not started."""

    code = "BootstrapError"


def compiled_agent(where: Path, python: str) -> Path:
    """The agent compiled to ``where/agent.pyc`` when ``python`` is this interpreter (else,
    or when that cannot be written, ``AGENT``). Python runs a ``.pyc`` given as the script
    without compiling the source, which every start of ``agent.py`` does: a quarter of
    an agent's start-up, paid by each agent of a fleet that starts at once. Only for
    agents that run on this host (another interpreter could not read the bytecode)."""
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return AGENT
    target = where / "agent.pyc"
    try:
        where.mkdir(parents=True, exist_ok=True)
        py_compile.compile(str(AGENT), cfile=str(target), doraise=True)
    except (OSError, py_compile.PyCompileError):
        return AGENT
    return target


def agent_source() -> str:
    """The text of ``bootstrap/agent.py``, as shipped next to this module."""
    return AGENT.read_text(encoding="utf-8")


def agent_flags(heartbeat_s: float, orphan_after_s: float, tail_bytes: int) -> list[str]:
    """The agent flags every provider passes alike (how it watches the daemon)."""
    return [
        "--heartbeat-s",
        f"{heartbeat_s:g}",
        "--orphan-after-s",
        f"{orphan_after_s:g}",
        "--tail-bytes",
        str(tail_bytes),
    ]


@dataclass(frozen=True, slots=True)
class AgentCommand:
    """An agent's command line and the environment variables it needs besides ours."""

    argv: tuple[str, ...]
    env: Mapping[str, str]


def agent_command(
    python: str,
    agent: str | Path,
    *,
    url: str,
    machine: str,
    flags: Sequence[str],
    token: str | None = None,
    token_file: str | Path | None = None,
    workdir: str | Path | None = None,
    ready_at: float | None = None,
    slots: int = 1,
) -> AgentCommand:
    """The command that starts ``agent`` (a path to agent.py) as ``machine``.

    The agent gets the token either from ``token_file`` (remote machines, batch jobs:
    their environment is not ours to keep private) or, given ``token``, through
    :data:`TOKEN_ENV` in the environment of a child process we start ourselves.
    ``ready_at`` (epoch seconds) holds its first report back, to emulate a boot time.
    ``slots``: the tasks it runs at once (``--slots``, given when above 1; the controller's
    replies say it too).

    Python runs it with ``-S``: the agent needs the standard library only, and without
    ``site`` (site-packages, ``.pth`` files, an editable install's finder) it starts in
    about 10 % less CPU and cannot be broken by what is installed on the machine.
    """
    if (token is None) == (token_file is None):
        raise BootstrapError("an agent needs exactly one of a token and a token file")
    argv = [python, "-S", str(agent), "--url", url, "--machine", machine]
    if token_file is not None:
        argv += ["--token-file", str(token_file)]
    argv += flags
    if ready_at is not None:
        argv += ["--ready-at", f"{ready_at:.6f}"]
    if workdir is not None:
        argv += ["--workdir", str(workdir)]
    if slots > 1:
        argv += ["--slots", str(slots)]
    env = {TOKEN_ENV: token} if token is not None else {}
    return AgentCommand(tuple(argv), env)


@dataclass(frozen=True, slots=True)
class AgentSettings:
    """How agents of this host's providers (local, Grid Engine) are started."""

    url: str
    token: str  # the run's secret: each agent is given its machine's token, derived from it
    heartbeat_s: float = 2.0
    orphan_after_s: float = 60.0
    tail_bytes: int = 4096
    workdir: Path | None = None
    python: str = sys.executable
    slots: Mapping[str, int] = field(default_factory=dict)  # per machine type; missing: 1
    agent: Path = AGENT  # agent.py, or its bytecode (``compiled_agent``)
    ca_file: Path | None = None  # the run's CA, pinned (the dispatcher serves https)

    def flags(self) -> list[str]:
        """The agent flags every provider passes alike (how it watches the daemon, which
        CA it trusts)."""
        flags = agent_flags(self.heartbeat_s, self.orphan_after_s, self.tail_bytes)
        return flags if self.ca_file is None else [*flags, "--ca-file", str(self.ca_file)]

    def machine_token(self, machine: str) -> str:
        """The token ``machine``'s agent presents (``bootstrap.credentials``)."""
        return machine_token(self.token, machine)

    def command(
        self,
        machine: str,
        *,
        token_file: Path | None = None,
        ready_at: float | None = None,
        type: str = "",
    ) -> AgentCommand:
        """The command of ``machine``'s agent (of machine type ``type``): its machine's
        token from ``token_file`` if given (``machine_token``), else in its environment."""
        return agent_command(
            self.python,
            self.agent,
            url=self.url,
            machine=machine,
            flags=self.flags(),
            token=self.machine_token(machine) if token_file is None else None,
            token_file=token_file,
            workdir=self.workdir,
            ready_at=ready_at,
            slots=self.slots.get(type, 1),
        )
