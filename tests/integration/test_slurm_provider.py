"""The slurm provider against the real one-node Slurm (infra/slurm/setup.sh).

Machines are real batch jobs on the partitions as_small and as_large; each runs the real
worker agent, which polls a scripted controller on loopback (test_agent's) with the token
it reads from the token file. Offers come from the real scheduler (``sbatch
--test-only``), on an idle node and on a node a job of ours fills. Every job a test
submits is cancelled at its end.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from autoscaler.bootstrap.agent_start import AgentSettings
from autoscaler.bootstrap.credentials import machine_token
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.base import Capabilities, PartialLaunch, ProviderState
from autoscaler.providers.batch import CommandResult, CommandRunner
from autoscaler.providers.cost_tags import CostTags
from autoscaler.providers.offer import OfferRequest
from autoscaler.providers.sge_output import job_name
from autoscaler.providers.slurm import (
    SlurmProvider,
    SlurmType,
    cancel_jobs,
    list_tagged,
    run_command,
)
from autoscaler.providers.slurm_output import finish_after
from tests.integration.agent_harness import FakeController, Request
from tests.integration.slurm import XDIST_GROUP, Slurm
from tests.integration.test_sge_provider import (  # the fixtures: a scripted controller
    TOKEN,
    controller,
    new_run_id,
    run_dir,
    wait_until,
)

pytestmark = [pytest.mark.integration, XDIST_GROUP]
__all__ = ["controller", "run_dir"]  # fixtures used by name

BUSY = "sbatch: error: Batch job submission failed: Resource temporarily unavailable"
TIMEOUT_S = 90.0  # a bound on waiting for the scheduler, not a timing assertion


@pytest.fixture
def run_ids() -> Iterator[list[str]]:
    """Run ids a test uses; any job of theirs still queued at the end is cancelled."""
    ids: list[str] = []
    yield ids
    cancel_jobs([t.job_id for t in list_tagged() if t.run_id in ids])


def make_provider(
    run_id: str,
    run_dir: Path,
    url: str,
    large: SlurmType | None = None,
    *,
    account_from_project: bool = False,
    runner: CommandRunner | None = None,
) -> SlurmProvider:
    caps = Capabilities(
        billing=BillingModel("fixed", 300.0),
        max_counts={"small": 2, "large": 2},
        boot_estimate_s={"small": 5.0, "large": 5.0},
    )
    agents = AgentSettings(
        url=url, token=TOKEN, heartbeat_s=0.5, orphan_after_s=30.0, python=sys.executable
    )
    types = {
        "small": SlurmType(partition="as_small"),
        "large": large or SlurmType(partition="as_large", cpus=2),
    }
    return SlurmProvider(
        caps,
        run_id,
        agents,
        types,
        run_dir / "agents",
        time.monotonic,
        run_dir / "token",
        runner,
        account_from_project=account_from_project,
    )


def states(provider: SlurmProvider) -> dict[str, ProviderState]:
    return {s.id: s.state for s in provider.describe()}


def our_jobs(run_id: str) -> dict[str, str]:
    """machine id -> job id of the run's queued or running jobs."""
    return {t.machine: t.job_id for t in list_tagged() if t.run_id == run_id}


