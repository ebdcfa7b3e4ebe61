"""The Grid Engine provider without Grid Engine: parsers on captured output, logic on replays.

Every file under ``data/sge/`` is the real output of a command on the one-node Grid Engine
of ``infra/sge/setup.sh`` (Debian's 8.1.9). The provider's logic runs against a scripted
runner that answers each command with such a capture, so it fakes the remote side (the
commands) and nothing of ours.
"""

from __future__ import annotations

import stat
from collections import deque
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.bootstrap.agent_start import AgentSettings
from autoscaler.bootstrap.credentials import machine_token
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.base import Capabilities, ProviderState
from autoscaler.providers.sge import (
    CommandResult,
    SgeProvider,
    SgeType,
    TaggedJob,
    delete_jobs,
    list_tagged,
)
from autoscaler.providers.sge_output import (
    Job,
    job_name,
    parse_job_name,
    parse_qacct,
    parse_qdel,
    parse_qstat_j,
    parse_qstat_j_errors,
    parse_qstat_xml,
    parse_qsub,
    provider_state,
)

DATA = Path(__file__).parent / "data" / "sge"
RUN = "it-20261122T101500Z-0a1f"  # the run id of the captured jobs
TOKEN = "s3cret-test-token-0f9a"


def data(name: str) -> str:
    return (DATA / name).read_text()


def ok(name: str) -> CommandResult:
    return CommandResult(0, data(name), "")


def failed(rc: int, stem: str) -> CommandResult:
    """A failure as captured: ``<stem>.out`` and ``<stem>.err`` (either may be missing)."""
    out, err = DATA / f"{stem}.out", DATA / f"{stem}.err"
    return CommandResult(
        rc, out.read_text() if out.exists() else "", err.read_text() if err.exists() else ""
    )


