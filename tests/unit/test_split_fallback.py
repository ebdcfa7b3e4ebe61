"""A job split across providers (``jobs[].split``) runs as one part per provider, each
planned on its provider's types; the job's other types are the part's fallback
(``JobSpec.fallback``), planned on only when none of its own can be launched and one of
those can, or for tasks surely late (the watch: ``planned_types(every=True)``)."""

from __future__ import annotations

from pathlib import Path

from autoscaler.config.load import load_config
from autoscaler.core.billing import BillingModel
from autoscaler.core.journal import decode, encode
from autoscaler.core.model import JobAdded, JobSpec, LaunchFailed, TypeSpec
from autoscaler.core.state import RunState
from autoscaler.deadline.jobs import DeadlineSettings, planned_types, task_times
from autoscaler.run.assemble import job_specs
from tests.unit.test_multi_provider import HYBRID, write

TYPES = (
    TypeSpec("node", 0.0, 8, 60.0, provider="campus"),
    TypeSpec("c5", 0.5, 20, 120.0, provider="east"),
)
PART = JobSpec("sim@campus", 0, 10, 0.0, 3600.0, None, {"node": 120.0, "c5": 60.0}, "", ("c5",))


def state_of(*jobs: JobSpec, types: tuple[TypeSpec, ...] = TYPES) -> RunState:
    billing = BillingModel("fixed", 3600, 60, 300)
    n = sum(j.count for j in jobs)
    return RunState.new(types, billing, None, n, list(range(n)), jobs=jobs)


def refuse(state: RunState, type_name: str, until: float = 1800.0) -> None:
    state.capacity.refused(
        state.now,
        LaunchFailed("t", type_name, 1, "InsufficientInstanceCapacity", "capacity", until),
    )


def test_each_part_keeps_the_jobs_times_and_names_the_other_providers_types(
    tmp_path: Path,
) -> None:
    text = HYBRID.replace(
        "task_s: {node: 120, c5: 60}",
        "task_s: {node: 120, c5: 60}\n    split: {campus: 80, east: 120}",
    )
    parts = {j.name: j for j in job_specs(load_config(write(tmp_path, text)))}
    assert set(parts) == {"sim@campus", "sim@east"}
    assert parts["sim@campus"].fallback == ("c5",)
    assert parts["sim@east"].fallback == ("node",)
    assert all(dict(j.task_s) == {"node": 120, "c5": 60} for j in parts.values())
    assert [(j.first, j.count) for j in parts.values()] == [(0, 80), (80, 120)]


def test_a_part_is_planned_on_its_own_types_while_one_can_be_launched() -> None:
    state = state_of(PART)
    assert planned_types(state, PART) == ["node"]
    assert set(task_times(DeadlineSettings(), state, PART)) == {"node"}
    assert planned_types(state, PART, every=True) == ["node", "c5"]
    whole = JobSpec("sim", 0, 10, 0.0, 3600.0, None, {"node": 120.0, "c5": 60.0})
    assert planned_types(state_of(whole), whole) == ["node", "c5"]


def test_a_part_whose_own_types_are_refused_is_planned_on_its_fallback_until_they_return() -> None:
    state = state_of(PART)
    refuse(state, "node", until=1800.0)
    assert planned_types(state, PART) == ["node", "c5"]
    assert set(task_times(DeadlineSettings(), state, PART)) == {"node", "c5"}
    state.now = 1800.0
    assert planned_types(state, PART) == ["node"]


def test_a_part_stays_on_its_own_types_when_its_fallback_cannot_be_launched_either() -> None:
    state = state_of(PART)
    refuse(state, "node")
    refuse(state, "c5")
    assert planned_types(state, PART) == ["node"]


def test_a_part_whose_provider_allows_no_machines_is_planned_on_its_fallback() -> None:
    none = (TypeSpec("node", 0.0, 0, 60.0, provider="campus"), TYPES[1])
    assert planned_types(state_of(PART, types=none), PART) == ["node", "c5"]


def test_a_parts_fallback_survives_the_journal() -> None:
    """A service's job is journaled as ``JobAdded``; JSON gives the fallback back as a
    list, and the part must compare equal to what was written."""
    added = JobAdded(PART, tuple(range(PART.count)))
    back = decode("event", "JobAdded", encode(added))
    assert isinstance(back, JobAdded)
    assert back.job == PART
    assert back.job.fallback == ("c5",)
