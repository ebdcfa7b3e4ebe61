"""The worker agent with slots and task groups, as a real process (``agent_harness``):
several runs at once, a group's queue taken back, many results per request."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration import agent_harness
from tests.integration.agent_harness import (
    FakeController,
    Reply,
    Request,
    StartAgent,
    give,
    gone_within,
    read_pid,
    sleeper,
    task,
)
from tests.integration.daemon_helpers import wait_for

pytestmark = pytest.mark.integration

controller = agent_harness.controller
start_agent = agent_harness.start_agent
task_pids = agent_harness.task_pids


def stamped(work: Path, run: int, body: str) -> str:
    """``body`` between two stamps of the wall clock, ``<run>.start`` and ``<run>.end``."""
    return (
        f"date +%s.%N > {work}/{run}.start.tmp && mv {work}/{run}.start.tmp {work}/{run}.start; "
        f"{body}; date +%s.%N > {work}/{run}.end"
    )


def stamps(work: Path, run: int) -> tuple[float, float]:
    return (
        float((work / f"{run}.start").read_text()),
        float((work / f"{run}.end").read_text()),
    )


def reported(requests: list[Request]) -> list[int]:
    return [result["run"] for r in requests for result in r.results()]


def test_three_slots_run_three_tasks_side_by_side(
    controller: FakeController, start_agent: StartAgent, tmp_path: Path
) -> None:
    """With ``slots: 3`` the three runs of a group all start before any of them ends."""
    runs = (1, 2, 3)
    controller.replies.append(
        Reply(
            fields={"slots": 3, "tasks": [task(r, stamped(tmp_path, r, "sleep 1")) for r in runs]}
        )
    )
    start_agent(controller.url)

    for run in runs:
        controller.wait_for(lambda r, run=run: r.carries(run), timeout=10)
    intervals = [stamps(tmp_path, run) for run in runs]
    assert max(start for start, _ in intervals) < min(end for _, end in intervals)
    assert sorted(reported(controller.snapshot())) == list(runs)


def test_the_slots_flag_sets_the_first_width_and_the_queue_waits_for_a_free_slot(
    controller: FakeController, start_agent: StartAgent, tmp_path: Path
) -> None:
    """``--slots 2`` with three runs: two go together, the third starts after one ends."""
    runs = (1, 2, 3)
    controller.replies.append(give(*(task(r, stamped(tmp_path, r, "sleep 0.5")) for r in runs)))
    start_agent(controller.url, "--slots", "2")

    for run in runs:
        controller.wait_for(lambda r, run=run: r.carries(run), timeout=10)
    (s1, e1), (s2, e2), (s3, _) = (stamps(tmp_path, run) for run in runs)
    assert max(s1, s2) < min(e1, e2)  # the first two overlap
    assert s3 >= min(e1, e2)  # the third waited for a slot
    first = next(r for r in controller.snapshot() if r.body["running"])
    assert first.body["running"] == [1, 2, 3]  # the running ones first, then the queued one


def test_a_queued_run_cancelled_never_starts_and_a_running_one_is_killed(
    controller: FakeController, start_agent: StartAgent, tmp_path: Path, task_pids: list[int]
) -> None:
    """One slot, a group of two: cancelling the queued run drops it (its marker never
    appears); cancelling the running one kills its process group; neither reports."""
    pid_file = tmp_path / "child.pid"
    marker = tmp_path / "marker"
    controller.replies.append(give(task(1, sleeper(pid_file)), task(2, f"touch {marker}")))
    start_agent(controller.url)

    child = read_pid(pid_file, task_pids)
    controller.wait_for(lambda r: r.body["running"] == [1, 2])
    controller.replies.append(Reply(fields={"cancel": [2]}))
    controller.wait_for(lambda r: r.body["running"] == [1])
    controller.replies.append(Reply(fields={"cancel": [1]}))
    controller.wait_for(lambda r: r.body["running"] == [] and r.body["wait_s"] > 0)
    assert gone_within(child, 2)
    assert not marker.exists()
    assert reported(controller.snapshot()) == []


def test_release_kills_every_run_in_progress(
    controller: FakeController, start_agent: StartAgent, tmp_path: Path, task_pids: list[int]
) -> None:
    """Three slots, three sleepers: ``release`` kills all three process groups, exit 0."""
    files = [tmp_path / f"child-{run}.pid" for run in (1, 2, 3)]
    controller.replies.append(
        Reply(
            fields={
                "slots": 3,
                "tasks": [task(r, sleeper(f)) for r, f in zip((1, 2, 3), files, strict=True)],
            }
        )
    )
    agent = start_agent(controller.url)

    children = [read_pid(f, task_pids) for f in files]
    controller.wait_for(lambda r: r.body["running"] == [1, 2, 3])
    controller.replies.append(Reply(fields={"release": True}))
    assert agent.wait(timeout=5) == 0
    assert all(gone_within(child, 2) for child in children)
    assert reported(controller.snapshot()) == []


def test_a_group_of_20_quick_tasks_comes_back_in_fewer_requests_than_tasks(
    controller: FakeController, start_agent: StartAgent
) -> None:
    """Results of a group are batched: fewer requests carry results than there are
    tasks, and every run is reported exactly once (each request is acknowledged)."""
    count = 20
    controller.replies.append(
        Reply(fields={"slots": 2, "tasks": [task(run, "true") for run in range(1, count + 1)]})
    )
    start_agent(controller.url, heartbeat_s=5.0)

    seen: set[int] = set()

    def all_back(r: Request) -> bool:
        """Every run reported by this request, and none running. (Two slots: run 20 may
        end before run 19, so the request carrying it may still list 19 as running.)"""
        seen.update(result["run"] for result in r.results())
        return len(seen) == count and r.body["running"] == []

    controller.wait_for(all_back, timeout=10)
    requests = controller.snapshot()
    carrying = [r for r in requests if r.results()]
    assert len(carrying) < count
    assert sorted(reported(requests)) == list(range(1, count + 1))


def test_results_of_a_group_are_kept_until_acknowledged(
    controller: FakeController, start_agent: StartAgent
) -> None:
    """A batch refused with a 503 is sent again whole, then never again once acknowledged."""
    runs = list(range(1, 6))
    refused: list[Request] = []

    def script(request: Request) -> Reply:
        if request.results() and not refused:
            refused.append(request)
            return Reply(status=503)
        return Reply()

    controller.replies.append(
        Reply(fields={"slots": 5, "tasks": [task(run, "true") for run in runs]})
    )
    controller.script = script
    start_agent(controller.url, heartbeat_s=5.0)

    def after_refusal() -> list[Request]:
        requests = controller.snapshot()
        return requests[requests.index(refused[0]) + 1 :] if refused else []

    wait_for(lambda: set(reported(after_refusal())) >= set(runs), 10, "every result again")
    first = reported(refused)
    after = after_refusal()
    assert reported(after[:1])[: len(first)] == first  # the refused batch again, in order
    assert sorted(reported(after)) == runs  # then each once
