"""``run.session``: one real run from its start to its end, whoever asked for it."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.journal import JOURNAL_DB, SqliteJournal
from autoscaler.run.daemon import Outcome
from autoscaler.run.session import (
    SIGNALS,
    DaemonBroke,
    Ending,
    Session,
    check_same_bag,
    ending_of,
    error_of,
    take_over,
)
from autoscaler.run.start import dry_run

EXAMPLES = Path(__file__).parents[2] / "config" / "examples"


def _outcome(budget: float | None = None) -> Outcome:
    cfg = load_config(EXAMPLES / "quickstart.yaml")
    if budget is not None:
        cfg = cfg.model_copy(
            update={"constraint": cfg.constraint.model_copy(update={"budget": budget})}
        )
    ran = dry_run(cfg, expand_bag(cfg), run_id="r")
    return Outcome("r", ran.state, ran.report, Path("r"), ran.wall_s)


def test_a_foreground_session_takes_the_signals_a_services_does_not(tmp_path: Path) -> None:
    cfg = load_config(EXAMPLES / "local.yaml")
    tasks = expand_bag(cfg)
    mine = Session.start("new", tmp_path / "a", cfg, tasks, run_id="a", seed=1)
    theirs = Session.start("new", tmp_path / "b", cfg, tasks, foreground=False)
    before = {signum: signal.getsignal(signum) for signum in SIGNALS}
    with theirs._signals():
        assert {signum: signal.getsignal(signum) for signum in SIGNALS} == before
    with mine._signals():
        taken = {signum: signal.getsignal(signum) for signum in SIGNALS}
        assert all(taken[signum] is not before[signum] for signum in SIGNALS)
    assert {signum: signal.getsignal(signum) for signum in SIGNALS} == before
    assert (mine.files.run_id, mine.files.seed) == ("a", 1)
    assert Session.start("plan", tmp_path / "c", cfg, tasks).daemon.hold


def test_a_run_ends_done_stopped_or_handed_over() -> None:
    finished = _outcome()
    assert finished.report.stop_reason is None
    assert ending_of(finished, handed_over=False) is Ending.DONE
    assert ending_of(finished, handed_over=True) is Ending.HANDED_OVER
    short = _outcome(budget=3)
    assert short.report.stop_reason is not None
    assert ending_of(short, handed_over=False) is Ending.STOPPED


def test_a_broken_daemon_says_its_error_in_one_line() -> None:
    broke = DaemonBroke(KeyError("x"))
    assert str(broke) == "daemon error: KeyError('x')"
    assert error_of(broke) == "KeyError('x')"
    assert error_of(AutoscalerError("port in use")) == "port in use"
    assert error_of(ValueError("v")) == "ValueError('v')"


def test_a_config_given_with_a_real_plan_must_be_the_one_it_sampled(tmp_path: Path) -> None:
    cfg = load_config(EXAMPLES / "local.yaml")
    tasks = expand_bag(cfg)
    files = Session.start("plan", tmp_path / "run", cfg, tasks, run_id="p").files
    journal = SqliteJournal(tmp_path / "run" / JOURNAL_DB)  # as the daemon's start writes it
    journal.set_meta(**files.journal_meta())
    journal.close()
    check_same_bag(cfg, tasks, tmp_path / "run", "local.yaml")
    with pytest.raises(AutoscalerError, match=r"local\.yaml is not the config the plan sampled"):
        check_same_bag(cfg, tasks[:-1], tmp_path / "run", "local.yaml")


def test_a_run_no_daemon_holds_is_taken_over_without_asking(tmp_path: Path) -> None:
    asked: list[int] = []
    take_over(tmp_path, asked.append, wait_s=0)
    assert asked == []
