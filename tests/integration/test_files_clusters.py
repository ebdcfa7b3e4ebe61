"""Task files on the one-node Grid Engine and Slurm (issue 23 §2) with a shared file
system (``shared_fs: true``): nothing is staged over HTTP, each task's inputs are
links to the files in place, its outputs are moved into the run directory per attempt
and the counted attempt is renamed to ``outputs/<task>/``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration import sge as sge_harness
from tests.integration import slurm as slurm_harness
from tests.integration.daemon_helpers import journal_rows
from tests.integration.test_sge_daemon import run_to_its_end

pytestmark = pytest.mark.integration

N = 4


def with_files(config: Path, section: str) -> Path:
    """The cluster's test config with a command bag of files on its shared file system."""
    data: dict[str, Any] = yaml.safe_load(config.read_text())
    (config.parent / "inputs").mkdir()
    for i in range(N):
        (config.parent / "inputs" / f"in-{i}.txt").write_text(f"input {i}\n")
    data["bag"] = {
        "command": "readlink in.txt > where.txt; cat in.txt > out/result.txt",
        "sweep": {"i": list(range(N))},
        "files": {
            "inputs": [{"path": "inputs/in-{i}.txt", "as": "in.txt"}],
            "outputs": ["where.txt", "out/*"],
        },
    }
    data["bag"]["command"] = "mkdir -p out; " + data["bag"]["command"] + "; : {i}"
    data[section]["shared_fs"] = True
    config.write_text(yaml.safe_dump(data), encoding="utf-8")
    return config


def check_outputs(run_dir: Path, inputs: Path) -> None:
    report = json.loads((run_dir / "report.json").read_text())
    assert report["tasks_done"] == N
    outputs = run_dir / "outputs"
    assert sorted(p.name for p in outputs.iterdir()) == [str(i) for i in range(N)]
    for i in range(N):
        assert (outputs / str(i) / "out" / "result.txt").read_text() == f"input {i}\n"
        # read in place: the task's input was a link to the file on the shared system
        assert (outputs / str(i) / "where.txt").read_text().strip() == str(inputs / f"in-{i}.txt")
    assert report["outputs"]["files"] == 2 * N
    assert len([d for _, _, d in journal_rows(run_dir, "TaskDone") if d["stored"]]) == N
    log = (run_dir / "log.jsonl").read_text()
    assert '"outputs committed"' in log


@sge_harness.XDIST_GROUP
def test_grid_engine_with_a_shared_file_system(sge: sge_harness.GridEngine, tmp_path: Path) -> None:
    config = with_files(sge_harness.sge_config(tmp_path, 1), "sge")
    run_dir = tmp_path / "run"
    run_to_its_end(config, run_dir)
    check_outputs(run_dir, tmp_path / "inputs")


@slurm_harness.XDIST_GROUP
def test_slurm_with_a_shared_file_system(slurm: slurm_harness.Slurm, tmp_path: Path) -> None:
    config = with_files(slurm_harness.slurm_config(tmp_path, 1), "slurm")
    run_dir = tmp_path / "run"
    run_to_its_end(config, run_dir)
    check_outputs(run_dir, tmp_path / "inputs")
