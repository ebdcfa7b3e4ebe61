"""The sge provider against the real one-node Grid Engine (infra/sge/setup.sh).

Machines are real jobs on the queues as_small.q and as_large.q; each runs the real worker
agent, which polls a scripted controller on loopback (test_agent's) with the token it
reads from the token file. Every job a test submits is deleted at its end.
"""

from __future__ import annotations

import re
import secrets
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import pytest

from autoscaler.bootstrap.agent_start import AgentSettings
from autoscaler.bootstrap.credentials import machine_token
from autoscaler.core.billing import BillingModel
from autoscaler.providers.base import Capabilities, ProviderState
from autoscaler.providers.cost_tags import CostTags
from autoscaler.providers.sge import SgeProvider, SgeType, delete_jobs, list_tagged
from autoscaler.providers.sge_output import job_name
from tests.integration.agent_harness import FakeController, Request
from tests.integration.sge import XDIST_GROUP, GridEngine

pytestmark = [pytest.mark.integration, XDIST_GROUP]

TOKEN = "s3cret-sge-token-51c7"
TIMEOUT_S = 90.0  # a bound on waiting for the scheduler, not a timing assertion
T = TypeVar("T")


def wait_until(what: str, probe: Callable[[], T | None], timeout: float = TIMEOUT_S) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.5)


def new_run_id() -> str:
    return f"it-{datetime.now(UTC):%Y%m%dT%H%M%SZ}-{secrets.token_hex(2)}"


@pytest.fixture
def controller() -> Iterator[FakeController]:
    ctl = FakeController()
    ctl.start()
    yield ctl
    ctl.stop()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    return tmp_path


@pytest.fixture
def run_ids() -> Iterator[list[str]]:
    """Run ids a test uses; any job of theirs still queued at the end is deleted."""
    ids: list[str] = []
    yield ids
    leftover = [t.job_id for t in list_tagged() if t.run_id in ids]
    delete_jobs(leftover)


def make_provider(run_id: str, run_dir: Path, url: str, workdir: Path | None = None) -> SgeProvider:
    caps = Capabilities(
        billing=BillingModel("fixed", 3600.0),
        max_counts={"small": 2, "large": 2},
        boot_estimate_s={"small": 5.0, "large": 5.0},
    )
    agents = AgentSettings(
        url=url,
        token=TOKEN,  # the run's secret: each agent's token file holds its machine's
        heartbeat_s=0.5,
        orphan_after_s=30.0,
        workdir=workdir,
        python=sys.executable,
    )
    types = {"small": SgeType(queue="as_small.q"), "large": SgeType(queue="as_large.q")}
    return SgeProvider(
        caps, run_id, agents, types, run_dir / "agents", time.monotonic, run_dir / "token"
    )


def states(provider: SgeProvider) -> dict[str, ProviderState]:
    return {s.id: s.state for s in provider.describe()}


def our_jobs(run_id: str) -> dict[str, str]:
    """machine id -> job id of the run's jobs in qstat."""
    return {t.machine: t.job_id for t in list_tagged() if t.run_id == run_id}


def test_machines_are_jobs_whose_agents_poll_with_the_token(
    sge: GridEngine,
    controller: FakeController,
    run_dir: Path,
    run_ids: list[str],
) -> None:
    run_id = new_run_id()
    run_ids.append(run_id)
    provider = make_provider(run_id, run_dir, controller.url)

    small = provider.launch("small", 1, "L1", {})
    large = provider.launch("large", 1, "L2", {})
    assert [r.id for r in small + large] == ["small-L1-0", "large-L2-0"]
    jobs = our_jobs(run_id)
    assert set(jobs) == {"small-L1-0", "large-L2-0"}

    # Queued, then running; never anything else on the way.
    seen: list[dict[str, ProviderState]] = []

    def all_running() -> bool:
        seen.append(states(provider))
        return all(s is ProviderState.RUNNING for s in seen[-1].values())

    wait_until("both jobs to run", all_running)
    for snapshot in seen:
        assert set(snapshot) == {"small-L1-0", "large-L2-0"}
        assert set(snapshot.values()) <= {ProviderState.PENDING, ProviderState.RUNNING}
    queues = {
        job.split("@")[0]
        for job in sge.run("qstat", "-u", "*").stdout.split()
        if job.startswith("as_")
    }
    assert queues == {"as_small.q", "as_large.q"}

    # The agents really poll, each with its machine id and its machine's token from its
    # file (not the run's secret).
    for mid in ("small-L1-0", "large-L2-0"):

        def polled(request: Request, mid: str = mid) -> bool:
            return request.body.get("machine") == mid

        request = controller.wait_for(polled, timeout=TIMEOUT_S)
        assert request.headers["Authorization"] == f"Bearer {machine_token(TOKEN, mid)}"
    # ... and no token is anywhere in what Grid Engine shows every user.
    for mid, job_id in jobs.items():
        shown = sge.run("qstat", "-j", job_id).stdout
        assert TOKEN not in shown
        assert machine_token(TOKEN, mid) not in shown

    # The same tokens again: no new job.
    again = provider.launch("small", 1, "L1", {}) + provider.launch("large", 1, "L2", {})
    assert [(r.id, r.launched_at) for r in again] == [(r.id, r.launched_at) for r in small + large]
    assert our_jobs(run_id) == jobs

    # A restarted daemon (a new provider object) adopts the run's jobs by name.
    adopted = make_provider(run_id, run_dir, controller.url)
    assert states(adopted) == {
        "small-L1-0": ProviderState.RUNNING,
        "large-L2-0": ProviderState.RUNNING,
    }

    # A job deleted from outside is a lost machine: TERMINATED.
    assert sge.qdel([jobs["small-L1-0"]]) == [jobs["small-L1-0"]]
    wait_until(
        "the deleted job to show as terminated",
        lambda: states(adopted)["small-L1-0"] is ProviderState.TERMINATED,
    )
    assert states(adopted)["large-L2-0"] is ProviderState.RUNNING

    # terminate() deletes the job; describe then says TERMINATED and qstat loses it.
    assert adopted.terminate(["large-L2-0", "small-L1-0"]) == ["large-L2-0", "small-L1-0"]
    assert set(states(adopted).values()) == {ProviderState.TERMINATED}
    wait_until("the run's jobs to leave qstat", lambda: not our_jobs(run_id))
    assert set(states(provider).values()) == {ProviderState.TERMINATED}


