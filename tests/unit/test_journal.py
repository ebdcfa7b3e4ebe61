"""The SQLite journal, the dispatcher's request parsing, and the state's real-run rules."""

from __future__ import annotations

import contextlib
import json
import sqlite3
from pathlib import Path

import pytest

from autoscaler.core.journal import (
    JOURNAL_JSONL,
    Journal,
    JournalError,
    JsonlJournal,
    SqliteJournal,
    decode,
    encode,
    fields,
    jsonl_line,
    kind_of,
    replay,
)
from autoscaler.core.model import (
    Action,
    Assign,
    AssignGroup,
    BoundaryNear,
    Event,
    Extend,
    Launch,
    MachineLaunched,
    MachineLost,
    MachineReady,
    Move,
    Release,
    Shutdown,
    Stop,
    TaskDone,
    TaskSpec,
)
from autoscaler.core.state import RunState
from autoscaler.run.assemble import new_state
from autoscaler.run.polls import BadRequest, parse_poll
from autoscaler.run.start import dry_run, make_emulator
from tests.conftest import make_config


def test_every_record_of_a_dry_run_survives_the_journal_and_replays_to_the_same_state(
    tmp_path: Path,
) -> None:
    """Encode → SQLite → decode → replay gives the dry run's final state back, whole."""
    cfg = make_config(
        bag={"synthetic": 300},
        emulator={
            "seed": 4,
            "runtime": {"dist": "normal", "mean_s": 600, "sd_s": 120},
            "speed": {"fast": 3.0},
            "task_failure_prob": 0.05,
            "machine_failures": [{"type": "fast", "at_s": 2000}],
        },
    )
    journal = SqliteJournal(tmp_path / "j.sqlite")
    steps: list[tuple[float, list[Event], list[Action]]] = []

    def on_step(now: float, events: list[Event], actions: list[Action], _: RunState) -> None:
        steps.append((now, list(events), list(actions)))
        journal.step(now, events, actions)

    emulator = make_emulator(cfg, 300, on_step=on_step)
    final = emulator.run()
    journal.close()

    reopened = SqliteJournal(tmp_path / "j.sqlite")
    records = list(reopened.records())
    assert [(r.t, r.kind, r.item) for r in records] == [
        (t, kind, item)
        for t, events, actions in steps
        for kind, items in (("event", events), ("action", actions))
        for item in items
    ]
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    replayed = new_state(cfg, 300, cfg.emulator.seed)
    replay(replayed, records)
    reopened.close()
    assert replayed == final


def test_the_dry_runs_jsonl_journal_replays_to_the_runs_final_state(tmp_path: Path) -> None:
    """The dry run writes through the same Journal protocol; its file rebuilds the state."""
    cfg = make_config(bag={"synthetic": 80}, emulator={"seed": 2, "task_failure_prob": 0.1})
    tasks = [TaskSpec(i, None) for i in range(80)]
    run = dry_run(cfg, tasks, out_dir=tmp_path / "run", plots=False)
    journal: Journal = JsonlJournal(tmp_path / "run" / JOURNAL_JSONL)
    records = list(journal.records())
    journal.close()
    assert [r.seq for r in records] == list(range(1, len(records) + 1))
    replayed = new_state(cfg, 80, cfg.emulator.seed)
    assert replay(replayed, records) == len(records)
    assert replayed == run.state


def test_a_jsonl_journal_continues_its_numbering_and_keeps_run_facts(tmp_path: Path) -> None:
    path = tmp_path / JOURNAL_JSONL
    first = JsonlJournal(path)
    first.set_meta(run_id="r1", seed=3)
    first.step(0.0, [], [Launch("slow", 1, "L0")])
    first.close()
    again = JsonlJournal(path)
    again.step(1.5, [MachineLaunched("slow-L0-0", "slow", "L0")], [])
    again.set_meta(seed=4)
    assert [(r.seq, r.t, r.kind) for r in again.records()] == [
        (1, 0.0, "action"),
        (2, 1.5, "event"),
    ]
    assert again.meta() == {"run_id": "r1", "seed": 4}
    again.close()
    fresh = JsonlJournal(path, fresh=True)
    assert list(fresh.records()) == []
    fresh.close()


