"""Task groups (issue 21 §2, paper 004's batch-resizing policies as they apply to us)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from autoscaler.config.load import load_config
from autoscaler.core.billing import BillingModel
from autoscaler.core.groups import GroupLimits, ahead, fair_share, group_size, stretched
from autoscaler.core.journal import SqliteJournal, replay
from autoscaler.core.model import (
    Action,
    Assign,
    AssignGroup,
    Event,
    Launch,
    MachineLaunched,
    MachineReady,
    Move,
    TaskDone,
    TaskState,
    TypeSpec,
)
from autoscaler.core.state import RunState
from autoscaler.core.step import Step, assignments
from autoscaler.run.start import make_emulator

# --- sizing ------------------------------------------------------------------------------


def size(**kw: object) -> int:
    args: dict[str, object] = {
        "slots": 1,
        "in_flight": 0,
        "pending": 1000,
        "share": 1000,
        "mean_s": 0.1,
        "window_s": None,
        "limits": GroupLimits(horizon_s=2.0),
    }
    args.update(kw)
    return group_size(**args)  # type: ignore[arg-type]


def test_without_an_estimate_a_group_is_one_task_per_free_slot() -> None:
    assert size(mean_s=None, slots=4) == 4
    assert size(mean_s=None, slots=4, in_flight=3) == 1
    assert size(mean_s=None, slots=4, in_flight=4) == 0


def test_the_horizon_bounds_the_group_in_whole_waves_of_the_slots() -> None:
    assert size(mean_s=0.1) == 20  # 2 s of 0.1 s tasks
    assert size(mean_s=0.1, slots=4) == 80  # four at a time
    assert size(mean_s=0.1, in_flight=15) == 5  # tops up what the agent has


def test_a_task_that_fills_the_horizon_goes_one_per_slot_as_before() -> None:
    assert size(mean_s=3600.0) == 1
    assert size(mean_s=3600.0, slots=8) == 8
    assert size(mean_s=3600.0, limits=GroupLimits(horizon_s=0.0)) == 1  # group_s 0


def test_a_draining_machine_gets_only_what_fits_its_paid_time() -> None:
    assert size(mean_s=10.0, window_s=35.0, limits=GroupLimits(horizon_s=600.0)) == 3
    assert size(mean_s=10.0, window_s=5.0, limits=GroupLimits(horizon_s=600.0)) == 0
    assert size(mean_s=10.0, slots=2, window_s=25.0, limits=GroupLimits(horizon_s=600.0)) == 4


def test_the_type_limits_the_tasks_left_and_the_fair_share_cut_a_group() -> None:
    assert size(limits=GroupLimits(horizon_s=2.0, max_s=0.5)) == 5  # policy 1-2
    assert size(limits=GroupLimits(horizon_s=2.0, max_tasks=7)) == 7
    assert size(pending=3) == 3  # policy 7: no more than the bag holds
    assert size(share=6) == 6
    assert fair_share(100, 2, 20) == 10  # 2 of 20 slots: a tenth
    assert fair_share(3, 4, 40) == 4  # never below a machine's slots


def test_past_the_stretch_a_busy_machine_is_topped_up_a_horizons_group_at_a_time() -> None:
    """2 s of 0.1 s tasks is a group of 20; ahead, a machine holds up to 41 (twice the
    group and a wave). Busy, it is topped up only once 20 or more fit, so each report
    adds about a horizon's work and more than that stays queued."""
    assert ahead(1000, 1001)
    assert not ahead(1000, 1000)
    assert not ahead(0, 10**6)  # 0: never
    assert size(ahead=True) == 41  # idle: the group, the next, and a wave
    assert size(ahead=True, in_flight=21) == 20  # a horizon's work left: topped up
    assert size(ahead=True, in_flight=22) == 0  # more than that: a later report
    assert size(ahead=True, slots=4, in_flight=4 + 80) == 80  # in whole waves of slots
    assert size(ahead=True, slots=4, in_flight=3) == 4 * 41 - 3  # a slot free: filled
    # what bounds a group bounds the top-up: the share, the window, the type
    assert size(ahead=True, in_flight=1, share=10) == 0
    assert size(ahead=True, in_flight=0, share=10) == 10
    assert size(ahead=True, mean_s=10.0, window_s=35.0, limits=GroupLimits(600.0)) == 3
    assert size(ahead=True, in_flight=5, limits=GroupLimits(2.0, max_tasks=30)) == 25
    assert size(mean_s=0.1, in_flight=21) == 0  # up to the stretch: as before


# --- records -----------------------------------------------------------------------------


TYPES = [TypeSpec("a", 1.0, 4, 10.0), TypeSpec("b", 2.0, 2, 10.0, slots=3)]


def two_machines() -> RunState:
    state = RunState.new(TYPES, BillingModel("fixed", 3600.0), 100.0, 12, list(range(12)))
    for mid, tname in (("a0", "a"), ("b0", "b")):
        state.apply(0.0, Launch(tname, 1, f"t-{mid}"))
        state.apply(0.0, MachineLaunched(mid, tname, f"t-{mid}"))
        state.apply(10.0, MachineReady(mid))
    return state


