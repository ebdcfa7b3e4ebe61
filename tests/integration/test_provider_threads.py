"""A provider called from several threads at once, as the daemon calls it (four provider
threads: a launch beside another launch or a describe), with real agent processes."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from autoscaler.config.load import load_config
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.providers.local import run_processes
from autoscaler.run.wiring import make_provider

pytestmark = pytest.mark.integration

EXAMPLES = Path(__file__).parents[2] / "config" / "examples"


def test_launches_at_once_never_pass_the_maximum_and_none_breaks(tmp_path: Path) -> None:
    """Eight launches of one machine each, released together on eight threads while a
    ninth describes, against a type whose maximum is 2: exactly two start, the others
    are refused for the maximum (never a RuntimeError from a table changed mid-read:
    CI ci16), and every agent started is ended."""
    cfg = load_config(EXAMPLES / "local.yaml")
    (first, *_) = cfg.machine_types
    cfg = cfg.model_copy(update={"machine_types": [first.model_copy(update={"max_count": 2})]})
    run_id = f"threads-{tmp_path.name}"
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
        assert len(started) == 2, started
        assert len(refused) == 6
        assert all("exceeds the limit 2" in r for r in refused)
    finally:
        provider.terminate([m.id for m in provider.describe()], now=True)
    assert run_processes(run_id) == []
