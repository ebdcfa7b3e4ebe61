"""The ``autoscaler`` console script: the command group with every command on it.

The commands live by concern (``cli.check``, ``cli.run``, ``cli.plan``,
``cli.service_commands``, ``cli.token_commands``) and register themselves on
``cli.app.app``; errors become messages and exit codes in ``cli.app``.
"""

from __future__ import annotations

from autoscaler.cli import check, plan, run, service_commands, token_commands
from autoscaler.cli.app import EXIT_CONFIG, EXIT_STOPPED, app

__all__ = [
    "EXIT_CONFIG",
    "EXIT_STOPPED",
    "app",
    "check",
    "main",
    "plan",
    "run",
    "service_commands",
    "token_commands",
]


def main() -> None:
    """Entry point of the ``autoscaler`` console script."""
    app()
