"""Several providers in one run: the config's ``providers:`` section, each provider's
one-provider view, the limits the planners take, and a dry run's report per provider."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autoscaler.budget.planner import plan_budget
from autoscaler.budget.problem import BudgetProblem, TypeEstimate
from autoscaler.cli.main import EXIT_STOPPED
from autoscaler.config.bag import expand_bag
from autoscaler.config.load import load_config
from autoscaler.config.schema import RunConfig
from autoscaler.core.billing import BillingModel
from autoscaler.core.errors import AutoscalerError
from autoscaler.core.limits import Room, apportion, new_caps
from autoscaler.core.model import ProviderLimit, TypeSpec
from autoscaler.core.state import RunState
from autoscaler.run.start import dry_run

TWO = """\
name: two
bag: {synthetic: 300}
constraint: {budget: 100}
emulator: {seed: 1, runtime: {dist: normal, mean_s: 10m, sd_s: 2m}, speed: {node: 1, c5: 2}}
providers:
  campus: {kind: sim, max_machines: 4, machine_hours: 6}
  east: {kind: sim}
machine_types:
  - {name: node, provider: campus, price: 0.5, max_count: 20}
  - {name: c5, provider: east, price: 3, max_count: 10}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def check(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    """``autoscaler validate FILE`` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "autoscaler", "validate", str(write(tmp_path, text))],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_two_provider_config_loads_with_each_types_provider(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, TWO))
    assert cfg.provider_names() == ["campus", "east"]
    assert [cfg.provider_of(t.name) for t in cfg.machine_types] == ["campus", "east"]
    assert cfg.provider_label() == "campus (sim), east (sim)"
    view = cfg.for_provider("campus")
    assert view.provider == "sim"
    assert view.providers is None
    assert [t.name for t in view.machine_types] == ["node"]
    assert cfg.limits("campus").max_machines == 4
    assert cfg.limits("east").max_machines is None


def test_a_one_provider_config_is_its_own_view(tmp_path: Path) -> None:
    one = "name: t\nbag: {synthetic: 5}\nconstraint: {budget: 40}\nmachine_types:\n"
    one += "  - {name: a, price: 1, max_count: 2}\n"
    cfg = load_config(write(tmp_path, one))
    assert cfg.provider_names() == ["sim"]
    assert cfg.provider_of("a") == "sim"
    assert cfg.for_provider("sim") is cfg


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("provider: campus", "provider: nowhere"), "names unknown provider 'nowhere'"),
        (("provider: east, ", ""), "machine type 'c5' names no provider (providers: campus, east)"),
        (("  east: {kind: sim}\n", "  east: {kind: sim}\n  west: {kind: sim}\n"), "west"),
        (("kind: sim, max", "kind: cloud9, max"), "providers.campus"),
        (
            ("max_machines: 4", "max_machines: 0"),
            "providers.campus.max_machines: must be greater than 0 (got 0)",
        ),
        (("name: two\n", "name: two\nprovider: local\n"), "either provider"),
    ],
)
def test_a_bad_providers_section_names_the_field(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    """Through the CLI: exit 2, the problem named, no traceback."""
    result = check(tmp_path, TWO.replace(*change))
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_an_ec2_provider_needs_its_types_named(tmp_path: Path) -> None:
    text = TWO.replace(
        "east: {kind: sim}",
        "east: {kind: ec2, region: us-east-1, ami: ami-0abc, bootstrap: user-data, "
        "controller_url: 'https://127.0.0.1:1', types: {c6: {instance_type: c5.large}}}",
    )
    result = check(tmp_path, text)
    assert result.returncode == 2
    assert "providers.east.types names unknown machine type 'c6'" in result.stderr


def test_a_dry_run_reports_cost_and_machines_per_provider(tmp_path: Path) -> None:
    """The limited provider never has more than 4 machines, nor more than its 6 machine
    hours; the report's per-provider sums are its machines'."""
    cfg = load_config(write(tmp_path, TWO))
    report = dry_run(cfg, expand_bag(cfg), out_dir=tmp_path / "out").report
    assert report.tasks_done == 300
    campus = [m for m in report.machines if m.provider == "campus"]
    assert campus, "the cheap cluster was used"
    assert report.providers["campus"].machines == len(campus)
    assert report.providers["campus"].cost == pytest.approx(sum(m.cost for m in campus), abs=1e-3)
    assert sum(m.units_paid for m in campus) <= 6 + 1e-9
    points = sorted([(m.start_s, 1) for m in campus] + [(m.end_s, -1) for m in campus])
    alive = most = 0
    for _, step in points:
        alive += step
        most = max(most, alive)
    assert most <= 4
    assert "| campus | sim | node |" in (tmp_path / "out" / "report.md").read_text()


HOURLY = BillingModel("fixed", 3600.0)


@pytest.mark.parametrize("budget", [100, 4])
def test_a_budget_run_on_a_free_cluster_and_a_cloud_runs_within_its_budget(
    tmp_path: Path, budget: float
) -> None:
    """The campus nodes are free (price 0): its machine hours, not money, limit them.
    A budget run raised ZeroDivisionError launching them (a unit of a free type), and
    once only free machines were kept (the money left paying no cloud unit)."""
    text = TWO.replace("price: 0.5", "price: 0").replace("budget: 100", f"budget: {budget}")
    result = run_dry(tmp_path, text)
    assert "Traceback" not in result.stderr + result.stdout
    assert result.returncode in (0, EXIT_STOPPED), result.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["cost"] <= budget + 1e-9
    ran = {m["type"] for m in report["machines"] if m["tasks_run"]}
    assert "node" in ran
    if result.returncode == 0:
        assert report["tasks_done"] == 300


def test_the_budget_milp_keeps_a_provider_within_its_quota() -> None:
    """Without the quota the planner takes 10 cheap machines; with a quota of 3 over the
    two cheap types, at most 3 of them and the rest elsewhere."""
    types = [
        TypeEstimate("a", 1.0, 10, 0.0, 600.0),
        TypeEstimate("b", 1.0, 10, 0.0, 600.0),
        TypeEstimate("c", 4.0, 10, 0.0, 600.0),
    ]
    free = BudgetProblem(tasks=60, budget=100, types=types, billing=HOURLY, final_loss=0.0)
    plan = plan_budget(free)
    assert plan is not None
    assert plan.counts["a"] + plan.counts["b"] > 3
    limited = BudgetProblem(
        tasks=60,
        budget=100,
        types=types,
        billing=HOURLY,
        final_loss=0.0,
        groups=(Room(("a", "b"), 3, None),),
    )
    plan = plan_budget(limited)
    assert plan is not None
    assert plan.counts["a"] + plan.counts["b"] <= 3
    assert plan.counts["c"] > 0


def test_the_budget_milp_keeps_a_provider_within_its_machine_hours() -> None:
    types = [TypeEstimate("a", 0.0, 10, 0.0, 600.0), TypeEstimate("c", 4.0, 10, 0.0, 600.0)]
    problem = BudgetProblem(
        tasks=60,
        budget=200,
        types=types,
        billing=HOURLY,
        final_loss=0.0,
        groups=(Room(("a",), None, 4 * 3600.0),),
    )
    plan = plan_budget(problem)
    assert plan is not None
    assert plan.counts["a"] * (plan.units + 1) <= 4  # k units each, and the first
    assert plan.counts["c"] > 0


def test_new_caps_share_a_quota_among_a_providers_types() -> None:
    def state(limit: ProviderLimit) -> RunState:
        types = [TypeSpec("a", 1.0, 10, 0.0, "p"), TypeSpec("b", 1.0, 5, 0.0, "p")]
        return RunState.new([*types, TypeSpec("c", 1, 3, 0)], HOURLY, None, 1, [0], limits=[limit])

    caps = new_caps(state(ProviderLimit("p", max_machines=6)))
    assert caps["a"] + caps["b"] <= 6
    assert caps["a"] > caps["b"] > 0
    assert caps["c"] == 3
    timed = new_caps(state(ProviderLimit("p", machine_s=2 * 3600.0)))
    assert timed["a"] + timed["b"] <= 2


def test_apportion_never_exceeds_the_room_nor_a_types_own_maximum() -> None:
    for total in range(0, 12):
        caps = apportion(Room(("a", "b", "c"), total, None), {"a": 5, "b": 3, "c": 1}, 3600.0)
        assert sum(caps.values()) <= total
        assert caps["a"] <= 5
        assert caps["b"] <= 3
        assert caps["c"] <= 1
        assert sum(caps.values()) == min(total, 9)


def test_a_run_config_with_providers_round_trips(tmp_path: Path) -> None:
    """A run directory keeps the config with every field written out: it reads back."""
    cfg = load_config(write(tmp_path, TWO))
    again = RunConfig.model_validate(cfg.model_dump(mode="json"))
    assert again.provider_names() == cfg.provider_names()


# --- offers (paper 003) at the start of a run ---------------------------------------------

HYBRID = """\
name: hybrid
jobs:
  - name: sim
    bag: {synthetic: 200}
    constraint: {deadline_s: 1h}
    task_s: {node: 120, c5: 60}
deadline: {offers: dplb}
billing: {mode: fixed, atu_s: 1h}
emulator: {seed: 2, runtime: {dist: normal, mean_s: 60s, sd_s: 6s}}
providers:
  campus: {kind: sim, max_machines: 8}
  east: {kind: sim}
machine_types:
  - {name: node, provider: campus, price: 0, max_count: 8, boot_s: 1m}
  - {name: c5, provider: east, price: 0.5, max_count: 20, boot_s: 2m}
"""


def run_dry(tmp_path: Path, text: str) -> subprocess.CompletedProcess[str]:
    """``autoscaler run FILE --dry-run`` as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "autoscaler", "run", str(write(tmp_path, text)), "--dry-run",
         "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip


def test_offers_split_a_job_across_providers_and_the_report_shows_it(tmp_path: Path) -> None:
    """DPLB composes the providers' offers: the job runs as one part per provider, each
    on its provider's machines, every task done once and the deadline met; the split is
    said at the start and kept in the run's config."""
    result = run_dry(tmp_path, HYBRID)
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stderr.splitlines() if x.startswith("offers: job sim"))
    assert "OffersWithDPLB splits it: " in line
    assert "campus" in line
    assert "east" in line
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    parts = {j["name"]: j for j in report["jobs"]}
    assert set(parts) == {"sim@campus", "sim@east"}
    assert sum(j["tasks"] for j in parts.values()) == 200
    assert all(j["met_deadline"] for j in parts.values())
    by_type = {m["type"]: m["provider"] for m in report["machines"]}
    assert by_type.get("node", "campus") == "campus"
    kept = load_config(tmp_path / "out" / "config.yaml")
    assert sum(kept.jobs[0].split.values()) == 200


