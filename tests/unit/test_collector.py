"""``run.collector.long_run``: the collector's young generation while runs go, and back
after the last one, however they overlap."""

from __future__ import annotations

import gc
import threading

from autoscaler.run.collector import GC_YOUNG, long_run


def test_runs_that_overlap_restore_the_threshold_only_when_the_last_ends() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        first, second = long_run(), long_run()
        first.__enter__()
        assert gc.get_threshold() == (GC_YOUNG, 10, 10)
        second.__enter__()
        first.__exit__(None, None, None)  # the first ends while the second goes
        assert gc.get_threshold() == (GC_YOUNG, 10, 10)
        second.__exit__(None, None, None)
        assert gc.get_threshold() == (700, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_collection_turned_off_stays_off_and_a_failed_run_restores() -> None:
    before = gc.get_threshold()
    try:
        gc.set_threshold(0)
        with long_run():
            assert gc.get_threshold()[0] == 0
        gc.set_threshold(500, 5, 5)
        try:
            with long_run():
                raise RuntimeError("the run failed")
        except RuntimeError:
            pass
        assert gc.get_threshold() == (500, 5, 5)
    finally:
        gc.set_threshold(*before)


def test_runs_on_threads_leave_the_threshold_as_it_was() -> None:
    before = gc.get_threshold()
    go = threading.Barrier(4)

    def run() -> None:
        with long_run():
            go.wait(timeout=10)  # all four go at once

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert gc.get_threshold() == before
