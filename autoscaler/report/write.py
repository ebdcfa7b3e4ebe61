"""Writing a run's report into its run directory: ``report.json``, ``report.md``,
``unfinished.txt`` and the plots."""

from __future__ import annotations

import json
from pathlib import Path

from autoscaler.core.state import RunState
from autoscaler.report.markdown import render_markdown, unfinished_text
from autoscaler.report.records import (
    GANTT_PNG,
    REPORT_JSON,
    REPORT_MD,
    SPEND_PNG,
    UNFINISHED_TXT,
    Report,
)


def write_report(
    report: Report, state: RunState | None, out_dir: Path, *, plots: bool = True
) -> None:
    (out_dir / REPORT_JSON).write_text(
        json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8"
    )
    (out_dir / REPORT_MD).write_text(render_markdown(report), encoding="utf-8")
    unfinished = unfinished_text(report)
    if unfinished is None:
        (out_dir / UNFINISHED_TXT).unlink(missing_ok=True)  # a resumed run that finished
    else:
        (out_dir / UNFINISHED_TXT).write_text(unfinished, encoding="utf-8")
    if plots and state is not None:
        from autoscaler.report.plots import gantt_figure, spend_figure

        gantt_figure(state).savefig(out_dir / GANTT_PNG, dpi=100)
        spend_figure(state, report.budget).savefig(out_dir / SPEND_PNG, dpi=100)
