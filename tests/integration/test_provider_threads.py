"""A provider called from several threads at once, as the daemon calls it (four provider
threads: a launch beside another launch or a describe), with real agent processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from autoscaler.config.load import load_config
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.local import run_processes
from autoscaler.providers.sge import list_tagged as sge_jobs
from autoscaler.providers.slurm import list_tagged as slurm_jobs
from autoscaler.run.wiring import make_provider
from tests.integration import sge, slurm

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).parents[2] / "config" / "examples"


def _left_running(kind: str, run_id: str) -> list[str]:
    """What of the run is still there: agent processes, or queued and running jobs."""
    if kind == "local":
        return [str(p) for p in run_processes(run_id)]
    listed = sge_jobs() if kind == "sge" else slurm_jobs()
    return [j.job_id for j in listed if j.run_id == run_id]


def _config_path(kind: str, tmp: Path, request: pytest.FixtureRequest) -> Path:
    if kind == "local":
        return EXAMPLES / "local.yaml"
    request.getfixturevalue(kind)  # the cluster answers (CI: fails, else skips, when not)
    return (sge.sge_config if kind == "sge" else slurm.slurm_config)(tmp, 10)


def _gone(probe: Callable[[], list[str]], timeout: float = 60.0) -> list[str]:
    """``probe()`` once it is empty, or what it still lists after ``timeout`` (a bound
    on the scheduler's bookkeeping, not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while (left := probe()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


@pytest.mark.parametrize(
    "kind",
    [
        "local",
        pytest.param("sge", marks=sge.XDIST_GROUP),
        pytest.param("slurm", marks=slurm.XDIST_GROUP),
    ],
)
def test_launches_at_once_never_pass_the_maximum_and_none_breaks(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    """Eight launches of one machine each, released together on eight threads while a
    ninth describes, against a type whose maximum is 2: exactly two start (agents, or
    jobs submitted to Grid Engine or Slurm), the others are refused for the maximum
    (never a RuntimeError from a table changed mid-read: CI ci16), and every machine
    started is ended."""
    cfg = load_config(_config_path(kind, tmp_path, request))
    (first, *_) = cfg.machine_types
    cfg = cfg.model_copy(update={"machine_types": [first.model_copy(update={"max_count": 2})]})
    run_id = f"threads-{tmp_path.name}"
    token = tmp_path / "token"  # batch jobs' agents read it (the daemon writes it)
    token.write_text("t0ken")
    token.chmod(0o600)
    (tmp_path / "work").mkdir()  # a batch job whose working directory is missing never runs
    provider = make_provider(
        cfg,
        billing=BillingModel("fixed", 60.0),
        run_id=run_id,
        run_dir=tmp_path,
        token="t0ken",
        url="http://127.0.0.1:9",  # nothing answers: the agents wait, then are ended
        workdir=tmp_path / "work",
        clock=lambda: 0.0,
    )
    gate = threading.Barrier(9)
    started: list[str] = []
    refused: list[str] = []
    broken: list[BaseException] = []

    def launch(i: int) -> None:
        gate.wait()
        try:
            started.extend(r.id for r in provider.launch(first.name, 1, f"L{i}", {}))
        except AutoscalerError as error:
            refused.append(str(error))
        except BaseException as error:  # what the test looks for
            broken.append(error)

    def describe() -> None:
        gate.wait()
        for _ in range(20):
            try:
                provider.describe()
            except BaseException as error:
                broken.append(error)

    threads = [threading.Thread(target=launch, args=(i,)) for i in range(8)]
    threads.append(threading.Thread(target=describe))
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert broken == []
        assert len(started) == 2, (started, refused)
        assert len(refused) == 6
        assert all("exceeds the limit 2" in r for r in refused)
    finally:
        provider.terminate([m.id for m in provider.describe()], now=True)
    assert _gone(lambda: _left_running(kind, run_id)) == []
