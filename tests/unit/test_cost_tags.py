"""Whom a run's machines are charged to (``cost_tags``): the values EC2 takes, what a
Slurm or Grid Engine job says of its project, what a run directory keeps across a
resume, and what the service's deadline pool says of machines its jobs share."""

from __future__ import annotations

import contextlib
import sqlite3
import time
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.config.bag import expand_bag
from autoscaler.config.schema import RunConfig
from autoscaler.core.journal import JOURNAL_DB
from autoscaler.providers.cost_tags import (
    JOB_TAG,
    PROJECT_TAG,
    SHARED,
    USER_TAG,
    CostTags,
    common,
)
from autoscaler.providers.ec2 import TAG_VALUE_MAX, aws_tag_value
from autoscaler.providers.sge import SgeProvider
from autoscaler.providers.slurm import SlurmProvider
from autoscaler.run.daemon import Daemon
from autoscaler.run.rundir import RunFiles, os_user
from autoscaler.service.job_states import JobState
from autoscaler.service.job_tags import job_cost_tags
from autoscaler.service.pool import Pool, pool_config
from autoscaler.service.store import JobRow
from tests.conftest import make_config
from tests.unit.test_provider_registry import build
from tests.unit.test_provider_registry import config as example

TAGS = CostTags("physics", "sweep-3", "alice")


# --- EC2's rules for tag values ------------------------------------------------------------


def aws_accepts(value: str) -> bool:
    """AWS's rule for a tag value every service takes: at most 256 letters, digits,
    spaces and ``_ . : / = + - @`` (``[\\p{L}\\p{Z}\\p{N}_.:/=+\\-@]*``), and not the
    reserved prefix ``aws:``, in any case."""
    return (
        len(value) <= TAG_VALUE_MAX
        and all(c in "_.:/=+-@" or unicodedata.category(c)[0] in "LZN" for c in value)
        and not value.lower().startswith("aws:")
    )


@pytest.mark.parametrize(
    "value",
    ["physics", "alice@lab.example", "run 7: a/b=c+d_e.f-g", "Zürich données 数据", ""],
)
def test_a_value_aws_takes_is_kept_as_it_is(value: str) -> None:
    assert aws_tag_value(value) == value


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("sweep (v2) #3", "sweep _v2_ _3"),
        ("DOMAIN\\alice", "DOMAIN_alice"),
        ("a;b|c\nd\te", "a_b_c_d_e"),
        ("x–y", "x_y"),  # an en dash is punctuation AWS refuses
        ("aws:reserved", "_aws:reserved"),
        ("AWS:Reserved", "_AWS:Reserved"),
    ],
)
def test_a_character_aws_refuses_becomes_an_underscore(value: str, kept: str) -> None:
    assert not aws_accepts(value)
    assert aws_tag_value(value) == kept
    assert aws_accepts(kept)


def test_a_long_value_is_cut_to_256_characters() -> None:
    value = "p" * 300
    assert aws_tag_value(value) == "p" * TAG_VALUE_MAX


@given(st.text(max_size=400))
def test_every_value_comes_out_as_one_aws_takes_and_stays_so(value: str) -> None:
    once = aws_tag_value(value)
    assert aws_accepts(once)
    assert aws_tag_value(once) == once


# --- the tags of a launch --------------------------------------------------------------------


def test_the_tags_of_a_launch_name_the_project_the_job_and_the_user() -> None:
    assert TAGS.tags() == {PROJECT_TAG: "physics", JOB_TAG: "sweep-3", USER_TAG: "alice"}


def test_machines_of_several_jobs_say_what_they_share_and_shared_for_the_rest() -> None:
    a = CostTags("physics", "j1", "alice")
    assert common([a]) == a
    assert common([a, CostTags("physics", "j2", "alice")]) == CostTags("physics", SHARED, "alice")
    assert common([a, CostTags("chemistry", "j2", "bob")]) == CostTags(SHARED, SHARED, SHARED)


# --- a batch job says its project ------------------------------------------------------------


def test_a_slurm_job_s_comment_is_the_project_and_its_account_only_when_asked(
    tmp_path: Path,
) -> None:
    cfg = example("slurm")
    plain = build(cfg, tmp_path)
    assert isinstance(plain, SlurmProvider)
    args = plain.submit_args("small-L0-0", plain.types["small"], "Physics")
    assert "--comment=Physics" in args
    assert not [a for a in args if a.startswith("--account")]

    assert cfg.slurm is not None
    slurm = cfg.slurm.model_copy(update={"account_from_project": True})
    charged = build(cfg.model_copy(update={"slurm": slurm}), tmp_path)
    assert isinstance(charged, SlurmProvider)
    args = charged.submit_args("small-L0-0", charged.types["small"], "Physics")
    assert "--comment=Physics" in args
    assert "--account=physics" in args  # Slurm keeps account names in lower case
    assert args[-1].startswith("--wrap=")  # the command stays last