class Replay:
    """A runner that answers each command from a queue of captured results, in order."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.answers: dict[str, deque[CommandResult]] = {}

    def on(self, command: str, *results: CommandResult) -> Replay:
        self.answers.setdefault(command, deque()).extend(results)
        return self

    @staticmethod
    def key(argv: Sequence[str]) -> str:
        return "qstat -j" if argv[0] == "qstat" and "-j" in argv else argv[0]

    def __call__(self, argv: Sequence[str]) -> CommandResult:
        self.calls.append(list(argv))
        queue = self.answers.get(self.key(argv))
        if not queue:
            raise AssertionError(f"unexpected command {list(argv)}")
        return queue.popleft()

    def called(self, command: str) -> list[list[str]]:
        return [c for c in self.calls if self.key(c) == command]


# --- parsers ----------------------------------------------------------------------------


def test_parse_qsub_normal_and_terse() -> None:
    assert parse_qsub(data("qsub.txt")) == "12"
    assert parse_qsub(data("qsub_terse.txt")) == "13"
    assert parse_qsub('Your job-array 7.1-3:1 ("arr") has been submitted\n') == "7"


def test_parse_qsub_refuses_other_output() -> None:
    with pytest.raises(AutoscalerError, match="cannot read a job id") as err:
        parse_qsub(data("qsub_bad_queue.err"))
    assert err.value.code == "SgeError"


def test_parse_qstat_xml_running_pending_error_and_held_jobs() -> None:
    jobs = {j.job_id: j for j in parse_qstat_xml(data("qstat_jobs.xml"))}
    assert sorted(jobs, key=int) == [str(i) for i in range(12, 22)]
    running = jobs["12"]
    assert running.name == f"as.{RUN}.small-t1-0"
    assert (running.state, running.queue) == ("r", "as_small.q@localhost")
    assert running.submitted_at is not None
    assert (jobs["18"].state, jobs["18"].queue) == ("qw", None)
    assert jobs["20"].state == "Eqw"
    assert jobs["19"] == Job(
        "19", "as.other+2erun.small-t9-0", "hqw", None, jobs["19"].submitted_at
    )
    assert jobs["21"].name == "plainjob"


def test_parse_qstat_xml_empty_and_not_xml() -> None:
    assert parse_qstat_xml(data("qstat_empty.xml")) == []
    with pytest.raises(AutoscalerError, match="not XML"):
        parse_qstat_xml(data("qstat_down.err"))


def test_parse_qstat_j_lists_the_jobs_that_exist() -> None:
    assert parse_qstat_j(data("qstat_j_mixed.xml")) == {"24"}
    assert parse_qstat_j(data("qstat_j_unknown.xml")) == set()


def test_parse_qstat_j_errors_says_why_jobs_are_in_error() -> None:
    assert parse_qstat_j_errors(data("qstat_j_error.xml")) == {
        "23": 'error: can\'t open output file "/nonexistent/x.log": No such file or directory',
        "46": "error: can't chdir to /nonexistent/runs/x/work: No such file or directory",
    }
    assert parse_qstat_j_errors(data("qstat_j_mixed.xml")) == {}  # no job in error
    assert parse_qstat_j_errors(data("qstat_j_unknown.xml")) == {}


def test_parse_qacct_gives_the_failure_and_the_exit_status() -> None:
    assert parse_qacct(data("qacct_failed.txt")) == (
        "failed 26 : opening input/output file, exit status 0"
    )
    assert parse_qacct(data("qacct_exit.txt")) == "exit status 3"
    assert parse_qacct(data("qacct_unknown.out")) is None


def test_parse_qdel() -> None:
    assert parse_qdel(data("qdel.txt")) == ({"12"}, set())
    assert parse_qdel(data("qdel_mixed.txt")) == ({"13"}, {"12", "999999"})
    assert parse_qdel(data("qdel_pending.txt")) == ({"20"}, set())
    # Two deletes of one job (cleanup, then a run's own end): the second is not an error.
    again = 'denied: job "268" does not exist\njob 269 is already in deletion\n'
    assert parse_qdel(again) == ({"269"}, {"268"})


@pytest.mark.parametrize(
    ("sge", "ours"),
    [
        ("qw", ProviderState.PENDING),
        ("hqw", ProviderState.PENDING),
        ("r", ProviderState.RUNNING),
        ("t", ProviderState.RUNNING),
        ("Rr", ProviderState.RUNNING),
        ("s", ProviderState.RUNNING),
        ("dr", ProviderState.TERMINATED),
        ("Eqw", None),
    ],
)
def test_provider_state(sge: str, ours: ProviderState | None) -> None:
    assert provider_state(sge) is ours


# --- job names ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("run_id", "machine"),
    [
        (RUN, "small-L3-0"),
        ("my run/2: ü*?@\\", "big.x-L12-3"),
        ("a.b", "c.d"),
        ("42", "+2e"),
    ],
)
def test_job_name_round_trip(run_id: str, machine: str) -> None:
    name = job_name(run_id, machine)
    assert parse_job_name(name) == (run_id, machine)
    assert name.startswith("as.")
    assert name.count(".") == 2


def test_job_name_keeps_plain_run_ids_readable() -> None:
    assert job_name(RUN, "small-L3-0") == f"as.{RUN}.small-L3-0"


@pytest.mark.parametrize(
    "name",
    ["filler1", "plainjob", "as.x", "as.a.b.c", "xs.a.b", "as..b", "as.+61.b", "as.a+zz.b"],
)
def test_parse_job_name_refuses_other_names(name: str) -> None:
    assert parse_job_name(name) is None


@given(st.text(min_size=1), st.text(min_size=1))
def test_job_names_survive_grid_engine_rules(run_id: str, machine: str) -> None:
    name = job_name(run_id, machine)
    assert parse_job_name(name) == (run_id, machine)
    assert not name[0].isdigit()
    assert not set(name) & set("/:@\\*? \t\n\r")  # what qsub -N refuses


# --- commands and their failures -----------------------------------------------------------


def test_list_tagged_finds_our_jobs_of_any_run_only() -> None:
    replay = Replay().on("qstat", ok("qstat_jobs.xml"))
    tagged = {t.job_id: t for t in list_tagged(replay)}
    assert sorted(tagged, key=int) == ["12", "13", "18", "19", "20"]
    assert tagged["19"] == TaggedJob("19", "other.run", "small-t9-0", "hqw")
    assert tagged["12"] == TaggedJob("12", RUN, "small-t1-0", "r")
    assert replay.calls == [["qstat", "-xml", "-u", "*"]]


def test_delete_jobs_takes_a_gone_job_as_deleted() -> None:
    replay = Replay().on("qdel", CommandResult(1, data("qdel_mixed.txt"), ""))
    assert delete_jobs(["12", "13", "999999"], replay) == ["12", "13", "999999"]
    assert delete_jobs([], replay) == []
    assert len(replay.calls) == 1


def test_qmaster_down_is_a_retryable_error() -> None:
    replay = Replay().on("qstat", failed(1, "qstat_down"))
    with pytest.raises(AutoscalerError) as err:
        list_tagged(replay)
    assert err.value.code == "SgeError"
    assert err.value.retryable
    assert "qstat" in err.value.message
    assert "Connection refused" in err.value.message

    replay = Replay().on("qdel", failed(1, "qdel_down"))
    with pytest.raises(AutoscalerError) as err:
        delete_jobs(["5"], replay)
    assert err.value.retryable
    assert "qdel 5" in err.value.message


# --- the provider, on replays -------------------------------------------------------------


def make_provider(tmp_path: Path, replay: Replay) -> SgeProvider:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o600)
    caps = Capabilities(
        billing=BillingModel("fixed", 3600.0),
        max_counts={"small": 4, "large": 3},
        boot_estimate_s={"small": 10.0, "large": 10.0},
    )
    agents = AgentSettings(url="http://127.0.0.1:8123", token=TOKEN, python="/usr/bin/python3")
    types = {"small": SgeType(queue="as_small.q"), "large": SgeType("as_large.q", "h_vmem=1G")}
    return SgeProvider(
        caps, RUN, agents, types, tmp_path / "agents", lambda: 100.0, token_file, replay
    )


def test_describe_adopts_the_runs_jobs_and_maps_their_states(tmp_path: Path) -> None:
    replay = Replay().on("qstat", ok("qstat_jobs.xml")).on("qdel", ok("qdel_pending.txt"))
    replay.on("qstat -j", ok("qstat_j_unknown.xml"))  # why job 20 is in error: not kept
    provider = make_provider(tmp_path, replay)
    states = {s.id: (s.type, s.state) for s in provider.describe()}
    assert states == {
        "small-t1-0": ("small", ProviderState.RUNNING),
        "large-t1-0": ("large", ProviderState.RUNNING),
        "large-t1-1": ("large", ProviderState.PENDING),
        "small-t2-0": ("small", ProviderState.TERMINATED),  # Eqw: deleted, reported gone
    }
    assert replay.called("qdel") == [["qdel", "20"]]  # only the Eqw job, never another run's


def test_launch_submits_only_the_tokens_missing_jobs(tmp_path: Path) -> None:
    replay = Replay().on("qstat", ok("qstat_jobs.xml")).on("qsub", ok("qsub_terse.txt"))
    replay.on("qdel", ok("qdel_pending.txt")).on("qstat -j", ok("qstat_j_unknown.xml"))
    provider = make_provider(tmp_path, replay)
    records = provider.launch("large", 3, "t1", {})
    assert [(r.id, r.type, r.token) for r in records] == [
        ("large-t1-0", "large", "t1"),
        ("large-t1-1", "large", "t1"),
        ("large-t1-2", "large", "t1"),
    ]
    assert records[2].launched_at == 100.0
    (qsub,) = replay.called("qsub")
    assert qsub[qsub.index("-N") + 1] == job_name(RUN, "large-t1-2")
    assert qsub[qsub.index("-q") + 1] == "as_large.q"
    assert qsub[qsub.index("-l") + 1] == "h_vmem=1G"
    token_file = tmp_path / "agents" / "large-t1-2.token"
    assert qsub[qsub.index("--token-file") + 1] == str(token_file)
    assert token_file.read_text().strip() == machine_token(TOKEN, "large-t1-2")  # not the run's
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert qsub[qsub.index("--machine") + 1] == "large-t1-2"
    assert qsub[qsub.index("-o") + 1] == str(tmp_path / "agents" / "large-t1-2.log")
    assert not any(TOKEN in arg for arg in qsub)  # qstat -j would show it to everyone
    assert "-v" not in qsub
    assert "-V" not in qsub


def test_launch_is_refused_past_the_types_limit(tmp_path: Path) -> None:
    replay = Replay().on("qstat", ok("qstat_jobs.xml")).on("qdel", ok("qdel_pending.txt"))
    replay.on("qstat -j", ok("qstat_j_unknown.xml"))
    provider = make_provider(tmp_path, replay)
    with pytest.raises(AutoscalerError) as err:
        provider.launch("large", 2, "t5", {})  # 2 alive + 2 > 3
    assert err.value.code == "MaxCountExceeded"
    assert replay.called("qsub") == []


def test_a_vanished_job_is_terminated_once_qstat_j_confirms_it(tmp_path: Path) -> None:
    replay = Replay().on("qstat", ok("qstat_empty.xml"), ok("qstat_empty.xml"))
    replay.on("qsub", ok("qsub.txt"))
    provider = make_provider(tmp_path, replay)
    provider.launch("small", 1, "t7", {})
    (tmp_path / "agents" / "small-t7-0.log").write_text(
        "agent: cannot reach the dispatcher\n"  # as the job of qacct_exit.txt wrote it
    )
    replay.on("qstat -j", ok("qstat_j_unknown.xml")).on("qacct", ok("qacct_exit.txt"))
    (status,) = provider.describe()
    assert (status.id, status.state) == ("small-t7-0", ProviderState.TERMINATED)
    assert replay.called("qstat -j") == [["qstat", "-xml", "-j", "12"]]
    assert replay.called("qacct") == [["qacct", "-j", "12"]]
    assert status.reason == (
        "sge job 12: gone from qstat, exit status 3; "
        f"log {tmp_path / 'agents' / 'small-t7-0.log'}: agent: cannot reach the dispatcher"
    )


def test_a_job_in_error_is_deleted_and_says_why(tmp_path: Path) -> None:
    # A relative -wd (issue 34: the run directory as the user typed it) as Grid Engine
    # answers it: the job waits in Eqw, "can't chdir".
    replay = Replay().on("qstat", ok("qstat_eqw.xml")).on("qstat -j", ok("qstat_j_eqw.xml"))
    replay.on("qdel", ok("qdel_eqw.txt"))
    provider = make_provider(tmp_path, replay)
    (status,) = provider.describe()
    assert (status.id, status.state) == ("small-t3-0", ProviderState.TERMINATED)
    assert replay.called("qdel") == [["qdel", "77"]]
    assert status.reason == (
        "sge job 77: Eqw, error: can't chdir to runs/it/work: No such file or directory; "
        f"its log {tmp_path / 'agents' / 'small-t3-0.log'} was never written"
    )


def test_a_job_ended_by_us_gives_no_reason(tmp_path: Path) -> None:
    replay = Replay().on("qstat", ok("qstat_empty.xml")).on("qsub", ok("qsub.txt"))
    provider = make_provider(tmp_path, replay)
    provider.launch("small", 1, "t7", {})
    replay.on("qstat", ok("qstat_empty.xml")).on("qdel", ok("qdel.txt"))
    assert provider.terminate(["small-t7-0"]) == ["small-t7-0"]
    (status,) = provider.describe()
    assert (status.state, status.reason) == (ProviderState.TERMINATED, None)
    assert replay.called("qacct") == []


def test_a_job_missing_from_one_listing_but_alive_is_kept(tmp_path: Path) -> None:
    # Job 24 of the capture exists; the listing does not show it (qmaster in trouble).
    replay = Replay().on("qstat", ok("qstat_empty.xml"), ok("qstat_empty.xml"))
    replay.on("qsub", CommandResult(0, "24\n", ""))
    provider = make_provider(tmp_path, replay)
    provider.launch("small", 1, "t8", {})
    replay.on("qstat -j", ok("qstat_j_mixed.xml"))
    (status,) = provider.describe(["small-t8-0"])
    assert status.state is ProviderState.PENDING


def test_terminate_deletes_only_this_runs_jobs(tmp_path: Path) -> None:
    replay = Replay().on("qstat", ok("qstat_jobs.xml"), ok("qstat_jobs.xml"))
    replay.on("qdel", ok("qdel_pending.txt"), ok("qdel_pending.txt"))
    replay.on("qstat -j", ok("qstat_j_unknown.xml"))
    provider = make_provider(tmp_path, replay)
    provider.describe()
    replay.on("qdel", CommandResult(1, data("qdel_mixed.txt"), ""))
    # Ids it does not know make it look again (adoption), then it deletes its own only.
    done = provider.terminate(["small-t1-0", "large-t1-0", "small-t9-0", "nope"])
    assert done == ["small-t1-0", "large-t1-0"]
    assert replay.called("qdel")[-1] == ["qdel", "12", "13"]


def test_qsub_failure_names_the_command_and_is_not_retryable(tmp_path: Path) -> None:
    replay = Replay().on("qstat", ok("qstat_empty.xml"))
    replay.on("qsub", failed(1, "qsub_bad_queue"))
    provider = make_provider(tmp_path, replay)
    with pytest.raises(AutoscalerError) as err:
        provider.launch("small", 1, "t1", {})
    assert err.value.code == "SgeError"
    assert not err.value.retryable
    assert "qsub" in err.value.message
    assert 'unknown queue "nosuch.q"' in err.value.message
    assert TOKEN not in err.value.message


def test_qsub_with_qmaster_down_is_retryable(tmp_path: Path) -> None:
    replay = Replay().on("qstat", ok("qstat_empty.xml")).on("qsub", failed(1, "qsub_down"))
    provider = make_provider(tmp_path, replay)
    with pytest.raises(AutoscalerError) as err:
        provider.launch("small", 1, "t1", {})
    assert err.value.retryable


def test_launch_of_a_type_without_a_mapping_is_refused(tmp_path: Path) -> None:
    replay = Replay().on("qstat", ok("qstat_empty.xml"))
    provider = make_provider(tmp_path, replay)
    provider.types.pop("small")
    with pytest.raises(AutoscalerError, match="no entry for machine type 'small'"):
        provider.launch("small", 1, "t1", {})
