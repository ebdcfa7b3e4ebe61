"""The worker agent (bootstrap/agent.py) as a real process against a scripted controller
(``agent_harness``)."""

from __future__ import annotations

import calendar
import itertools
import os
import re
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.integration import agent_harness
from tests.integration.agent_harness import (
    TOKEN,
    FakeController,
    Reply,
    Request,
    StartAgent,
    give,
    gone_within,
    read_pid,
    result_of,
    sleeper,
    task,
)

pytestmark = pytest.mark.integration

controller = agent_harness.controller
start_agent = agent_harness.start_agent
task_pids = agent_harness.task_pids


def test_command_runs_with_env_and_cwd_and_reports_a_bounded_tail(
    controller: FakeController, start_agent: StartAgent, tmp_path: Path
) -> None:
    """A command sees its env and cwd; the result has exit 0, its runtime, the last bytes."""
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    command = (
        'echo "greeting=$GREETING" >&2; pwd >&2; echo "token=${AUTOSCALER_TOKEN:-unset}" >&2; '
        "sleep 0.3; head -c 10000 /dev/zero | tr '\\0' x; echo END"
    )
    controller.replies.append(
        give(task(1, command, env={"GREETING": "hello world"}, cwd="sub", timeout_s=20))
    )
    agent = start_agent(controller.url, "--workdir", str(work), "--tail-bytes", "400")

    done = controller.wait_for(lambda r: r.carries(1))
    result = result_of(done, 1)
    assert result["task"] == 101
    assert result["exit_code"] == 0
    assert result["error"] is None
    assert 0.3 <= result["runtime_s"] < 5
    assert len(result["stdout"].encode()) <= 400
    assert result["stdout"].endswith("xxxEND\n")
    assert "greeting=hello world\n" in result["stderr"]
    assert f"{os.path.realpath(work / 'sub')}\n" in result["stderr"]
    assert "token=unset" in result["stderr"]

    first = controller.requests[0]
    assert first.headers["Authorization"] == f"Bearer {TOKEN}"
    assert first.headers["Content-Type"] == "application/json"
    assert first.body["machine"] == "m-1"
    assert first.body["pid"] == agent.proc.pid
    assert first.body["host"] == socket.gethostname()
    assert first.body["epoch"] is None
    assert done.body["epoch"] == "epoch-1"
    assert TOKEN not in agent.log()


def test_failing_command_reports_its_exit_code(
    controller: FakeController, start_agent: StartAgent
) -> None:
    """A command exiting 3 gives exit_code 3 and error "exit 3", with its stderr."""
    controller.replies.append(give(task(1, "echo oops >&2; exit 3")))
    start_agent(controller.url)

    result = result_of(controller.wait_for(lambda r: r.carries(1)), 1)
    assert result["exit_code"] == 3
    assert result["error"] == "exit 3"
    assert result["stderr"] == "oops\n"


def test_missing_command_reports_127_and_command_not_found(
    controller: FakeController, start_agent: StartAgent
) -> None:
    """A command the shell cannot find gives 127 and says so with the shell's message."""
    controller.replies.append(give(task(1, "no-such-command-7f3e --flag")))
    start_agent(controller.url)

    result = result_of(controller.wait_for(lambda r: r.carries(1)), 1)
    assert result["exit_code"] == 127
    assert result["error"].startswith("exit 127: command not found: ")
    assert "no-such-command-7f3e" in result["error"]
    assert "\n" not in result["error"]


def test_missing_cwd_reports_cannot_start(
    controller: FakeController, start_agent: StartAgent, tmp_path: Path
) -> None:
    """When the process cannot be created the result says why, with no exit code."""
    missing = tmp_path / "no-such-dir"
    controller.replies.append(give(task(1, "true", cwd=str(missing)), task(2, "echo next")))
    start_agent(controller.url)

    done = controller.wait_for(lambda r: r.carries(1))
    result = result_of(done, 1)
    assert result["exit_code"] is None
    assert result["error"].startswith("cannot start: ")
    assert str(missing) in result["error"]
    assert result_of(controller.wait_for(lambda r: r.carries(2)), 2)["exit_code"] == 0


