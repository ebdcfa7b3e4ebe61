"""Task files on EC2 through moto (issue 23 §2): inputs fetched through each instance's
SSH tunnel from the daemon, outputs written by the agents to moto's S3 with presigned
PUT URLs (no credentials on the machine), per attempt, the counted attempt copied under
``<prefix>/<task>/`` and every attempt's objects deleted."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import boto3
import pytest

from tests.integration.daemon_helpers import journal_rows, start_daemon
from tests.integration.ec2_world import Ec2World
from tests.integration.test_ec2_daemon import check_no_secrets, check_spend, finish

pytestmark = pytest.mark.integration

N = 6


def test_outputs_go_to_s3_with_presigned_urls(world: Ec2World) -> None:
    s3 = boto3.client("s3", endpoint_url=world.moto.endpoint, region_name="us-east-1")
    s3.create_bucket(Bucket="results")
    (world.tmp / "params.txt").write_text("alpha=1\n")
    config = world.config(
        bag={
            "command": "cat params.txt > out-{i}.txt; mkdir -p logs; echo {i} > logs/run.log",
            "sweep": {"i": list(range(N))},
            "synthetic": None,  # the world's bag is synthetic: this one replaces it
            "files": {
                "inputs": ["params.txt"],
                "outputs": ["out-*.txt", "logs/*.log"],
                "to": "s3://results/sweep-1",
                "endpoint_url": world.moto.endpoint,  # moto's S3, on loopback
            },
        },
    )
    run_dir = world.tmp / "run"
    proc: subprocess.Popen[str] = start_daemon(str(config), "--out", str(run_dir))
    out = finish(proc)
    assert proc.returncode == 0, out[-3000:]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["tasks_done"] == N, out[-3000:]
    check_spend(run_dir)

    keys = {
        o["Key"]: o["Size"]
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket="results")
        for o in page.get("Contents", [])
    }
    expected = {f"sweep-1/{i}/out-{i}.txt": 8 for i in range(N)}
    expected |= {f"sweep-1/{i}/logs/run.log": 2 for i in range(N)}
    assert keys == expected  # one copy per task, no attempt left
    body = s3.get_object(Bucket="results", Key="sweep-1/3/out-3.txt")["Body"].read()
    assert body == b"alpha=1\n"
    summary = report["outputs"]
    assert summary["bytes"] == sum(expected.values())
    assert [s["where"] for s in summary["stored"]] == [
        f"s3://results/sweep-1/{i}/" for i in range(N)
    ]
    stored = [d["stored"] for _, _, d in journal_rows(run_dir, "TaskDone")]
    assert len(stored) == N
    assert all(s is not None and s["files"] == 2 for s in stored)
    # The agents held no AWS credentials: their environment and logs never saw any.
    assert not (Path(world.remote_dir) / ".aws").exists()
    check_no_secrets(world, run_dir)
