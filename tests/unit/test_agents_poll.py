"""What the daemon makes of agents' polls (``autoscaler.run.agents``), on a real run state:
results counted once however often they come, answers that give an agent the runs it
lacks and its machine's slots."""

from __future__ import annotations

from pathlib import Path

import structlog
import structlog.testing

from autoscaler.config.bag import expand_bag
from autoscaler.core.leases import Timeline
from autoscaler.core.model import (
    Assign,
    Event,
    Launch,
    LaunchFailed,
    MachineLaunched,
    MachineLost,
    MachineReady,
    Move,
    TaskDone,
    TaskState,
)
from autoscaler.core.state import RunState
from autoscaler.run.agents import Agents
from autoscaler.run.assemble import new_state
from autoscaler.run.polls import AgentResult, Notice, Poll
from tests.conftest import make_config

CFG = make_config(
    machine_types=[{"name": "w", "price": 1.0, "max_count": 4, "boot_s": 0, "slots": 2}],
    emulator={"seed": 1, "runtime": {"dist": "normal", "mean_s": 600, "sd_s": 60}},
)


def machine_with_tasks(tasks: list[int]) -> tuple[RunState, Agents, str]:
    """A ready machine of two slots with ``tasks`` assigned to it, in that order."""
    state = new_state(CFG, 10, 1)
    state.apply(0.0, Launch("w", 1, "tok"))
    state.apply(0.0, MachineLaunched("m1", "w", "tok"))
    state.apply(0.0, MachineReady("m1"))
    for tid in tasks:
        state.apply(1.0, Assign(tid, "m1"))
    agents = Agents(CFG, expand_bag(CFG), [60.0] * 10, Path("/tmp"), structlog.get_logger())
    return state, agents, "m1"


def poll(machine: str, results: list[AgentResult], running: list[int]) -> Poll:
    return Poll(machine, results, running, wait_s=0.0, arrived=0.0)


def test_a_result_sent_again_after_a_lost_ack_is_counted_once() -> None:
    state, agents, mid = machine_with_tasks([3])
    run = state.fleet.machines[mid].run_no[3]
    result = AgentResult(run, 3, 0, 1.5, None)

    first = agents.poll_events(state, poll(mid, [result], []), set())
    assert first == [TaskDone(3, mid, 1.5 * CFG.time_scale)]
    for event in first:
        state.apply(2.0, event)
    assert agents.poll_events(state, poll(mid, [result], []), set()) == []
    assert state.tasks.done == 1


def test_a_result_repeated_within_one_step_is_counted_once() -> None:
    state, agents, mid = machine_with_tasks([3])
    result = AgentResult(state.fleet.machines[mid].run_no[3], 3, 0, 1.5, None)
    seen: set[tuple[str, int]] = set()
    events = agents.poll_events(state, poll(mid, [result], []), seen)
    events += agents.poll_events(state, poll(mid, [result, result], []), seen)
    assert len(events) == 1


def test_the_answer_gives_the_runs_the_agent_lacks_and_the_slots() -> None:
    state, agents, mid = machine_with_tasks([3, 4, 5])
    m = state.fleet.machines[mid]
    runs = sorted(m.run_no.values())
    assert len(runs) >= 2  # two slots: at least two runs at once
    asked = poll(mid, [], [runs[0]])
    agents.answer(state, asked, Timeline.resume(0.0, 0.0, 0.0, 1.0))
    body = asked.reply.body
    assert body is not None
    assert body["slots"] == 2
    assert body["report_s"] == CFG.daemon.report_s
    assert [t["run"] for t in body["tasks"]] == runs[1:]
    assert body["cancel"] == []


def test_a_result_of_a_run_taken_back_from_the_group_counts_once() -> None:
    """The task was moved off the machine's queue while its agent, ahead of its
    reports, ran it: the result counts, the moved copy ends, a repeat is not counted."""
    state, agents, mid = machine_with_tasks([3, 4, 5])
    state.apply(1.0, Launch("w", 1, "tok2"))
    state.apply(1.0, MachineLaunched("m2", "w", "tok2"))
    state.apply(1.0, MachineReady("m2"))
    m = state.fleet.machines[mid]
    assert list(m.queue) == [5]
    run = m.run_no[5]
    state.apply(2.0, Move((5,), mid, "m2"))
    result = AgentResult(run, 5, 0, 0.5, None)
    events = agents.poll_events(state, poll(mid, [result], [run]), set())
    assert events == [TaskDone(5, mid, 0.5 * CFG.time_scale)]
    for event in events:
        state.apply(3.0, event)
    assert state.tasks.done == 1
    assert 5 not in state.fleet.machines["m2"].running
    assert agents.poll_events(state, poll(mid, [result], []), set()) == []
    failed = AgentResult(run, 5, 1, 0.5, "exit 1")
    assert agents.poll_events(state, poll(mid, [failed], []), set()) == []