def test_the_horizon_stretches_with_the_fleet_past_where_the_heartbeat_does() -> None:
    assert stretched(2.0, 1000, 1) == stretched(2.0, 1000, 1000) == 2.0
    assert stretched(2.0, 1000, 5000) == 10.0
    assert stretched(2.0, 0, 10**6) == 2.0  # 0: never
    assert stretched(0.0, 1000, 5000) == 0.0  # one task per slot stays so


def test_a_step_merges_assigns_to_one_machine_into_a_group_and_replays_equal() -> None:
    live, replayed = two_machines(), two_machines()
    s = Step(live, 11.0)
    for tid, mid in ((0, "a0"), (1, "a0"), (2, "a0"), (3, "b0"), (4, "a0")):
        s.do(Assign(tid, mid))
    decided = s.decided()
    assert decided == [AssignGroup((0, 1, 2), "a0"), Assign(3, "b0"), Assign(4, "a0")]
    assert assignments(decided) == [(0, "a0"), (1, "a0"), (2, "a0"), (3, "b0"), (4, "a0")]
    journal = SqliteJournal(Path(":memory:"))
    journal.step(11.0, [], decided)
    replay(replayed, journal.records())
    assert replayed == live
    a0, b0 = live.fleet.machines["a0"], live.fleet.machines["b0"]
    assert list(a0.running) == [0]
    assert list(a0.queue) == [1, 2, 4]
    assert list(b0.running) == [3]  # three slots, one task
    assert sorted(a0.run_no.values()) == [1, 2, 3, 4]  # queued tasks have run numbers


def test_slots_run_at_once_and_a_result_of_a_queued_task_is_taken() -> None:
    state = two_machines()
    state.apply(11.0, AssignGroup((0, 1, 2, 3, 4), "b0"))
    b0 = state.fleet.machines["b0"]
    assert sorted(b0.running) == [0, 1, 2]
    assert list(b0.queue) == [3, 4]
    # The agent ran task 4 before the state expected (its slots freed early): counted.
    state.apply(20.0, TaskDone(4, "b0", 3.0))
    assert state.tasks.task_state[4] is TaskState.DONE
    assert list(b0.queue) == [3]
    assert sorted(b0.running) == [0, 1, 2]
    state.apply(21.0, TaskDone(0, "b0", 10.0))
    assert sorted(b0.running) == [1, 2, 3]
    assert not b0.queue
    assert state.tasks.done == 2


def test_a_queued_task_moved_away_loses_its_run_number_there() -> None:
    state = two_machines()
    state.apply(11.0, AssignGroup((0, 1, 2), "a0"))
    state.apply(12.0, Move((2,), "a0", "b0"))
    a0, b0 = state.fleet.machines["a0"], state.fleet.machines["b0"]
    assert 2 not in a0.run_no
    assert list(a0.queue) == [1]
    assert 2 in b0.running
    assert b0.run_no[2] == 1


# --- in the emulator: budget mode with groups --------------------------------------------

CONFIG = """
bag: {synthetic: 600}
constraint: {budget: 40}
billing: {mode: fixed, atu_s: 1h}
machine_types:
  - {name: small, price: 1.0, max_count: 4, boot_s: 60, slots: SLOTS}
  - {name: large, price: 2.5, max_count: 4, boot_s: 60}
emulator:
  runtime: {dist: normal, mean_s: 20, sd_s: 4}
  speed: {large: 2.0}
daemon: {group_s: GROUP, heartbeat_s: BEAT}
policy: POLICY
"""


