"""Loading configs: validation messages, paths, the schema file, the CLI (the bag's
expansion: test_bag.py)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from autoscaler.cli.main import app
from autoscaler.config.bag import expand_bag
from autoscaler.config.budgets import check_budget
from autoscaler.config.durations import parse_duration, seconds_in
from autoscaler.config.load import config_json_schema, config_warnings, load_config, load_trace
from autoscaler.config.schema import TraceRuntime
from autoscaler.core.errors import AutoscalerError, ConfigError
from tests.conftest import is_run_config

CONFIG_DIR = Path(__file__).resolve().parents[2] / "config"
EXAMPLES = sorted(
    p
    for p in (CONFIG_DIR / "examples").glob("*.yaml")
    if is_run_config(p)  # services, jobs: test_service_*
)

TYPES = """\
machine_types:
  - {name: small, price: 1, max_count: 10}
  - {name: fast, price: 3, max_count: 10}
"""
GOOD = "name: t\nbag: {synthetic: 5}\nconstraint: {budget: 40}\n" + TYPES


def write(tmp_path: Path, text: str, name: str = "run.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def problems(tmp_path: Path, text: str) -> list[str]:
    """The problems ``load_config`` reports for ``text``, loaded and expanded."""
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        expand_bag(load_config(path))
    return info.value.problems


# --- the examples and the schema file -------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_loads_and_expands(path: Path) -> None:
    """Every shipped example is valid and has tasks numbered from 0."""
    tasks = expand_bag(load_config(path))
    assert [t.id for t in tasks] == list(range(len(tasks)))
    assert tasks


def test_examples_cover_every_bag_kind() -> None:
    """The examples show a synthetic bag, a sweep and a file bag."""
    bags = [b for b in (load_config(p).bag for p in EXAMPLES) if b is not None]
    assert any(b.synthetic for b in bags)
    assert any(b.sweep for b in bags)
    assert any(b.file for b in bags)


BATS_SCENARIOS = [  # paper 000 §3: cluster1's price and speed, and RR's cost as budget
    ("s1_1", 3, 1, 810),
    ("s1_4", 3, 4, 384),
    ("s4_1", 12, 1, 2034),
    ("s3_4", 9, 4, 768),
    ("s4_3", 12, 3, 1062),
]


@pytest.mark.parametrize(("scenario", "price", "speed", "budget"), BATS_SCENARIOS)
def test_bats_scenario_matches_paper(
    scenario: str, price: float, speed: float, budget: float
) -> None:
    """cluster1's price and speed and the budget (RR's cost) follow paper 000 §3."""
    cfg = load_config(CONFIG_DIR / "examples" / f"bats_{scenario}.yaml")
    assert (cfg.type_named("cluster1").price, cfg.emulator.speed["cluster1"]) == (price, speed)
    assert cfg.constraint.budget == budget


@pytest.mark.parametrize("scenario", [s[0] for s in BATS_SCENARIOS])
def test_bats_scenario_workload(scenario: str) -> None:
    """Every scenario has 1000 tasks of N(15 min, 5 min²) and a $3 cluster0."""
    cfg = load_config(CONFIG_DIR / "examples" / f"bats_{scenario}.yaml")
    assert cfg.bag.synthetic == 1000
    assert cfg.type_named("cluster0").price == 3
    assert cfg.emulator.runtime.model_dump() == {
        "dist": "normal",
        "mean_s": 900.0,
        "sd_s": pytest.approx(60 * 5**0.5, abs=1e-3),
    }


def test_schema_file_is_in_sync() -> None:
    """config/schema.json is the schema of the current models."""
    on_disk = json.loads((CONFIG_DIR / "schema.json").read_text(encoding="utf-8"))
    assert on_disk == config_json_schema(), (
        "config/schema.json is stale: run `autoscaler schema --out config/schema.json`"
    )


# --- bad files ------------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    """A config file that does not exist is a ConfigError naming the file."""
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path / "nope.yaml")
    assert info.value.source.endswith("nope.yaml")
    assert "cannot read" in info.value.problems[0]


def test_malformed_yaml_gives_line(tmp_path: Path) -> None:
    """Broken YAML is reported with its line and column."""
    found = problems(tmp_path, "bag: {synthetic: 5\nconstraint: [\n")
    assert len(found) == 1
    assert "malformed YAML at line 2" in found[0]


def test_top_level_must_be_mapping(tmp_path: Path) -> None:
    """A YAML list at the top level is refused."""
    assert "must be a mapping" in problems(tmp_path, "- 1\n- 2\n")[0]


def test_empty_file(tmp_path: Path) -> None:
    """An empty file is refused, saying it is empty."""
    assert "empty file" in problems(tmp_path, "")[0]


def test_unknown_top_level_field(tmp_path: Path) -> None:
    """A typo at the top level is named."""
    assert "budjet: unknown field" in problems(tmp_path, GOOD + "budjet: 40\n")


def test_unknown_field_value_is_not_shown(tmp_path: Path) -> None:
    """The value of an unknown field (perhaps a secret) is not echoed."""
    found = problems(tmp_path, GOOD + "aws_secret: hunter2\n")
    assert found == ["aws_secret: unknown field"]


def test_env_value_is_not_shown(tmp_path: Path) -> None:
    """A bad value in bag.env (perhaps a token) is named but not echoed."""
    text = GOOD.replace("{synthetic: 5}", "{synthetic: 5, env: {API_TOKEN: 81234567}}")
    assert problems(tmp_path, text) == ["bag.env.API_TOKEN: must be a string"]


def test_unknown_nested_field(tmp_path: Path) -> None:
    """A typo inside a list item is named with its index."""
    text = GOOD.replace("max_count: 10}", "max_count: 10, colour: red}", 1)
    assert "machine_types[0].colour: unknown field" in problems(tmp_path, text)


def test_negative_price(tmp_path: Path) -> None:
    """A negative price names the field and the value."""
    text = GOOD.replace("price: 3", "price: -3")
    bad = "machine_types[1].price: must be greater than or equal to 0 (got -3)"
    assert bad in problems(tmp_path, text)


def test_zero_max_count(tmp_path: Path) -> None:
    """max_count 0 names the field and the value."""
    text = GOOD.replace("price: 1, max_count: 10", "price: 1, max_count: 0")
    assert "machine_types[0].max_count: must be greater than 0 (got 0)" in problems(tmp_path, text)


def test_zero_synthetic_tasks(tmp_path: Path) -> None:
    """synthetic: 0 names the field and the value."""
    text = GOOD.replace("synthetic: 5", "synthetic: 0")
    assert "bag.synthetic: must be greater than 0 (got 0)" in problems(tmp_path, text)


def test_empty_sweep_list(tmp_path: Path) -> None:
    """An empty sweep list leaves the bag without tasks, and says which list."""
    text = GOOD.replace("{synthetic: 5}", '{command: "x {alpha}", sweep: {alpha: []}}')
    [found] = problems(tmp_path, text)
    assert found.startswith("bag.sweep.alpha:")
    assert "bag has no tasks" in found
    assert "(got [])" in found


def test_sweep_value_of_wrong_kind(tmp_path: Path) -> None:
    """A sweep entry that is neither a list nor a range is one clear line."""
    text = GOOD.replace("{synthetic: 5}", '{command: "x {alpha}", sweep: {alpha: 3}}')
    assert problems(tmp_path, text) == [
        "bag.sweep.alpha: must be a list of values or a range {start, stop, step} (got 3)"
    ]


def test_empty_range(tmp_path: Path) -> None:
    """An empty range says why, at the sweep name."""
    text = GOOD.replace("{synthetic: 5}", '{command: "x {a}", sweep: {a: {start: 3, stop: 3}}}')
    assert problems(tmp_path, text) == ["bag.sweep.a: range(3, 3, 1) is empty"]


def test_missing_bag_file(tmp_path: Path) -> None:
    """A bag file that does not exist names the field and the path."""
    text = GOOD.replace("{synthetic: 5}", "{file: tasks.txt}")
    [found] = problems(tmp_path, text)
    assert found.startswith("bag.file:")
    assert str(tmp_path / "tasks.txt") in found


def test_budget_below_one_unit(tmp_path: Path) -> None:
    """A budget that cannot pay one unit of the cheapest type is refused with its value."""
    [found] = problems(tmp_path, GOOD.replace("budget: 40", "budget: 0.5"))
    assert "constraint.budget 0.5" in found
    assert "cheapest" in found


def test_duplicate_type_name(tmp_path: Path) -> None:
    """Two types with one name are refused, naming the name."""
    text = GOOD.replace("name: fast", "name: small")
    assert problems(tmp_path, text) == ["machine_types: machine type 'small' is given twice"]


def test_unknown_type_in_speed(tmp_path: Path) -> None:
    """emulator.speed for a type that does not exist names the field and the type."""
    [found] = problems(tmp_path, GOOD + "emulator: {speed: {huge: 2}}\n")
    assert "emulator.speed" in found
    assert "'huge'" in found


def test_bad_duration(tmp_path: Path) -> None:
    """A duration pydantic cannot read names the field (without the union tag) and value."""
    text = GOOD + "emulator: {runtime: {dist: normal, mean_s: 15 minutes, sd_s: 1m}}\n"
    [found] = problems(tmp_path, text)
    assert found.startswith("emulator.runtime.mean_s: '15 minutes' is not a duration")


def test_unknown_runtime_distribution(tmp_path: Path) -> None:
    """An unknown ``dist`` lists the known ones."""
    [found] = problems(tmp_path, GOOD + "emulator: {runtime: {dist: gamma}}\n")
    assert found.startswith("emulator.runtime: unknown dist 'gamma'")
    assert "'normal'" in found


def test_two_bag_sources(tmp_path: Path) -> None:
    """A bag with both a command and a synthetic count says which were given."""
    text = GOOD.replace("{synthetic: 5}", "{synthetic: 5, command: echo}")
    assert problems(tmp_path, text) == [
        "bag: give exactly one of command, file or synthetic (got command, synthetic)"
    ]


def test_a_constraint_needs_a_budget_or_a_deadline(tmp_path: Path) -> None:
    """A constraint with neither a budget nor a deadline is an error at constraint."""
    [found] = problems(tmp_path, GOOD.replace("{budget: 40}", "{on_shortfall: stop}"))
    assert found.startswith("constraint: give a budget, a deadline_s, or both")


def test_missing_required_field(tmp_path: Path) -> None:
    """A missing section is named."""
    assert "constraint: missing (required)" in problems(tmp_path, "bag: {synthetic: 5}\n" + TYPES)


def test_boolean_key_is_explained(tmp_path: Path) -> None:
    """``on:`` is read by YAML as true; the error says to quote it."""
    [found] = problems(tmp_path, GOOD + "on: 1\n")
    assert "True is not a string" in found
    assert "quote" in found


# --- durations and paths --------------------------------------------------------------


@pytest.mark.parametrize(("given", "seconds"), [("15m", 900.0), ("1h", 3600.0), ("90", 90.0)])
def test_duration_strings(tmp_path: Path, given: str, seconds: float) -> None:
    """Durations with a unit are read as seconds."""
    cfg = load_config(write(tmp_path, GOOD + f"monitoring_interval_s: {given}\n"))
    assert cfg.monitoring_interval_s == seconds


def test_bag_file_is_relative_to_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bag.file is found next to the config, whatever the working directory."""
    (tmp_path / "conf").mkdir()
    write(tmp_path / "conf", "echo a\n", "tasks.txt")
    path = write(tmp_path / "conf", GOOD.replace("{synthetic: 5}", "{file: tasks.txt}"))
    monkeypatch.chdir(tmp_path)
    cfg = load_config(Path("conf") / path.name)
    assert cfg.bag.file == (tmp_path / "conf" / "tasks.txt")