def test_two_results_of_one_task_in_one_step_make_one_done() -> None:
    """A task taken back whose first agent had run it, and its new machine's run, both
    report in one step: one TaskDone (the first), the other dropped."""
    state, agents, mid = machine_with_tasks([3, 4, 5])
    state.apply(1.0, Launch("w", 1, "tok2"))
    state.apply(1.0, MachineLaunched("m2", "w", "tok2"))
    state.apply(1.0, MachineReady("m2"))
    run = state.fleet.machines[mid].run_no[5]
    state.apply(2.0, Move((5,), mid, "m2"))
    moved = state.fleet.machines["m2"].run_no[5]
    seen: set[tuple[str, int]] = set()
    events = agents.poll_events(state, poll(mid, [AgentResult(run, 5, 0, 0.5, None)], []), seen)
    events += agents.poll_events(state, poll("m2", [AgentResult(moved, 5, 0, 0.4, None)], []), seen)
    assert events == [TaskDone(5, mid, 0.5 * CFG.time_scale)]


def test_set_ups_failing_in_one_step_give_the_type_up_once_at_the_limit() -> None:
    """``setup_failures_max`` 2: two machines whose set-ups fail in the same step (their
    losses not folded yet) give the type up in that step, once; a third failure later
    does not say it again. (Each used to count one failure and the type was never given
    up: CI ci16.)"""
    cfg = make_config(
        machine_types=[
            {"name": "w", "price": 1.0, "max_count": 4, "boot_s": 0, "setup": ["exit 3"]}
        ],
        setup_failures_max=2,
        emulator={"seed": 1, "runtime": {"dist": "normal", "mean_s": 600, "sd_s": 60}},
    )
    state = new_state(cfg, 10, 1)
    state.apply(0.0, Launch("w", 3, "tok"))
    for mid in ("m1", "m2", "m3"):
        state.apply(0.0, MachineLaunched(mid, "w", "tok"))
    agents = Agents(cfg, expand_bag(cfg), [60.0] * 10, Path("/tmp"), structlog.get_logger())
    failed = {"state": "failed", "command": "exit 3", "error": "exit 3"}

    def report(mid: str, seen: set[tuple[str, int]]) -> list[Event]:
        asked = Poll(mid, [], [], wait_s=0.0, arrived=0.0, setup=failed)
        return agents.poll_events(state, asked, seen)

    seen: set[tuple[str, int]] = set()
    step = report("m1", seen) + report("m2", seen)
    assert [type(e) for e in step] == [MachineLost, MachineLost, LaunchFailed]
    given_up = step[-1]
    assert isinstance(given_up, LaunchFailed)
    assert (given_up.type, given_up.kind) == ("w", "setup")
    for event in step:
        state.apply(1.0, event)
    later = report("m3", set())
    assert [type(e) for e in later] == [MachineLost]


