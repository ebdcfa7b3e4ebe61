"""A service's job whose start was killed half-way begins again (``runners.start_own_run``).

``RunFiles.create`` writes the journal first and the tasks file whole and last. A
service killed -9 between the two (seen in CI: ``test_service_quota``'s restart test,
killed while its second job started) left a run directory with a journal and no tasks
file: started again, the service resumed it, the resume could not read the run, and
the job failed although nothing of it had run, launched or cost anything.
"""

from __future__ import annotations

import time
from pathlib import Path

from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.run.rundir import TASKS_FILE, RunFiles, made
from autoscaler.service.job_states import JobState
from autoscaler.service.runners import start_own_run
from autoscaler.service.store import JobRow

EXAMPLES = Path(__file__).parents[2] / "config" / "examples"


def test_a_job_whose_start_was_killed_before_its_tasks_file_begins_again(
    tmp_path: Path,
) -> None:
    cfg = load_config(EXAMPLES / "local.yaml")
    tasks = expand_bag(cfg)
    jobs_dir = tmp_path / "jobs"
    run_dir = jobs_dir / "j2"
    RunFiles.create(cfg, tasks, run_dir, "old", 5)
    (run_dir / TASKS_FILE).unlink()  # killed before the last file of the start
    assert not made(run_dir)
    row = JobRow(
        "j2",
        cfg.name,
        time.time(),
        JobState.INTERRUPTED,
        cfg,
        len(tasks),
        run_dir,
        started_at=time.time(),
        ended_at=None,
        final=None,
        run_id="new",
        seed=5,
        in_pool=False,
        deadline_at=None,
    )
    session = start_own_run(
        row,
        lambda: tasks,
        jobs_dir=jobs_dir,
        max_running=2,
        now=time.time(),
        progress=lambda state, estimate: None,
        plots=False,
    )
    files = session.daemon.files
    assert files.run_id == "new"  # made afresh, not resumed
    assert files.tasks == tasks
    assert made(run_dir)