def test_trace_file_is_relative_to_config(tmp_path: Path) -> None:
    """emulator.runtime.file is resolved next to the config."""
    write(tmp_path, "60\n", "trace.txt")
    cfg = load_config(
        write(tmp_path, GOOD + "emulator: {runtime: {dist: trace, file: trace.txt}}\n")
    )
    runtime = cfg.emulator.runtime
    assert isinstance(runtime, TraceRuntime)
    assert runtime.file == tmp_path / "trace.txt"


def test_missing_trace_file(tmp_path: Path) -> None:
    """A trace file that does not exist names the field and the path."""
    [found] = problems(tmp_path, GOOD + "emulator: {runtime: {dist: trace, file: t.txt}}\n")
    assert found == f"emulator.runtime.file: no such file: {tmp_path / 't.txt'}"


def test_bad_trace_line_in_config(tmp_path: Path) -> None:
    """A bad runtime in a config's trace names the field, the file and the line."""
    write(tmp_path, "60\nfast\n", "t.txt")
    [found] = problems(tmp_path, GOOD + "emulator: {runtime: {dist: trace, file: t.txt}}\n")
    assert found.startswith("emulator.runtime.file:")
    assert "t.txt" in found
    assert "line 2" in found


# --- traces ---------------------------------------------------------------------------


