"""The Slurm provider without Slurm: parsers on captured output, logic on replays.

Every file under ``data/slurm/`` is the real output of a command on the one-node Slurm of
``infra/slurm/setup.sh`` (Debian's 22.05.8). The provider's logic runs against a scripted
runner that answers each command with such a capture (``test_sge_parse.Replay``), so it
fakes the remote side (the commands) and nothing of ours.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import pytest

from autoscaler.bootstrap.agent_start import AgentSettings
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.base import Capabilities, ProviderState, failure_kind
from autoscaler.providers.batch import CommandResult
from autoscaler.providers.offer import Offer, OfferRequest
from autoscaler.providers.sge_output import job_name
from autoscaler.providers.slurm import (
    SQUEUE_MINE,
    SlurmProvider,
    SlurmType,
    TaggedJob,
    cancel_jobs,
    list_tagged,
)
from autoscaler.providers.slurm_output import (
    Job,
    finish_after,
    job_words,
    parse_sacct,
    parse_sbatch,
    parse_squeue,
    parse_test_only,
    provider_state,
    time_limit_minutes,
)
from tests.unit.test_sge_parse import Replay as SgeReplay

DATA = Path(__file__).parent / "data" / "slurm"
RUN = "it-20261125T1530Z-0a1f"  # the run id of the captured jobs
TOKEN = "s3cret-test-token-51c7"


def data(name: str) -> str:
    return (DATA / name).read_text()


def ok(name: str) -> CommandResult:
    return CommandResult(0, data(name), "")


def failed(stem: str) -> CommandResult:
    return CommandResult(1, "", data(f"{stem}.err"))


def epoch(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


class Replay(SgeReplay):
    """Answers each command from captures; ``sbatch --test-only`` apart from ``sbatch``."""

    @staticmethod
    def key(argv: Sequence[str]) -> str:
        return "sbatch --test-only" if "--test-only" in argv else argv[0]


# --- parsers ----------------------------------------------------------------------------


def test_parse_sbatch_parsable() -> None:
    assert [parse_sbatch(line) for line in data("sbatch_parsable.txt").split()] == [
        "8",
        "9",
        "10",
    ]
    assert parse_sbatch("41;cluster\n") == "41"
    with pytest.raises(AutoscalerError, match="no job id") as err:
        parse_sbatch(data("sbatch_bad_partition.err"))
    assert err.value.code == "SlurmError"


def test_parse_squeue_reads_every_state_and_a_name_with_the_separator() -> None:
    jobs = {j.job_id: j for j in parse_squeue(data("squeue.txt"))}
    assert jobs["24"] == Job(
        "24", "RUNNING", epoch("2026-11-25T15:24:19"), "as_small", "None", f"as.{RUN}.small-L1-0"
    )
    assert (jobs["26"].state, jobs["26"].reason) == ("PENDING", "Resources")
    assert (jobs["27"].state, jobs["27"].reason) == ("PENDING", "PartitionConfig")
    assert jobs["23"].state == "COMPLETED"
    assert jobs["17"].state == "CANCELLED"
    assert jobs["29"].name == "plain|job"
    assert jobs["28"].reason.startswith("Nodes required for job")


def test_job_words_give_the_state_and_its_reason() -> None:
    jobs = {j.job_id: j for j in parse_squeue(data("squeue_failed.txt"))}
    assert job_words(jobs["35"]) == "FAILED (JobLaunchFailure)"  # its --output unwritable
    assert job_words(jobs["36"]) == "FAILED (NonZeroExitCode)"
    jobs = {j.job_id: j for j in parse_squeue(data("squeue.txt"))}
    assert job_words(jobs["24"]) == "RUNNING"  # squeue's reason "None" is left out
    assert job_words(jobs["27"]) == "PENDING (PartitionConfig)"


def test_parse_sacct_reads_the_jobs_own_line() -> None:
    # sacct's documented --parsable2 output: this cluster keeps no accounting to capture
    # it from (sacct_disabled.err is what sacct says here).
    text = "35|FAILED|0:53|None\n35.batch|FAILED|0:53|\n"
    assert parse_sacct(text, "35") == "FAILED, exit code 0:53"
    assert parse_sacct("36|TIMEOUT|0:0|TimeLimit\n", "36") == "TIMEOUT, exit code 0:0 (TimeLimit)"
    assert parse_sacct(text, "37") is None
    assert parse_sacct(data("sacct_disabled.err"), "35") is None


def test_parse_squeue_refuses_another_shape() -> None:
    assert parse_squeue("") == []
    with pytest.raises(AutoscalerError, match="unexpected line"):
        parse_squeue(data("squeue_down.err"))


@pytest.mark.parametrize(
    ("state", "reason", "ours"),
    [
        ("PENDING", "Resources", ProviderState.PENDING),
        ("PENDING", "Priority", ProviderState.PENDING),
        ("CONFIGURING", "None", ProviderState.PENDING),
        ("PENDING", "PartitionConfig", None),
        ("PENDING", "BadConstraints", None),
        ("RUNNING", "None", ProviderState.RUNNING),
        ("SUSPENDED", "None", ProviderState.RUNNING),
        ("COMPLETING", "None", ProviderState.TERMINATED),
        ("COMPLETED", "None", ProviderState.TERMINATED),
        ("CANCELLED", "None", ProviderState.TERMINATED),
        ("TIMEOUT", "TimeLimit", ProviderState.TERMINATED),
        ("NODE_FAIL", "None", ProviderState.TERMINATED),
    ],
)
def test_provider_state(state: str, reason: str, ours: ProviderState | None) -> None:
    assert provider_state(Job("1", state, None, "p", reason, "n")) is ours


def test_parse_test_only_on_an_idle_and_a_busy_cluster() -> None:
    idle = parse_test_only(data("test_only_idle.txt"))
    assert idle is not None
    assert (idle.start, idle.processors) == (epoch("2026-11-25T15:21:45"), 4)
    assert (idle.nodes, idle.partition) == ("vm", "as_small")
    busy = parse_test_only(data("test_only_busy.txt"))
    assert busy is not None
    assert (busy.start, busy.processors) == (epoch("2026-11-25T15:27:20"), 4)


def test_parse_test_only_says_none_when_slurm_cannot_run_the_shape() -> None:
    assert parse_test_only(data("test_only_too_wide.err")) is None
    assert parse_test_only(data("sbatch_bad_partition.err")) is None


def test_finish_after_counts_whole_waves() -> None:
    assert finish_after(8, 4, 10.0) == 20.0
    assert finish_after(9, 4, 10.0) == 30.0
    assert finish_after(3, 4, 10.0) == 10.0
    assert finish_after(0, 4, 10.0) == 0.0


@pytest.mark.parametrize(("atu_s", "minutes"), [(3600, 60), (90, 1), (30, 1), (119.9, 1)])
def test_time_limit_is_one_paid_unit_rounded_down(atu_s: float, minutes: int) -> None:
    assert time_limit_minutes(atu_s) == minutes


# --- commands and their failures -----------------------------------------------------------


def test_list_tagged_finds_our_queued_and_running_jobs_of_any_run() -> None:
    replay = Replay().on("squeue", ok("squeue.txt"))
    tagged = {t.job_id: t for t in list_tagged(replay)}
    assert sorted(tagged, key=int) == ["24", "26", "27", "28"]
    assert tagged["28"] == TaggedJob("28", "other.run", "small-L9-0", "PENDING")
    assert tagged["24"] == TaggedJob("24", RUN, "small-L1-0", "RUNNING")
    assert replay.calls == [list(SQUEUE_MINE)]


def test_slurmctld_down_is_a_retryable_error() -> None:
    replay = Replay().on("squeue", failed("squeue_down"))
    with pytest.raises(AutoscalerError) as err:
        list_tagged(replay)
    assert (err.value.code, err.value.retryable) == ("SlurmError", True)
    assert "Unable to contact slurm controller" in err.value.message
    replay = Replay().on("scancel", CommandResult(1, "", data("sbatch_down.err")))
    with pytest.raises(AutoscalerError) as err:
        cancel_jobs(["5"], replay)
    assert err.value.retryable
    assert "scancel 5" in err.value.message


# --- the provider, on replays -------------------------------------------------------------


def make_provider(
    tmp_path: Path, replay: Replay, wall: float = 0.0, small_slots: int = 1
) -> SlurmProvider:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    caps = Capabilities(
        billing=BillingModel("fixed", 3600.0),
        max_counts={"small": 4, "large": 3},
        boot_estimate_s={"small": 10.0, "large": 10.0},
    )
    agents = AgentSettings(
        url="http://127.0.0.1:8123",
        token=TOKEN,
        python="/usr/bin/python3",
        slots={"small": small_slots},
    )
    types = {
        "small": SlurmType(partition="as_small", cpus=small_slots),
        "large": SlurmType("as_large", "fast", 4, "2G", ("--qos=normal",)),
    }
    return SlurmProvider(
        caps,
        RUN,
        agents,
        types,
        tmp_path / "agents",
        lambda: 100.0,
        token_file,
        replay,
        wall=lambda: wall,
    )


def test_describe_adopts_the_runs_jobs_and_cancels_one_that_never_runs(tmp_path: Path) -> None:
    replay = Replay().on("squeue", ok("squeue.txt")).on("scancel", ok("sbatch_parsable.txt"))
    provider = make_provider(tmp_path, replay)
    states = {s.id: (s.type, s.state) for s in provider.describe()}
    assert states == {
        "small-L0-0": ("small", ProviderState.TERMINATED),  # COMPLETED
        "small-L1-0": ("small", ProviderState.RUNNING),
        "large-L1-0": ("large", ProviderState.PENDING),
        "large-L1-1": ("large", ProviderState.TERMINATED),  # PartitionConfig: cancelled
    }
    assert replay.called("scancel") == [["scancel", "27"]]  # never another run's job


def test_launch_submits_only_the_tokens_missing_jobs(tmp_path: Path) -> None:
    replay = Replay().on("squeue", ok("squeue.txt")).on("scancel", CommandResult(0, "", ""))
    replay.on("sbatch", CommandResult(0, "31\n", ""), CommandResult(0, "32\n", ""))
    provider = make_provider(tmp_path, replay)
    records = provider.launch("large", 3, "L1", {})
    assert [r.id for r in records] == ["large-L1-0", "large-L1-1", "large-L1-2"]
    assert records[2].launched_at == 100.0
    # large-L1-1 never runs (cancelled), so it is submitted again, with large-L1-2.
    submitted = replay.called("sbatch")
    assert len(submitted) == 2
    argv = submitted[1]
    assert f"--job-name={job_name(RUN, 'large-L1-2')}" in argv
    for arg in ("--partition=as_large", "--constraint=fast", "--cpus-per-task=4", "--mem=2G"):
        assert arg in argv
    assert "--qos=normal" in argv
    assert "--time=60" in argv  # the one-hour ATU
    assert "--export=NIL" in argv
    assert f"--output={tmp_path / 'agents' / 'large-L1-2.log'}" in argv
    wrap = argv[-1]
    assert wrap.startswith("--wrap=exec /usr/bin/python3 ")
    assert f"--token-file {tmp_path / 'agents' / 'large-L1-2.token'}" in wrap  # its own
    assert "--machine large-L1-2" in wrap
    assert not any(TOKEN in arg for arg in argv)  # scontrol show job would show it


def test_launch_past_the_types_limit_is_refused(tmp_path: Path) -> None:
    replay = Replay().on("squeue", ok("squeue.txt")).on("scancel", CommandResult(0, "", ""))
    provider = make_provider(tmp_path, replay)
    with pytest.raises(AutoscalerError) as err:
        provider.launch("small", 4, "L7", {})  # 1 alive + 4 > 4
    assert err.value.code == "MaxCountExceeded"
    assert replay.called("sbatch") == []


@pytest.mark.parametrize(
    ("stem", "code", "slurm_says"),
    [
        ("sbatch_bad_partition", "Unsupported", "Invalid partition name specified"),
        ("sbatch_bad_constraint", "Unsupported", "Invalid feature specification"),
        ("sbatch_down", "SlurmError", "Unable to contact slurm controller"),
    ],
)
def test_an_sbatch_refusal_names_the_type_and_slurms_message(
    tmp_path: Path, stem: str, code: str, slurm_says: str
) -> None:
    replay = Replay().on("squeue", CommandResult(0, "", "")).on("sbatch", failed(stem))
    provider = make_provider(tmp_path, replay)
    with pytest.raises(AutoscalerError) as err:
        provider.launch("large", 1, "L1", {})
    assert "machine type 'large'" in err.value.message
    assert slurm_says in err.value.message
    assert err.value.code == code
    assert err.value.retryable is (code == "SlurmError")
    assert failure_kind(err.value.code, err.value.retryable) == (
        "capacity" if code == "Unsupported" else "throttled"
    )
    assert TOKEN not in err.value.message


def test_a_job_gone_from_squeue_has_ended(tmp_path: Path) -> None:
    replay = Replay().on("squeue", CommandResult(0, "", ""), CommandResult(0, "", ""))
    replay.on("sbatch", CommandResult(0, "40\n", "")).on("sacct", failed("sacct_disabled"))
    provider = make_provider(tmp_path, replay)
    provider.launch("small", 1, "L5", {})
    assert [(s.id, s.state, s.reason) for s in provider.describe()] == [
        (
            "small-L5-0",
            ProviderState.TERMINATED,
            "slurm job 40: gone from squeue (sacct: Slurm accounting storage is disabled); "
            f"its log {tmp_path / 'agents' / 'small-L5-0.log'} was never written",
        )
    ]
    (sacct,) = replay.called("sacct")
    assert sacct[sacct.index("-j") + 1] == "40"


def test_a_job_that_failed_to_launch_says_why(tmp_path: Path) -> None:
    # The job of issue 34: slurmd could not open its --output (a relative path joined
    # twice), so it FAILED at once, and no log was written.
    replay = Replay().on("squeue", CommandResult(0, "", ""), ok("squeue_launch_failed.txt"))
    replay.on("sbatch", CommandResult(0, "69\n", ""))
    provider = make_provider(tmp_path, replay)
    provider.launch("small", 1, "L7", {})
    (status,) = provider.describe()
    assert (status.id, status.state) == ("small-L7-0", ProviderState.TERMINATED)
    assert status.reason == (
        "slurm job 69: FAILED (JobLaunchFailure); "
        f"its log {tmp_path / 'agents' / 'small-L7-0.log'} was never written"
    )
    assert replay.called("sacct") == []  # squeue said it all


def test_terminate_cancels_only_this_runs_live_jobs(tmp_path: Path) -> None:
    replay = Replay().on("squeue", *[ok("squeue.txt")] * 3)
    replay.on("scancel", *[CommandResult(0, "", "")] * 5)
    provider = make_provider(tmp_path, replay)
    provider.describe()
    done = provider.terminate(["small-L1-0", "large-L1-0", "small-L9-0", "nope"])
    assert done == ["small-L1-0", "large-L1-0"]
    assert replay.called("scancel") == [["scancel", "27"], ["scancel", "24", "26"]]
    # squeue may still list a cancelled job as running for a moment: it stays ended.
    assert {s.state for s in provider.describe(done)} == {ProviderState.TERMINATED}


# --- offers -------------------------------------------------------------------------------


def test_offers_start_when_slurm_says_and_take_whole_waves(tmp_path: Path) -> None:
    """A busy cluster: Slurm says the 4-wide small job starts at 15:27:20; 10 tasks of
    60 s on 4 machines take 3 waves. The large type cannot run at all."""
    asked_at = epoch("2026-11-25T15:24:20")
    replay = Replay().on(
        "sbatch --test-only",
        CommandResult(1, "", data("test_only_busy.txt")),  # small, 4 wide
        failed("test_only_too_wide"),  # large, 3 wide
        failed("test_only_too_wide"),  # large, 1 wide
    )
    provider = make_provider(tmp_path, replay, wall=asked_at)
    request = OfferRequest(tasks=10, task_s=60.0, deadline=5000.0, now=1000.0)
    (offer,) = provider.offers(request, [10])
    assert offer == Offer("slurm", 10, 1000.0 + 180.0 + 3 * 60.0)
    small, large, narrower = replay.called("sbatch --test-only")
    assert "--ntasks=4" in small
    assert "--time=3" in small  # the 3 waves' minutes
    assert "--partition=as_small" in small
    assert "--ntasks=3" in large  # as many as the type's max_count, then halved
    assert "--ntasks=1" in narrower


def test_an_offer_counts_each_machines_slots(tmp_path: Path) -> None:
    """A small machine runs 2 tasks at once (2 CPUs): 10 tasks need 5 machines, the
    type's limit is 4, and Slurm would start the 4-wide job with 4 processors, which is
    2 machines: 4 lanes, 3 waves of 60 s after Slurm's start (180 s after asking)."""
    replay = Replay().on(
        "sbatch --test-only",
        CommandResult(1, "", data("test_only_busy.txt")),  # 4 processors
        failed("test_only_too_wide"),
        failed("test_only_too_wide"),
    )
    provider = make_provider(tmp_path, replay, wall=epoch("2026-11-25T15:24:20"), small_slots=2)
    (offer,) = provider.offers(OfferRequest(10, 60.0, 5000.0, 1000.0), [10])
    assert offer.finish == 1000.0 + 180.0 + 3 * 60.0
    small = replay.called("sbatch --test-only")[0]
    assert "--ntasks=4" in small
    assert "--cpus-per-task=2" in small
    assert "--time=2" in small  # 10 tasks on 4 machines of 2 lanes: 2 waves of 60 s


def test_an_offer_on_an_idle_cluster_starts_now(tmp_path: Path) -> None:
    # Slurm's start is a little in the past of the asking time: the wait is zero.
    replay = Replay().on(
        "sbatch --test-only",
        CommandResult(1, "", data("test_only_busy_one.txt")),
        failed("test_only_too_wide"),
        failed("test_only_too_wide"),
    )
    provider = make_provider(tmp_path, replay, wall=epoch("2026-11-25T15:25:30"))
    (offer,) = provider.offers(OfferRequest(1, 30.0, 100.0, 10.0), [1])
    assert offer.finish == 10.0 + 30.0