def test_a_deadline_no_offer_meets_is_said_at_the_start(tmp_path: Path) -> None:
    """200 two-minute tasks in 5 minutes: no composition meets it; the user hears the
    earliest finish the providers offer before the run, which still runs every task."""
    text = HYBRID.replace("deadline_s: 1h", "deadline_s: 5m")
    result = run_dry(tmp_path, text)
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stderr.splitlines() if x.startswith("offers: job sim"))
    assert "its deadline 0h05m00s cannot be met: the earliest finish the providers offer is" in line
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["tasks_done"] == 200


@pytest.mark.parametrize(
    ("split", "message"),
    [
        ("{campus: 100, west: 100}", "jobs[0].split names unknown provider 'west'"),
        ("{campus: 100, east: 50}", "its split gives 150 tasks (campus 100, east 50), it has 200"),
    ],
)
def test_a_bad_split_names_the_problem(tmp_path: Path, split: str, message: str) -> None:
    text = HYBRID.replace(
        "task_s: {node: 120, c5: 60}", f"task_s: {{node: 120, c5: 60}}\n    split: {split}"
    )
    result = run_dry(tmp_path, text)
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_two_ec2_providers_sign_with_their_own_profiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each EC2 provider of a run may name its AWS profile: its client signs with that
    profile's keys (two accounts in one run); an unknown profile is a clear error."""
    from autoscaler.providers.ec2 import _client, ec2_settings

    creds = tmp_path / "credentials"
    creds.write_text(
        "[east]\naws_access_key_id = AKIAEAST\naws_secret_access_key = fake-east\n"
        "[west]\naws_access_key_id = AKIAWEST\naws_secret_access_key = fake-west\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(creds))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "config"))
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(key, raising=False)
    section = (
        "{kind: ec2, region: REGION, ami: ami-0abc, bootstrap: user-data, profile: PROFILE, "
        "controller_url: 'https://127.0.0.1:1', types: {TYPE: {instance_type: c5.large}}}"
    )
    text = TWO.replace(
        "campus: {kind: sim, max_machines: 4, machine_hours: 6}",
        "campus: " + section.replace("REGION", "us-east-1").replace("PROFILE", "east")
        .replace("TYPE", "node"),
    ).replace(
        "east: {kind: sim}",
        "east: " + section.replace("REGION", "us-west-2").replace("PROFILE", "west")
        .replace("TYPE", "c5"),
    )  # fmt: skip
    cfg = load_config(write(tmp_path, text))
    keys = {}
    for name in cfg.provider_names():
        client = _client(ec2_settings(cfg.for_provider(name)))
        keys[name] = client._request_signer._credentials.access_key  # type: ignore[attr-defined]
    assert keys == {"campus": "AKIAEAST", "east": "AKIAWEST"}
    wrong = text.replace("profile: west", "profile: nobody")
    cfg = load_config(write(tmp_path, wrong))
    with pytest.raises(AutoscalerError, match="no AWS profile named 'nobody'"):
        _client(ec2_settings(cfg.for_provider("east")))
