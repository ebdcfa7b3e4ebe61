"""Machines that run several tasks at once: the planners, the emulator, the providers."""

from __future__ import annotations

import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.budget.minimum import minimum_budget
from autoscaler.budget.planner import plan_budget, plan_clairvoyant
from autoscaler.budget.problem import BudgetProblem, TypeEstimate
from autoscaler.config.bag import expand_bag
from autoscaler.config.schema import RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.model import Action, Event, TaskDone
from autoscaler.core.state import RunState
from autoscaler.deadline.instance import DeadlineJob, MachineType
from autoscaler.deadline.slot_queues import cushion, slotted
from autoscaler.providers.sge import SgeProvider
from autoscaler.providers.sim import share_factor
from autoscaler.providers.slurm import SlurmProvider
from autoscaler.run.start import dry_run, make_emulator
from tests.unit.test_provider_registry import build

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "config" / "examples"
HOURLY = BillingModel("fixed", 3600.0)


# --- the budget planner ----------------------------------------------------------------------


def test_a_machine_of_8_slots_plans_as_8_machines_of_one_at_the_same_price_per_task() -> None:
    """Fluid model: s slots at T per task are worth one slot at T/s; the clairvoyant mix
    (no cushion, no boot) is then the same."""
    eight = plan_clairvoyant(
        2000, 400.0, [TypeEstimate("big", 1.0, 100, 0.0, 600.0, slots=8)], HOURLY
    )
    fast = plan_clairvoyant(2000, 400.0, [TypeEstimate("big", 1.0, 100, 0.0, 75.0)], HOURLY)
    assert eight is not None
    assert fast is not None
    assert eight.counts == fast.counts
    assert eight.units == fast.units
    assert eight.speed == pytest.approx(fast.speed)


def test_the_budget_an_8_slot_type_needs_is_about_an_eighth() -> None:
    """The same bag costs about an eighth on 8 slots, and its cheapest plan buys about an
    eighth of the machine-units (at least one machine of each)."""

    def problem(slots: int, budget: float = 0.0) -> BudgetProblem:
        t = TypeEstimate("big", 1.0, 500, 120.0, 600.0, sd_s=60.0, slots=slots, first_cost=1.0)
        return BudgetProblem(4000.0, budget, [t], HOURLY)

    one, eight = minimum_budget(problem(1)), minimum_budget(problem(8))
    assert one is not None
    assert eight is not None
    assert 0.10 <= eight / one <= 0.16
    plan_one, plan_eight = plan_budget(problem(1, one)), plan_budget(problem(8, eight))
    assert plan_one is not None
    assert plan_eight is not None
    used_one = plan_one.counts["big"] * (plan_one.units + 1)
    used_eight = plan_eight.counts["big"] * (plan_eight.units + 1)
    assert 0.10 <= used_eight / used_one <= 0.16


def test_slots_1_is_the_plan_of_a_type_without_slots() -> None:
    bare = TypeEstimate("a", 2.0, 20, 120.0, 900.0, sd_s=90.0, first_cost=2.0, first_tasks=3)
    one = TypeEstimate(
        "a", 2.0, 20, 120.0, 900.0, sd_s=90.0, first_cost=2.0, first_tasks=3, slots=1
    )
    other = TypeEstimate("b", 3.0, 20, 120.0, 500.0, sd_s=50.0, first_cost=3.0, first_tasks=6)
    for budget in (30.0, 80.0, 300.0):
        a = plan_budget(BudgetProblem(400.0, budget, [bare, other], HOURLY, cushion_z=1.0))
        b = plan_budget(BudgetProblem(400.0, budget, [one, other], HOURLY, cushion_z=1.0))
        assert a == b


# --- the deadline planner ---------------------------------------------------------------------


def test_the_deadline_problem_of_one_slot_is_left_as_it_is() -> None:
    jobs = [DeadlineJob("j", 100, 3600.0, {"a": 60.0})]
    types = [MachineType("a", 1.0, 100.0, 10)]
    got_jobs, got_types = slotted(jobs, types, {"a": 1})
    assert got_jobs == jobs
    assert got_types == types