def test_trace_skips_blanks_and_comments(tmp_path: Path) -> None:
    """A trace is one float per line; blank and ``#`` lines are skipped."""
    path = write(tmp_path, "# seconds\n60\n\n  90.5\n# end\n", "t.txt")
    assert load_trace(path) == [60.0, 90.5]


def test_trace_non_positive_value(tmp_path: Path) -> None:
    """A zero runtime is refused with its line number and the file."""
    path = write(tmp_path, "60\n0\n", "t.txt")
    with pytest.raises(ConfigError) as info:
        load_trace(path)
    assert info.value.source == str(path)
    assert info.value.problems == ["line 2: a runtime must be a positive number (got 0)"]


def test_trace_not_a_number(tmp_path: Path) -> None:
    """A word in a trace is refused with its line number."""
    with pytest.raises(ConfigError) as info:
        load_trace(write(tmp_path, "sixty\n", "t.txt"))
    assert info.value.problems == ["line 1: not a number (got 'sixty')"]


def test_empty_trace(tmp_path: Path) -> None:
    """A trace with only comments is an error."""
    with pytest.raises(ConfigError, match="no runtimes"):
        load_trace(write(tmp_path, "# nothing\n\n", "t.txt"))


# --- the command line -----------------------------------------------------------------


def test_cli_validate_good(tmp_path: Path) -> None:
    """validate on a good file exits 0 and sums it up."""
    result = CliRunner().invoke(app, ["validate", str(write(tmp_path, GOOD))])
    assert result.exit_code == 0, result.output
    assert "t: 5 tasks" in result.stdout
    assert "small (1/ATU, max 10)" in result.stdout


