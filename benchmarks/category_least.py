"""The least budget ``autoscaler plan`` offers with categories, run (issue 21 §3).

For each scenario of ``benchmarks/category_mix.py`` and seed: the state at which the
first plan was made (sampling over), the frontier's ``minimum`` option there, and a run
with that option's budget. Printed per seed: the least budget and its mix, tasks done
(and whether each once), the run's cost, the option's forecast makespan against the
run's; below it, per (category, type), the estimate the first plan stood on (with its
runs) against the scenario's true mean (the runtime's mean over the category's speed on
the type). Targets, checked: every run does every task once within the budget, and the
forecast makespan is within 20 % of the actual. Run from the repository root::

    .venv/bin/python -m benchmarks.category_least --scenarios three --seeds 6
"""

from __future__ import annotations

import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

if __name__ == "__main__" and not __package__:  # ``python benchmarks/category_least.py``
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoscaler.budget.category_means import category_times
from autoscaler.budget.frontier import frontier
from autoscaler.config.bag import expand_bag
from autoscaler.config.schema import RunConfig
from autoscaler.report.build import build_report
from autoscaler.run.start import make_emulator
from benchmarks.bats_scenarios import library_digest, library_state, pooled, render_table
from benchmarks.category_mix import config, controller, first_plan_state, scenario_args

FORECAST = 0.20  # the option's makespan within this share of the run's


@dataclass(frozen=True, slots=True)
class Least:
    scenario: str
    seed: int
    budget: float
    counts: dict[str, int]
    done: int
    tasks: int
    once: bool
    cost: float
    forecast_s: float
    makespan_s: float
    estimates: tuple[tuple[str, str, float, int, float], ...]  # category, type, T, runs, truth

    @property
    def error(self) -> float:
        return abs(self.forecast_s - self.makespan_s) / self.makespan_s

    @property
    def sound(self) -> bool:
        return self.done == self.tasks and self.once and self.cost <= self.budget + 1e-6


def true_mean_s(cfg: RunConfig, category: str, type_name: str) -> float:
    """The scenario's mean runtime of a task of ``category`` on ``type_name``."""
    speed = (cfg.emulator.category_speed or {}).get(category, {}).get(type_name, 1.0)
    return float(cfg.emulator.runtime.mean_s) / speed


def run_least(work: tuple[str, int]) -> Least:
    """The least budget offered at the first plan of ``scenario``/``seed``, and its run."""
    scenario, seed = work
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config(scenario, seed, Path(tmp))
        state, now = first_plan_state(cfg)
        made = controller(cfg, True)
        least = frontier(made, state, now).options[0]
        assert made.categories is not None
        cats = made.categories.categories
        times = category_times(state, cats, sorted(state.types))
        assert times is not None
        names = {c.id: str(c.key) for c in cats}
        estimates = tuple(
            (
                names[k],
                t,
                m,
                int(state.observed.category_runs.get((k, t), (0,))[0]),
                true_mean_s(cfg, names[k], t),
            )
            for (k, t), m in sorted(times.mean_s.items())
        )
        budget = cfg.constraint.model_copy(update={"budget": least.budget})
        ran_cfg = cfg.model_copy(update={"constraint": budget})
        tasks = expand_bag(ran_cfg)
        ran = make_emulator(ran_cfg, len(tasks), controller=controller(ran_cfg, True)).run()
        report = build_report(ran_cfg, ran, tasks=tasks, run_id=scenario, seed=seed)
    done = Counter(s.task for s in ran.tasks.segments if s.outcome == "done")
    return Least(
        scenario,
        seed,
        least.budget,
        {n: c for n, c in least.counts.items() if c},
        len(done),
        len(tasks),
        set(done.values()) <= {1},
        report.cost,
        least.makespan_s,
        report.makespan_s,
        estimates,
    )


def table(results: Sequence[Least]) -> str:
    head = ["scenario", "seed", "least", "mix", "done", "cost", "forecast h", "actual h", "err"]
    rows = [
        [
            r.scenario,
            str(r.seed),
            f"{r.budget:.2f}",
            " ".join(f"{n}{c}" for n, c in sorted(r.counts.items())),
            f"{r.done}/{r.tasks}{'' if r.once else ' (twice)'}",
            f"{r.cost:.2f}",
            f"{r.forecast_s / 3600:.2f}",
            f"{r.makespan_s / 3600:.2f}",
            f"{r.error:.1%}",
        ]
        for r in results
    ]
    return render_table(head, rows, left=4)


def estimates(r: Least) -> str:
    return f"  {r.scenario} seed {r.seed}: " + "; ".join(
        f"{k}/{t} {m:.0f} s (n={n}, true {true:.0f})" for k, t, m, n, true in r.estimates
    )


def main(argv: Sequence[str] | None = None) -> int:
    args, names, work = scenario_args(__doc__, argv, 6, "three", 1)
    digest = library_digest()
    print(f"Library: {library_state()}")
    results: list[Least] = []
    with pooled(run_least, work, args.jobs) as done:
        for i, r in enumerate(done, start=1):
            results.append(r)
            print(f"[{i}/{len(work)}] {r.scenario} seed {r.seed}", file=sys.stderr)
    results.sort(key=lambda r: (names.index(r.scenario), r.seed))
    print(table(results) + "\n")
    print("Estimates at the first plan (per category/type: mean, runs, true mean):")
    print("\n".join(estimates(r) for r in results) + "\n")
    sound = all(r.sound for r in results)
    close = all(r.error <= FORECAST for r in results)
    worst = max(r.error for r in results)
    checks = [
        f"every run does every task once within the least budget: {'ok' if sound else 'FAILED'}",
        f"forecast makespan within {FORECAST:.0%} of the actual in every run "
        f"(worst {worst:.1%}): {'ok' if close else 'FAILED'}",
    ]
    print("\n".join(checks))
    if library_digest() != digest:
        print("WARNING: the library's sources changed during the run", file=sys.stderr)
    return 0 if sound and close else 1


if __name__ == "__main__":
    raise SystemExit(main())