def emulate(
    tmp_path: Path,
    group_s: float,
    slots: int = 1,
    policy: str = "bats",
    beat: float = 2.0,
    busy: list[int] | None = None,
) -> tuple[RunState, list[Action]]:
    """The emulated run and its actions; ``busy`` counts the assignments to a machine
    that was running a task they did not bring."""
    path = tmp_path / f"run-{group_s}-{slots}-{policy}-{beat}.yaml"
    text = CONFIG.replace("GROUP", str(group_s)).replace("SLOTS", str(slots))
    text = text.replace("BEAT", str(beat))
    path.write_text(text.replace("POLICY", policy))
    cfg = load_config(path)
    taken: list[Action] = []
    journal = SqliteJournal(tmp_path / f"j-{group_s}-{slots}-{policy}-{beat}.db")

    def hook(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        journal.step(now, events, actions)
        taken.extend(actions)
        for a in actions:
            if busy is not None and isinstance(a, Assign | AssignGroup):
                given = {a.task} if isinstance(a, Assign) else set(a.tasks)
                busy[0] += bool(set(state.fleet.machines[a.machine].running) - given)

    state = make_emulator(cfg, 600, 1, on_step=hook, run_tag="r").run()
    replayed = RunState.new(
        state.types.values(), state.billing, 40.0, 600, list(range(600)), sample_target=30
    )
    replay(replayed, journal.records())
    assert replayed.tasks.done == state.tasks.done
    assert replayed.tasks.task_state == state.tasks.task_state
    journal.close()
    return state, taken


def assert_every_task_done_once_in_budget(state: RunState) -> None:
    assert state.tasks.done == 600
    assert state.money.committed <= 40.0 + 1e-9
    done = Counter(s.task for s in state.tasks.segments if s.outcome == "done")
    assert set(done) == set(range(600))
    assert max(done.values()) == 1


def largest_group(actions: list[Action]) -> int:
    return max((len(a.tasks) for a in actions if isinstance(a, AssignGroup)), default=1)


def records(actions: list[Action]) -> int:
    """Assignment records: one per group, one per task without groups."""
    return sum(isinstance(a, Assign | AssignGroup) for a in actions)


@pytest.mark.parametrize("policy", ["bats", "round_robin"])
def test_groups_hand_out_many_tasks_per_record_and_finish_every_task_once(
    tmp_path: Path, policy: str
) -> None:
    """Round robin, which has no sampling, hands out groups from the start (they once
    waited for a plan it never makes: one task per request)."""
    one, one_actions = emulate(tmp_path, 0.0, policy=policy)
    grouped, actions = emulate(tmp_path, 120.0, policy=policy)
    for state in (one, grouped):
        assert_every_task_done_once_in_budget(state)
    assert largest_group(actions) > 1
    assert records(actions) < records(one_actions) / 2
    assert not [a for a in one_actions if isinstance(a, AssignGroup)]  # one task a record
    # one record per group, one task per record without groups
    assert not [a for a in one_actions if isinstance(a, AssignGroup)]


def test_a_fleet_past_the_heartbeats_stretch_gets_groups_as_much_longer(tmp_path: Path) -> None:
    """A heartbeat of 4 ms stretches past 500 × 0.004 = 2 machines: with up to 8 machines
    alive the horizon is up to 4× longer, and so are the groups, as at 4,000 agents with
    the default 2 s heartbeat. Nothing else changes: every task done once, in budget."""
    plain, plain_actions = emulate(tmp_path, 40.0, policy="round_robin")
    wide, wide_actions = emulate(tmp_path, 40.0, policy="round_robin", beat=0.004)
    for state in (plain, wide):
        assert_every_task_done_once_in_budget(state)
    assert largest_group(plain_actions) <= 4  # 40 s of 10 s tasks on the fast type
    assert largest_group(wide_actions) > 2 * largest_group(plain_actions)
    assert records(wide_actions) < records(plain_actions) / 2


def test_past_the_stretch_busy_machines_are_handed_their_next_group_before_they_idle(
    tmp_path: Path,
) -> None:
    """With the fleet past the heartbeat's stretch, groups go to machines still running
    a task (their agents hear of them at their next report instead of polling when their
    queue runs dry); up to it, only to machines with a free slot. Every task is done
    once, in budget, and the bag ends no later for it than a task's length."""
    plain_busy, wide_busy = [0], [0]
    plain, _ = emulate(tmp_path, 40.0, policy="round_robin", busy=plain_busy)
    wide, _ = emulate(tmp_path, 40.0, policy="round_robin", beat=0.004, busy=wide_busy)
    for state in (plain, wide):
        assert_every_task_done_once_in_budget(state)
    assert plain_busy == [0]
    assert wide_busy[0] > 10

    def last_end(state: RunState) -> float:
        return max(s.end for s in state.tasks.segments if s.outcome == "done")

    assert last_end(wide) <= last_end(plain) + 20.0  # the slow type's mean task


def test_an_idle_machine_takes_back_the_end_of_another_machines_group(tmp_path: Path) -> None:
    state, actions = emulate(tmp_path, 600.0)
    moves = [a for a in actions if isinstance(a, Move)]
    assert moves, "the bag's end is balanced by taking queued tasks back"
    assert state.tasks.done == 600


def test_a_task_taken_back_that_its_agent_had_finished_counts_once() -> None:
    """The agent ran ahead of what it had reported: the task taken back from its group
    had already ended there. Its result counts and the copy moved elsewhere ends."""
    state = two_machines()
    state.apply(11.0, AssignGroup((0, 1, 2), "a0"))
    state.apply(11.0, Assign(3, "b0"))
    state.apply(11.0, Assign(4, "b0"))
    state.apply(11.0, Assign(5, "b0"))  # b0's three slots busy: 2 waits in its queue
    state.apply(12.0, Move((2,), "a0", "b0"))
    b0 = state.fleet.machines["b0"]
    assert list(b0.queue) == [2]
    state.apply(13.0, TaskDone(2, "a0", 0.5))  # the late result of the run taken back
    assert state.tasks.task_state[2] is TaskState.DONE
    assert state.tasks.done == 1
    assert 2 not in b0.queue
    assert 2 not in b0.run_no
    state.apply(14.0, TaskDone(2, "a0", 0.5))  # sent again: counted once
    assert state.tasks.done == 1
