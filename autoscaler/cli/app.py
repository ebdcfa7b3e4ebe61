"""The ``autoscaler`` command group: the typer app, its consoles and exit codes, and the
one place where an ``AutoscalerError`` becomes a message and an exit code.

A command raises ``AutoscalerError`` (``ConfigError`` for a file that cannot be used)
and never prints its own error: ``Commands.invoke`` catches it, prints ``error: ...``
(a ``ConfigError``: its source, then each problem on a line) and exits with
``EXIT_CONFIG``.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from typer.core import TyperGroup

from autoscaler.core.errors import AutoscalerError, ConfigError

if TYPE_CHECKING:
    from autoscaler.config.schema import RunConfig
    from autoscaler.core.model import TaskSpec
    from autoscaler.report.records import Report

EXIT_CONFIG = 2
"""Exit code for a config that cannot be used (and other errors we raise on purpose)."""
EXIT_STOPPED = 3
"""Exit code for a run that stopped before the bag was finished (its report says why)."""

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

SOLVING = frozenset({"run", "plan", "serve"})
"""The commands that solve MILPs (and would show the solver's banner)."""


def print_error(exc: AutoscalerError) -> None:
    """``exc`` as the user reads it, on stderr."""
    if isinstance(exc, ConfigError):
        err_console.print(f"error: {exc.source}", markup=False, soft_wrap=True)
        for problem in exc.problems:
            err_console.print(f"  {problem}", markup=False, soft_wrap=True)
    else:
        err_console.print(f"error: {exc.message}", markup=False, soft_wrap=True)


_REASONS = {
    "float_parsing": "not a number",
    "int_parsing": "not a whole number",
    "int_from_float": "not a whole number",
}
"""What a value given for a typed option is not, by pydantic's error type (typer parses
options with pydantic)."""


def bad_value(exc: typer.BadParameter) -> str | None:
    """One line naming the flag, the value and what is wrong with it; None for what is
    not a bad value (a missing argument: typer shows the usage)."""
    from pydantic import ValidationError  # not for every command's start: only a bad value

    flag = "/".join(exc.param.opts) if exc.param is not None and exc.param.opts else None
    if flag is None:
        return None
    cause = exc.__cause__
    if isinstance(cause, ValidationError) and cause.errors():
        error = cause.errors()[0]
        reason = _REASONS.get(error["type"], str(error["msg"]))
        return f"{flag} {error['input']!r}: {reason}"
    return f"{flag}: {exc.message}" if exc.message else None


class Commands(TyperGroup):
    """The command group; any ``AutoscalerError`` a command raises, and any value its
    options refuse, is printed as one line and ends the process with ``EXIT_CONFIG`` (the
    exit code of a usage error), never with a traceback or a boxed usage message."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except AutoscalerError as exc:
            print_error(exc)
            raise typer.Exit(EXIT_CONFIG) from None
        except typer.BadParameter as exc:
            line = bad_value(exc)
            if line is None:
                raise
            err_console.print(f"error: {line}", markup=False, soft_wrap=True)
            raise typer.Exit(EXIT_CONFIG) from None


# Markdown mode reflows a docstring's paragraphs to the terminal's width; the default
# keeps the source's line breaks, and a narrow terminal then breaks lines mid-sentence.
app = typer.Typer(
    cls=Commands, no_args_is_help=True, add_completion=False, rich_markup_mode="markdown"
)


@app.callback()
def _root(ctx: typer.Context) -> None:
    """Run a bag of independent tasks on rented machines within a money budget."""
    if ctx.invoked_subcommand in SOLVING:
        silence_solver_banner()


def silence_solver_banner() -> None:
    """Keep HiGHS's banner ("Running HiGHS ...") off stdout, where ``--json`` output goes.

    HiGHS writes it to file descriptor 1 when the process makes its first solver, before
    any option can turn logging off, and only then; so the first solver is made here,
    with descriptor 1 pointing at /dev/null.
    """
    try:
        import highspy
    except ImportError:  # PuLP falls back to CBC, which is run with its output captured
        return
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()  # type: ignore[no-untyped-call]  # highspy has no types here
            _flush_c_stdio()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def _flush_c_stdio() -> None:
    """Flush C's stdio buffers, so nothing HiGHS buffered reaches the real stdout later."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).fflush(None)


def directory_to_write(path: Path | None) -> Path | None:
    """A directory an option names for writing (``--out``), refused at once, before any
    work, where a file stands at it or at one of its parents."""
    if path is not None:
        for place in (path, *path.parents):
            if place.exists():
                if not place.is_dir():
                    where = "" if place == path else f"{path}: "
                    raise typer.BadParameter(f"{where}{place} is a file, not a directory")
                break
    return path


def file_to_write(path: Path | None) -> Path | None:
    """A file an option names for writing, refused at once where it is a directory or
    its directory cannot be one."""
    if path is not None:
        if path.is_dir():
            raise typer.BadParameter(f"{path} is a directory, not a file")
        directory_to_write(path.parent)
    return path


def load(path: Path) -> tuple[RunConfig, list[TaskSpec]]:
    """Load the run config ``path`` and expand its bag: the one way a command reads a run
    config (a bad one raises ``ConfigError``, which names each bad field)."""
    from autoscaler.config.bag import expand_bag  # the config models: not at start
    from autoscaler.config.load import load_config

    cfg = load_config(path, prices=_aws_prices, vcpus=_aws_vcpus)
    return cfg, expand_bag(cfg, source=str(path))


def _aws_prices(
    instance_types: Sequence[str], region: str, endpoint: str | None
) -> Mapping[str, float]:
    """On-demand USD per hour from the AWS Pricing API (only for ``ec2.lookup_prices``)."""
    from autoscaler.providers.ec2_prices import lookup_prices  # boto3: only when asked

    return lookup_prices(instance_types, region, endpoint)


def _aws_vcpus(
    instance_types: Sequence[str], region: str, endpoint: str | None, profile: str | None
) -> Mapping[str, int]:
    """Default vCPUs per instance type from EC2 (only for ``ec2.lookup_slots``)."""
    from autoscaler.providers.ec2_types import lookup_vcpus  # boto3: only when asked

    return lookup_vcpus(instance_types, region, endpoint, profile)


def conclude(report: Report, run_dir: Path) -> None:
    """The report's head and where the run directory is; exit 3 if the bag is unfinished."""
    print_head(report, run_dir)
    if report.stop_reason is not None:
        raise typer.Exit(EXIT_STOPPED)


def print_head(report: Report, run_dir: Path) -> None:
    """What ``run`` prints at its end: the report's head, rendered, and the run directory."""
    # Markdown's renderer and the report's records load at the end of a run, not at start.
    from rich.markdown import Markdown

    from autoscaler.report.markdown import render_head

    console.print(Markdown(render_head(report)))
    console.print(f"run directory: {run_dir}", markup=False, soft_wrap=True)
