"""Machine set-up (issue 23 §1): β measured per type, the agent's reading of a set-up in
a reply, and the config's fields checked where a user writes them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from autoscaler.bootstrap.agent import parse_reply
from autoscaler.core.billing import BillingModel
from autoscaler.core.model import Launch, MachineLaunched, MachineReady, TypeSpec
from autoscaler.core.state import RunState
from tests.conftest import make_config


def test_a_types_start_up_is_measured_once_a_machine_comes_up() -> None:
    """Declared β until a machine of the type is ready; then launch to ready (its
    set-up included), averaged over the machines that came up."""
    types = [TypeSpec("a", 1.0, 4, 120.0), TypeSpec("b", 1.0, 4, 60.0)]
    state = RunState.new(types, BillingModel("fixed", 3600.0), 100.0, 4, [0, 1, 2, 3])
    assert state.fleet.boot_s("a") == 120.0
    state.apply(0.0, Launch("a", 2, "L0"))
    state.apply(0.0, MachineLaunched("a-0", "a", "L0"))
    state.apply(0.0, MachineLaunched("a-1", "a", "L0"))
    state.apply(300.0, MachineReady("a-0"))
    assert state.fleet.boot_s("a") == 300.0
    state.apply(500.0, MachineReady("a-1"))
    assert state.fleet.boot_s("a") == 400.0
    assert state.fleet.boot_s("b") == 60.0  # none of b came up: as declared


def test_the_agent_reads_a_set_up_and_refuses_a_bad_one() -> None:
    reply = parse_reply(json.dumps({"setup": {"commands": ["a", "b"], "timeout_s": 9}}).encode())
    assert reply.setup is not None
    assert reply.setup.commands == ("a", "b")
    assert reply.setup.timeout_s == 9
    assert parse_reply(b"{}").setup is None
    with pytest.raises(ValueError, match="setup"):
        parse_reply(json.dumps({"setup": {"commands": [1]}}).encode())


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("setup", "pip install x", "setup"),
        ("setup_timeout_s", 0, "setup_timeout_s"),
        ("setup_failures_max", 0, "setup_failures_max"),
    ],
)
def test_bad_set_up_fields_are_named(tmp_path: Path, field: str, value: object, named: str) -> None:
    data = make_config().model_dump(mode="json", exclude_none=True)
    data[field] = value
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    out = subprocess.run(
        [sys.executable, "-m", "autoscaler", "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode != 0
    assert named in out.stderr + out.stdout
    assert "Traceback" not in out.stderr


def test_a_types_set_up_runs_after_the_runs() -> None:
    data = make_config().model_dump(mode="json", exclude_none=True)
    data["setup"] = ["sync"]
    data["machine_types"][1]["setup"] = ["pip install x"]
    cfg = type(make_config()).model_validate(data)
    assert cfg.setup_for("slow") == ("sync",)
    assert cfg.setup_for("fast") == ("sync", "pip install x")
