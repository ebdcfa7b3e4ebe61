"""Scoped agents' channels (issue 39 §5): each machine's token speaks for that machine
only, a result for a task its machine was not given is refused, an agent started from
user data registers its instance with its launch's token, and a direct agent trusts only
a controller whose certificate the run's CA issued.

Real processes: the daemon (``autoscaler run``) with local agents, real agent processes
(``bootstrap/agent.py``) and raw HTTP clients speaking the agents' protocol; the
registration and TLS tests play the daemon's side of a real dispatcher's queue."""

from __future__ import annotations

import http.client
import json
import os
import queue
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoscaler.bootstrap.credentials import launch_token, machine_token
from autoscaler.bootstrap.tls import run_ca
from autoscaler.core.task_files import FileSpec, InputFile
from autoscaler.run.dispatch import MAX_MACHINE_ID, Dispatcher
from autoscaler.run.polls import Poll
from tests.integration.daemon_helpers import (
    ROOT,
    assigned_rows,
    journal_rows,
    kill_agents,
    local_config,
    outputs,
    run_id_of,
    start_daemon,
    wait_for,
)
from tests.integration.test_dispatcher_loop import staging_of

pytestmark = pytest.mark.integration

AGENT = ROOT / "bootstrap" / "agent.py"
SECRET = "run-secret-for-the-test"
FORGED_S = 4321.5  # a runtime no real result has: the forged result's mark


def port_of(run_dir: Path) -> int:
    import sqlite3

    con = sqlite3.connect(str(run_dir / "journal.sqlite"))
    try:
        row = con.execute("SELECT value FROM meta WHERE key='port'").fetchone()
    finally:
        con.close()
    return int(json.loads(row[0]))


def post(
    port: int, path: str, body: dict[str, Any], token: str, tls: ssl.SSLContext | None = None
) -> tuple[int, dict[str, Any]]:
    if tls is None:
        conn: http.client.HTTPConnection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    else:
        conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=30, context=tls)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        conn.request("POST", path, json.dumps(body), headers)
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read() or b"{}")
    finally:
        conn.close()


