"""Deadline mode's config: a deadline on a constraint, jobs, their tasks and their means."""

from __future__ import annotations

import random
import textwrap
from pathlib import Path

import pytest
import yaml

from autoscaler.config.bag import expand_bag, expand_jobs, task_means
from autoscaler.config.load import load_config
from autoscaler.config.schema import Emulator, RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError, ConfigError
from autoscaler.providers.base import Capabilities
from autoscaler.providers.sim import SimProvider, draw_runtimes, runtime_mean, type_runtime

TYPES = """\
machine_types:
  - {name: small, price: 1, max_count: 10}
  - {name: fast, price: 3, max_count: 10}
"""
JOBS = """\
jobs:
  - {name: a, bag: {synthetic: 3}, constraint: {budget: 10, deadline_s: 20m},
     task_s: {small: 60, fast: 20}}
  - {name: b, at: 5m, bag: {command: "echo {x}", sweep: {x: [1, 2]}, env: {K: v}, timeout_s: 9},
     constraint: {budget: 5, deadline_s: 10m}}
"""


def load(tmp_path: Path, text: str) -> RunConfig:
    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return load_config(path)


def problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        expand_bag(load(tmp_path, text))
    return info.value.problems


# --- a deadline on one bag ------------------------------------------------------------


@pytest.mark.parametrize("constraint", ["{deadline_s: 1h}", "{budget: 40, deadline_s: 1h}"])
def test_a_bag_with_a_deadline_is_one_job(tmp_path: Path, constraint: str) -> None:
    """A bag with a deadline (and maybe a budget) is deadline mode with one job at 0."""
    cfg = load(tmp_path, f"name: r\nbag: {{synthetic: 4}}\nconstraint: {constraint}\n" + TYPES)
    assert cfg.deadline_mode
    [job] = cfg.deadline_jobs()
    assert (job.name, job.at, job.task_s, job.constraint) == ("r", 0.0, {}, cfg.constraint)
    assert [(j.name, ids) for j, ids in expand_jobs(cfg)] == [("r", range(4))]
    assert task_means(cfg, 4) == [None] * 4


def test_a_budget_bag_is_budget_mode(tmp_path: Path) -> None:
    cfg = load(tmp_path, "bag: {synthetic: 4, max_retries: 5}\nconstraint: {budget: 40}\n" + TYPES)
    assert not cfg.deadline_mode
    assert cfg.deadline_jobs() == []
    assert expand_jobs(cfg) == []
    assert cfg.max_retries == 5
    assert cfg.bag is not None


# --- jobs -----------------------------------------------------------------------------


def test_jobs_form_summarises_the_constraint(tmp_path: Path) -> None:
    """The summary: budgets summed, the last deadline from the start; no bag."""
    cfg = load(tmp_path, JOBS + TYPES)
    assert cfg.bag is None
    assert cfg.deadline_mode
    assert cfg.constraint.budget == 15
    assert cfg.constraint.deadline_s == max(0 + 1200, 300 + 600)
    assert [j.name for j in cfg.deadline_jobs()] == ["a", "b"]


def test_jobs_form_survives_a_dump(tmp_path: Path) -> None:
    """A run directory's config.yaml (the dump) validates back to the same config."""
    cfg = load(tmp_path, JOBS + TYPES)
    dumped = cfg.model_dump(mode="json")
    assert "constraint" not in dumped
    assert RunConfig.model_validate(dumped) == cfg


def test_jobs_tasks_are_concatenated_in_job_order(tmp_path: Path) -> None:
    cfg = load(tmp_path, JOBS + TYPES)
    tasks = expand_bag(cfg)
    assert [t.id for t in tasks] == list(range(5))
    assert [t.command for t in tasks] == [None, None, None, "echo 1", "echo 2"]
    assert [dict(t.env) for t in tasks] == [{}] * 3 + [{"K": "v"}] * 2
    assert [t.timeout_s for t in tasks] == [None] * 3 + [9.0] * 2
    assert [(j.name, ids) for j, ids in expand_jobs(cfg)] == [("a", range(3)), ("b", range(3, 5))]
    assert cfg.max_retries == 2