def test_cli_validate_bad_exits_2(tmp_path: Path) -> None:
    """validate on a bad file exits 2 and lists the problem on stderr."""
    path = write(tmp_path, GOOD.replace("price: 3", "price: -3"))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert f"error: {path}" in result.stderr
    assert "machine_types[1].price: must be greater than or equal to 0 (got -3)" in result.stderr


def test_cli_validate_bad_bag_exits_2(tmp_path: Path) -> None:
    """An error found while expanding the bag also exits 2, naming the config."""
    path = write(tmp_path, GOOD.replace("{synthetic: 5}", '{command: "r {a}", sweep: {a: []}}'))
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert f"error: {path}" in result.stderr
    assert "bag.sweep.a" in result.stderr


def test_cli_error_has_no_traceback(tmp_path: Path) -> None:
    """The installed script reports a bad file without a traceback."""
    script = Path(sys.executable).parent / "autoscaler"
    path = write(tmp_path, GOOD + "budjet: 1\n")
    done = subprocess.run(
        [str(script), "validate", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 2
    assert "budjet: unknown field" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout


def test_cli_schema_out(tmp_path: Path) -> None:
    """schema --out writes the same schema as config/schema.json."""
    out = tmp_path / "schema.json"
    result = CliRunner().invoke(app, ["schema", "--out", str(out)])
    assert result.exit_code == 0
    assert out.read_text(encoding="utf-8") == (CONFIG_DIR / "schema.json").read_text(
        encoding="utf-8"
    )


def test_cli_validate_warns_of_types_missing_from_emulator_speed(tmp_path: Path) -> None:
    """A type left out of emulator.speed runs at speed 1 in a dry run: validate says so,
    naming the types, and still exits 0 (the config is valid)."""
    path = write(tmp_path, GOOD + "emulator: {speed: {small: 1}}\n")
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert "warning: emulator.speed gives no speed for machine type fast" in result.stderr
    assert "small" not in result.stderr
    assert "t: 5 tasks" in result.stdout


def test_cli_validate_is_quiet_when_every_type_has_a_speed(tmp_path: Path) -> None:
    """No warning when emulator.speed covers every type, or there is one type only."""
    both = write(tmp_path, GOOD + "emulator: {speed: {small: 1, fast: 3}}\n", "both.yaml")
    one = write(
        tmp_path,
        "bag: {synthetic: 5}\nconstraint: {budget: 40}\n"
        "machine_types: [{name: small, price: 1, max_count: 2}]\n",
        "one.yaml",
    )
    for path in (both, one):
        result = CliRunner().invoke(app, ["validate", str(path)])
        assert result.exit_code == 0, result.output
        assert "warning" not in result.stderr


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_give_no_warnings(path: Path) -> None:
    """The shipped examples are what we recommend: nothing to warn about."""
    assert config_warnings(load_config(path)) == []


def test_cli_validate_names_a_misspelt_sge_type(tmp_path: Path) -> None:
    """A typo among sge.types' keys is an error naming the key as written (exit 2)."""
    data = yaml.safe_load((CONFIG_DIR / "examples" / "sge.yaml").read_text(encoding="utf-8"))
    data["sge"]["types"]["lage"] = data["sge"]["types"].pop("large")
    path = _write(tmp_path, data)
    result = CliRunner().invoke(app, ["validate", str(path)])
    assert result.exit_code == 2
    assert "sge.types names unknown machine type 'lage'" in result.stderr
    assert "Traceback" not in result.output


# --- real providers' sections --------------------------------------------------------------


def _ec2_data(tmp_path: Path, **ec2: object) -> dict[str, object]:
    key = tmp_path / "id_test"
    key.write_text("not a real key")
    section: dict[str, object] = {
        "region": "us-east-1",
        "ami": "ami-0123abcd",
        "types": {"slow": {"instance_type": "t3.micro"}, "fast": {"instance_type": "c5.large"}},
        "ssh": {"key_file": "id_test"},
    }
    section.update(ec2)
    return {
        "bag": {"synthetic": 10},
        "constraint": {"budget": 10},
        "machine_types": [
            {"name": "slow", "price": 1, "max_count": 2},
            {"name": "fast", "price": 2, "max_count": 2},
        ],
        "provider": "ec2",
        "ec2": section,
    }


def _write(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_ec2_config_resolves_the_key_file_next_to_the_config(tmp_path: Path) -> None:
    cfg = load_config(_write(tmp_path, _ec2_data(tmp_path)))
    assert cfg.ec2 is not None
    assert cfg.ec2.ssh is not None
    assert cfg.ec2.ssh.key_file == tmp_path / "id_test"


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"types": {"slow": {"instance_type": "t3.micro"}}}, "no entry for machine type 'fast'"),
        ({"ami": "ubuntu"}, "ec2.ami"),
        ({"ssh": None}, "give ec2.ssh"),
        ({"bootstrap": "user-data", "ssh": None}, "give ec2.controller_url"),
        (
            {"types": {"slow": {"instance_type": "t3.micro"}, "fast": {"instance_type": "big"}}},
            "ec2.types.fast.instance_type",
        ),
    ],
)
def test_bad_ec2_sections_are_named(
    tmp_path: Path, change: dict[str, object], expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, _ec2_data(tmp_path, **change)))
    assert expected in str(info.value)


