"""One real run from its start to its end, however it was asked for.

``autoscaler run`` (a new run, ``--resume``, ``--plan``), ``autoscaler plan`` on a real
provider, and each job of a service (a run of its own, or the deadline pool) are each
one ``Session``: the run's daemon made through the one start path (``run.start``),
shown while it runs (the live view, on a terminal), its signals taken, run to its end,
and how it ended said (``Ending``). A service calls a session for each of its jobs; a
run in the foreground is no service's.

Signals: a session in the foreground takes SIGINT and SIGTERM (the first releases every
machine, a second kills them) and ``HANDOVER_SIGNAL`` (a run that waits for a budget is
handed over); a service's session takes none: the service's ``close`` tells its daemon.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Literal

from rich.console import Console

from autoscaler.config.budgets import check_budget
from autoscaler.config.schema import RunConfig
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.model import BudgetSet, TaskSpec
from autoscaler.core.state import RunState
from autoscaler.providers.cost_tags import CostTags
from autoscaler.report.records import Report
from autoscaler.run.daemon import HANDOVER_SIGNAL, Daemon, HoldHook, Outcome, ProgressHook
from autoscaler.run.live import live_view
from autoscaler.run.rundir import RunFiles, daemon_alive, read_run
from autoscaler.run.start import start_run

RealMode = Literal["new", "resume", "plan"]
"""How a real run starts (``run.start.Mode`` but the dry run)."""


class Ending(StrEnum):
    """How a real run's daemon ended."""

    DONE = "done"  # the bag is finished
    STOPPED = "stopped"  # with tasks left; the report says why
    HELD = "held"  # a plan's run: the samples are in, the run waits for a budget
    INTERRUPTED = "interrupted"  # its machines released, to be resumed (``Interrupted``)
    HANDED_OVER = "handed over"  # its machines left running for the next daemon


@dataclass(frozen=True)
class Ended:
    """A session's end: the daemon's outcome and how it ended."""

    outcome: Outcome
    ending: Ending

    @property
    def report(self) -> Report:
        return self.outcome.report

    @property
    def state(self) -> RunState:
        return self.outcome.state


class DaemonBroke(AutoscalerError):
    """A daemon broke with an error that is not ours (its log has the traceback)."""

    def __init__(self, error: Exception):
        self.error = repr(error)
        super().__init__(f"daemon error: {self.error}")


def ending_of(outcome: Outcome, handed_over: bool) -> Ending:
    """How a daemon that returned ``outcome`` ended (``handed_over``: it handed its run
    over)."""
    state = outcome.state
    if handed_over:
        return Ending.HANDED_OVER
    if state.money.interrupted:
        return Ending.INTERRUPTED
    if outcome.report.stop_reason is None and state.finished:
        return Ending.DONE
    if state.money.awaiting_budget and not state.finished:
        return Ending.HELD
    return Ending.STOPPED


def error_of(exc: Exception) -> str:
    """What a session broke with, in one line: our error's message, another's repr."""
    if isinstance(exc, DaemonBroke):
        return exc.error
    return str(exc) if isinstance(exc, AutoscalerError) else repr(exc)


SIGNALS = (signal.SIGINT, signal.SIGTERM, HANDOVER_SIGNAL)
"""What a session in the foreground takes for its run (``Daemon.signal``)."""


