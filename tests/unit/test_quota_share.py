"""``run.quota.Share``: a run's side of the machine limits it shares with other runs."""

from __future__ import annotations

from pathlib import Path

import structlog

from autoscaler.config.load import load_config
from autoscaler.core.actions import Launch
from autoscaler.core.model import LaunchFailed, QuotaSet
from autoscaler.run.assemble import new_state
from autoscaler.run.quota import QUOTA_KIND, Share
from autoscaler.service.quota_ledger import QuotaLedger

EXAMPLES = Path(__file__).parents[2] / "config" / "examples"


def test_launches_beyond_the_share_are_refused_in_the_next_step() -> None:
    cfg = load_config(EXAMPLES / "quickstart.yaml")  # types small and fast
    state = new_state(cfg, 10, 1)
    ledger = QuotaLedger({"small": 3, "fast": 10}, {})
    ledger.hold("other", {"small": 2})
    woken: list[int] = []
    share = Share(ledger, "me", lambda: woken.append(1), structlog.get_logger())
    [room] = share.news(state)
    assert isinstance(room, QuotaSet)
    assert room.types["small"] == 1
    launches = [Launch("small", 3, "t1"), Launch("fast", 2, "t2")]
    kept = share.granted(state, launches)
    assert kept == [Launch("small", 1, "t1"), Launch("fast", 2, "t2")]
    assert woken == [1]
    [refused] = share.refused()
    assert isinstance(refused, LaunchFailed)
    assert (refused.token, refused.count, refused.kind) == ("t1", 2, QUOTA_KIND)
    assert share.refused() == []


def test_a_run_that_shares_nothing_launches_as_planned() -> None:
    cfg = load_config(EXAMPLES / "quickstart.yaml")
    state = new_state(cfg, 10, 1)
    share = Share(None, "", lambda: None, structlog.get_logger())
    launches = [Launch("small", 30, "t1")]
    assert share.news(state) == []
    assert share.granted(state, launches) == launches
    assert share.refused() == []
