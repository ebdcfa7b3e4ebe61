"""The emulator's skewed runtime distributions: their means, their draws, their errors."""

from __future__ import annotations

import math
import random
import statistics
from pathlib import Path
from typing import Any

import pytest

from autoscaler.config.load import load_config
from autoscaler.config.schema import Emulator
from autoscaler.core.errors import ConfigError
from autoscaler.providers.sim import draw_runtimes

DRAWS = 20_000
Z = 4.5
"""How many standard errors a sample mean may stray: a false alarm about once in 150,000
draws of the sample (the draws are seeded, so a passing test stays passing)."""


def mean_and_sd(runtime: dict[str, Any]) -> tuple[float, float]:
    """The distribution's mean and standard deviation, from the textbook formulas."""
    match runtime["dist"]:
        case "bimodal":
            short, long, p = runtime["short_s"], runtime["long_s"], runtime["long_share"]
            share = runtime.get("sd_share", 0.1)
            mean = (1 - p) * short + p * long
            var = (1 - p) * (share * short) ** 2 + p * (share * long) ** 2
            var += p * (1 - p) * (long - short) ** 2
            return mean, math.sqrt(var)
        case "pareto":
            mean, a = runtime["mean_s"], runtime["alpha"]
            x_m = mean * (a - 1) / a
            assert a > 2, "the test needs a finite variance"
            return mean, x_m / (a - 1) * math.sqrt(a / (a - 2))
        case "weibull":
            mean, k = runtime["mean_s"], runtime["shape"]
            scale = mean / math.gamma(1 + 1 / k)
            return mean, scale * math.sqrt(math.gamma(1 + 2 / k) - math.gamma(1 + 1 / k) ** 2)
    raise AssertionError(runtime)


def draw(runtime: dict[str, Any], n: int = DRAWS, seed: int = 0) -> list[float]:
    return draw_runtimes(Emulator.model_validate({"runtime": runtime}), n, random.Random(seed))


SKEWED = [
    {"dist": "bimodal", "short_s": 60, "long_s": 1200, "long_share": 0.1},
    {"dist": "bimodal", "short_s": "5m", "long_s": "1h", "long_share": 0.3, "sd_share": 0.5},
    {"dist": "pareto", "mean_s": 600, "alpha": 2.5},
    {"dist": "pareto", "mean_s": "15m", "alpha": 4},
    {"dist": "weibull", "mean_s": 600, "shape": 0.7},
    {"dist": "weibull", "mean_s": "15m", "shape": 2},
]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("runtime", SKEWED, ids=lambda r: f"{r['dist']}-{sorted(r.items())}")
def test_the_sample_mean_is_the_configured_mean(runtime: dict[str, Any], seed: int) -> None:
    """Over many draws the mean is the configured one, within Z standard errors."""
    mean, sd = mean_and_sd(Emulator.model_validate({"runtime": runtime}).runtime.model_dump())
    values = draw(runtime, seed=seed)
    tolerance = Z * sd / math.sqrt(DRAWS)
    assert abs(statistics.fmean(values) - mean) < tolerance, (statistics.fmean(values), mean)


def test_bimodal_has_its_share_of_long_tasks() -> None:
    """Tasks are long with probability long_share (a binomial count, within Z sd)."""
    p = 0.2
    values = draw({"dist": "bimodal", "short_s": 60, "long_s": 600, "long_share": p})
    long = sum(v > 330 for v in values)  # the modes are 10 sd apart: none is misread
    assert abs(long - p * DRAWS) < Z * math.sqrt(DRAWS * p * (1 - p))


def test_pareto_never_goes_below_its_scale() -> None:
    """The shortest runtime is x_m = mean (alpha - 1) / alpha, and some come close to it."""
    values = draw({"dist": "pareto", "mean_s": 600, "alpha": 2.5})
    assert min(values) >= 360.0
    assert min(values) < 361.0


def test_weibull_below_shape_1_has_a_long_tail() -> None:
    """At k = 0.7 the median is well below the mean (about 0.72 of it): a skew the
    normal and the hump of k = 2 do not have."""
    skewed = draw({"dist": "weibull", "mean_s": 600, "shape": 0.7})
    humped = draw({"dist": "weibull", "mean_s": 600, "shape": 2})
    assert statistics.median(skewed) < 0.8 * 600
    assert statistics.median(humped) > 0.9 * 600


@pytest.mark.parametrize("runtime", SKEWED, ids=lambda r: r["dist"])
def test_draws_repeat_with_the_seed(runtime: dict[str, Any]) -> None:
    assert draw(runtime, 100, seed=5) == draw(runtime, 100, seed=5)
    assert draw(runtime, 100, seed=5) != draw(runtime, 100, seed=6)


# --- bad values -----------------------------------------------------------------------


def problems(tmp_path: Path, runtime: str) -> list[str]:
    path = tmp_path / "run.yaml"
    path.write_text(
        "bag: {synthetic: 5}\nconstraint: {budget: 40}\n"
        "machine_types: [{name: a, price: 1, max_count: 2}]\n"
        f"emulator: {{runtime: {runtime}}}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError) as info:
        load_config(path)
    return info.value.problems


@pytest.mark.parametrize(
    ("runtime", "expected"),
    [
        (
            "{dist: pareto, mean_s: 600, alpha: 1}",
            "emulator.runtime.alpha: alpha must be > 1: at alpha <= 1 a Pareto's mean is "
            "infinite (got 1)",
        ),
        ("{dist: pareto, mean_s: 600, alpha: 0.5}", "emulator.runtime.alpha: alpha must be > 1"),
        ("{dist: pareto, mean_s: 600, alpha: .inf}", "emulator.runtime.alpha: must be a finite"),
        ("{dist: pareto, mean_s: 600}", "emulator.runtime.alpha: missing (required)"),
        ("{dist: pareto, mean_s: 0, alpha: 2}", "emulator.runtime.mean_s: must be greater than 0"),
        ("{dist: weibull, mean_s: 600, shape: 0}", "emulator.runtime.shape: must be greater"),
        ("{dist: weibull, mean_s: 600, shape: 0.001}", "emulator.runtime.shape: shape is too"),
        (
            "{dist: bimodal, short_s: 600, long_s: 60, long_share: 0.2}",
            "emulator.runtime: long_s (60) must exceed short_s (600)",
        ),
        (
            "{dist: bimodal, short_s: 60, long_s: 600, long_share: 1}",
            "emulator.runtime.long_share: must be less than 1",
        ),
        (
            "{dist: bimodal, short_s: 60, long_s: 600, long_share: 0}",
            "emulator.runtime.long_share: must be greater than 0",
        ),
        (
            "{dist: bimodal, short_s: 60, long_s: 600, long_share: 0.1, sd_share: -0.1}",
            "emulator.runtime.sd_share: must be greater than or equal to 0",
        ),
        (
            "{dist: bimodal, short_s: 60, long_s: 600, long_share: 0.1, sd_share: 0.7}",
            "emulator.runtime.sd_share: must be less than or equal to 0.5",
        ),
    ],
)
def test_bad_values_name_the_field(tmp_path: Path, runtime: str, expected: str) -> None:
    found = problems(tmp_path, runtime)
    assert len(found) == 1, found
    assert found[0].startswith(expected), found