def test_a_job_file_is_relative_to_the_config(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "cmds.txt").write_text("echo x\n# no\n\necho y\n", encoding="utf-8")
    text = JOBS.replace("{synthetic: 3}", "{file: sub/cmds.txt}")
    cfg = load(tmp_path, text + TYPES)
    assert [t.command for t in expand_bag(cfg)] == ["echo x", "echo y", "echo 1", "echo 2"]
    assert [ids for _, ids in expand_jobs(cfg)] == [range(2), range(2, 4)]


def test_a_missing_job_file_names_the_job(tmp_path: Path) -> None:
    text = JOBS.replace("{synthetic: 3}", "{file: nope.txt}")
    [found] = problems(tmp_path, text + TYPES)
    assert found.startswith("jobs[0].bag.file: no such file")


def test_a_job_sweep_error_names_the_job(tmp_path: Path) -> None:
    found = problems(tmp_path, JOBS.replace("echo {x}", "echo {y}") + TYPES)
    assert found == [
        "jobs[1].bag.command: placeholder {y} is not in jobs[1].bag.sweep",
        "jobs[1].bag.sweep.x: not used in jobs[1].bag.command",
    ]


def test_task_means_follow_the_jobs(tmp_path: Path) -> None:
    """Job a's tasks carry its task_s, overridden per type by emulator_task_s; b has none."""
    text = JOBS.replace(
        "task_s: {small: 60, fast: 20}",
        "task_s: {small: 60, fast: 20}, emulator_task_s: {fast: 25}",
    )
    means = task_means(load(tmp_path, text + TYPES), 5)
    assert [m and dict(m.by_type) for m in means] == [{"small": 60, "fast": 25}] * 3 + [None] * 2
    assert {m.job for m in means if m} == {"a"}


# --- bad configs ----------------------------------------------------------------------

BAD = [
    (JOBS + "bag: {synthetic: 2}\n", "give either bag and constraint, or jobs, not both"),
    (JOBS + "constraint: {budget: 4}\n", "give either bag and constraint, or jobs, not both"),
    ("name: x\n", "give a bag and its constraint"),
    ("jobs: []\n", "give a bag and its constraint"),
    ("bag: {synthetic: 2}\n", "constraint: missing (required)"),
    (JOBS.replace("name: b", "name: a"), "jobs[1].name: job 'a' is given twice"),
    (JOBS.replace("budget: 5, deadline_s: 10m", "budget: 5"), "jobs[1].constraint.deadline_s"),
    (JOBS.replace("small: 60", "tiny: 60"), "jobs[0].task_s names unknown machine type 'tiny'"),
    (
        JOBS.replace("timeout_s: 9}", "timeout_s: 9}, emulator_task_s: {small: 3}"),
        "jobs[1].emulator_task_s gives no mean for machine type fast",
    ),
    (
        JOBS.replace("timeout_s: 9}", "timeout_s: 9}, emulator_task_s: {big: 3}"),
        "jobs[1].emulator_task_s names unknown machine type 'big'",
    ),
    (JOBS.replace("budget: 5,", "budget: 0.5,"), "jobs[1].constraint.budget 0.5 is below one unit"),
    (JOBS.replace("at: 5m", "at: -1"), "jobs[1].at"),
    (JOBS.replace("name: b", "name: 'b c'"), "jobs[1].name: must match the pattern"),
]


@pytest.mark.parametrize(("text", "expected"), BAD)
def test_bad_jobs_configs_name_the_field(tmp_path: Path, text: str, expected: str) -> None:
    found = problems(tmp_path, text + TYPES)
    assert any(expected in p for p in found), found


def test_a_budget_only_job_says_how_to_run_it(tmp_path: Path) -> None:
    [found] = problems(tmp_path, JOBS.replace("budget: 5, deadline_s: 10m", "budget: 5") + TYPES)
    assert "single bag and constraint" in found


def test_a_job_env_value_is_never_shown(tmp_path: Path) -> None:
    [found] = problems(tmp_path, JOBS.replace("{K: v}", "{K: [secret]}") + TYPES)
    assert found.startswith("jobs[1].bag.env.K")
    assert "secret" not in found


# --- emulated runtimes ----------------------------------------------------------------


