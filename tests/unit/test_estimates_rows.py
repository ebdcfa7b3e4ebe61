"""``benchmarks.estimates``' rows for issue 38: ``--boots`` and ``--factors``."""

from __future__ import annotations

import subprocess
import sys

import pytest

from benchmarks.bats_scenarios import REPO
from benchmarks.estimates import Row, RunResult, main, make_config, results_table


def test_a_boot_share_sets_both_types_boot_time() -> None:
    cfg = make_config("normal", "fixed", 10, 100.0, boot=0.25)
    assert [t.boot_s for t in cfg.machine_types] == [900.0, 900.0]
    assert [t.boot_s for t in make_config("normal", "fixed", 10, 100.0).machine_types] == [
        120.0,
        120.0,
    ]


def test_runs_replicate_unless_told_not_to() -> None:
    """``--no-tail-replication``: the rows' runs without BaTS's tail phase, to set the
    first plan's forecast of the end against runs it describes (it leaves copies out)."""
    assert make_config("normal", "fixed", 10, 100.0).tail_replication
    assert not make_config("normal", "fixed", 10, 100.0, replicate=False).tail_replication


def test_boot_rows_print_with_their_boot_factor_and_the_issue_targets(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = "--seeds 1 --jobs 1 --tasks 200 --dists normal --billing per_second"
    assert main([*argv.split(), "--boots", "0.1,0.4", "--factors", "1.5"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith("normal  per_second")]
    # the B_min table's row and the results table's, per boot share
    assert [r[2] for r in rows] == ["0.1", "0.4", "0.1", "0.4"]
    results = rows[2:]
    assert [r[3] for r in results] == ["1.5", "1.5"]
    assert all(r[-1] == "ok" or "miss" in r for r in results)
    assert "median cost err within ±10%" in out
    assert "boot/ATU" in out
    assert "issue 38" in out


def _run(factor: float) -> RunResult:
    return RunResult(
        dist="normal",
        billing="fixed",
        factor=factor,
        seed=0,
        b_min=100.0,
        budget=100.0 * factor,
        cost=100.0,
        makespan_s=1000.0,
        finished=True,
        within_budget=True,
        cost_err=0.2,
        makespan_err=-0.05,
        cost_inside=False,
        makespan_inside=True,
        sampling_share=0.3,
        over_clairvoyant=1.1,
        warned_early=None,
        risk_early=None,
        risk_said=False,
        false_alarm=False,
        wall_s=0.1,
    )


def test_a_row_names_the_issue_targets_it_misses() -> None:
    table = results_table([Row("normal", "fixed", 1.1, (_run(1.1),), 0.25)], checked=True)
    assert table.splitlines()[-1].endswith("miss $, $ cov")


def test_without_the_new_options_the_table_is_as_it_was() -> None:
    table = results_table([Row("normal", "fixed", 1.1, (_run(1.1),))])
    assert "boot" not in table
    assert "issue 38" not in table
    assert table.splitlines()[0].split()[:3] == ["dist", "billing", "xB_min"]


@pytest.mark.parametrize(
    ("flag", "value"),
    [
        ("--boots", "0"),
        ("--boots", "x"),
        ("--factors", "-1"),
        ("--boots", "1.5"),
        ("--max-count", "0"),
    ],
)
def test_a_bad_share_or_factor_is_refused_by_name(flag: str, value: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.estimates", flag, value],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert flag in proc.stderr
    assert value in proc.stderr
    assert "Traceback" not in proc.stderr
