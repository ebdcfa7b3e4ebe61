"""Machine limits belong to the account: jobs side by side in one `autoscaler serve`
share each type's `max_count`, and the jobs' view says who waits for what."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.run.rundir import read_run
from tests.integration.daemon_helpers import ROOT, assert_clean_end, wait_for
from tests.integration.service_helpers import ServiceProcess

EXAMPLES = ROOT / "config" / "examples"
ENDED = {"done", "stopped", "failed", "cancelled"}
_WAIT = r"\d+ (small|fast) machines? held by j\d(, j\d)*"
WAITING = re.compile(rf"waiting for {_WAIT}(; {_WAIT})*")


def _example_service(tmp: Path, max_machines: int | None = None) -> tuple[Path, dict[str, int]]:
    """config/examples/service.yaml (its report plots left out), its local provider
    named ``here`` with ``max_machines`` if given; its limits: the types' max_count and
    the provider's max_machines, by name."""
    data = yaml.safe_load((EXAMPLES / "service.yaml").read_text(encoding="utf-8"))
    data["service"]["plots"] = False
    limits = {t["name"]: t["max_count"] for t in data["machine_types"]}
    if max_machines is not None:
        local = data.pop("local")
        del data["provider"]
        data["providers"] = {"here": {"kind": "local", **local, "max_machines": max_machines}}
        for t in data["machine_types"]:
            t["provider"] = "here"
        limits["here"] = max_machines
    path = tmp / "service.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path, limits


def _machine_names(run_dirs: list[Path]) -> list[tuple[str, str]]:
    """(job's run directory name, machine id) of every machine of every job's run."""
    return [
        (run_dir.name, m.id)
        for run_dir in run_dirs
        for m in read_run(run_dir)[1].fleet.machines.values()
    ]


def _most_alive_at_once(run_dirs: list[Path]) -> dict[str, int]:
    """Per type and per provider, the most machines alive at one moment across every
    job's run, from their journals: each machine from its launch to its end, on the
    wall clock. A job's run has ended every machine; the deadline pool's run goes on
    while the service runs, and a machine it still holds counts as alive to the end."""
    edges: list[tuple[float, int, str]] = []
    for run_dir in run_dirs:
        files, state = read_run(run_dir)
        start, scale = files.start_wall, files.cfg.time_scale
        for m in state.fleet.machines.values():
            if m.ended_at is None:
                assert run_dir.name == "pool", f"{m.id} of {run_dir.name} never ended"
                end = float("inf")
            else:
                end = start + m.ended_at / scale
            for name in (m.type.name, m.type.provider):
                edges.append((start + m.launched_at / scale, 1, name))
                edges.append((end, -1, name))
    alive: dict[str, int] = {}
    most: dict[str, int] = {}
    for _, step, name in sorted(edges):  # at one moment, ends (-1) before launches
        alive[name] = alive.get(name, 0) + step
        most[name] = max(most.get(name, 0), alive[name])
    return most


