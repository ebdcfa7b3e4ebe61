"""The EC2 world of the integration tests, as a fixture: a moto server (behind a
``FaultProxy``) for the EC2 API, a real sshd every instance is reached through, a key,
and the run config that ties them together.

Registered by ``pytest_plugins``: a test takes a ``world`` parameter.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from autoscaler.providers.ec2 import RUN_TAG
from tests.integration.ec2_faults import FaultProxy
from tests.integration.notices import NoticeServer
from tests.integration.services import FAKE_AWS_ENV, MotoServer
from tests.integration.sshd import SshServer

ATU = 60.0
N_TASKS = 40
BUDGET = 30.0


@dataclass
class Ec2World:
    moto: MotoServer
    proxy: FaultProxy
    sshd: SshServer
    ec2: Any  # a boto3 client straight to moto, for the test's own looks
    tmp: Path
    remote_dir: Path
    secret: str
    notices: NoticeServer  # the instances' metadata: spot interruption notices

    def config(self, **overrides: Any) -> Path:
        images = self.ec2.describe_images(Owners=["amazon"])["Images"]
        subnets = [s["SubnetId"] for s in self.ec2.describe_subnets()["Subnets"]][:2]
        data: dict[str, Any] = {
            "name": "ec2it",
            "bag": {"synthetic": N_TASKS},
            "plots": False,  # as daemon_helpers.local_config
            "constraint": {"budget": BUDGET},
            "machine_types": [
                {"name": "small", "price": 1, "max_count": 3, "boot_s": 5},
                {"name": "fast", "price": 3, "max_count": 3, "boot_s": 5},
            ],
            "billing": {"mode": "fixed", "atu_s": ATU},
            "provider": "ec2",
            "ec2": {
                "region": "us-east-1",
                "endpoint_url": self.proxy.endpoint,
                "ami": images[0]["ImageId"],
                "subnets": subnets,
                "types": {
                    "small": {"instance_type": "t3.micro"},
                    "fast": {"instance_type": "c5.large", "spot": True},
                },
                "max_attempts": 6,
                "notice_url": self.notices.url,  # loopback, never the real metadata
                "notice_every_s": 1,
                "ssh": {
                    "user": self.sshd.user,
                    "key_file": str(self.sshd.client_key),
                    "connect": f"127.0.0.1:{self.sshd.port}",
                    "remote_dir": str(self.remote_dir),
                    "python": sys.executable,
                    "poweroff_on_exit": False,
                    "timeout_s": 60,
                },
            },
            "monitoring_interval_s": 10,
            "tail_replication": False,
            "daemon": {"heartbeat_s": 0.5, "lost_after_s": 8, "orphan_after_s": 60},
            "emulator": {
                "seed": 5,
                "runtime": {"dist": "normal", "mean_s": 3, "sd_s": 0.5},
                "speed": {"small": 1, "fast": 2},
            },
        }
        for key, value in overrides.items():
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        path = self.tmp / "ec2.yaml"
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        return path

    def instances(self, run_id: str) -> list[dict[str, Any]]:
        pages = self.ec2.get_paginator("describe_instances").paginate(
            Filters=[{"Name": f"tag:{RUN_TAG}", "Values": [run_id]}]
        )
        return [i for page in pages for r in page["Reservations"] for i in r["Instances"]]

    def running(self, run_id: str) -> list[str]:
        return [
            i["InstanceId"]
            for i in self.instances(run_id)
            if i["State"]["Name"] in ("pending", "running")
        ]

    def agent_pids(self) -> list[int]:
        """Agents started over SSH into this test's remote directory."""
        marker = str(self.remote_dir).encode()
        out = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    cmd = (entry / "cmdline").read_bytes()
                    if marker in cmd and b"agent.py" in cmd:
                        out.append(int(entry.name))
        return out


@pytest.fixture
def world(
    moto: MotoServer, sshd: SshServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Ec2World]:
    secret = "fake-secret-" + secrets.token_hex(8)  # unique, so a leak can be grepped for
    for key, value in FAKE_AWS_ENV.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    moto.reset()
    ec2 = boto3.client("ec2", endpoint_url=moto.endpoint, region_name="us-east-1")
    remote = tmp_path / "remote"
    remote.mkdir(mode=0o700)
    with FaultProxy(moto.endpoint) as proxy, NoticeServer() as notices:
        w = Ec2World(moto, proxy, sshd, ec2, tmp_path, remote, secret, notices)
        try:
            yield w
        finally:
            for pid in w.agent_pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                reservations = ec2.describe_instances()["Reservations"]
                ids = [i["InstanceId"] for r in reservations for i in r["Instances"]]
                if ids:
                    ec2.terminate_instances(InstanceIds=ids)
