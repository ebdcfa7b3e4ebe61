"""`autoscaler run SERVICE --job ...` as a user runs it: the CLI in a subprocess."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "config" / "examples"
RUN_ID = re.compile(r"^(?P<name>.+)-\d{8}T\d{6}Z-[0-9a-f]{4}$")


def test_a_service_dry_run_names_its_directory_by_a_run_id(tmp_path: Path) -> None:
    """Without --out, the directory is `runs/<run id>` as for any run, not epoch seconds."""
    got = subprocess.run(
        [
            sys.executable,
            "-m",
            "autoscaler",
            "run",
            str(EXAMPLES / "service.yaml"),
            "--dry-run",
            "--job",
            str(EXAMPLES / "job.yaml"),
        ],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert got.returncode == 0, got.stdout + got.stderr
    [run_dir] = (tmp_path / "runs").iterdir()
    match = RUN_ID.match(run_dir.name)
    assert match is not None, run_dir.name
    assert match["name"] == "local-service"
    assert (run_dir / "1-sweep-a" / "report.json").is_file()
