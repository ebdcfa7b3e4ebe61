"""Compact sampling (slides 001): the affine fit between types, a dry run in compact mode
against the emulator's affine types, plain mode left as it was, and the settings."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from autoscaler.budget.controller import Controller
from autoscaler.config.bag import expand_bag
from autoscaler.config.schema import Emulator, MachineFailure, RunConfig
from autoscaler.core.journal import JOURNAL_JSONL, JsonlJournal, Record, replay, step_records
from autoscaler.core.model import Action, Configure, Event
from autoscaler.core.state import RunState
from autoscaler.learn.affine import fit_affine
from autoscaler.learn.stats import sample_size
from autoscaler.providers.sim import type_runtime
from autoscaler.run.assemble import controller_settings, new_state
from autoscaler.run.start import dry_run, make_emulator

AFFINE = {
    "small": {"a": 1.0, "b_s": 0.0, "noise": 0.05},
    "mid": {"a": 0.5, "b_s": 90.0, "noise": 0.05},
    "fast": {"a": 0.25, "b_s": 60.0, "noise": 0.05},
}
PRICES = {"small": 1.0, "mid": 2.0, "fast": 3.0}
MEAN_S = 900.0


def true_mean(name: str) -> float:
    return AFFINE[name]["a"] * MEAN_S + AFFINE[name]["b_s"]


def config(mode: str, tasks: int = 800, budget: float = 400.0, **sampling: Any) -> RunConfig:
    return RunConfig.model_validate(
        {
            "name": f"compact-{mode}",
            "bag": {"synthetic": tasks},
            "constraint": {"budget": budget},
            "machine_types": [
                {"name": n, "price": p, "max_count": 15, "boot_s": 120.0} for n, p in PRICES.items()
            ],
            "emulator": {
                "seed": 3,
                "runtime": {"dist": "normal", "mean_s": MEAN_S, "sd_s": 300.0},
                "affine": AFFINE,
            },
            "sampling": {"mode": mode, **sampling},
        }
    )


# --- the fit ------------------------------------------------------------------------------


def test_fit_recovers_slope_and_intercept_of_exact_pairs() -> None:
    """Pairs on a line give that line back, with no residual."""
    xs = [300.0, 700.0, 900.0, 1200.0, 1500.0]
    fit = fit_affine((x, 0.3 * x + 45.0) for x in xs)
    assert fit is not None
    assert fit.a == pytest.approx(0.3)
    assert fit.b == pytest.approx(45.0)
    assert fit.resid_sd == pytest.approx(0.0, abs=1e-9)
    assert fit(1000.0) == pytest.approx(345.0)


def test_fit_on_noisy_pairs_is_near_the_line_and_knows_its_error() -> None:
    """With noise the fit is close to the true line, and the fitted line's variance is
    smallest at the mean of x and grows away from it."""
    rng = random.Random(7)
    xs = [rng.gauss(900.0, 300.0) for _ in range(400)]
    fit = fit_affine((x, 0.5 * x + 90.0 + rng.gauss(0.0, 20.0)) for x in xs)
    assert fit is not None
    assert fit.a == pytest.approx(0.5, abs=0.02)
    assert fit.b == pytest.approx(90.0, abs=20.0)
    assert fit.resid_sd == pytest.approx(20.0, rel=0.15)
    assert fit.line_var(fit.x_mean) < fit.line_var(fit.x_mean + 600.0)


@pytest.mark.parametrize(
    "pairs",
    [
        [(100.0, 50.0), (200.0, 80.0)],  # too few
        [(100.0, 50.0), (100.0, 60.0), (100.0, 70.0)],  # no spread in x
        [(100.0, 90.0), (200.0, 60.0), (300.0, 30.0)],  # falling
    ],
)
def test_fit_refuses_what_cannot_map(pairs: list[tuple[float, float]]) -> None:
    assert fit_affine(pairs) is None


# --- a dry run in compact mode --------------------------------------------------------------


@dataclass
class FirstPlan:
    """The run as its first plan saw it (the journal replayed up to that step's events),
    the plan, and the money committed before it."""

    state: RunState
    plan: Configure
    sampling_cost: float
    controller: Controller


def first_plan(cfg: RunConfig, tasks: int) -> FirstPlan:
    records: list[Record] = []
    seen: dict[str, Any] = {}
    before = [0.0]

    def on_step(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        plans = [a for a in actions if isinstance(a, Configure) and a.predicted_makespan_s]
        if plans and not seen:
            seen.update(plan=plans[0], cost=before[0])
            seen["records"] = [*records, *step_records(len(records), now, events, [])]
        records.extend(step_records(len(records), now, events, actions))
        before[0] = state.money.committed

    make_emulator(cfg, tasks, on_step=on_step).run()
    assert seen, "no plan was made"
    state = new_state(cfg, tasks, cfg.emulator.seed)
    replay(state, seen["records"])
    return FirstPlan(state, seen["plan"], seen["cost"], Controller(controller_settings(cfg)))


def test_compact_dry_run_finishes_within_budget_with_estimates_near_the_truth() -> None:
    """Compact sampling on affinely related types: the bag finishes within budget, the
    first plan's T_i of every type is near the true a·μ + b, each replicated task ran on
    every type, the other types started only k machines, and sampling cost less than
    plain sampling of the same bag."""
    tasks = 800
    cfg = config("compact", tasks)
    d = dry_run(cfg, expand_bag(cfg), plots=False)
    assert d.report.within_budget
    assert d.report.tasks_done == tasks
    assert d.state.money.committed <= cfg.constraint.budget + 1e-6

    fp = first_plan(cfg, tasks)
    state, controller = fp.state, fp.controller
    k = cfg.sampling.replicated
    assert len(state.observed.paired) == k
    assert all(set(state.observed.paired_runs[t]) == set(PRICES) for t in state.observed.paired)
    first = state.decisions.configurations[0][1].counts
    ref = controller.reference(state)
    assert ref == "small"  # every type can start iw machines: the cheapest
    assert all(c == k for n, c in first.items() if n != ref)
    assert first[ref] == min(15, sample_size(tasks))
    assert fp.sampling_cost < first_plan(config("plain", tasks), tasks).sampling_cost

    est, _ = controller.outlook(state, state.now)
    for name in PRICES:
        assert abs(est[name].mean_s / true_mean(name) - 1) < 0.15, name
        assert fp.plan.assumed_lo_s[name] < fp.plan.assumed_hi_s[name]


def test_compact_sampling_fills_every_slot_with_replicated_tasks() -> None:
    """Machines of 4 slots: a sampling machine of a type other than the reference runs
    replicated tasks on all its slots at once (it took one at a time, while idle, and
    its other slots took tasks of the bag); the bag still finishes within budget, each
    task done (a replicated task once per type)."""
    raw = config("compact", 400).model_dump(mode="json", exclude_none=True)
    for t in raw["machine_types"]:
        t["slots"] = 4
    cfg = RunConfig.model_validate(raw)
    most: dict[str, int] = {}

    def hook(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        if (
            state.decisions.configurations
            and state.decisions.configurations[-1][1].predicted_makespan_s
        ):
            return  # planned: sampling is over
        for m in state.fleet.alive_machines():
            held = len(set(state.observed.paired) & {*m.running, *m.queue})
            most[m.type.name] = max(most.get(m.type.name, 0), held)

    state = make_emulator(cfg, 400, on_step=hook).run()
    assert most["mid"] >= 2, most
    assert most["fast"] >= 2, most
    assert state.tasks.done == 400
    assert state.money.committed <= cfg.constraint.budget + 1e-6
    done = Counter(seg.task for seg in state.tasks.segments if seg.outcome == "done")
    assert set(done) == set(range(400))
    assert {t for t, n in done.items() if n > 1} <= set(state.observed.paired)  # run on every type


def test_derived_estimates_carry_the_fits_error() -> None:
    """A type estimated through the fit has a wider interval than the reference scaled
    by a alone: the fitted line's error is added."""
    tasks = 800
    fp = first_plan(config("compact", tasks), tasks)
    state, controller, plan = fp.state, fp.controller, fp.plan
    ref = controller.reference(state)
    derived = [n for n in PRICES if n != ref and state.observed.stats[n].done < sample_size(tasks)]
    assert derived, "every other type had a sample of its own by the first plan"
    ref_width = plan.assumed_hi_s[ref] - plan.assumed_lo_s[ref]
    for name in derived:
        fit = controller.fit(state, name)
        assert fit is not None
        assert fit.resid_sd > 0
        assert plan.assumed_hi_s[name] - plan.assumed_lo_s[name] > fit.a * ref_width


# --- plain mode and the settings ---------------------------------------------------------------


def test_plain_mode_replicates_nothing_and_ignores_the_compact_setting() -> None:
    """Plain sampling starts iw machines of every type, pairs no task, and its run does
    not depend on ``sampling.replicated``."""
    tasks = 500
    a = dry_run(config("plain", tasks), expand_bag(config("plain", tasks)), plots=False)
    b_cfg = config("plain", tasks, replicated=4)
    b = dry_run(b_cfg, expand_bag(b_cfg), plots=False)
    assert a.state.observed.paired == []
    assert b.state.observed.paired == []
    iw = min(tasks // 10, sample_size(tasks))
    assert a.state.decisions.configurations[0][1].counts == {n: min(iw, 15) for n in PRICES}
    assert a.state.tasks.segments == b.state.tasks.segments
    assert a.state.money.committed == b.state.money.committed


def test_compact_controller_setting_comes_from_the_config() -> None:
    assert controller_settings(config("compact")).sampling_mode == "compact"
    assert controller_settings(config("plain")).sampling_mode == "plain"


def test_emulator_affine_types_relate_with_noise_and_others_keep_their_speed() -> None:
    """Without noise a type with a relation runs a·x + b (over its speed); with noise
    the same task and type always take the same time, its mean stays a·x + b, and a
    type without a relation still runs x / speed."""
    model = Emulator.model_validate(
        {
            "speed": {"fast": 2.0, "plain": 4.0},
            "affine": {"fast": {"a": 0.5, "b_s": 30.0}, "noisy": {"a": 0.5, "noise": 0.2}},
        }
    )
    assert type_runtime(model, 600.0, 1, "fast") == pytest.approx((0.5 * 600 + 30) / 2)
    assert type_runtime(model, 600.0, 1, "plain") == 600.0 / 4
    assert type_runtime(model, 600.0, 1, "other") == 600.0
    noisy = [type_runtime(model, 600.0, t, "noisy") for t in range(2000)]
    assert noisy == [type_runtime(model, 600.0, t, "noisy") for t in range(2000)]
    assert len(set(noisy)) > 1000
    assert sum(noisy) / len(noisy) == pytest.approx(300.0, rel=0.02)


def test_a_compact_runs_journal_replays_to_its_final_state(tmp_path: Path) -> None:
    """The pairs (which tasks, their runs per type) are rebuilt from the journal alone,
    with task failures and a lost machine on the way."""
    tasks = 400
    cfg = config("compact", tasks).model_copy(
        update={
            "emulator": config("compact", tasks).emulator.model_copy(
                update={
                    "task_failure_prob": 0.05,
                    "machine_failures": [MachineFailure(type="fast", at_s=400.0)],
                }
            )
        }
    )
    run = dry_run(cfg, expand_bag(cfg), out_dir=tmp_path / "run", plots=False)
    journal = JsonlJournal(tmp_path / "run" / JOURNAL_JSONL)
    replayed = new_state(cfg, tasks, cfg.emulator.seed)
    replay(replayed, list(journal.records()))
    journal.close()
    assert replayed.observed.paired
    assert replayed == run.state