def test_a_jsonl_line_is_json_dumps_of_the_record_whichever_way_it_is_written() -> None:
    """The lines of a task's records are formatted directly (the common ones); each is
    the text ``json.dumps`` writes of the record's dict, odd values included."""
    items: list[Event | Action] = [
        Assign(7, "sim-cluster0-3"),
        Assign(0, 'a "quoted" \\ name, ünïcode'),
        AssignGroup((1, 2, 3), "m"),
        TaskDone(12, "sim-cluster1-0", 901.2345678901234),
        TaskDone(3, "m\n", 1e-300),
        TaskDone(4, "m", float("inf")),
        TaskDone(5, "m", 60),  # an int runtime: the general path
        MachineReady("m"),
        Stop(None),
        BoundaryNear("sim-cluster0-3"),
        BoundaryNear('m "q" ü'),
        Extend("sim-cluster0-3", 7200.000000000001),
        Extend("m", 7200),  # an int: the general path
        Extend("m", float("inf")),
    ]
    for t in (0.0, 12.5, 1e22, 3, float("nan")):
        for seq, item in enumerate(items, 1):
            line = {
                "seq": seq,
                "t": t,
                "kind": kind_of(item),
                "type": type(item).__name__,
                "data": fields(item),
            }
            assert jsonl_line(seq, t, item) == json.dumps(line)


def test_a_sqlite_record_is_compact_json_of_its_fields_whichever_way_it_is_written() -> None:
    """The SQLite journal's ``data`` of the common records is formatted directly; each is
    the compact JSON of the record's fields, odd values included."""
    items: list[Event | Action] = [
        Assign(7, "sim-cluster0-3"),
        Assign(0, 'a "quoted" \\ name, ünïcode'),
        AssignGroup((1, 2, 3), "m"),
        AssignGroup((4,), 'm "q" ü'),
        AssignGroup((True, 2), "m"),  # a bool is no task id: the general path
        TaskDone(12, "sim-cluster1-0", 901.2345678901234),
        TaskDone(3, "m\n", 1e-300),
        TaskDone(4, "m", float("inf")),
        TaskDone(5, "m", 60),
        MachineReady("m"),
        BoundaryNear('m "q" ü'),
        Extend("sim-cluster0-3", 7200.000000000001),
        Extend("m", float("nan")),
    ]
    for item in items:
        assert encode(item) == json.dumps(fields(item), separators=(",", ":"))


def test_a_jsonl_journal_writes_every_step_by_close_and_before_reading(tmp_path: Path) -> None:
    """Lines go out in batches; what was stepped is in the file when it is read back or
    closed, in order and numbered on."""
    path = tmp_path / JOURNAL_JSONL
    journal = JsonlJournal(path)
    n = 2 * JsonlJournal.BATCH_LINES + 5
    for i in range(n):
        journal.step(float(i), [TaskDone(i, "m", 1.5)], [Assign(i + 1, "m")])
    assert [r.seq for r in journal.records()] == list(range(1, 2 * n + 1))
    journal.step(float(n), [MachineReady("m")], [])
    journal.close()
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 * n + 1
    assert json.loads(lines[-1])["type"] == "MachineReady"
    again = JsonlJournal(path)
    again.step(0.0, [], [Stop(None)])
    again.close()
    assert json.loads(path.read_text(encoding="utf-8").splitlines()[-1])["seq"] == 2 * n + 2


def test_decode_names_a_record_that_does_not_fit() -> None:
    with pytest.raises(JournalError, match="unknown action type 'Explode'"):
        decode("action", "Explode", "{}")
    with pytest.raises(JournalError, match="does not fit"):
        decode("event", "MachineReady", json.dumps({"machine": "m", "colour": "red"}))
    move = Move((1, 2), "a", "b")
    assert decode("action", "Move", encode(move)) == move


def test_meta_round_trips(tmp_path: Path) -> None:
    journal = SqliteJournal(tmp_path / "j.sqlite")
    journal.set_meta(run_id="r1", port=4242, start_wall=1.5)
    journal.set_meta(port=4343)
    assert journal.meta() == {"run_id": "r1", "port": 4343, "start_wall": 1.5}
    journal.close()