def test_a_real_provider_needs_its_section(tmp_path: Path) -> None:
    data = _ec2_data(tmp_path)
    data["provider"] = "sge"
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, data))
    assert "provider is sge: give the sge section" in str(info.value)


def test_missing_prices_come_from_the_lookup_scaled_to_the_atu(tmp_path: Path) -> None:
    data = _ec2_data(tmp_path, lookup_prices=True)
    data["billing"] = {"atu_s": "30m"}
    del data["machine_types"][0]["price"]  # type: ignore[index]
    asked: list[tuple[list[str], str]] = []

    def prices(types: object, region: str, endpoint: object) -> dict[str, float]:
        asked.append((list(types), region))  # type: ignore[call-overload]
        return {"t3.micro": 0.0104}

    cfg = load_config(_write(tmp_path, data), prices=prices)
    assert asked == [(["t3.micro"], "us-east-1")]
    assert cfg.type_named("slow").price == pytest.approx(0.0052)
    assert cfg.type_named("fast").price == 2  # given: never looked up


def test_a_price_the_lookup_lacks_is_named(tmp_path: Path) -> None:
    data = _ec2_data(tmp_path, lookup_prices=True)
    del data["machine_types"][1]["price"]  # type: ignore[index]
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, data), prices=lambda types, region, endpoint: {})
    assert "machine_types[1].price: not given" in str(info.value)
    assert "c5.large" in str(info.value)


