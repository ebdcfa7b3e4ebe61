"""Spot prices in a config, through the ``autoscaler`` command in a process of its own:
``ec2.spot_prices`` and ``emulator.spot_prices`` (a list of points or a CSV file), and
each bad value refused in one line that names the field, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.test_cli_process import EXAMPLES, autoscaler

EXAMPLE = EXAMPLES / "spot_market.yaml"


def example(tmp_path: Path, ec2: dict[str, Any] | None = None, **traces: object) -> Path:
    """The spot example with ``ec2`` fields and ``emulator.spot_prices`` replaced."""
    data = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    data["ec2"].update(ec2 or {})
    if traces:
        data["emulator"]["spot_prices"] = traces
    path = tmp_path / "spot.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def refused(path: Path) -> str:
    """What ``validate`` says of a bad config: exit 2 and one line naming the field."""
    done = autoscaler("validate", str(path))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 2, done.stderr  # "error: FILE", then the one problem
    return lines[1].strip()


@pytest.mark.parametrize(
    ("ec2", "traces", "said"),
    [
        (
            {"spot_prices": "live"},
            {},
            "ec2.spot_prices: must be 'config' or 'market' (got 'live')",
        ),
        (
            {},
            {"spot": [[0, 0.02], [600, 0.03], [300, 0.04]]},
            "emulator.spot_prices.spot[2]: times must increase (300 s after 600 s)",
        ),
        (
            {},
            {"spot": [[0, 0.02], [600, -0.01]]},
            "emulator.spot_prices.spot[1]: price -0.01 must be 0 or more",
        ),
        (
            {},
            {"gpu": [[0, 0.02]]},
            "emulator.spot_prices names unknown machine type 'gpu' (known: od, spot)",
        ),
        (
            {},
            {"spot": [[0, 0.02], [600, 0.2]]},
            "emulator.spot_prices.spot[1]: price 0.2 is above the type's cap 0.085",
        ),
    ],
    ids=["unknown-setting", "time-goes-back", "negative-price", "unknown-type", "above-cap"],
)
def test_a_bad_spot_price_setting_is_named_in_one_line(
    tmp_path: Path, ec2: dict[str, Any], traces: dict[str, object], said: str
) -> None:
    assert refused(example(tmp_path, ec2, **traces)).startswith(said)


def test_a_bad_line_of_a_trace_file_is_named_with_the_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "prices.csv").write_text("time_s,price\n0,0.02\n60,cheap\n", encoding="utf-8")
    line = refused(example(tmp_path, spot="prices.csv"))
    assert line.startswith("emulator.spot_prices.spot: ")
    assert line.endswith("prices.csv line 3: not time_s,price (got '60,cheap')")


def test_a_missing_trace_file_is_named(tmp_path: Path) -> None:
    line = refused(example(tmp_path, spot="nowhere.csv"))
    assert line.startswith("emulator.spot_prices.spot: cannot read ")
    assert "nowhere.csv" in line


def test_a_max_price_is_the_cap_a_trace_may_reach(tmp_path: Path) -> None:
    """With max_price (USD an hour, the ATU an hour here), the cap is it, not the price."""
    path = example(
        tmp_path,
        {
            "types": {
                "od": {"instance_type": "c5.large"},
                "spot": {"instance_type": "c5.large", "spot": True, "max_price": 0.05},
            }
        },
        spot=[[0, 0.06]],
    )
    assert refused(path).startswith(
        "emulator.spot_prices.spot[0]: price 0.06 is above the type's cap 0.05"
    )


def test_a_trace_file_next_to_the_config_dry_runs_as_its_points(tmp_path: Path) -> None:
    """A CSV trace (relative to the config) and the same points inline give one run."""
    (tmp_path / "prices.csv").write_text(
        "# c5.large, us-east-1\ntime_s,price\n0,0.026\n1800,0.04\n3600,0.085\n", encoding="utf-8"
    )
    reports = []
    for name, trace in (
        ("file", "prices.csv"),
        ("inline", [[0, 0.026], [1800, 0.04], [3600, 0.085]]),
    ):
        out = tmp_path / name
        done = autoscaler("run", str(example(tmp_path, spot=trace)), "--dry-run", "--out", str(out))
        assert done.returncode == 0, done.stderr
        reports.append(json.loads((out / "report.json").read_text()))
        assert "Spot prices: the dry run's trace, read" in (out / "report.md").read_text()
    file, inline = reports
    assert file["spot_prices"] == inline["spot_prices"]
    assert file["cost"] == inline["cost"]
    spot = file["spot_prices"]
    assert spot["source"] == "trace"
    assert spot["types"]["spot"]["last_price"] == 0.085  # the run outlasted the rise
    assert spot["types"]["spot"]["billed"] < spot["types"]["spot"]["at_cap"]


def test_the_config_s_prices_are_left_alone_without_a_market(tmp_path: Path) -> None:
    """No ec2.spot_prices: market and no trace: the report has no spot_prices key, as
    before (config/examples/ec2.yaml has a spot type)."""
    out = tmp_path / "run"
    done = autoscaler("run", "config/examples/ec2.yaml", "--dry-run", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert "spot_prices" not in json.loads((out / "report.json").read_text())
    assert "Spot prices" not in (out / "report.md").read_text()