def test_machines_are_jobs_whose_agents_poll_with_the_token(
    slurm: Slurm, controller: FakeController, run_dir: Path, run_ids: list[str]
) -> None:
    run_id = new_run_id()
    run_ids.append(run_id)
    provider = make_provider(run_id, run_dir, controller.url)

    submitted = time.monotonic()
    small = provider.launch("small", 1, "L1", {})
    large = provider.launch("large", 1, "L2", {})
    assert [r.id for r in small + large] == ["small-L1-0", "large-L2-0"]
    jobs = our_jobs(run_id)
    assert set(jobs) == {"small-L1-0", "large-L2-0"}
    shown = {mid: slurm.run("scontrol", "show", "job", job).stdout for mid, job in jobs.items()}
    assert "Partition=as_large" in shown["large-L2-0"]
    assert "NumCPUs=2" in shown["large-L2-0"]
    assert "TimeLimit=00:05:00" in shown["small-L1-0"]  # one 5-minute ATU
    assert all(TOKEN not in text for text in shown.values())  # every user may read these
    assert all(machine_token(TOKEN, mid) not in text for mid, text in shown.items())

    # The agents really poll, each with its machine id and the token from the file.
    for mid in ("small-L1-0", "large-L2-0"):

        def polled(request: Request, mid: str = mid) -> bool:
            return request.body.get("machine") == mid

        request = controller.wait_for(polled, timeout=TIMEOUT_S)
        assert request.headers["Authorization"] == f"Bearer {machine_token(TOKEN, mid)}"
        print(f"\nslurm: {mid} sbatch to first agent poll {request.at - submitted:.2f}s")
    wait_until(
        "both jobs to run",
        lambda: set(states(provider).values()) == {ProviderState.RUNNING},
    )

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

    # A job cancelled from outside is a lost machine: TERMINATED.
    slurm.scancel([jobs["small-L1-0"]])
    wait_until(
        "the cancelled job to show as terminated",
        lambda: states(adopted)["small-L1-0"] is ProviderState.TERMINATED,
    )
    assert states(adopted)["large-L2-0"] is ProviderState.RUNNING

    # terminate() cancels the job; describe then says TERMINATED and squeue loses it.
    assert adopted.terminate(["large-L2-0", "small-L1-0"]) == ["large-L2-0", "small-L1-0"]
    assert set(states(adopted).values()) == {ProviderState.TERMINATED}
    wait_until("the run's jobs to leave the queue", lambda: not our_jobs(run_id))
    assert set(states(provider).values()) == {ProviderState.TERMINATED}


def test_a_job_carries_the_run_s_project_as_its_comment_and_account_if_asked(
    slurm: Slurm, run_dir: Path, run_ids: list[str]
) -> None:
    """The comment always (any cluster keeps it); the account only with
    ``account_from_project``: a cluster with accounting refuses an account it does not
    know, and this one (no slurmdbd) takes any."""
    run_id = new_run_id()
    run_ids.append(run_id)
    charged = CostTags("Physics", "sweep", "alice").tags()
    make_provider(run_id, run_dir, "http://127.0.0.1:9").launch("small", 1, "L1", charged)
    asked = make_provider(run_id, run_dir, "http://127.0.0.1:9", account_from_project=True)
    asked.launch("large", 1, "L2", charged)
    jobs = our_jobs(run_id)

    plain = slurm.run("scontrol", "show", "job", jobs["small-L1-0"]).stdout
    assert "Comment=Physics" in plain
    assert "Account=physics" not in plain
    assert slurm.run("squeue", "-h", "-j", jobs["small-L1-0"], "-o", "%k").stdout.strip() == (
        "Physics"
    )
    charged_job = slurm.run("scontrol", "show", "job", jobs["large-L2-0"]).stdout
    assert "Comment=Physics" in charged_job
    assert "Account=physics" in charged_job


def test_a_job_that_can_never_run_is_cancelled_and_reported_terminated(
    slurm: Slurm, run_dir: Path, run_ids: list[str]
) -> None:
    # More CPUs than the node has: Slurm queues it for good (reason PartitionConfig).
    run_id = new_run_id()
    run_ids.append(run_id)
    too_big = SlurmType(partition="as_large", cpus=512)
    provider = make_provider(run_id, run_dir, "http://127.0.0.1:9", too_big)
    provider.launch("large", 1, "L1", {})
    (job_id,) = our_jobs(run_id).values()
    wait_until(
        "the job to be cancelled",
        lambda: (
            states(provider) == {"large-L1-0": ProviderState.TERMINATED}
            and slurm.state(job_id) in ("", "CANCELLED")
        ),
    )


def test_an_sbatch_refusal_names_the_type_and_slurms_reason(
    slurm: Slurm, run_dir: Path, run_ids: list[str]
) -> None:
    run_id = new_run_id()
    run_ids.append(run_id)
    provider = make_provider(run_id, run_dir, "http://127.0.0.1:9", SlurmType("no_such_part"))
    with pytest.raises(AutoscalerError) as err:
        provider.launch("large", 1, "L1", {})
    assert "machine type 'large'" in err.value.message
    assert "Invalid partition name specified" in err.value.message
    assert err.value.code == "Unsupported"
    assert our_jobs(run_id) == {}


