"""EC2 with ``bootstrap: user-data`` end to end (issue 39 §5): the daemon launches
instances on the moto server, and each instance's own user data, as EC2 stored it, runs
here with ``sh``: it registers the instance with its launch's token over HTTPS, the
controller's certificate checked against the run's CA pinned in the script, and the
agent works the bag with its machine's token.

What stands in for the instance: a small IMDSv2 server that gives the instance's id
(``test_userdata.FakeImds``), a directory of the test for ``/var/lib/autoscaler``, this
interpreter for ``python3``, and no power-off (the script would power this host off).
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler.bootstrap.credentials import launch_of, machine_token
from tests.integration.daemon_helpers import journal_rows, run_id_of, start_daemon, wait_for
from tests.integration.ec2_world import N_TASKS, Ec2World
from tests.integration.test_ec2_daemon import finish, report_of
from tests.integration.test_userdata import FakeImds

pytestmark = pytest.mark.integration

POWEROFF = 'if [ "$(id -u)" -eq 0 ]; then poweroff; else sudo -n poweroff; fi'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def as_this_host_runs_it(user_data: bytes, remote: Path, imds: FakeImds) -> str:
    """The instance's script with the stand-ins of the module doc put in."""
    script = (gzip.decompress(user_data) if user_data[:2] == b"\x1f\x8b" else user_data).decode()
    swaps = {
        "DIR=/var/lib/autoscaler\n": f"DIR={remote}\n",
        "PY=python3\n": f"PY={sys.executable}\n",
        "'http://169.254.169.254'": imds.url,
        "http://169.254.169.254 <<": f"{imds.url} <<",
        POWEROFF: ":",
        "/var/lib/autoscaler/": f"{remote}/",
    }
    for old, new in swaps.items():
        script = script.replace(old, new)
    assert "poweroff;" not in script
    assert "169.254.169.254" not in script.split("AUTOSCALER_AGENT")[0]
    return script


def test_user_data_instances_register_and_run_the_bag_over_https(
    world: Ec2World, tmp_path: Path
) -> None:
    port = free_port()
    config = world.config(
        ec2={"bootstrap": "user-data", "controller_url": f"https://127.0.0.1:{port}", "ssh": None},
        daemon={"port": port},
    )
    run_dir = tmp_path / "run"
    daemon = start_daemon(str(config), "--out", str(run_dir))
    scripts: dict[str, subprocess.Popen[bytes]] = {}
    imds: list[FakeImds] = []
    try:
        wait_for(lambda: (run_dir / "journal.sqlite").exists(), 60, "the journal")
        wait_for(lambda: bool(journal_rows(run_dir, "MachineLaunched")), 60, "a launch")
        run_id = run_id_of(run_dir)
        while daemon.poll() is None:
            for instance in set(world.running(run_id)) - set(scripts):
                data = world.ec2.describe_instance_attribute(
                    InstanceId=instance, Attribute="userData"
                )["UserData"]["Value"]
                server = FakeImds(instance)
                imds.append(server)
                remote = tmp_path / instance
                remote.mkdir()
                path = tmp_path / f"{instance}.sh"
                path.write_text(as_this_host_runs_it(base64.b64decode(data), remote, server))
                with (tmp_path / f"{instance}.out").open("wb") as out:
                    scripts[instance] = subprocess.Popen(
                        ["sh", str(path)],
                        stdin=subprocess.DEVNULL,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.wait(0.5)
        finish(daemon)
        for script in scripts.values():
            script.wait(60)
    finally:
        if daemon.poll() is None:
            daemon.kill()
        for script in scripts.values():
            if script.poll() is None:
                os.killpg(script.pid, signal.SIGKILL)
                script.wait()
        for server in imds:
            server.stop()
    report = report_of(run_dir)
    assert report["tasks_done"] == N_TASKS
    assert scripts
    registered = dict(
        line.split(" ", 1) for line in (run_dir / "registered").read_text().splitlines()
    )
    assert set(registered) == set(scripts)  # each instance registered, once
    secret = (run_dir / "token").read_text().strip()
    for instance in scripts:
        remote = tmp_path / instance
        held = (remote / "token").read_text().strip()
        assert launch_of(secret, held) is not None  # its launch's token, never the secret
        assert (remote / "ca.pem").read_text() == (run_dir / "ca.pem").read_text()
        log = (remote / "agent.log").read_text()
        assert "machine registered" in log
        assert machine_token(secret, instance) not in log
    log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    assert not [e for e in log if e["event"].startswith("agent refused")]
    assert {e["machine"] for e in log if e["event"] == "machine registered"} == set(scripts)
