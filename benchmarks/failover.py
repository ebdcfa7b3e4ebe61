"""The failover figure: from a refused launch to machines running elsewhere, on EC2.

Real daemons (``autoscaler run``) against the moto server behind the test suite's fault
proxy (``tests/integration/ec2_faults.py``), agents started over SSH on a loopback sshd,
exactly as the integration tests run them. Three scenarios:

* ``deadline``: a deadline job of 12 tasks for which spot ``fast`` (c5.large) is the
  cheaper way to the deadline (40 s), on-demand ``small`` (t3.micro) the other type;
  every launch of ``fast`` is refused.
* ``budget``: 300 tasks, budget 80, ATU 60 s; sampling (8 of each type) is let through,
  then every launch of ``fast`` is refused (the plan wants more of it).
* ``regions``: the deadline job on two providers of kind ec2, ``east`` (us-east-1, type
  ``use1``, the cheaper) and ``west`` (us-west-2, type ``usw2``), the same instance type;
  every launch in us-east-1 is refused, for capacity or for the region's vCPU quota.

Per scenario, in the same session, the refusal with codes the run recognizes
(``InsufficientInstanceCapacity``, ``SpotMaxPriceTooLow``, ``VcpuLimitExceeded``) and,
as the baseline, the same refusal with a code the run does not recognize (kind
``error``: what the base commit 0b36523 did with ``SpotMaxPriceTooLow``,
``UnfulfillableCapacity`` and ``InsufficientCapacity``; the type now waits a minute
before it is tried again, and deadline mode plans without it meanwhile). It is stopped
(SIGINT to the daemon this script started) ``--baseline-s`` (default 60) after its
first refusal if it has not ended.

Each run with a recognized code is followed by the same refusal rehearsed in a dry run
(issue 37 §5: ``emulator.refusals`` with the same code, ``autoscaler run CONFIG
--dry-run``), and the two are checked to react alike: the same kind, in the same step,
onto the same types, running within one monitoring interval (exit 1 if not).

Printed per run, in run seconds from the daemon's journal: when the first refusal came,
when a launch of another type was decided (``same step``: in the step that heard of
the refusal), when the first machine of such a launch was running (its agent took
work), that time against the monitoring interval (10 s), the launches refused, tasks
done and the most money committed against the budget.

Run from the repository root::

    .venv/bin/python -m benchmarks.failover [--baseline-s 60] [--scenarios deadline,budget,regions]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # ``python benchmarks/failover.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import boto3
import yaml

from benchmarks.bats_scenarios import library_state, render_table
from tests.integration.daemon_helpers import (
    committed_over_time,
    journal_rows,
    run_id_of,
    start_daemon,
)
from tests.integration.ec2_faults import FaultProxy, Params
from tests.integration.ec2_world import Ec2World
from tests.integration.failover_world import (
    SPOT_BUDGET,
    SPOT_DEADLINE,
    Failover,
    failover_of,
    refuse_type,
    two_regions,
)
from tests.integration.notices import NoticeServer
from tests.integration.services import FAKE_AWS_ENV, moto_server
from tests.integration.sshd import SshdFactory

INTERVAL_S = 10.0  # the world config's monitoring interval
UNRECOGNIZED = "SpotCapacityNotAvailable"  # a code the run does not know: kind ``error``


@dataclass(frozen=True)
class Case:
    scenario: str  # deadline | budget
    code: str
    status: int
    label: str


CASES = (
    Case("deadline", "InsufficientInstanceCapacity", 500, "failover"),
    Case("deadline", "SpotMaxPriceTooLow", 400, "failover"),
    Case("deadline", UNRECOGNIZED, 400, "unknown code"),
    Case("budget", "InsufficientInstanceCapacity", 500, "failover"),
    Case("budget", UNRECOGNIZED, 400, "unknown code"),
    Case("regions", "InsufficientInstanceCapacity", 500, "failover"),
    Case("regions", "VcpuLimitExceeded", 400, "failover"),
    Case("regions", UNRECOGNIZED, 400, "unknown code"),
)


@contextlib.contextmanager
def world(tmp: Path) -> Iterator[Ec2World]:
    """moto behind the fault proxy, an sshd, a key: the integration tests' EC2 world."""
    os.environ.update(FAKE_AWS_ENV)
    os.environ["AWS_SECRET_ACCESS_KEY"] = "fake-secret-" + secrets.token_hex(8)
    (tmp / "sshd").mkdir()
    factory = SshdFactory(tmp / "sshd")
    with moto_server(tmp) as moto:
        try:
            sshd = factory.start()
            ec2 = boto3.client("ec2", endpoint_url=moto.endpoint, region_name="us-east-1")
            with FaultProxy(moto.endpoint) as proxy, NoticeServer() as notices:
                remote = tmp / "remote"
                remote.mkdir(mode=0o700)
                secret = os.environ["AWS_SECRET_ACCESS_KEY"]
                yield Ec2World(moto, proxy, sshd, ec2, tmp, remote, secret, notices)
        finally:
            factory.close()