@dataclass
class Session:
    """A real run's daemon, made and not yet run: ``run()`` runs it to its end.
    ``foreground``: it takes the process's signals (a service's session does not)."""

    daemon: Daemon
    foreground: bool = False

    @classmethod
    def start(
        cls,
        mode: RealMode,
        run_dir: Path,
        cfg: RunConfig | None = None,
        tasks: Sequence[TaskSpec] = (),
        *,
        run_id: str | None = None,
        seed: int | None = None,
        budget: BudgetSet | None = None,
        on_hold: HoldHook | None = None,
        resumed: str | None = None,
        progress: ProgressHook | None = None,
        plots: bool = True,
        foreground: bool = True,
        cost_tags: CostTags | None = None,
    ) -> Session:
        """The run of ``cfg`` and ``tasks`` in ``run_dir`` made ready (``run.start``'s
        ``start_run``: a new run writes its run directory, ``resume`` reads it).
        ``foreground``: the session takes the process's signals (a service's does not);
        ``cost_tags``: whom a new run's machines are charged to (default: its config's
        project and name, the OS user)."""
        daemon = start_run(
            mode,
            run_dir,
            cfg,
            tasks,
            run_id=run_id,
            seed=seed,
            progress=progress,
            plots=plots,
            budget=budget,
            on_hold=on_hold,
            resumed=resumed,
            cost_tags=cost_tags,
        )
        return cls(daemon, foreground)

    @property
    def files(self) -> RunFiles:
        return self.daemon.files

    def run(self, console: Console | None = None) -> Ended:
        """Run the daemon to its end, with the live view on ``console`` if it is a
        terminal. An ``AutoscalerError`` is raised as it is; any other error as
        ``DaemonBroke``."""
        daemon = self.daemon
        with self._signals(), self._shown(console):
            try:
                outcome = daemon.run()
            except AutoscalerError:
                raise
            except Exception as exc:
                raise DaemonBroke(exc) from exc
        return Ended(outcome, ending_of(outcome, daemon.handed_over))

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        """In the foreground, ``SIGNALS`` go to the daemon while it runs."""
        if not self.foreground:
            yield
            return
        if self.daemon.hold:
            # A hand-over asked for just as the daemon ends must not kill this process.
            signal.signal(HANDOVER_SIGNAL, signal.SIG_IGN)

        def handler(signum: int, frame: FrameType | None) -> None:
            self.daemon.signal(signum)

        old = {signum: signal.signal(signum, handler) for signum in SIGNALS}
        try:
            yield
        finally:
            for signum, was in old.items():
                signal.signal(signum, was)

    @contextlib.contextmanager
    def _shown(self, console: Console | None) -> Iterator[None]:
        """The live view on ``console``, beside the progress hook the daemon has."""
        if console is None:
            yield
            return
        daemon = self.daemon
        given = daemon.progress
        with live_view(console, daemon.cfg, len(daemon.tasks)) as view:

            def both(state: RunState, estimate: float | None) -> None:
                if given is not None:
                    given(state, estimate)
                view(state, estimate)

            daemon.progress = both
            try:
                yield
            finally:
                daemon.progress = given


# --- before a run is carried on -------------------------------------------------------


def check_same_bag(cfg: RunConfig, tasks: Sequence[TaskSpec], run_dir: Path, name: str) -> None:
    """Refuse a config (``name``) given with a real plan unless it is the one the plan
    sampled in ``run_dir``: the same bag and machines."""
    files = RunFiles.open(run_dir)
    same = [(t.id, t.command) for t in tasks] == [(t.id, t.command) for t in files.tasks]
    if not same or cfg.machine_types != files.cfg.machine_types:
        raise AutoscalerError(
            f"{name} is not the config the plan sampled ({run_dir / 'config.yaml'}): "
            "give the plan's own config, or none"
        )


def check_budget_covers(run_dir: Path, budget: float) -> None:
    """Refuse a budget below what the run in ``run_dir`` has committed, before anything
    is taken over (a held run commits nothing more, so its journal's figure holds)."""
    committed = read_run(run_dir)[1].money.committed
    check_budget(budget, committed=committed, holder=f"the run in {run_dir}")


def take_over(
    run_dir: Path, asking: Callable[[int], None], wait_s: float = 60.0, poll_s: float = 0.1
) -> None:
    """Ask the daemon holding ``run_dir`` after sampling (``autoscaler plan``) to hand its
    machines over, and wait until it has let the run go; ``asking``: told its pid as it
    is asked."""
    pid = daemon_alive(run_dir)
    if pid is None:
        return
    if pid > 0:
        asking(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, HANDOVER_SIGNAL)
    deadline = time.monotonic() + wait_s
    while daemon_alive(run_dir) is not None:
        if time.monotonic() > deadline:
            raise AutoscalerError(
                f"{run_dir}: the daemon holding it (pid {pid}) did not hand it over within "
                f"{wait_s:.0f} s; it hands over only a run that waits for a budget"
            )
        time.sleep(poll_s)