# --- compact sampling and the emulator's affine types -------------------------------------


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        ("sampling: {mode: fancy}", "sampling.mode:"),
        ("sampling: {mode: compact, replicated: 2}", "sampling.replicated: must be greater than"),
        ("sampling: {mode: compact, replicated: 40}", "sampling.replicated: must be at most the"),
        ("emulator: {affine: {huge: {a: 2}}}", "names unknown machine type 'huge'"),
        ("emulator: {affine: {fast: {a: 0}}}", "emulator.affine.fast.a: must be greater than 0"),
        ("emulator: {affine: {fast: {noise: 1.5}}}", "emulator.affine.fast.noise: must be less"),
        ("emulator: {affine: {fast: {slope: 2}}}", "emulator.affine.fast.slope: unknown field"),
    ],
)
def test_bad_compact_sampling_or_affine_setting_names_the_field(
    tmp_path: Path, extra: str, expected: str
) -> None:
    """A bad compact-sampling setting or emulator relation is refused, naming the field."""
    found = problems(tmp_path, GOOD + extra + "\n")
    assert any(expected in p for p in found), found


def test_compact_sampling_setting_loads(tmp_path: Path) -> None:
    """compact with its number of replicated tasks loads; the default is plain."""
    cfg = load_config(write(tmp_path, GOOD + "sampling: {mode: compact, replicated: 5}\n"))
    assert (cfg.sampling.mode, cfg.sampling.replicated) == ("compact", 5)
    assert load_config(write(tmp_path, GOOD)).sampling.mode == "plain"