def test_timeout_kills_the_process_group(
    controller: FakeController, start_agent: StartAgent, tmp_path: Path, task_pids: list[int]
) -> None:
    """At timeout_s the whole group is killed, a child included; exit_code null, error says so."""
    pid_file = tmp_path / "child.pid"
    controller.replies.append(give(task(1, sleeper(pid_file), timeout_s=1)))
    start_agent(controller.url)

    child = read_pid(pid_file, task_pids)
    result = result_of(controller.wait_for(lambda r: r.carries(1)), 1)
    assert result["exit_code"] is None
    assert result["error"] == "timed out after 1s"
    assert 0.9 <= result["runtime_s"] < 3
    assert gone_within(child, 2)


def test_cancel_kills_the_current_run_and_gives_no_result(
    controller: FakeController, start_agent: StartAgent, tmp_path: Path, task_pids: list[int]
) -> None:
    """A cancelled run is killed and never reported; the agent goes on with the next task."""
    pid_file = tmp_path / "child.pid"
    controller.replies.append(give(task(1, sleeper(pid_file))))
    cancelled = threading.Event()

    def script(request: Request) -> Reply:
        if request.body["running"] == [1] and pid_file.exists() and not cancelled.is_set():
            cancelled.set()
            return Reply(fields={"cancel": [1], "tasks": [task(2, "echo second")]})
        return Reply()

    controller.script = script
    start_agent(controller.url)

    child = read_pid(pid_file, task_pids)
    done = controller.wait_for(lambda r: r.carries(2))
    assert result_of(done, 2)["stdout"] == "second\n"
    assert gone_within(child, 2)
    controller.wait_for(lambda r: r.at > done.at)
    assert not any(r.carries(1) for r in controller.snapshot())
    after = [r for r in controller.snapshot() if r.at > done.at]
    assert all(1 not in r.body["running"] for r in after)


def test_release_exits_0_and_kills_the_task(
    controller: FakeController, start_agent: StartAgent, tmp_path: Path, task_pids: list[int]
) -> None:
    """release: true makes the agent kill its run's process group and exit 0."""
    pid_file = tmp_path / "child.pid"
    controller.replies.append(give(task(1, sleeper(pid_file))))
    controller.script = lambda request: Reply(
        fields={"release": request.body["running"] == [1] and pid_file.exists()}
    )
    agent = start_agent(controller.url)

    child = read_pid(pid_file, task_pids)
    assert agent.wait(timeout=5) == 0
    assert gone_within(child, 2)
    assert "released" in agent.log()


def test_lease_is_renewed_and_its_expiry_exits_3(
    controller: FakeController, start_agent: StartAgent, tmp_path: Path, task_pids: list[int]
) -> None:
    """Renewals keep the agent past its first lease; once they stop it exits 3 at the deadline.

    Renewals come every renew_in_s (heartbeats are slow here); then the controller holds
    the request without answering, and the agent must not wait for the HTTP timeout.
    """
    pid_file = tmp_path / "child.pid"
    controller.heartbeat_s = 5.0
    lease = {"lease_s": 0.8, "renew_in_s": 0.3}
    controller.replies.append(Reply(fields={"tasks": [task(1, sleeper(pid_file))], **lease}))

    def script(request: Request) -> Reply:
        # Renewals for 1.6 s from the agent's first request (not from its start: a
        # loaded host took longer than that to start Python), then none.
        if request.at < controller.snapshot()[0].at + 1.6:
            return Reply(fields=lease)
        return Reply(fields=lease, hold_s=20)

    controller.script = script
    agent = start_agent(controller.url)
    renewing_until = controller.wait_for(lambda r: True, timeout=30).at + 1.6

    child = read_pid(pid_file, task_pids)
    assert agent.wait(timeout=6) == 3
    exited = time.monotonic()
    renewals = [r for r in controller.snapshot() if r.at < renewing_until]
    assert exited >= renewing_until
    assert exited - renewals[-1].at < 0.8 + 0.7
    gaps = [b.at - a.at for a, b in itertools.pairwise(renewals[1:])]
    assert gaps
    assert max(gaps) < 0.5
    assert gone_within(child, 2)
    assert "lease expired" in agent.log()