def test_a_lost_machines_results_of_runs_it_had_count_once_and_end_the_run_elsewhere() -> None:
    """Lost for its silence while its agent went on: the poll it sent before it knew
    brings the results of the runs it had. Each counts (the task re-run elsewhere is
    cancelled there); a repeat, a failure, or a result of a task it never had does not,
    and nothing else of the poll (a notice) is taken from a machine gone."""
    state, agents, mid = machine_with_tasks([3, 4, 5])
    m = state.fleet.machines[mid]
    runs = dict(m.run_no)
    state.apply(5.0, MachineLost(mid, "no contact for 16s"))
    state.apply(5.0, Launch("w", 1, "tok2"))
    state.apply(5.0, MachineLaunched("m2", "w", "tok2"))
    state.apply(5.0, MachineReady("m2"))
    state.apply(5.0, Assign(3, "m2"))  # the bag's front: task 3 runs again on m2
    assert 3 in state.fleet.machines["m2"].running
    late = poll(mid, [AgentResult(runs[3], 3, 0, 4.0, None)], [])
    late.notice = Notice("terminate", "2026-12-02T00:00:00Z")
    events = agents.poll_events(state, late, set())
    assert events == [TaskDone(3, mid, 4.0 * CFG.time_scale)]
    for event in events:
        state.apply(6.0, event)
    assert state.tasks.task_state[3] is TaskState.DONE
    assert state.tasks.done == 1
    assert 3 not in state.fleet.machines["m2"].running  # its re-run ends
    assert agents.poll_events(state, late, set()) == []  # counted once
    failed = poll(mid, [AgentResult(runs[4], 4, 1, 1.0, "exit 1")], [])
    assert agents.poll_events(state, failed, set()) == []
    never = poll(mid, [AgentResult(99, 7, 0, 1.0, None)], [])
    assert agents.poll_events(state, never, set()) == []


def two_machines() -> tuple[RunState, Agents]:
    """m1 with tasks 3 and 4, m2 with task 5, all ready."""
    state, agents, _ = machine_with_tasks([3, 4])
    state.apply(1.0, Launch("w", 1, "tok2"))
    state.apply(1.0, MachineLaunched("m2", "w", "tok2"))
    state.apply(1.0, MachineReady("m2"))
    state.apply(1.0, Assign(5, "m2"))
    return state, agents


def test_a_result_for_a_task_given_to_another_machine_is_refused() -> None:
    """m1 reports task 5, which is m2's: not counted, logged, acknowledged and named in
    the answer's ``refused`` (an agent that sent it drops it rather than retry forever)."""
    state, agents = two_machines()
    m2_run = state.fleet.machines["m2"].run_no[5]
    forged = AgentResult(m2_run, 5, 0, 1.0, None)
    asked = poll("m1", [forged], [])
    with structlog.testing.capture_logs() as logs:
        events = agents.poll_events(state, asked, set())
    assert events == []
    assert agents.refused_results == 1
    assert [(e["machine"], e["task"], e["run"]) for e in logs if "refused" in e["event"]] == [
        ("m1", 5, m2_run)
    ]
    agents.answer(state, asked, Timeline.resume(0.0, 0.0, 0.0, 1.0))
    body = asked.reply.body
    assert body is not None
    assert body["ack"] is True
    assert body["refused"] == [m2_run]
    assert state.tasks.task_state[5] is TaskState.RUNNING
    assert state.tasks.done == 0


def test_a_result_for_a_task_never_handed_out_is_refused() -> None:
    """A task still in the bag, reported by a machine: refused, the bag unchanged."""
    state, agents, mid = machine_with_tasks([3])
    asked = poll(mid, [AgentResult(99, 7, 0, 1.0, None)], [])
    assert agents.poll_events(state, asked, set()) == []
    assert asked.refused == [99]
    assert state.tasks.task_state[7] is TaskState.PENDING


def test_a_repeat_of_a_result_counted_before_is_not_refused() -> None:
    """The machine's own result, sent again after a lost ack, is dropped quietly."""
    state, agents, mid = machine_with_tasks([3])
    agents.answer(state, poll(mid, [], []), Timeline.resume(0.0, 0.0, 0.0, 1.0))  # sends 3
    result = AgentResult(state.fleet.machines[mid].run_no[3], 3, 0, 1.5, None)
    for event in agents.poll_events(state, poll(mid, [result], []), set()):
        state.apply(2.0, event)
    again = poll(mid, [result], [])
    assert agents.poll_events(state, again, set()) == []
    assert again.refused == []
    assert agents.refused_results == 0


def test_a_resumed_daemon_knows_what_each_machine_was_given() -> None:
    """After a restart the journal's runs count as given: a repeat is not refused."""
    state, agents, mid = machine_with_tasks([3])
    result = AgentResult(state.fleet.machines[mid].run_no[3], 3, 0, 1.5, None)
    for event in agents.poll_events(state, poll(mid, [result], []), set()):
        state.apply(2.0, event)
    resumed = Agents(CFG, expand_bag(CFG), [60.0] * 10, Path("/tmp"), structlog.get_logger())
    resumed.know_given(state)
    again = poll(mid, [result], [])
    assert resumed.poll_events(state, again, set()) == []
    assert again.refused == []