def test_a_launch_refused_part_way_owns_the_jobs_it_submitted(
    slurm: Slurm, run_dir: Path, run_ids: list[str]
) -> None:
    """Slurm takes the first job of a launch of 2 and refuses the second (its controller
    busy): the launch is a ``PartialLaunch`` whose record is the job that was queued, so
    the run owns it (pays for it, ends it); it was a plain error, and the job ran unowned."""
    run_id = new_run_id()
    run_ids.append(run_id)
    sbatches: list[Sequence[str]] = []

    def busy_on_the_second(argv: Sequence[str]) -> CommandResult:
        if argv[0] == "sbatch":
            sbatches.append(argv)
            if len(sbatches) == 2:
                return CommandResult(1, "", BUSY)
        return run_command(argv)

    provider = make_provider(run_id, run_dir, "http://127.0.0.1:9", runner=busy_on_the_second)
    with pytest.raises(PartialLaunch) as err:
        provider.launch("small", 2, "L1", {})
    assert "Resource temporarily unavailable" in err.value.message
    (record,) = err.value.records
    assert set(our_jobs(run_id)) == {record.id}
    assert record.id in {s.id for s in provider.describe()}


def test_list_tagged_finds_every_runs_jobs_and_no_one_elses(
    slurm: Slurm, controller: FakeController, run_dir: Path, run_ids: list[str]
) -> None:
    run_id, other_run = new_run_id(), f"other run/{new_run_id()}"
    run_ids += [run_id, other_run]
    provider = make_provider(run_id, run_dir, controller.url)
    (record,) = provider.launch("large", 1, "L9", {})
    foreign = slurm.sbatch("--job-name=plain", "--time=2", "--wrap=sleep 60")
    stray = slurm.sbatch(
        f"--job-name={job_name(other_run, 'small-L3-0')}", "--time=2", "--wrap=sleep 60"
    )
    found = {t.job_id: (t.run_id, t.machine) for t in list_tagged()}
    assert found[our_jobs(run_id)[record.id]] == (run_id, record.id)
    assert found[stray] == (other_run, "small-L3-0")
    assert foreign not in found

    # The provider of one run neither sees nor cancels another's jobs.
    assert set(states(provider)) == {record.id}
    assert provider.terminate([record.id, "small-L3-0"]) == [record.id]
    assert stray in {t.job_id for t in list_tagged()}
    assert slurm.state(foreign) in ("PENDING", "RUNNING")


def test_offers_come_from_the_scheduler_and_move_later_on_a_full_node(
    slurm: Slurm, run_dir: Path, run_ids: list[str]
) -> None:
    """On the idle node a slice starts now and takes its waves; once a job of ours holds
    every CPU for 5 minutes, Slurm starts it after that job's time limit."""
    run_id = new_run_id()
    run_ids.append(run_id)
    provider = make_provider(run_id, run_dir, "http://127.0.0.1:9")
    request = OfferRequest(tasks=10, task_s=30.0, deadline=3600.0, now=1000.0)
    sizes = [10, 5, 1]

    wait_until(  # jobs of earlier tests may still be completing
        "the node to be idle",
        lambda: slurm.run("sinfo", "-h", "-o", "%T").stdout.split()[:1] == ["idle"],
    )
    idle = provider.offers(request, sizes)
    assert [o.tasks for o in idle] == sizes
    for offer in idle:  # two machines at most: ceil(n / 2) waves of 30 s, starting now
        assert offer.finish == pytest.approx(1000.0 + finish_after(offer.tasks, 2, 30.0), abs=2)

    cpus = slurm.run("sinfo", "-h", "-o", "%C").stdout.strip().split("/")[-1]
    filler = slurm.sbatch(
        "--partition=debug",
        f"--ntasks={cpus}",
        "--time=5",
        f"--job-name={job_name(run_id, 'filler')}",
        "--wrap=sleep 600",
    )
    wait_until("the filler to hold the node", lambda: slurm.state(filler) == "RUNNING")
    busy = provider.offers(request, sizes)
    assert [o.tasks for o in busy] == sizes
    for before, after in zip(idle, busy, strict=True):
        assert after.finish >= before.finish + 4 * 60, (before, after)
    print(f"\nslurm offers, idle: {idle}\nslurm offers, node full: {busy}")