def test_a_controller_back_before_the_lease_ends_renews_it(
    controller: FakeController, start_agent: StartAgent
) -> None:
    """Polls that fail back off, but never past half the lease left: a controller that
    answers again 0.38 s before the lease ends (a resumed daemon) reaches the agent in
    time. (Doubling alone, the agent tries 2.55 s after its lease began, then 3.35 s:
    past the 3 s lease, it exits 3.)"""
    controller.heartbeat_s = 5.0
    controller.replies.append(Reply(fields={"lease_s": 3.0, "renew_in_s": 1.0}))

    def script(request: Request) -> Reply:
        if request.at < controller.snapshot()[0].at + 2.62:
            return Reply(status=503)
        return Reply(fields={"release": True})

    controller.script = script
    agent = start_agent(controller.url)

    assert agent.wait(timeout=10) == 0, agent.log()
    assert "released" in agent.log()
    assert "lease expired" not in agent.log()


def test_wrong_token_exits_2(controller: FakeController, start_agent: StartAgent) -> None:
    """A 401 means the token is refused: exit 2, said on stderr, the token never printed."""
    controller.script = lambda request: Reply(status=401)
    agent = start_agent(controller.url, token="wrong-token-4b1c")

    assert agent.wait(timeout=5) == 2
    assert "token refused by the controller" in agent.log()
    assert "wrong-token-4b1c" not in agent.log()


def test_log_lines_carry_utc_time_level_message_and_fields(
    controller: FakeController, start_agent: StartAgent
) -> None:
    """Every stderr line is ``<UTC time to the ms>Z LEVEL message key=value``, its time
    within the run's."""
    controller.script = lambda request: Reply(status=401)
    before = time.time()
    agent = start_agent(controller.url, token="wrong-token-4b1c")

    assert agent.wait(timeout=5) == 2
    after = time.time()
    lines = agent.log().splitlines()
    assert lines, "the agent said nothing"
    for line in lines:
        match = re.fullmatch(
            r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z (INFO|WARNING|ERROR) (.+)", line
        )
        assert match, line
        when = calendar.timegm(time.strptime(match[1][:19], "%Y-%m-%dT%H:%M:%S"))
        assert before - 1 <= when + int(match[1][20:]) / 1000 <= after + 1, line
    refused = [line for line in lines if "token refused by the controller" in line]
    assert refused
    assert refused[0].endswith("Z ERROR token refused by the controller machine=m-1 status=401")


def test_missing_token_exits_2(controller: FakeController, start_agent: StartAgent) -> None:
    """Without a token the agent exits 2 before contacting anyone."""
    agent = start_agent(controller.url, token=None)

    assert agent.wait(timeout=5) == 2
    assert "AUTOSCALER_TOKEN" in agent.log()
    assert controller.snapshot() == []


def test_token_file_is_read(
    controller: FakeController, start_agent: StartAgent, tmp_path: Path
) -> None:
    """--token-file supplies the token (stripped) instead of the environment."""
    token_file = tmp_path / "token"
    token_file.write_text("from-file-token-91\n")
    start_agent(controller.url, "--token-file", str(token_file), token=None)

    request = controller.wait_for(lambda r: True)
    assert request.headers["Authorization"] == "Bearer from-file-token-91"


def test_start_delay_postpones_the_first_contact(
    controller: FakeController, start_agent: StartAgent
) -> None:
    """--start-delay-s emulates a boot: no request before it has passed."""
    agent = start_agent(controller.url, "--start-delay-s", "0.5")

    first = controller.wait_for(lambda r: True)
    assert first.at - agent.started >= 0.5


def test_unknown_machine_410_exits_0(controller: FakeController, start_agent: StartAgent) -> None:
    """A 410 means the controller does not know this machine: exit 0."""
    controller.script = lambda request: Reply(status=410)
    agent = start_agent(controller.url)

    assert agent.wait(timeout=5) == 0