# --- durations and budgets: one parser, one check ----------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 90.0),
        ("90s", 90.0),
        ("15m", 900.0),
        ("15min", 900.0),
        (" 2h ", 7200.0),
        ("1.5h", 5400.0),
        ("1d", 86400.0),
        (".5m", 30.0),
    ],
)
def test_a_duration_is_seconds_or_a_number_with_a_unit(text: str, seconds: float) -> None:
    assert seconds_in(text) == seconds
    assert parse_duration(text, field="bag.timeout_s") == seconds


@pytest.mark.parametrize("text", ["", "soon", "15 minutes", "-5m", "2w", "1h30m", "m"])
def test_a_bad_duration_is_refused_naming_the_field_and_the_text(text: str) -> None:
    assert seconds_in(text) is None
    with pytest.raises(ConfigError) as refused:
        parse_duration(text, field="--deadline")
    assert refused.value.source == "--deadline"
    assert refused.value.problems == [
        f"{text!r} is not a duration: use seconds or a number with s, m, h or d"
    ]


def test_every_duration_field_reads_the_same_units(tmp_path: Path) -> None:
    """The config's duration fields and the command line's share one parser."""
    cfg = load_config(
        write(
            tmp_path,
            GOOD.replace("{synthetic: 5}", "{synthetic: 5, timeout_s: 15min}")
            + "billing: {atu_s: 1h}\nmonitoring_interval_s: 1.5m\n",
        )
    )
    assert cfg.bag is not None
    assert cfg.bag.timeout_s == seconds_in("15min") == 900
    assert cfg.billing.atu_s == seconds_in("1h") == 3600
    assert cfg.monitoring_interval_s == seconds_in("1.5m") == 90


@pytest.mark.parametrize(
    ("budget", "committed", "message"),
    [
        (0.0, 0.0, "budget: must be positive (got 0)"),
        (-5.0, 0.0, "budget: must be positive (got -5)"),
        (math.inf, 0.0, "budget: must be a finite number (got inf)"),
        (math.nan, 0.0, "budget: must be a finite number (got nan)"),
        (5.0, 7.5, "budget 5.00 is below the 7.50 job j1 has committed already"),
    ],
)
def test_a_budget_is_positive_finite_and_not_below_what_is_committed(
    budget: float, committed: float, message: str
) -> None:
    with pytest.raises(AutoscalerError) as refused:
        check_budget(budget, committed=committed, holder="job j1")
    assert refused.value.message == message


def test_a_budget_equal_to_what_is_committed_may_be_set() -> None:
    assert check_budget(7.5, committed=7.5) == 7.5
    assert check_budget(0.01) == 0.01


@pytest.mark.parametrize("budget", [".inf", ".nan"])
def test_a_config_budget_must_be_finite(tmp_path: Path, budget: str) -> None:
    """Before: `budget: .inf` was taken."""
    text = GOOD.replace("{budget: 40}", f"{{budget: {budget}}}")
    found = problems(tmp_path, text)
    assert len(found) == 1
    assert found[0].startswith("constraint.budget: must be")


def test_a_job_s_budget_must_be_finite(tmp_path: Path) -> None:
    text = (
        "jobs:\n  - {name: a, bag: {synthetic: 2}, constraint: {deadline_s: 1h, budget: .inf}}\n"
        + TYPES
    )
    assert problems(tmp_path, text) == [
        "jobs[0].constraint.budget: must be a finite number (got inf)"
    ]


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("nan", "--budget: must be a finite number (got nan)"),
        ("inf", "--budget: must be a finite number (got inf)"),
        ("-1", "--budget: must be positive (got -1)"),
    ],
)
def test_run_refuses_a_budget_that_is_not_a_positive_amount(
    tmp_path: Path, given: str, message: str
) -> None:
    """Before: `run --budget nan` (or inf) was taken, and the dry run ended in a traceback."""
    script = Path(sys.executable).parent / "autoscaler"
    done = subprocess.run(
        [
            str(script),
            "run",
            str(write(tmp_path, GOOD)),
            "--dry-run",
            "--budget",
            given,
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"error: {message}" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    assert not (tmp_path / "out").exists()
