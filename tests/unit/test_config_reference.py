"""docs/config.md is what ``autoscaler schema --markdown`` renders from the pydantic
models now, so the configuration reference cannot drift from the schema."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from autoscaler.cli.main import EXIT_CONFIG, app
from autoscaler.config.reference import config_markdown
from autoscaler.config.schema import RunConfig
from autoscaler.config.service_schema import ServiceSettings

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "config.md"


def test_docs_config_md_is_the_generated_reference() -> None:
    assert REFERENCE.read_text(encoding="utf-8") == config_markdown(), (
        "docs/config.md is stale: run `autoscaler schema --markdown --out docs/config.md`"
    )


def test_every_field_of_the_run_config_and_the_service_section_is_listed() -> None:
    text = config_markdown()
    rows = set(re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE))
    for model in (RunConfig, ServiceSettings):
        for name, info in model.model_fields.items():
            assert (info.alias or name) in rows, f"{model.__name__}.{name} is not in the reference"


def test_a_duration_field_reads_as_a_duration_with_its_default_and_bound() -> None:
    row = next(line for line in config_markdown().splitlines() if line.startswith("| `atu_s` |"))
    assert row == "| `atu_s` | duration (> 0) | `3600` | accountable time unit |"


def test_the_command_prints_it_and_writes_it(tmp_path: Path) -> None:
    printed = CliRunner().invoke(app, ["schema", "--markdown"])
    assert printed.exit_code == 0, printed.output
    assert printed.output == config_markdown()
    out = tmp_path / "config.md"
    written = CliRunner().invoke(app, ["schema", "--markdown", "--out", str(out)])
    assert written.exit_code == 0, written.output
    assert out.read_text(encoding="utf-8") == config_markdown()


def test_markdown_and_report_together_are_refused_by_name() -> None:
    result = CliRunner().invoke(app, ["schema", "--markdown", "--report"])
    assert result.exit_code == EXIT_CONFIG
    assert "--markdown or --report" in result.output