def _setup(w: Ec2World, scenario: str) -> tuple[Path, str, Callable[[Params], bool]]:
    """The config of ``scenario``, its type refused, and the proxy's match for it."""
    if scenario == "regions":
        return two_regions(w), "use1", refuse_type("t3.micro", region="us-east-1")
    if scenario == "budget":  # sampling's launch (4 in each subnet) goes through, no later
        return w.config(**SPOT_BUDGET), "fast", refuse_type("c5.large", after=2)
    return w.config(**SPOT_DEADLINE), "fast", refuse_type("c5.large")


def run_case(
    w: Ec2World, case: Case, n: int, baseline_s: float
) -> tuple[list[str], Failover | None]:
    """One daemon run of ``case``; its row of the table and what it did."""
    w.moto.reset()
    w.proxy.clear()
    config, refused, match = _setup(w, case.scenario)
    w.proxy.fail("RunInstances", case.code, status=case.status, match=match)
    run_dir = w.tmp / f"run{n}"
    print(f"{case.scenario} / {case.code}: running in {run_dir}", file=sys.stderr)
    proc = start_daemon(str(config), "--out", str(run_dir))
    baseline = case.label == "unknown code"
    stopped = _wait(proc, run_dir, baseline_s if baseline else math.inf)
    rows = journal_rows(run_dir)
    found = failover_of(rows, refused)
    with contextlib.suppress(Exception):
        leftover = w.running(run_id_of(run_dir))
        if leftover:
            w.ec2.terminate_instances(InstanceIds=leftover)
    _stop_agents(w)
    spent = max(committed_over_time(run_dir), default=0.0)
    return _row(case, case.label, rows, found, refused, stopped, spent), found


def _row(
    case: Case,
    label: str,
    rows: list[tuple[float, str, dict[str, Any]]],
    found: Failover | None,
    refused: str,
    stopped: str,
    spent: float,
) -> list[str]:
    """A run's row: its reaction to the first refusal of ``refused`` (``spent``: the
    most money it committed)."""
    overrides = SPOT_BUDGET if case.scenario == "budget" else SPOT_DEADLINE
    done = f"{sum(1 for _, ty, _ in rows if ty == 'TaskDone')}/{_tasks(overrides)}"
    budget = (overrides.get("constraint") or {}).get("budget")
    money = "-" if budget is None else f"{spent:.0f}/{budget:.0f}"
    if found is None:
        return [case.scenario, case.code, label, "none", *["-"] * 5, "0", done, money]
    replan = "same step" if found.same_step else _at(found.replanned_at, found.refused_at)
    to_run = found.to_running_s
    return [
        case.scenario,
        case.code,
        label,
        found.kind,
        f"{found.refused_at:.2f}",
        replan,
        instead(rows, found),
        "never" + (f" ({stopped})" if stopped else "") if to_run is None else f"{to_run:.2f}",
        "-" if to_run is None else f"{to_run / INTERVAL_S:.2f}",
        str(found.refusals),
        done,
        money,
    ]