def test_unreachable_controller_exits_4(start_agent: StartAgent) -> None:
    """With nothing listening the agent retries, then exits 4 after orphan_after_s."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    agent = start_agent(f"http://127.0.0.1:{port}", orphan_after_s=1.5)

    assert agent.wait(timeout=1.5 + 4) == 4
    assert time.monotonic() - agent.started >= 1.5
    log = agent.log()
    assert "controller unreachable" in log
    assert log.count("poll failed") >= 3


def test_unacknowledged_results_are_sent_again_after_a_503(
    controller: FakeController, start_agent: StartAgent
) -> None:
    """A result whose request got a 503 is sent again, unchanged, until acknowledged."""
    controller.replies.append(give(task(1, "echo hi")))
    refused = threading.Event()

    def script(request: Request) -> Reply:
        if request.carries(1) and not refused.is_set():
            refused.set()
            return Reply(status=503)
        return Reply()

    controller.script = script
    start_agent(controller.url)

    first = controller.wait_for(lambda r: r.carries(1))
    second = controller.wait_for(lambda r: r.carries(1) and r is not first)
    assert second.results() == first.results()
    assert second.at - first.at < 1.0
    later = controller.wait_for(lambda r: r.at > second.at)
    assert later.results() == []


def test_sleep_task_takes_about_its_duration(
    controller: FakeController, start_agent: StartAgent
) -> None:
    """A sleep_s task waits that long without a process and reports exit 0, no output."""
    controller.replies.append(give(task(1, sleep_s=1.0)))
    start_agent(controller.url)

    given = controller.wait_for(lambda r: True)
    done = controller.wait_for(lambda r: r.carries(1))
    result = result_of(done, 1)
    assert result["exit_code"] == 0
    assert result["error"] is None
    assert (result["stdout"], result["stderr"]) == ("", "")
    assert 1.0 <= result["runtime_s"] < 1.3
    assert 1.0 <= done.at - given.at < 1.5


def test_heartbeats_arrive_while_a_long_task_runs(
    controller: FakeController, start_agent: StartAgent
) -> None:
    """While a task runs the agent polls with wait_s 0 every heartbeat_s; idle, it long-polls."""
    controller.heartbeat_s = 0.25
    controller.replies.append(give(task(1, "sleep 1.5")))
    start_agent(controller.url, heartbeat_s=5.0)

    done = controller.wait_for(lambda r: r.carries(1))
    beats = [r for r in controller.snapshot() if r.body["running"] == [1]]
    assert len(beats) >= 4
    assert all(r.body["wait_s"] == 0 for r in beats)
    gaps = [b.at - a.at for a, b in itertools.pairwise(beats)]
    assert max(gaps) < 0.25 + 0.15
    assert done.body["running"] == []
    assert done.body["wait_s"] == pytest.approx(0.25)


def test_queued_tasks_run_one_at_a_time_in_order(
    controller: FakeController, start_agent: StartAgent
) -> None:
    """Tasks given together run one after another in the order given; the queue is reported."""
    controller.replies.append(give(*(task(run, f"sleep 0.4; echo {run}") for run in (1, 2, 3))))
    start_agent(controller.url)

    controller.wait_for(lambda r: r.carries(3))
    requests = controller.snapshot()
    seen = [r.body["running"] for r in requests if r.body["running"]]
    changes = [running for i, running in enumerate(seen) if i == 0 or running != seen[i - 1]]
    assert changes == [[1, 2, 3], [2, 3], [3]]
    reported = [result["run"] for r in requests for result in r.results()]
    assert reported == [1, 2, 3]


@pytest.mark.parametrize("sigtimedwait", [True, False], ids=["sigtimedwait", "wake-up-pipe"])
def test_one_round_trip_per_task_without_sleeping(
    controller: FakeController, start_agent: StartAgent, sigtimedwait: bool
) -> None:
    """Each result is sent at once and the next task comes back in its answer: no waiting.
    A task's end wakes the agent (SIGCHLD), with ``signal.sigtimedwait`` or without."""
    count = 20
    next_run = iter(range(2, count + 1))

    def script(request: Request) -> Reply:
        if request.results():
            run = next(next_run, None)
            return give(task(run, "true")) if run is not None else Reply()
        return Reply()

    controller.replies.append(give(task(1, "true")))
    controller.script = script
    start_agent(controller.url, heartbeat_s=5.0, sigtimedwait=sigtimedwait)

    first = controller.wait_for(lambda r: True)
    last = controller.wait_for(lambda r: r.carries(count))
    assert last.at - first.at < 1.0
    reported = [result["run"] for r in controller.snapshot() for result in r.results()]
    assert reported == list(range(1, count + 1))


def test_sigterm_kills_the_task_and_exits_0(
    controller: FakeController, start_agent: StartAgent, tmp_path: Path, task_pids: list[int]
) -> None:
    """SIGTERM makes the agent kill its run's process group and exit 0."""
    pid_file = tmp_path / "child.pid"
    controller.replies.append(give(task(1, sleeper(pid_file))))
    agent = start_agent(controller.url)

    child = read_pid(pid_file, task_pids)
    agent.proc.send_signal(signal.SIGTERM)
    assert agent.wait(timeout=5) == 0
    assert gone_within(child, 2)