def sim(cfg: RunConfig, n: int, means: bool) -> SimProvider:
    caps = Capabilities(
        billing=BillingModel("fixed", 3600.0),
        max_counts={t.name: t.max_count for t in cfg.machine_types},
    )
    return SimProvider(
        caps,
        cfg.emulator,
        n,
        clock=lambda: 0.0,
        task_means=task_means(cfg, n) if means else None,
    )


NOISY = "emulator: {runtime: {dist: uniform, low_s: 90, high_s: 110}, speed: {fast: 3}}\n"


def test_a_job_with_means_runs_its_mean_times_the_noise(tmp_path: Path) -> None:
    cfg = load(tmp_path, JOBS + TYPES + NOISY)
    provider = sim(cfg, 5, means=True)
    for type_name, mean in (("small", 60.0), ("fast", 20.0)):
        [machine] = [m.id for m in provider.launch(type_name, 1, f"t-{type_name}", {})]
        for task in range(3):  # job a: its mean on the type, ±10 %
            drawn = provider.runtimes[task]
            assert provider.run_time(task, machine) == pytest.approx(mean * drawn / 100.0)
        for task in (3, 4):  # job b gives no means: drawn runtime over the speed
            speed = cfg.emulator.speed.get(type_name, 1.0)
            assert provider.run_time(task, machine) == pytest.approx(
                provider.runtimes[task] / speed
            )


def test_a_budget_run_is_unchanged(tmp_path: Path) -> None:
    cfg = load(tmp_path, "bag: {synthetic: 6}\nconstraint: {budget: 40}\n" + TYPES + NOISY)
    plain, with_means = sim(cfg, 6, means=False), sim(cfg, 6, means=True)
    assert plain.runtimes == with_means.runtimes
    [m] = [r.id for r in with_means.launch("fast", 1, "t", {})]
    assert [with_means.run_time(t, m) for t in range(6)] == [r / 3 for r in plain.runtimes]


def test_a_job_on_a_type_without_a_mean_is_an_error(tmp_path: Path) -> None:
    text = JOBS.replace("task_s: {small: 60, fast: 20}", "task_s: {small: 60}")
    cfg = load(tmp_path, text + TYPES)
    [means, *_] = task_means(cfg, 5)
    with pytest.raises(AutoscalerError, match=r"job 'a' .* machine type 'fast'"):
        type_runtime(cfg.emulator, 100.0, 0, "fast", means)


@pytest.mark.parametrize(
    ("runtime", "mean"),
    [
        ({"dist": "uniform", "low_s": 90, "high_s": 110}, 100.0),
        ({"dist": "constant", "value_s": 7}, 7.0),
        ({"dist": "bimodal", "short_s": 60, "long_s": 1200, "long_share": 0.1}, 174.0),
        ({"dist": "lognormal", "mean_s": 50, "sd_s": 5}, 50.0),
        ({"dist": "weibull", "mean_s": 600, "shape": 0.7}, 600.0),
    ],
)
def test_runtime_mean_is_the_distributions(runtime: dict[str, object], mean: float) -> None:
    model = Emulator.model_validate({"runtime": runtime})
    assert runtime_mean(model) == pytest.approx(mean)
    drawn = draw_runtimes(model, 20_000, random.Random(0))
    assert sum(drawn) / len(drawn) == pytest.approx(mean, rel=0.05)


def test_runtime_mean_of_a_trace(tmp_path: Path) -> None:
    (tmp_path / "t.txt").write_text("10\n20\n# x\n60\n", encoding="utf-8")
    model = Emulator.model_validate({"runtime": {"dist": "trace", "file": tmp_path / "t.txt"}})
    assert runtime_mean(model) == pytest.approx(30.0)


def test_budgets_are_given_to_every_job_or_to_none() -> None:
    """Jobs share machines, so their budgets are held as one (their sum): a job without
    one among jobs with budgets would be unbounded; the error names it."""
    example = Path(__file__).parents[2] / "config" / "examples" / "deadline.yaml"
    data = yaml.safe_load(example.read_text())
    data["jobs"][0]["constraint"]["budget"] = 5
    with pytest.raises(ValueError, match=r"jobs\[1\]\.constraint\.budget: missing"):
        RunConfig.model_validate(data)
    for job in data["jobs"]:
        job["constraint"]["budget"] = 2
    assert RunConfig.model_validate(data).constraint.budget == pytest.approx(12)