def test_a_slotted_type_is_planned_at_e_over_s_from_a_later_start() -> None:
    """e/s per task, the boot raised by Graham's (1 − 1/s)·e_max: k tasks end by
    k·e/s + (1 − 1/s)·e ≥ ⌈k/s⌉·e, so the plan meets the deadline on the real machine."""
    jobs = [
        DeadlineJob("j", 100, 3600.0, {"a": 80.0, "b": 50.0}),
        DeadlineJob("k", 5, 7200.0, {"a": 40.0}),
    ]
    types = [MachineType("a", 1.0, 100.0, 10), MachineType("b", 1.0, 30.0, 10)]
    got_jobs, got_types = slotted(jobs, types, {"a": 4})
    assert got_jobs[0].task_s == {"a": 20.0, "b": 50.0}
    assert got_jobs[1].task_s == {"a": 10.0}
    assert got_types[0].boot_s == 100.0 + 0.75 * 80.0
    assert got_types[1] == types[1]
    for k in range(1, 30):
        assert k * 80.0 / 4 + cushion(4, 80.0) >= -(-k // 4) * 80.0


def _deadline(slots: int) -> RunConfig:
    return RunConfig.model_validate(
        {
            "name": f"d{slots}",
            "bag": {"synthetic": 200},
            "constraint": {"deadline_s": 3 * 3600},
            "machine_types": [
                {"name": "big", "price": 2, "max_count": 64, "boot_s": 60, "slots": slots}
            ],
            "billing": {"mode": "per_second", "atu_s": "1h", "min_charge_s": 60},
            "monitoring_interval_s": "2m",
            "emulator": {"seed": 1, "runtime": {"dist": "normal", "mean_s": "5m", "sd_s": "30s"}},
        }
    )


def test_the_deadline_controller_buys_about_an_eighth_on_8_slots() -> None:
    reports = {}
    for slots in (1, 8):
        cfg = _deadline(slots)
        reports[slots] = dry_run(cfg, expand_bag(cfg), out_dir=None, plots=False).report
    one, eight = reports[1], reports[8]
    assert one.tasks_done == eight.tasks_done == 200
    assert 0.08 <= eight.cost / one.cost <= 0.2
    assert len(eight.machines) < len(one.machines)
    assert eight.makespan_s is not None
    assert eight.makespan_s <= 3 * 3600


# --- the emulator ---------------------------------------------------------------------------


def _budget(slots: int, **emulator: Any) -> RunConfig:
    return RunConfig.model_validate(
        {
            "name": f"b{slots}",
            "bag": {"synthetic": 120},
            "constraint": {"budget": 50},
            "machine_types": [
                {"name": "big", "price": 1, "max_count": 4, "boot_s": 60, "slots": slots}
            ],
            "billing": {"mode": "fixed", "atu_s": "1h"},
            "monitoring_interval_s": "5m",
            "tail_replication": False,
            "emulator": {"seed": 2, "runtime": {"dist": "constant", "value_s": 600}, **emulator},
        }
    )


def _runs(cfg: RunConfig) -> tuple[RunState, dict[str, list[tuple[float, float]]]]:
    """The run's state and each machine's runs as (start, end), from its TaskDone events."""
    runs: dict[str, list[tuple[float, float]]] = defaultdict(list)

    def hook(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        for e in events:
            if isinstance(e, TaskDone):
                runs[e.machine].append((now - e.runtime_s, now))

    em = make_emulator(cfg, len(expand_bag(cfg)), None, on_step=hook)
    return em.run(), runs


def _most_at_once(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    most = now = 0
    for _, step in edges:  # an end before a start at the same instant
        now += step
        most = max(most, now)
    return most


def test_the_emulator_runs_up_to_slots_tasks_at_once_and_never_more() -> None:
    state, runs = _runs(_budget(4))
    assert state.finished
    assert sum(len(r) for r in runs.values()) == 120
    most = {mid: _most_at_once(spans) for mid, spans in runs.items()}
    assert max(most.values()) == 4
    assert all(n <= 4 for n in most.values())


def test_one_slot_runs_one_task_at_a_time() -> None:
    _, runs = _runs(_budget(1))
    assert all(_most_at_once(spans) == 1 for spans in runs.values())


def test_share_factor() -> None:
    assert share_factor(0.0, 8, 8) == 1.0
    assert share_factor(0.6, 1, 4) == 1.0
    assert share_factor(0.6, 4, 4) == pytest.approx(1.6)
    assert share_factor(0.6, 3, 4) == pytest.approx(1.4)
    assert share_factor(0.6, 9, 4) == pytest.approx(1.6)  # at most the slots share
    assert share_factor(0.6, 2, 1) == 1.0


def test_the_emulator_slows_tasks_that_start_beside_others() -> None:
    """Constant 600 s tasks, 4 slots, share_slowdown 0.6: a task that starts with n tasks
    running (itself included) takes 600·(1 + 0.6·(n − 1)/3)."""
    _, runs = _runs(_budget(4, share_slowdown=0.6))
    lengths = {round(e - s, 6) for spans in runs.values() for s, e in spans}
    assert lengths <= {600.0, 720.0, 840.0, 960.0}
    assert 960.0 in lengths  # a full machine
    _, alone = _runs(_budget(4))
    assert {round(e - s, 6) for spans in alone.values() for s, e in spans} == {600.0}


# --- providers --------------------------------------------------------------------------------


def _with_slots(name: str, slots: dict[str, int], **changes: Any) -> RunConfig:
    data = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    for t in data["machine_types"]:
        if t["name"] in slots:
            t["slots"] = slots[t["name"]]
    for key, value in changes.items():
        data[key] = value
    return RunConfig.model_validate(data)


def test_a_slurm_job_asks_for_its_slots_times_the_bags_cpus(tmp_path: Path) -> None:
    cfg = _with_slots("slurm", {"small": 3, "large": 2}, bag={"synthetic": 10, "cpus": 2})
    provider = build(cfg, tmp_path)
    assert isinstance(provider, SlurmProvider)
    small = provider.submit_args("small-L0-0", provider.types["small"])
    large = provider.submit_args("large-L0-0", provider.types["large"])
    assert "--cpus-per-task=6" not in small  # small gives cpus: 1 itself
    assert "--cpus-per-task=1" in small
    assert "--cpus-per-task=2" in large  # large gives cpus: 2 itself
    assert "--slots 3" in small[-1]
    assert "--slots 2" in large[-1]


def test_a_slurm_type_without_cpus_asks_for_slots_times_cpus(tmp_path: Path) -> None:
    cfg = _with_slots("slurm", {"small": 3}, bag={"synthetic": 10, "cpus": 2})
    data = cfg.model_dump()
    data["slurm"]["types"]["small"] = {"partition": "as_small"}
    cfg = RunConfig.model_validate(data)
    provider = build(cfg, tmp_path)
    assert isinstance(provider, SlurmProvider)
    assert "--cpus-per-task=6" in provider.submit_args("small-L0-0", provider.types["small"])


def test_a_grid_engine_type_with_a_pe_asks_for_its_cores(tmp_path: Path) -> None:
    cfg = _with_slots("sge", {"small": 4})
    data = cfg.model_dump()
    data["sge"]["types"]["small"]["pe"] = "smp"
    provider = build(RunConfig.model_validate(data), tmp_path)
    assert isinstance(provider, SgeProvider)
    args = provider._submit_args("small-L0-0", provider.types["small"])
    at = args.index("-pe")
    assert args[at + 1 : at + 3] == ["smp", "4"]
    assert args[args.index("--slots") + 1] == "4"
    plain = provider._submit_args("large-L0-0", provider.types["large"])
    assert "-pe" not in plain
    assert "--slots" not in plain


# --- the config, through the command line ------------------------------------------------------


def _validate(tmp_path: Path, data: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "autoscaler", "validate", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def test_slots_0_is_an_error_naming_the_field(tmp_path: Path) -> None:
    data = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())
    data["machine_types"][0]["slots"] = 0
    done = _validate(tmp_path, data)
    assert done.returncode == 2
    assert "machine_types[0].slots" in done.stderr
    assert "Traceback" not in done.stderr


def test_share_slowdown_below_0_is_an_error_naming_the_field(tmp_path: Path) -> None:
    data = yaml.safe_load((EXAMPLES / "quickstart.yaml").read_text())
    data.setdefault("emulator", {})["share_slowdown"] = -1
    done = _validate(tmp_path, data)
    assert done.returncode == 2
    assert "emulator.share_slowdown" in done.stderr


def test_report_names_slots_per_type_and_machine(tmp_path: Path) -> None:
    cfg = _budget(4)
    run = dry_run(cfg, expand_bag(cfg), out_dir=tmp_path / "run", plots=False)
    assert run.report.machine_types["big"].slots == 4
    assert {m.slots for m in run.report.machines} == {4}
    text = (tmp_path / "run" / "report.md").read_text()
    assert "| type | slots |" in text
    assert "| machine | type | slots |" in text
