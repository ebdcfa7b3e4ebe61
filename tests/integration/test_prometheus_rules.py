"""infra/prometheus/alerts.yml through Prometheus's own tool: ``promtool check rules``
parses every rule, and ``promtool test rules`` fires them on the sample series of
infra/prometheus/alerts_test.yml (tests/run.sh installs Debian's ``prometheus`` for it)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.integration.services import missing

pytestmark = pytest.mark.integration

RULES = Path(__file__).resolve().parents[2] / "infra" / "prometheus"


@pytest.mark.parametrize(
    "check", [["check", "rules", "alerts.yml"], ["test", "rules", "alerts_test.yml"]]
)
def test_promtool_takes_the_alerting_rules(check: list[str]) -> None:
    tool = shutil.which("promtool")
    if tool is None:
        missing("promtool is not installed (Debian's prometheus package)")
    done = subprocess.run(
        [str(tool), *check], cwd=RULES, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout, done.stdout
