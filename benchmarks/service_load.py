"""The service under load: how fast it takes jobs, answers, and how much memory it holds.

A real `autoscaler serve` process (local provider, time_scale 360, per-second billing,
8 jobs running at once, plots off) takes 200 small jobs (2 synthetic tasks, budget 3),
submitted over its HTTP API by 8 clients at once, and, as the baseline in the same run,
the same 200 jobs by one client into a fresh service. Per setting: submissions per second, submit
latency (p50, p95, max), latency of `GET /api/v1/jobs` and of `autoscaler jobs` (the
CLI, a new process each time) with the 200 jobs known, the service's resident memory
(VmRSS, and its peak VmHWM) once they are submitted and once they are all done; and
the time to accept one job of 10,000 tasks.

Run from the repository root::

    .venv/bin/python -m benchmarks.service_load [--jobs 200] [--clients 8]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

if __name__ == "__main__" and not __package__:  # ``python benchmarks/service_load.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import yaml

from autoscaler.service.client import Client

ROOT = Path(__file__).resolve().parent.parent

SERVICE: dict[str, Any] = {
    "name": "bench",
    "machine_types": [{"name": "small", "price": 1, "max_count": 2, "boot_s": "1m"}],
    "billing": {"mode": "per_second", "atu_s": "1h", "min_charge_s": "1m"},
    "provider": "local",
    "local": {"time_scale": 360},
    "tail_replication": False,
    "daemon": {"heartbeat_s": 0.5, "lost_after_s": 3, "orphan_after_s": 30},
    "emulator": {"seed": 3, "runtime": {"dist": "normal", "mean_s": "5m", "sd_s": "1m"}},
    "service": {"max_running_jobs": 8, "plots": False},
}


def small_job(i: int) -> dict[str, Any]:
    return {"name": f"n{i}", "bag": {"synthetic": 2}, "constraint": {"budget": 3}}


class Served:
    def __init__(self, tmp: Path) -> None:
        config = tmp / "service.yaml"
        config.write_text(yaml.safe_dump(SERVICE), encoding="utf-8")
        self.state_dir = tmp / "state"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "autoscaler",
                "serve",
                str(config),
                "--state-dir",
                str(self.state_dir),
            ],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        for _ in range(600):
            try:
                self.client = Client(self.state_dir)
                self.client.call("GET", "/api/v1/jobs", timeout=2)
                return
            except Exception:
                time.sleep(0.05)
        raise SystemExit("the service did not come up")

    def memory_mib(self) -> tuple[float, float]:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        kb = {
            k: float(v.split()[0])
            for k, v in (line.split(":", 1) for line in status.splitlines() if ":" in line)
            if k in ("VmRSS", "VmHWM")
        }
        return kb["VmRSS"] / 1024, kb["VmHWM"] / 1024

    def stop(self) -> None:
        os.kill(self.proc.pid, signal.SIGTERM)
        self.proc.wait(timeout=120)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def one_setting(jobs: int, clients: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="svc-bench-") as tmp:
        served = Served(Path(tmp))
        try:
            latencies: list[float] = []
            ids: list[str] = []
            lock = threading.Lock()

            def client(k: int) -> None:
                api = Client(served.state_dir)
                for i in range(k, jobs, clients):
                    t0 = time.perf_counter()
                    job_id = api.call("POST", "/api/v1/jobs", {"job": small_job(i)})["id"]
                    dt = time.perf_counter() - t0
                    with lock:
                        latencies.append(dt)
                        ids.append(job_id)

            threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
            t0 = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            wall = time.perf_counter() - t0
            assert len(set(ids)) == jobs, "ids lost or repeated"
            rss_submitted = served.memory_mib()
            list_lat = []
            for _ in range(20):
                t1 = time.perf_counter()
                listed = served.client.call("GET", "/api/v1/jobs")["jobs"]
                list_lat.append(time.perf_counter() - t1)
            assert len(listed) == jobs
            cli_lat = []
            for _ in range(3):
                t1 = time.perf_counter()
                subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "autoscaler",
                        "jobs",
                        "--state-dir",
                        str(served.state_dir),
                    ],
                    cwd=ROOT,
                    capture_output=True,
                    check=True,
                )
                cli_lat.append(time.perf_counter() - t1)
            t1 = time.perf_counter()
            for job_id in ids:
                view = served.client.call(
                    "GET", f"/api/v1/jobs/{job_id}/wait?timeout=300", timeout=330
                )
                assert view["state"] == "done", view
            all_done = time.perf_counter() - t0
            rss_done = served.memory_mib()
            big = {
                "name": "big",
                "bag": {"command": "true {i}", "sweep": {"i": {"start": 0, "stop": 10_000}}},
                "constraint": {"budget": 5},
            }
            t1 = time.perf_counter()
            big_id = served.client.call("POST", "/api/v1/jobs", {"job": big})["id"]
            big_s = time.perf_counter() - t1
            served.client.call("POST", f"/api/v1/jobs/{big_id}/cancel")
        finally:
            served.stop()
    return {
        "clients": clients,
        "jobs": jobs,
        "submit_wall_s": wall,
        "per_s": jobs / wall,
        "submit_p50_ms": 1000 * statistics.median(latencies),
        "submit_p95_ms": 1000 * pct(latencies, 0.95),
        "submit_max_ms": 1000 * max(latencies),
        "jobs_p50_ms": 1000 * statistics.median(list_lat),
        "jobs_p95_ms": 1000 * pct(list_lat, 0.95),
        "cli_jobs_s": statistics.median(cli_lat),
        "rss_submitted_mib": rss_submitted[0],
        "rss_done_mib": rss_done[0],
        "peak_mib": rss_done[1],
        "all_done_s": all_done,
        "accept_10k_ms": 1000 * big_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--json", type=Path, help="also write the rows here")
    args = parser.parse_args()
    rows = [one_setting(args.jobs, 1), one_setting(args.jobs, args.clients)]
    cols = [
        ("clients", "{:d}"),
        ("jobs", "{:d}"),
        ("submit_wall_s", "{:.2f}"),
        ("per_s", "{:.1f}"),
        ("submit_p50_ms", "{:.1f}"),
        ("submit_p95_ms", "{:.1f}"),
        ("submit_max_ms", "{:.1f}"),
        ("jobs_p50_ms", "{:.1f}"),
        ("jobs_p95_ms", "{:.1f}"),
        ("cli_jobs_s", "{:.2f}"),
        ("rss_submitted_mib", "{:.0f}"),
        ("rss_done_mib", "{:.0f}"),
        ("peak_mib", "{:.0f}"),
        ("all_done_s", "{:.1f}"),
        ("accept_10k_ms", "{:.0f}"),
    ]
    print("| " + " | ".join(c for c, _ in cols) + " |")
    print("|" + "---|" * len(cols))
    for row in rows:
        print("| " + " | ".join(f.format(row[c]) for c, f in cols) + " |")
    base, load = rows
    print(
        f"\n{args.clients} clients against 1 (baseline, same run): "
        f"{load['per_s'] / base['per_s']:.2f}x the submissions per second; "
        f"submit p95 {load['submit_p95_ms']:.1f} ms against {base['submit_p95_ms']:.1f} ms"
    )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