def _metrics(svc: ServiceProcess) -> str:
    """The service's /metrics (Prometheus text)."""
    request = urllib.request.Request(
        svc.client.url + "/metrics", headers={"Authorization": f"Bearer {svc.client.token}"}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return str(answer.read().decode())


@pytest.mark.slow
@pytest.mark.long(3)
@pytest.mark.alone  # time-scaled budget jobs side by side
@pytest.mark.parametrize("max_machines", [None, 8], ids=["types", "provider"])
def test_jobs_side_by_side_share_max_count_and_say_who_waits(
    tmp_path: Path, max_machines: int | None
) -> None:
    """Four copies of config/examples/job.yaml (each would take up to 6 + 6 machines) in
    the example service: at no moment do the jobs hold more than each type's max_count
    (and their provider's max_machines, when it has one) between them, as the service
    counts (API, metrics) and as their journals show; every job finishes within its
    budget; a job that waits says for what and whose it is."""
    config, limits = _example_service(tmp_path, max_machines)
    job = yaml.safe_load((EXAMPLES / "job.yaml").read_text(encoding="utf-8"))
    svc = ServiceProcess(config, tmp_path / "state")
    try:
        ids = [svc.submit(job) for _ in range(4)]
        held_most: dict[str, int] = {}
        metric_most: dict[str, int] = {}
        said: set[str] = set()
        cli_said = ""
        deadline = time.monotonic() + 900
        views: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            status = svc.client.call("GET", "/api/v1/status")
            views = status["jobs"]
            for use in status["service"].get("quota", []):
                held_most[use["name"]] = max(held_most.get(use["name"], 0), use["held"])
            said.update(v["waiting"] for v in views if v.get("waiting"))
            for name, value in re.findall(
                r'autoscaler_service_quota_held\{kind="\w+",name="(\w+)"\} (\S+)', _metrics(svc)
            ):
                metric_most[name] = max(metric_most.get(name, 0), int(float(value)))
            if said and not cli_said:
                out = svc.cli("jobs").stdout
                cli_said = out if "waiting for" in out else ""
            if all(v["state"] in ENDED for v in views):
                break
            time.sleep(0.2)
        run_dirs = [Path(v["run_dir"]) for v in views]
        most = _most_alive_at_once(run_dirs)
        assert all(most.get(t, 0) <= n for t, n in limits.items()), (
            f"machines alive at once across the jobs {most}, limits {limits}"
        )
        assert all(held_most.get(t, 0) <= limits[t] for t in limits), held_most
        assert all(metric_most.get(t, 0) <= limits[t] for t in limits), metric_most
        assert set(held_most) == set(limits)  # every limit is shown, and no other
        assert set(metric_most) == set(limits)
        assert [v["state"] for v in views] == ["done"] * 4, [
            (v["id"], v["state"], v["stop_reason"]) for v in views
        ]
        for run_dir in run_dirs:
            report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
            assert_clean_end(run_dir, report, job["bag"]["synthetic"])
            assert report["cost"] <= job["constraint"]["budget"]
        # Machine names are unique across the jobs: each starts its token with its job's id.
        names = _machine_names(run_dirs)
        assert len({mid for _, mid in names}) == len(names), names
        assert all(re.fullmatch(rf"(small|fast)-{own}_L\d+-\d+", mid) for own, mid in names)
        assert said, "no job ever said it waits"
        assert all(WAITING.fullmatch(s) for s in said), said
        lines = [line.split() for line in cli_said.splitlines() if "waiting for" in line]
        assert lines, cli_said
        assert all(words[0] in ids for words in lines), cli_said  # the job's own row
        assert WAITING.search(cli_said), cli_said
    finally:
        assert svc.stop() == 0


def _quota(svc: ServiceProcess) -> dict[str, int]:
    """Machines held per type, service-wide, as the service counts them."""
    service = svc.client.call("GET", "/api/v1/status")["service"]
    return {u["name"]: u["held"] for u in service["quota"] if u["kind"] == "type"}


@pytest.mark.slow
@pytest.mark.long(3)
@pytest.mark.alone  # time-scaled budget jobs side by side, the service killed meanwhile
def test_a_service_started_again_counts_the_machines_its_jobs_hold(tmp_path: Path) -> None:
    """Killed (-9) while two jobs hold every machine of a type, the service starts again,
    resumes them (they adopt their machines) and takes two more jobs at once: the
    machines the resumed jobs hold are counted from their journals before any job
    launches, so at no moment, across the restart, are more alive than the limits."""
    config, limits = _example_service(tmp_path)
    job = yaml.safe_load((EXAMPLES / "job.yaml").read_text(encoding="utf-8"))
    state_dir = tmp_path / "state"
    svc = ServiceProcess(config, state_dir)
    ids = [svc.submit(job) for _ in range(2)]
    wait_for(
        lambda: any(_quota(svc).get(t) == most for t, most in limits.items()),
        120,
        "the jobs to hold every machine of a type",
    )
    svc.kill9()
    svc = ServiceProcess(config, state_dir)
    try:
        assert sum(_quota(svc).values()) > 0, "the resumed jobs' machines are not counted"
        ids += [svc.submit(job) for _ in range(2)]
        deadline = time.monotonic() + 900
        held_most: dict[str, int] = {}
        while time.monotonic() < deadline:
            for t, n in _quota(svc).items():
                held_most[t] = max(held_most.get(t, 0), n)
            views = svc.views()
            if all(v["state"] in ENDED for v in views):
                break
            time.sleep(0.2)
        run_dirs = [Path(v["run_dir"]) for v in views]
        most = _most_alive_at_once(run_dirs)
        assert all(most.get(t, 0) <= n for t, n in limits.items()), (most, limits)
        assert all(held_most[t] <= limits[t] for t in limits), held_most
        assert [v["id"] for v in views] == ids
        assert [v["state"] for v in views] == ["done"] * 4, [
            (v["id"], v["state"], v["stop_reason"]) for v in views
        ]
        for run_dir in run_dirs:
            report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
            assert_clean_end(run_dir, report, job["bag"]["synthetic"])
    finally:
        assert svc.stop() == 0


@pytest.mark.slow
@pytest.mark.long(2)
@pytest.mark.alone  # time-scaled jobs side by side, one with a deadline
def test_the_deadline_pool_shares_the_limits_with_the_budget_jobs(tmp_path: Path) -> None:
    """config/examples/job_deadline.yaml (the deadline pool's run) beside two copies of
    job.yaml (runs of their own): the pool's machines and theirs together stay within
    each type's max_count; every job does all its tasks."""
    config, limits = _example_service(tmp_path)
    budget = yaml.safe_load((EXAMPLES / "job.yaml").read_text(encoding="utf-8"))
    deadline = yaml.safe_load((EXAMPLES / "job_deadline.yaml").read_text(encoding="utf-8"))
    svc = ServiceProcess(config, tmp_path / "state")
    try:
        ids = [svc.submit(budget), svc.submit(deadline), svc.submit(budget)]
        for job_id in ids:
            assert svc.cli("wait", job_id, timeout=900).returncode == 0, svc.view(job_id)
        views = {v["id"]: v for v in svc.views()}
        assert [views[i]["state"] for i in ids] == ["done"] * 3
        pool = json.loads((Path(views[ids[1]]["run_dir"]) / "report.json").read_text())
        run_dirs = [Path(views[ids[0]]["run_dir"]), Path(pool["shared_run"])]
        run_dirs.append(Path(views[ids[2]]["run_dir"]))
        most = _most_alive_at_once(run_dirs)
        assert all(most.get(t, 0) <= n for t, n in limits.items()), (most, limits)
        names = [mid for _, mid in _machine_names(run_dirs)]
        assert len(set(names)) == len(names), names
        assert any(re.fullmatch(r"(small|fast)-pool_L\d+-\d+", mid) for mid in names), names
        for job_id in (ids[0], ids[2]):
            run_dir = Path(views[job_id]["run_dir"])
            report = json.loads((run_dir / "report.json").read_text(encoding="utf-8"))
            assert_clean_end(run_dir, report, budget["bag"]["synthetic"])
        assert views[ids[1]]["done"] == deadline["bag"]["synthetic"]
    finally:
        assert svc.stop() == 0