def agent(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(AGENT), "--orphan-after-s", "20", "--heartbeat-s", "0.2", *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_machines_token_speaks_for_that_machine_only(tmp_path: Path) -> None:
    """In a real run: machine A's token claiming machine B is refused (401, logged); a
    real agent with A's token started as B exits 2; A reporting a task of B's is
    acknowledged, refused and never counted; the run ends as if none of it happened."""
    config = local_config(tmp_path, bag={"synthetic": 60})
    run_dir = tmp_path / "run"
    daemon = start_daemon(str(config), "--out", str(run_dir))
    try:
        wait_for(lambda: len(journal_rows(run_dir, "MachineReady")) >= 2, 60, "two machines")
        ready = [d["machine"] for _, _, d in journal_rows(run_dir, "MachineReady")]
        a, b = ready[:2]
        secret = (run_dir / "token").read_text().strip()
        a_token = machine_token(secret, a)
        port = port_of(run_dir)
        claim_b = {"machine": b, "results": [], "running": [], "wait_s": 0}
        assert post(port, "/v1/poll", claim_b, a_token)[0] == 401
        impostor = agent(
            "--url", f"http://127.0.0.1:{port}", "--machine", b, env={"AUTOSCALER_TOKEN": a_token}
        )
        assert impostor.returncode == 2
        assert "token refused" in impostor.stderr
        wait_for(
            lambda: any(d["machine"] == b for _, _, d in assigned_rows(run_dir)), 60, "B's task"
        )
        b_task = next(d["task"] for _, _, d in assigned_rows(run_dir) if d["machine"] == b)
        forged = {"run": 1, "task": b_task, "exit_code": 0, "runtime_s": FORGED_S}
        as_a = {"machine": a, "results": [forged], "running": [], "wait_s": 0}
        status, answer = post(port, "/v1/poll", as_a, a_token)
        assert (status, answer["ack"], answer["refused"]) == (200, True, [1])
        assert daemon.wait(180) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
        kill_agents(run_id_of(run_dir))
    assert not [o for o in outputs(run_dir) if o["runtime_s"] == FORGED_S]
    done = [d for _, _, d in journal_rows(run_dir, "TaskDone") if d["task"] == b_task]
    assert len(done) == 1  # done once, by the run that really ran it
    log = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    refusals = [e for e in log if e["event"].startswith("agent refused")]
    assert {e["machine"] for e in refusals} == {b}
    assert len(refusals) == 2  # the raw claim and the real agent's first poll
    refused = [e for e in log if e["event"].startswith("result refused")]
    assert [(e["machine"], e["task"]) for e in refused] == [(a, b_task)]


class Played:
    """A real dispatcher whose queue the test answers as the daemon would: ``release``
    to every poll (the agent exits 0)."""

    def __init__(self, tmp_path: Path, tls: ssl.SSLContext | None = None) -> None:
        self.d = Dispatcher(SECRET, queue.SimpleQueue(), tls=tls, registry=tmp_path / "registered")
        self.polls: list[Poll] = []
        self.d.start()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while (poll := self.d.inbox.get()) is not None:
            assert isinstance(poll, Poll)
            self.polls.append(poll)
            poll.reply.send({"ack": True, "tasks": [], "cancel": [], "release": True})

    def machines(self, **launches: str) -> None:
        self.d.allowed.update(launches)
        self.d.launches.update(launches)

    def close(self) -> None:
        self.d.inbox.put(None)
        self.thread.join(30)
        self.d.close()


@pytest.fixture
def played(tmp_path: Path) -> Iterator[Played]:
    world = Played(tmp_path)
    yield world
    world.close()


def test_an_agent_registers_its_instance_with_its_launchs_token(
    played: Played, tmp_path: Path
) -> None:
    """A real agent with launch L0's token registers i-1 (one of L0's) and polls with
    i-1's token; as i-3 (L1's) it is refused and exits 2; a second registration of i-1
    (another nonce) is refused, its first nonce answered again."""
    played.machines(**{"i-1": "L0", "i-2": "L0", "i-3": "L1"})
    held = tmp_path / "launch-token"
    held.write_text(launch_token(SECRET, "L0") + "\n")
    url = played.d.url
    first = agent("--url", url, "--machine", "i-1", "--launch-token-file", str(held))
    assert first.returncode == 0, first.stderr
    assert "machine registered" in first.stderr
    assert [p.machine for p in played.polls] == ["i-1"]
    other = agent("--url", url, "--machine", "i-3", "--launch-token-file", str(held))
    assert other.returncode == 2
    assert "registration refused" in other.stderr
    port = played.d.address[1]
    again = post(
        port, "/v1/register", {"machine": "i-1", "nonce": "n2"}, launch_token(SECRET, "L0")
    )
    assert again[0] == 403
    twice = [
        post(port, "/v1/register", {"machine": "i-2", "nonce": "n1"}, launch_token(SECRET, "L0"))
        for _ in range(2)
    ]
    assert twice == [(200, {"token": machine_token(SECRET, "i-2")})] * 2
    forged = post(port, "/v1/register", {"machine": "i-2", "nonce": "n1"}, "L0." + "0" * 64)
    assert forged[0] == 401
    assert (tmp_path / "registered").read_text().split()[::2] == ["i-1", "i-2"]
    assert Dispatcher(
        SECRET, queue.SimpleQueue(), registry=tmp_path / "registered"
    ).registered.keys() == {"i-1", "i-2"}


def test_a_direct_agent_trusts_only_the_runs_ca(tmp_path: Path) -> None:
    """Over https a real agent pinned to the run's CA registers and polls; pinned to
    another run's CA it refuses the controller (exit 2) and sends it nothing."""
    server = run_ca(tmp_path, ["127.0.0.1"])
    world = Played(tmp_path, tls=server.context())
    try:
        world.machines(**{"i-1": "L0", "i-2": "L0"})
        assert world.d.url.startswith("https://")
        held = tmp_path / "launch-token"
        held.write_text(launch_token(SECRET, "L0") + "\n")
        ca = tmp_path / "ca.pem"
        url = world.d.url
        trusting = agent(
            "--url", url, "--machine", "i-1", "--launch-token-file", str(held), "--ca-file", str(ca)
        )
        assert trusting.returncode == 0, trusting.stderr
        assert [p.machine for p in world.polls] == ["i-1"]
        other = tmp_path / "other"
        other.mkdir()
        run_ca(other, ["127.0.0.1"])
        wary = agent(
            "--url",
            url,
            "--machine",
            "i-2",
            "--launch-token-file",
            str(held),
            "--ca-file",
            str(other / "ca.pem"),
        )
        assert wary.returncode == 2
        assert "controller certificate refused" in wary.stderr
        assert [p.machine for p in world.polls] == ["i-1"]
        assert "i-2" not in world.d.registered
    finally:
        world.close()


def test_a_machines_token_fetches_and_stores_only_its_own_task_files(
    played: Played, tmp_path: Path
) -> None:
    """Machine m1's input is served to m1's token; m2's token gets 401 for it, for
    m1's upload plan and for a PUT into m1's attempt, and nothing of m1's is written."""
    source = tmp_path / "input.bin"
    source.write_bytes(b"m1's input")
    spec = FileSpec((InputFile(str(source), source.name),), ("*.out",), 1 << 20, None)
    staging = staging_of(tmp_path, spec)
    played.d.files = staging
    _, files = staging.payload(spec, 0, "m1", 1, False)
    where = files["inputs"][0][2]
    port = played.d.address[1]

    def ask(method: str, path: str, token: str, body: bytes | None = None) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request(method, path, body, {"Authorization": f"Bearer {token}"})
            answer = conn.getresponse()
            answer.read()
            return answer.status
        finally:
            conn.close()

    m1, m2 = machine_token(SECRET, "m1"), machine_token(SECRET, "m2")
    assert ask("GET", where, m1) == 200
    assert ask("GET", where, m2) == 401
    plan = {"machine": "m1", "run": 1, "task": 0, "files": [["x.out", 3]]}
    assert post(port, "/v1/files", plan, m2)[0] == 401
    status, answer = post(port, "/v1/files", plan, m1)
    assert status == 200
    assert ask("PUT", answer["put"][0], m2, b"bad") == 401
    assert not (tmp_path / "run" / "outputs" / ".attempts" / "0.m1-1" / "x.out").exists()
    assert ask("PUT", answer["put"][0], m1, b"m1!") == 200
    stored = tmp_path / "run" / "outputs" / ".attempts" / "0.m1-1" / "x.out"
    assert stored.read_bytes() == b"m1!"


def test_a_long_machine_ids_token_is_checked_against_the_whole_id(
    played: Played, tmp_path: Path
) -> None:
    """A machine id longer than what a log line keeps of it (100 characters: a long
    type name, a service job's prefix): its own token plans its outputs, and the token
    of the machine whose id is its first 100 characters plans nothing of its."""
    spec = FileSpec((), ("*.out",), 1 << 20, None)
    staging = staging_of(tmp_path, spec)
    played.d.files = staging
    short = "t" * 95 + "-L1-1"  # machine 1 of launch L1 of a type of 95 characters
    long = short + "0"  # machine 10 of the same launch
    assert len(short) == 100
    staging.payload(spec, 0, long, 1, False)
    plan = {"machine": long, "run": 1, "task": 0, "files": [["x.out", 3]]}
    port = played.d.address[1]
    assert post(port, "/v1/files", plan, machine_token(SECRET, short))[0] == 401
    status, answer = post(port, "/v1/files", plan, machine_token(SECRET, long))
    assert status == 200, answer


def test_a_machine_id_past_any_real_one_is_never_given_a_token(played: Played) -> None:
    """A client claiming an id of 2,000 characters with the token derived for it is
    refused: no token is derived (hashed) for an id longer than ``MAX_MACHINE_ID``, at a
    length the client chose; a real id of 100 characters still has its own."""
    port = played.d.address[1]
    huge = "m" * 2000
    claim = {"machine": huge, "results": [], "running": [], "wait_s": 0}
    assert post(port, "/v1/poll", claim, machine_token(SECRET, huge))[0] == 401
    assert len(huge) > MAX_MACHINE_ID >= 100