def dry_case(w: Ec2World, case: Case, n: int) -> tuple[list[str], Failover | None]:
    """The same scenario and refusal rehearsed in a dry run (issue 37 §5): the run's
    config with ``emulator.refusals`` refusing the type with the same code (for the
    budget scenario after sampling's launches, at 1 s), run as a user runs it,
    ``autoscaler run CONFIG --dry-run``; its row and what it did."""
    config, refused, _ = _setup(w, case.scenario)
    data = yaml.safe_load(config.read_text(encoding="utf-8"))
    start = 1.0 if case.scenario == "budget" else 0.0
    emulator = data.setdefault("emulator", {})
    emulator["refusals"] = [{"type": refused, "code": case.code, "from_s": start}]
    path = w.tmp / f"dry{n}.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    run_dir = w.tmp / f"dry{n}"
    done = subprocess.run(
        [sys.executable, "-m", "autoscaler", "run", str(path), "--dry-run", "--out", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"dry run of {path} failed:\n{done.stderr}")
    rows = jsonl_rows(run_dir / "journal.jsonl")
    found = failover_of(rows, refused)
    report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
    return _row(case, "dry run", rows, found, refused, "", float(report["committed"])), found


def jsonl_rows(path: Path) -> list[tuple[float, str, dict[str, Any]]]:
    """(t, type, data) of a dry run's journal, as ``journal_rows`` reads a daemon's."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        out.append((float(r["t"]), str(r["type"]), r["data"]))
    return out


def instead(rows: list[tuple[float, str, dict[str, Any]]], found: Failover | None) -> str:
    """The types the run launched in the step that re-planned after the refusal."""
    if found is None or found.replanned_at is None:
        return "-"
    types = {
        d["type"]
        for t, ty, d in rows
        if ty == "Launch" and t == found.replanned_at and d["type"] != found.refused
    }
    return ",".join(sorted(types)) or "-"


def _tasks(overrides: dict[str, Any]) -> int:
    bags = [overrides.get("bag")] + [j["bag"] for j in overrides.get("jobs") or ()]
    return sum(b["synthetic"] for b in bags if b)


def _at(t: float | None, since: float) -> str:
    return "never" if t is None else f"+{t - since:.2f}"


def _wait(proc: subprocess.Popen[str], run_dir: Path, baseline_s: float) -> str:
    """Wait for the daemon to end; a run still going ``baseline_s`` after its first
    refusal (or 400 s in all) is asked to stop. What stopped it, if we did."""
    start = time.monotonic()
    first: float | None = None
    while proc.poll() is None:
        if first is None and any(ty == "LaunchFailed" for _, ty, _ in journal_rows(run_dir)):
            first = time.monotonic()
        late = first is not None and time.monotonic() - first > baseline_s
        if late or time.monotonic() - start > 400:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.communicate(timeout=90)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
            return "stopped by the benchmark"
        time.sleep(0.5)
    proc.communicate()
    return ""


def _stop_agents(w: Ec2World) -> None:
    """Agents of the runs this script started (found by their remote directory)."""
    for pid in w.agent_pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


HEADER = [
    "scenario",
    "refusal",
    "run",
    "kind",
    "refused at s",
    "re-planned",
    "launched instead",
    "running elsewhere after s",
    "/ interval",
    "refused",
    "tasks done",
    "committed/budget",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-s", type=float, default=6 * INTERVAL_S)
    parser.add_argument("--scenarios", default="deadline,budget,regions")
    args = parser.parse_args()
    chosen = set(args.scenarios.split(","))
    state = library_state()
    rows = []
    checks = []
    with tempfile.TemporaryDirectory(prefix="failover-bench-") as tmp, world(Path(tmp)) as w:
        for n, case in enumerate(c for c in CASES if c.scenario in chosen):
            row, real = run_case(w, case, n, args.baseline_s)
            rows.append(row)
            if case.label == "unknown code":
                continue  # a dry run refuses only with the codes the run reads
            dry_row, dry = dry_case(w, case, n)
            rows.append(dry_row)
            checks.append(same_reaction(case, real, dry, row, dry_row))
    print(f"Library: {state}")
    print(
        f"Failover on EC2 (moto + fault proxy, agents over SSH) and the same refusal "
        f"rehearsed in a dry run (emulator.refusals); monitoring interval {INTERVAL_S:g} s; "
        "times in run seconds from each run's journal (a dry run's are virtual: its "
        "machines boot for the type's boot_s, moto's at once)"
    )
    print(render_table(HEADER, rows, left=4))
    print()
    print("Target (issue 37): the dry run reacts as the run on moto, within one interval")
    for line in checks:
        print("  " + line)
    if any(line.startswith("MISSED") for line in checks):
        raise SystemExit(1)


def same_reaction(
    case: Case, real: Failover | None, dry: Failover | None, row: list[str], dry_row: list[str]
) -> str:
    """``ok`` when the dry run read the refusal as the real run did, re-planned in the
    step that heard it onto the same types, and had them running within one monitoring
    interval of it, as the real run did."""
    what = f"{case.scenario} / {case.code}"
    if real is None or dry is None:
        return f"MISSED {what}: no refusal in the " + ("moto run" if real is None else "dry run")
    within = [f.to_running_s is not None and f.to_running_s <= INTERVAL_S for f in (real, dry)]
    same = real.kind == dry.kind and real.same_step == dry.same_step and row[6] == dry_row[6]
    verdict = "ok" if same and all(within) else "MISSED"
    return (
        f"{verdict} {what}: moto {real.kind}, {row[5]}, {row[6]} running after {row[7]} s; "
        f"dry run {dry.kind}, {dry_row[5]}, {dry_row[6]} running after {dry_row[7]} s"
    )


if __name__ == "__main__":
    main()