def test_a_grid_engine_job_s_account_string_is_the_project(tmp_path: Path) -> None:
    provider = build(example("sge"), tmp_path)
    assert isinstance(provider, SgeProvider)
    args = provider._submit_args("small-L0-0", provider.types["small"], "physics")
    assert args[args.index("-A") + 1] == "physics"
    assert "-A" not in provider._submit_args("small-L0-0", provider.types["small"])


# --- a run keeps whom it is charged to -----------------------------------------------------


def _cfg(**changes: object) -> RunConfig:
    return make_config(name="nightly", **changes)


def test_a_run_is_charged_to_its_project_its_name_and_who_started_it(tmp_path: Path) -> None:
    cfg = _cfg(project="physics")
    files = RunFiles.create(cfg, expand_bag(cfg), tmp_path / "run", "r-1", seed=1)
    assert files.cost_tags == CostTags("physics", "nightly", os_user())
    plain = _cfg()
    files = RunFiles.create(plain, expand_bag(plain), tmp_path / "other", "r-2", seed=1)
    assert files.cost_tags == CostTags("default", "nightly", os_user())


def test_a_resumed_run_is_charged_as_it_was_made(tmp_path: Path) -> None:
    cfg = _cfg(project="physics")
    RunFiles.create(cfg, expand_bag(cfg), tmp_path / "run", "r-1", seed=1, cost_tags=TAGS)
    assert RunFiles.open(tmp_path / "run").cost_tags == TAGS


def test_a_run_made_before_runs_kept_their_tags_is_charged_as_one_started_by_hand(
    tmp_path: Path,
) -> None:
    cfg = _cfg(project="physics")
    run_dir = tmp_path / "run"
    RunFiles.create(cfg, expand_bag(cfg), run_dir, "r-1", seed=1, cost_tags=TAGS)
    with contextlib.closing(sqlite3.connect(run_dir / JOURNAL_DB)) as db, db:
        db.execute("DELETE FROM meta WHERE key LIKE 'cost_%'")  # as an older version wrote it
    assert RunFiles.open(run_dir).cost_tags == CostTags("physics", "nightly", os_user())


# --- the service ---------------------------------------------------------------------------


def _pool_job_config(project: str | None) -> RunConfig:
    return make_config(
        bag={"synthetic": 4},
        constraint={"deadline_s": 1200},
        **({"project": project} if project else {}),
    )


def _row(job_id: str, project: str | None, tmp_path: Path, user: str = "alice") -> JobRow:
    return JobRow(
        id=job_id,
        name=job_id,
        submitted_at=time.time(),
        state=JobState.RUNNING,
        config=_pool_job_config(project),
        n_tasks=4,
        run_dir=tmp_path / "jobs" / job_id,
        started_at=None,
        ended_at=None,
        final=None,
        run_id=None,
        seed=None,
        in_pool=True,
        deadline_at=None,
        user=user,
    )


def test_a_job_on_its_own_machines_is_charged_to_its_project_its_id_and_its_submitter(
    tmp_path: Path,
) -> None:
    row = _row("j-7", "physics", tmp_path, user="bob")
    assert job_cost_tags(row) == CostTags("physics", "j-7", "bob")
    assert job_cost_tags(_row("j-8", None, tmp_path)).project == "default"


def test_the_pool_s_launches_say_what_its_jobs_share(tmp_path: Path) -> None:
    rows = {
        "j-1": _row("j-1", "physics", tmp_path),
        "j-2": _row("j-2", "physics", tmp_path),
        "j-3": _row("j-3", "chemistry", tmp_path),
    }
    cfg = pool_config(rows["j-1"].config, "j-1")
    files = RunFiles.create(cfg, expand_bag(cfg), tmp_path / "pool", "pool-1", seed=1)
    daemon = Daemon(files)
    pool = Pool(files, time.time, rows.__getitem__, lambda *_: None, daemon)
    user = "alice"  # every job's submitter

    pool.retag(rows["j-1"])
    assert daemon.cost_tags == CostTags("physics", "j-1", user)
    pool.jobs.add("j-1")
    pool.retag(rows["j-2"])
    assert daemon.cost_tags == CostTags("physics", SHARED, user)
    pool.jobs.add("j-2")
    pool.retag(rows["j-3"])
    assert daemon.cost_tags == CostTags(SHARED, SHARED, user)
    pool.jobs.add("j-3")
    pool.jobs -= {"j-1", "j-2"}  # they ended
    pool.retag()
    assert daemon.cost_tags == CostTags("chemistry", "j-3", user)
    pool.jobs.clear()
    pool.retag()  # no job: the last word stands
    assert daemon.cost_tags == CostTags("chemistry", "j-3", user)
