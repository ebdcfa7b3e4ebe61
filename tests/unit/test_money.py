"""The money invariant, as a property: over random bags, types, prices and budgets,
committed spend never exceeds the budget at any step of any dry run, no machine
outlives the run, and no task is lost."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.config.schema import RunConfig
from autoscaler.core.model import Action, Event, TaskState
from autoscaler.core.state import RunState
from autoscaler.run.start import make_emulator


@st.composite
def run_configs(draw: st.DrawFn) -> RunConfig:
    n_types = draw(st.integers(1, 3))
    types = [
        {
            "name": f"t{i}",
            "price": draw(st.floats(0.5, 20.0)),
            "max_count": draw(st.integers(1, 8)),
            "boot_s": draw(st.floats(0.0, 300.0)),
        }
        for i in range(n_types)
    ]
    cheapest = min(t["price"] for t in types)
    per_second = draw(st.booleans())
    atu = draw(st.sampled_from([600.0, 1800.0, 3600.0]))
    billing: dict[str, Any] = {"mode": "per_second" if per_second else "fixed", "atu_s": atu}
    if per_second:
        billing["min_charge_s"] = draw(st.sampled_from([0.0, 60.0]))
        billing["commit_s"] = draw(st.sampled_from([60.0, 300.0]))
        cheapest = cheapest * max(billing["min_charge_s"], 1.0) / atu
    mean = draw(st.floats(30.0, 2400.0))
    failures = [
        {
            "type": f"t{draw(st.integers(0, n_types - 1))}",
            "at_s": draw(st.floats(0, 7200)),
            "index": 0,
        }
        for _ in range(draw(st.integers(0, 2)))
    ]
    return RunConfig.model_validate(
        {
            "bag": {"synthetic": draw(st.integers(1, 150)), "max_retries": draw(st.integers(0, 2))},
            "constraint": {"budget": cheapest * draw(st.floats(1.0, 200.0))},
            "machine_types": types,
            "billing": billing,
            "emulator": {
                "seed": draw(st.integers(0, 1000)),
                "runtime": {
                    "dist": "normal",
                    "mean_s": mean,
                    "sd_s": mean * draw(st.floats(0, 0.5)),
                },
                "speed": {t["name"]: draw(st.floats(0.25, 4.0)) for t in types},
                "task_failure_prob": draw(st.sampled_from([0.0, 0.0, 0.1])),
                "machine_failures": failures,
            },
            "monitoring_interval_s": draw(st.sampled_from([60.0, 300.0])),
            "tail_replication": draw(st.booleans()),
        }
    )


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run_configs())
def test_committed_spend_never_exceeds_the_budget(cfg: RunConfig) -> None:
    budget = cfg.constraint.budget
    assert budget is not None
    worst: list[tuple[float, float]] = []

    def check(now: float, events: list[Event], actions: list[Action], state: RunState) -> None:
        if state.money.committed > budget + 1e-6:
            worst.append((now, state.money.committed))
        # What the machines have used so far never exceeds what was committed.
        assert state.actual_cost() <= state.money.committed + 1e-6

    n = cfg.bag.synthetic
    assert n is not None
    state = make_emulator(cfg, n, on_step=check).run()

    assert worst == [], f"committed spend above budget {budget} at {worst[:3]}"
    assert state.actual_cost() <= budget + 1e-6
    assert not any(True for _ in state.fleet.alive_machines()), "a machine outlived the run"
    assert not state.fleet.pending_launches
    # Nothing lost: every task is done, failed, or (only if the run stopped) still pending.
    states = [state.tasks.task_state[t] for t in range(n)]
    assert TaskState.RUNNING not in states
    assert states.count(TaskState.DONE) == state.tasks.done
    assert states.count(TaskState.FAILED) == state.tasks.failed
    if state.money.stop_reason is None:
        assert state.tasks.done + state.tasks.failed == n
    else:
        assert state.tasks.done + state.tasks.failed < n
        assert len(state.tasks.pending) == n - state.tasks.done - state.tasks.failed
