"""Rebalance recommendations on EC2 (moto): the agent reads its instance's
recommendation from the metadata beside the interruption notice (a loopback stand-in,
``tests/integration/notices.py``), and the machine drains: it is given nothing new, its
queued tasks go back to the bag, what it runs finishes there, and it is released at the
end of its paid time, not lost."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.integration.daemon_helpers import assigned_rows, committed_over_time, journal_rows
from tests.integration.ec2_world import Ec2World
from tests.integration.test_ec2_daemon import report_of
from tests.integration.test_spot_notice import N, post_and_hear

pytestmark = pytest.mark.integration


@pytest.mark.long
def test_a_rebalance_recommendation_drains_the_machine(world: Ec2World) -> None:
    heard = post_and_hear(
        world,
        lambda m: world.notices.rebalance(m, "2026-11-26T11:58:00Z"),
        "RebalanceRecommended",
        "the recommendation heard",
    )
    run_dir, victim, run_id = heard.run_dir, heard.victim, heard.run_id
    assert heard.returncode == 0, heard.out[-3000:]
    ((t_rb, _, said),) = [
        r for r in journal_rows(run_dir, "RebalanceRecommended") if r[2]["machine"] == victim
    ]
    assert said["time"] == "2026-11-26T11:58:00Z"
    assert world.notices.rebalance_reads[victim] >= 1
    assert world.notices.tokenless == 0  # IMDSv2 for the recommendation too
    # Nothing new for it from then on; it was not lost, and what it ran there finished.
    assert not [d for t, _, d in assigned_rows(run_dir) if d["machine"] == victim and t >= t_rb]
    assert not [d for _, _, d in journal_rows(run_dir, "MachineLost") if d["machine"] == victim]
    done_by = {d["task"]: (t, d["machine"]) for t, _, d in journal_rows(run_dir, "TaskDone")}
    assert any(m == victim and t >= t_rb for t, m in done_by.values()), "it ran its task out"
    # Its queue at the recommendation went back to the bag and was done elsewhere.
    cancelled = [
        d["task"]
        for t, _, d in journal_rows(run_dir, "Cancel")
        if d["machine"] == victim and t == t_rb
    ]
    assert all(done_by[task][1] != victim for task in cancelled)
    done = Counter(d["task"] for _, _, d in journal_rows(run_dir, "TaskDone"))
    assert sorted(done) == list(range(N))
    assert set(done.values()) == {1}
    assert max(committed_over_time(run_dir)) <= 80 + 1e-9
    report = report_of(run_dir)
    gone = next(m for m in report["machines"] if m["id"] == victim)
    assert "interruption notice" not in (gone["end_reason"] or "")
    assert not world.running(run_id)
