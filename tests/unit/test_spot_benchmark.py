"""benchmarks/spot.py, issue 37's spot figure: its rows print, with targets checked."""

from __future__ import annotations

import pytest

from benchmarks.spot import TRACES, main


def test_the_spot_rows_print_beside_on_demand_alone(capsys: pytest.CaptureFixture[str]) -> None:
    """One seed, a small bag, one high reclaim rate: for each job a baseline row and a
    row per trace, every run kept (within budget, deadline met) with every task done,
    and spot at the flat trace's price (under a third of on-demand's) cheaper than
    on-demand alone."""
    assert main(["--seeds", "1", "--rates", "0.5", "--tasks", "120", "--budget", "2"]) == 0
    out = capsys.readouterr().out
    # job, machines (2 or 3 words), then from the right: trace, reclaims/h, cost, × od,
    # makespan, × od, kept, all done, taken back, held
    rows = [line.split() for line in out.splitlines() if line.startswith(("budget ", "deadline "))]
    for job in ("budget", "deadline"):
        traces = {r[-10]: float(r[-8]) for r in rows if r[0] == job}
        assert list(traces) == ["-", *TRACES]  # "-": on-demand alone, first
        assert traces["flat"] < traces["-"]
    assert all(r[-4] == "1/1" and r[-3] == "1/1" for r in rows)
    assert "targets: all met" in out