def test_a_job_in_error_is_deleted_and_reported_terminated(
    sge: GridEngine,
    run_dir: Path,
    run_ids: list[str],
) -> None:
    # A working directory missing on the node: Grid Engine puts the job in Eqw for good.
    run_id = new_run_id()
    run_ids.append(run_id)
    provider = make_provider(run_id, run_dir, "http://127.0.0.1:9", run_dir / "no-such-dir")
    provider.launch("small", 1, "L1", {})
    (job_id,) = our_jobs(run_id).values()

    def error_state() -> bool:
        return any(t.state.startswith("E") for t in list_tagged() if t.job_id == job_id)

    wait_until("the job to enter an error state", error_state)
    assert states(provider) == {"small-L1-0": ProviderState.TERMINATED}
    wait_until("the job in error to be deleted", lambda: job_id not in our_jobs(run_id).values())


def test_a_job_s_account_string_is_the_run_s_project(
    sge: GridEngine, run_dir: Path, run_ids: list[str]
) -> None:
    run_id = new_run_id()
    run_ids.append(run_id)
    provider = make_provider(run_id, run_dir, "http://127.0.0.1:9")
    provider.launch("small", 1, "L1", CostTags("physics", "sweep", "alice").tags())
    provider.launch("large", 1, "L2", {})
    jobs = our_jobs(run_id)
    shown = {mid: sge.run("qstat", "-j", job).stdout for mid, job in jobs.items()}
    assert re.search(r"^account:\s+physics$", shown["small-L1-0"], re.M), shown["small-L1-0"]
    assert not re.search(r"^account:\s+physics$", shown["large-L2-0"], re.M)


def test_list_tagged_finds_every_runs_jobs_and_no_one_elses(
    sge: GridEngine,
    controller: FakeController,
    run_dir: Path,
    run_ids: list[str],
    tmp_path: Path,
) -> None:
    run_id, other_run = new_run_id(), f"other run/{secrets.token_hex(2)}"
    run_ids += [run_id, other_run]
    provider = make_provider(run_id, run_dir, controller.url)
    (record,) = provider.launch("large", 1, "L9", {})
    log = str(tmp_path / "plain.log")
    foreign = sge.qsub("-b", "y", "-N", "plain", "-o", log, "-j", "y", "sleep", "60")
    stray = sge.qsub(
        "-b", "y", "-N", job_name(other_run, "small-L3-0"), "-o", log, "-j", "y", "sleep", "60"
    )

    found = {t.job_id: (t.run_id, t.machine) for t in list_tagged()}
    assert found[our_jobs(run_id)[record.id]] == (run_id, record.id)
    assert found[stray] == (other_run, "small-L3-0")
    assert foreign not in found

    # The provider of one run neither sees nor deletes another's jobs.
    assert set(states(provider)) == {record.id}
    assert provider.terminate([record.id, "small-L3-0"]) == [record.id]
    queued = {t.job_id for t in list_tagged()}
    assert stray in queued
    assert foreign in {
        line.split()[0] for line in sge.run("qstat", "-u", "*").stdout.splitlines()[2:]
    }
