"""The hybrid example for real: a Slurm cluster (the one-node Slurm of
``infra/slurm/setup.sh``) and EC2 (moto, agents over SSH) in one run, with a budget and a
deadline; the job split between them by the providers' offers (Slurm's from its own
scheduler, ``sbatch --test-only``), each part run on its provider's machines.

``config/examples/hybrid.yaml`` with its ``providers`` pointed at the test cluster and
moto, its tasks a few seconds long (Slurm cannot be sped up).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.daemon_helpers import (
    ROOT,
    assert_deadline_end,
    journal_rows,
    run_id_of,
    start_daemon,
    wait_for,
)
from tests.integration.ec2_world import Ec2World
from tests.integration.slurm import XDIST_GROUP, Slurm, jobs_of
from tests.integration.test_ec2_daemon import AGENT_GONE_S, finish

pytestmark = [pytest.mark.integration, XDIST_GROUP]


def hybrid_config(world: Ec2World) -> Path:
    """The example on the test Slurm and moto: 24 tasks, 2 nodes, 3 instances."""
    data: dict[str, Any] = yaml.safe_load((ROOT / "config/examples/hybrid.yaml").read_text())
    ec2 = yaml.safe_load(world.config().read_text())
    aws = {**ec2["ec2"], "kind": "ec2", "types": {"c5": {"instance_type": "c5.large"}}}
    data["providers"] = {
        "campus": {"kind": "slurm", "types": {"node": {"partition": "as_small"}}},
        "aws": aws,
    }
    data["machine_types"] = [
        {"name": "node", "provider": "campus", "price": 0, "max_count": 2, "boot_s": 5},
        {"name": "c5", "provider": "aws", "price": 1, "max_count": 3, "boot_s": 5},
    ]
    data["jobs"] = [
        {
            "name": "sweep",
            "bag": {"synthetic": 24},
            "constraint": {"deadline_s": 40, "budget": 10},
            "task_s": {"node": 3, "c5": 1.5},
        }
    ]
    data["billing"] = {"mode": "fixed", "atu_s": "2m"}
    for key in ("monitoring_interval_s", "tail_replication", "daemon"):
        data[key] = ec2[key]
    data["emulator"] = {"seed": 5, "runtime": {"dist": "normal", "mean_s": 3, "sd_s": 0.3}}
    path = world.tmp / "hybrid.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_the_hybrid_example_runs_on_slurm_and_ec2_split_by_their_offers(
    slurm: Slurm, world: Ec2World
) -> None:
    config = hybrid_config(world)
    run_dir = world.tmp / "run"
    proc = start_daemon(str(config), "--out", str(run_dir))
    out = finish(proc)
    assert proc.returncode == 0, out[-3000:]
    said = [line for line in out.splitlines() if line.startswith("offers: job sweep")]
    assert said, out[-3000:]
    report = assert_deadline_end(run_dir, 24)
    run_id = run_id_of(run_dir)
    parts = {j["name"]: j for j in report["jobs"]}
    assert set(parts) <= {"sweep@campus", "sweep@aws"}
    assert sum(j["tasks"] for j in parts.values()) == 24
    providers = report["providers"]
    assert providers["campus"]["kind"] == "slurm"
    assert providers["aws"]["kind"] == "ec2"
    for name, part in parts.items():
        provider = name.split("@")[1]
        assert providers[provider]["tasks_run"] >= part["done"]
        assert providers[provider]["machines"] > 0
    assert providers["campus"]["cost"] == 0
    assert report["cost"] <= 10
    launched = {d["provider"] for _, _, d in journal_rows(run_dir, "MachineLaunched")}
    assert launched == {p.split("@")[1] for p in parts}
    print(f"\nhybrid: {said[0][len('offers: ') :]}; cost {report['cost']}")
    assert not world.running(run_id), "an instance of the run is still running"
    wait_for(lambda: jobs_of(run_id) == {}, 30, "the run's Slurm jobs to leave the queue")
    wait_for(lambda: not world.agent_pids(), AGENT_GONE_S, "every EC2 agent of the run to exit")