def test_a_results_lines_are_journaled_with_it_in_the_journals_order(tmp_path: Path) -> None:
    """The outputs file's lines go in with their step, each under its event's number,
    and come back in the journal's order, whatever the order they were given in."""
    journal = SqliteJournal(tmp_path / "j.sqlite")
    journal.step(0.0, [MachineReady("m1")], [Assign(1, "m1"), Assign(2, "m1")])
    events: list[Event] = [MachineReady("m2"), TaskDone(2, "m1", 5.0), TaskDone(1, "m1", 6.0)]
    journal.step(7.0, events, [Release("m1", "done")], [(2, "line of 1"), (1, "line of 2")])
    journal.step(8.0, [TaskDone(3, "m2", 1.0)], [])  # a result without a line
    assert list(journal.outputs()) == ["line of 2", "line of 1"]
    seqs = {r.seq: r.item for r in journal.records()}
    with contextlib.closing(sqlite3.connect(tmp_path / "j.sqlite")) as db:
        rows = db.execute("SELECT seq, line FROM outputs ORDER BY seq").fetchall()
    assert [(seqs[seq], line) for seq, line in rows] == [
        (TaskDone(2, "m1", 5.0), "line of 2"),
        (TaskDone(1, "m1", 6.0), "line of 1"),
    ]
    journal.close()


def _state() -> RunState:
    return new_state(make_config(), 10, 1)


def test_a_launch_adopted_late_is_paid_from_when_it_started() -> None:
    """MachineLaunched.at dates the machine (an adoption after a restart)."""
    state = _state()
    state.apply(0.0, Launch("slow", 1, "L0"))
    state.apply(500.0, MachineLaunched("slow-L0-0", "slow", "L0", at=120.0))
    m = state.fleet.machines["slow-L0-0"]
    assert m.launched_at == 120.0
    assert m.paid_until == 120.0 + 3600.0


def test_a_launch_journaled_before_zones_replays_and_a_new_one_keeps_its_zone() -> None:
    """``MachineLaunched.zone`` is optional: a record without it (a journal written before
    zones) decodes and folds to a machine of no zone; one with it dates the machine's."""
    old = json.dumps({"machine": "slow-L0-0", "type": "slow", "token": "L0", "at": None})
    new = MachineLaunched("slow-L0-1", "slow", "L0", zone="us-east-1b")
    state = _state()
    state.apply(0.0, Launch("slow", 2, "L0"))
    state.apply(1.0, decode("event", "MachineLaunched", old))
    state.apply(1.0, decode("event", "MachineLaunched", encode(new)))
    assert [m.zone for m in state.fleet.machines.values()] == ["", "us-east-1b"]


def test_news_of_an_end_after_the_paid_time_dates_the_end_to_the_paid_time() -> None:
    """A machine lost while no daemon watched ended by its lease: no unpaid unit is counted."""
    state = _state()
    state.apply(0.0, Launch("slow", 1, "L0"))
    state.apply(0.0, MachineLaunched("slow-L0-0", "slow", "L0"))
    committed = state.money.committed
    state.apply(3600.0 + 900.0, MachineLost("slow-L0-0", "ended while the daemon was down"))
    m = state.fleet.machines["slow-L0-0"]
    assert m.ended_at == 3600.0
    assert state.money.committed == committed
    assert state.actual_cost() == pytest.approx(1.0)


def test_shutdown_stops_the_run_and_releases_every_machine() -> None:
    from autoscaler.budget.controller import Controller

    state = _state()
    controller = Controller()
    actions = controller.step(state, [], 0.0)
    launches = [a for a in actions if isinstance(a, Launch)]
    events: list[Event] = [
        MachineLaunched(f"{a.type}-{a.token}-{i}", a.type, a.token)
        for a in launches
        for i in range(a.count)
    ]
    controller.step(state, events, 1.0)
    controller.step(state, [MachineReady(e.machine) for e in events], 60.0)  # type: ignore[attr-defined]
    actions = controller.step(state, [Shutdown("interrupted by SIGTERM")], 100.0)
    assert Stop("interrupted by SIGTERM") in actions
    released = {a.machine for a in actions if isinstance(a, Release)}
    assert released == set(state.fleet.machines)
    assert not state.fleet.any_alive()
    assert state.tasks.pending
    assert not state.tasks.running_on
    assert state.money.stop_reason == "interrupted by SIGTERM"


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        (b"not json", "not JSON"),
        (b"[]", "JSON object"),
        (b'{"results": []}', "machine"),
        (b'{"machine": "m", "results": [{"run": 1}]}', "results"),
        (b'{"machine": "m", "running": ["x"]}', "running"),
        (b'{"machine": "m", "wait_s": -1}', "wait_s"),
    ],
)
def test_a_bad_agent_request_is_refused_naming_the_field(body: bytes, problem: str) -> None:
    with pytest.raises(BadRequest, match=problem):
        parse_poll(body, 0.0)


def test_a_poll_caps_its_wait() -> None:
    poll = parse_poll(b'{"machine": "m", "running": [3], "wait_s": 1e9}', 0.0)
    assert poll.running == [3]
    assert poll.wait_s == 60.0
