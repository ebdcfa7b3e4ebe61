"""Tasks that say what they need: a bag file's columns (.csv, .tsv) or a sweep's
templates, and the ``categories`` section; bad input named by field, line and column
through ``autoscaler validate`` as a user runs it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autoscaler.categories.sort import ClassIntervals, categorise, requirements_of
from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.config.size import bag_size

TYPES = """\
machine_types:
  - {name: small, price: 1, max_count: 10}
"""


def write(tmp_path: Path, bag: str, table: str | None = None, name: str = "tasks.csv") -> Path:
    if table is not None:
        (tmp_path / name).write_text(textwrap.dedent(table), encoding="utf-8")
    path = tmp_path / "run.yaml"
    path.write_text(f"bag: {bag}\nconstraint: {{budget: 40}}\n{TYPES}", encoding="utf-8")
    return path


def validate(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autoscaler", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


TABLE = """\
command,input_bytes,estimate_s,output_bytes,category
# a comment line
./sim 1,1KB,90,2MB,small
./sim 2,,3m,,
./sim 3,2048,1.5m,700KiB,big
"""


def test_a_csv_bag_carries_its_columns(tmp_path: Path) -> None:
    tasks = expand_bag(load_config(write(tmp_path, "{file: tasks.csv}", TABLE)))
    assert [t.command for t in tasks] == ["./sim 1", "./sim 2", "./sim 3"]
    first, second, third = tasks
    assert (first.input_bytes, first.estimate_s, first.output_bytes) == (1000, 90, 2e6)
    assert first.category == "small"
    assert (second.input_bytes, second.estimate_s, second.output_bytes) == (None, 180, None)
    assert second.category is None
    assert (third.input_bytes, third.output_bytes) == (2048, 700 * 1024)


def test_a_tsv_bag_and_the_categories_it_falls_in(tmp_path: Path) -> None:
    table = "command\testimate_s\n" + "".join(f"t {i}\t{s}\n" for i, s in enumerate([10, 100, 20]))
    tasks = expand_bag(load_config(write(tmp_path, "{file: tasks.tsv}", table, "tasks.tsv")))
    cats = categorise(requirements_of(tasks), ClassIntervals(estimate_s=60))
    assert [c.tasks for c in cats] == [(0, 2), (1,)]


def test_a_sweep_fills_its_needs_templates(tmp_path: Path) -> None:
    bag = (
        "{command: 'sim {n}', sweep: {n: [1, 5]}, "
        "needs: {input_bytes: '{n}KB', estimate_s: '{n}m', output_bytes: 10, category: 'c{n}'}}"
    )
    tasks = expand_bag(load_config(write(tmp_path, bag)))
    assert [(t.input_bytes, t.estimate_s, t.output_bytes, t.category) for t in tasks] == [
        (1000, 60, 10, "c1"),
        (5000, 300, 10, "c5"),
    ]


def test_categories_section_loads(tmp_path: Path) -> None:
    path = write(tmp_path, "{synthetic: 3}")
    path.write_text(
        path.read_text() + "categories: {input_bytes: 1KB, estimate_s: 1m, output_bytes: 500KB}\n"
    )
    cfg = load_config(path)
    assert cfg.categories is not None
    assert (cfg.categories.input_bytes, cfg.categories.estimate_s) == (1000, 60)
    assert cfg.categories.output_bytes == 500_000


CSV, SYN = "{file: tasks.csv}", "{synthetic: 2}"


@pytest.mark.parametrize(
    ("bag", "table", "extra", "expected"),
    [
        (CSV, "command,estimate_s\na,ten\n", "", "bag.file: line 2, column estimate_s"),
        (CSV, "command,output_bytes\na,1\nb,-4\n", "", "line 3, column output_bytes"),
        (CSV, "cmd,estimate_s\na,1\n", "", "unknown column 'cmd'"),
        (CSV, "estimate_s\n1\n", "", "the header has no command column"),
        (CSV, "command,estimate_s\na,1,2\n", "", "line 2: 3 cells, the header has 2"),
        (CSV, "command,estimate_s\n,1\n", "", "line 2, column command: empty"),
        (CSV, "command\n", "", "bag has no tasks"),
        ("{command: 'a {n}', sweep: {n: [1]}, needs: {estimate_s: '{m}'}}", None, "",
         "bag.needs.estimate_s: cannot fill the template"),
        ("{command: 'a {n}', sweep: {n: [x]}, needs: {input_bytes: '{n}'}}", None, "",
         "bag.needs.input_bytes (for {'n': 'x'}): not a size"),
        ("{synthetic: 2, needs: {estimate_s: 3}}", None, "", "bag: needs: only with a command"),
        (SYN, None, "categories: {by: requirements}\n", "categories: give a class interval"),
        (SYN, None, "categories: {estimate_s: 0}\n", "categories.estimate_s"),
        (SYN, None, "categories: {input_bytes: lots}\n", "categories.input_bytes"),
        (SYN, None, "categories: {by: label, estimate_s: 5}\n", "takes no class intervals"),
    ],
)  # fmt: skip
def test_bad_needs_are_named(
    tmp_path: Path, bag: str, table: str | None, extra: str, expected: str
) -> None:
    path = write(tmp_path, bag, table)
    path.write_text(path.read_text() + extra)
    done = validate(path)
    assert done.returncode == 2, done.stdout
    assert expected in done.stderr
    assert "Traceback" not in done.stderr


def test_a_tables_header_is_not_counted_as_a_task(tmp_path: Path) -> None:
    """The service refuses a job over its size before expanding it: a table counts its
    rows, not its header."""
    cfg = load_config(write(tmp_path, "{file: tasks.csv}", TABLE))
    assert cfg.bag is not None
    assert bag_size(cfg.bag, 100) == ("file", len(expand_bag(cfg)))
