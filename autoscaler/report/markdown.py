"""The report for people: ``report.md`` (its head is what ``autoscaler run`` and
``autoscaler report`` print) and ``unfinished.txt``, the tasks not done as a bag file."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from autoscaler.core.model import NOTICE_REASON
from autoscaler.core.reclaims import window_words
from autoscaler.core.words import counted
from autoscaler.providers import registry
from autoscaler.report.format import hms, money
from autoscaler.report.outputs import OutputsSummary
from autoscaler.report.records import (
    REPORT_JSON,
    REPORT_MD,
    UNFINISHED_TXT,
    DeadlineReport,
    JobOutcome,
    Prediction,
    Report,
    ShortfallNote,
    UnfinishedTask,
)

_LAUNCH_PROBLEM_MEANING = {
    "capacity": "type avoided for a while, re-planned without it",
    "limit": "account limit: scale-up held for a while",
    "throttled": "throttled: scale-up paused briefly",
    "error": "launch failed",
    "setup": "set-up failed on every try: not bought again",
    "quota": "the service's limit, held by other jobs: waited for them",
    "unready": "its machines ended before their agents were ready: not bought again",
}
_ROWS_SHOWN = 50
_UNFINISHED_SHOWN = 20
_WHY_WORDS: dict[str, str] = {
    "not_started": "not started",
    "cut_off": "cut off",
    "failed": "failed",
}
HEAD_END = "## Machine types"
"""The heading after the report's head (outcome and predicted against actual), which is
what ``autoscaler run`` and ``autoscaler report`` print; the rest is in ``report.md``."""


def render_markdown(report: Report) -> str:
    lines = [
        f"# Run {report.run_id}",
        "",
        f"Policy **{report.policy}** on provider **{report.provider}**{_emulated(report)}, "
        f"mode {report.mode}, seed {report.seed}.",
        "",
    ]
    if report.stop_reason is None:
        lines.append(
            f"The bag finished: {report.tasks_done} of {counted(report.tasks_total, 'task')} done"
            + (f", {report.tasks_failed} failed." if report.tasks_failed else ".")
        )
    else:
        lines.append(
            f"**The run stopped early:** {report.stop_reason}. "
            f"{report.tasks_done} of {counted(report.tasks_total, 'task')} done, "
            f"{report.tasks_failed} failed."
        )
    if report.unfinished_tasks:
        lines += ["", _unfinished_sentence(report.unfinished_tasks)]
    if report.outputs is not None:
        lines += ["", _outputs_sentence(report.outputs)]
    if isinstance(report, DeadlineReport):
        lines += ["", *_deadline_head(report), *_spot_lines(report), *_rehearsal_lines(report)]
        lines += ["", HEAD_END, *_types_table(report), *_jobs_section(report)]
        return _tail(report, lines)
    predicted = report.predicted or Prediction(None, None, None)
    ci, mi = predicted.cost_interval, predicted.makespan_interval_s
    lines += [
        "",
        "| | predicted | interval | actual | inside |",
        "| --- | ---: | ---: | ---: | :---: |",
        f"| cost | {money(predicted.cost)} | "
        f"{'-' if ci is None else f'{money(ci[0])} – {money(ci[1])}'} | "
        f"{money(report.cost)} | {_yes(predicted.cost_inside)} |",
        f"| makespan | {hms(predicted.makespan_s)} | "
        f"{'-' if mi is None else f'{hms(mi[0])} – {hms(mi[1])}'} | "
        f"{hms(report.makespan_s)} | {_yes(predicted.makespan_inside)} |",
        "",
        f"{_spent(report)}.",
    ]
    if report.predicted is not None:
        lines.append(_made_when(report.predicted))
    lines += _spot_lines(report)
    if report.risk is not None:
        r = report.risk
        lines += [
            "",
            f"**Risk at {hms(r.at_s)}** ({_when_said(r)}): {r.message}.{_borne_out(r)}",
        ]
    if report.shortfall is not None:
        sf = report.shortfall
        lines += [
            "",
            f"**Warning at {hms(sf.at_s)}** ({_when_said(sf)}): {sf.message}.{_borne_out(sf)}",
        ]
    lines += [*_rehearsal_lines(report), "", HEAD_END, *_types_table(report)]
    return _tail(report, lines)


def _spot_lines(report: Report) -> list[str]:
    """Which prices the market-priced types ran at, and their machines at the caps (what
    the budget committed) against at the prices in force (what they are billed)."""
    spot = report.spot_prices
    if spot is None:
        return []
    if spot.source == "config" or spot.refreshed_at_s is None:
        said = "the config's (no market price was read)"
    else:
        where = "EC2's spot price history" if spot.source == "market" else "the dry run's trace"
        said = f"{where}, read {spot.refreshes} times, last at {hms(spot.refreshed_at_s)}"
    parts = [
        f"{name} {money(t.billed)} billed, {money(t.at_cap)} at its cap {t.cap:g} an ATU"
        + ("" if t.last_price is None else f" (last price {t.last_price:g})")
        for name, t in spot.types.items()
    ]
    return ["", f"Spot prices: {said}; " + "; ".join(parts) + "."]


def _rehearsal_lines(report: Report) -> list[str]:
    """What a rehearsal's refusals and reclaims cost, against the same run without them."""
    r = report.rehearsal
    if r is None:
        return []
    taken = f"{counted(r.reclaimed, 'machine')} taken back"
    if r.reclaimed:
        taken += (
            f" (costing {money(r.reclaimed_cost)}; {counted(r.runs_cut, 'task run')} cut "
            f"short, {hms(r.cut_s)} of work done again)"
        )
    extra = report.cost - r.calm_cost
    share = f" ({extra / r.calm_cost:+.1%})" if r.calm_cost > 0 else ""
    longer = report.makespan_s - r.calm_makespan_s
    return [
        "",
        f"**Rehearsed:** {counted(r.refused, 'launch', 'launches')} refused, {taken}. The same run "
        f"without them: cost {money(r.calm_cost)}, makespan {hms(r.calm_makespan_s)}; this "
        f"one cost {money(abs(extra))} {'more' if extra >= 0 else 'less'}{share} and took "
        f"{hms(abs(longer))} {'longer' if longer >= 0 else 'less'}.",
    ]


def _borne_out(note: ShortfallNote) -> str:
    """Whether the run bore a warning out, as a sentence after it ("" if undecided)."""
    if note.borne_out is None:
        return ""
    if note.borne_out:
        return " Borne out: the budget ran out with tasks left."
    return " Not borne out: the bag was finished within the budget."


def _when_said(note: ShortfallNote) -> str:
    """Tasks left when a warning was said, and the money committed then if known."""
    said = f"{counted(note.tasks_left, 'task')} left"
    return said if note.committed is None else f"{said}, {money(note.committed)} committed"


def _made_when(p: Prediction) -> str:
    """When the prediction was made, and which plan it is."""
    if p.resampled_at_s is not None:
        return (
            f"Prediction made at {hms(p.at_s)}, by the plan the run followed: types refused "
            f"through sampling were sampled from {hms(p.resampled_at_s)}, once they could be "
            "launched, and this plan was made with their samples."
        )
    if p.replaced_best_effort_at_s is not None:
        return (
            f"Prediction made at {hms(p.at_s)}, by the plan the run followed: the first plan "
            f"after sampling, at {hms(p.replaced_best_effort_at_s)}, was a best-effort plan "
            "(the most profitable type only) for a budget the planner could not meet at the "
            "first estimates."
        )
    if p.best_effort:
        return (
            f"Prediction made at {hms(p.at_s)}, the first plan after sampling: a best-effort "
            "plan (the most profitable type only) for a budget the planner could not meet."
        )
    return f"Prediction made at {hms(p.at_s)}, the first plan after sampling."


def _types_table(report: Report) -> list[str]:
    lines = [
        "",
        "| type | slots | machines | units paid | cost | tasks run | busy | idle |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, t in report.machine_types.items():
        lines.append(
            f"| {name} | {t.slots} | {t.machines} | {t.units_paid:g} | {money(t.cost)} | "
            f"{t.tasks_run} | {hms(t.busy_s)} | {hms(t.idle_s)} |"
        )
    if len(report.providers) > 1:
        lines += [
            "",
            "| provider | kind | types | machines | units paid | cost | tasks run |",
            "| --- | --- | --- | ---: | ---: | ---: | ---: |",
        ]
        for name, p in report.providers.items():
            lines.append(
                f"| {name} | {p.kind} | {', '.join(p.types)} | {p.machines} | "
                f"{p.units_paid:g} | {money(p.cost)} | {p.tasks_run} |"
            )
    return lines


def _emulated(report: Report) -> str:
    """What a dry run adds to the provider's name: that none of its machines was rented
    (the emulator's own provider says so itself)."""
    kinds = [p.kind for p in report.providers.values()] or [report.provider]
    if report.emulated and not all(registry.is_emulated(k) for k in kinds):
        return ", emulated (a dry run: no machine was rented)"
    return ""


def _spent(report: Report) -> str:
    """The budget (if there was one) and what was spent against it."""
    if report.budget is None:
        return f"No budget; spent {money(report.cost)}"
    within = "within budget" if report.within_budget else "**OVER BUDGET**"
    return f"Budget {money(report.budget)}; spent {money(report.cost)} ({within})"


def _how_late(late: list[JobOutcome]) -> str:
    """What the jobs that missed their deadline left: tasks late (done after it, or not
    done once it passed), tasks never done (a run that stopped early), or tasks that
    failed (a job all of whose other tasks were done in time)."""
    names = f"; {', '.join(j.name for j in late)} "
    tasks_late = sum(j.tasks_late for j in late)
    undone = sum(j.tasks - j.done - j.failed for j in late)
    never = f"{counted(undone, 'task')} {'was' if undone == 1 else 'were'} never done."
    if not tasks_late and not undone:  # on time, but not every task done: some failed
        failed = sum(j.failed for j in late)
        return f"{names}did not finish: {counted(failed, 'task')} failed."
    if not tasks_late:
        return f"{names}did not finish: {never}"
    said = (
        f"{names}{'was' if len(late) == 1 else 'were'} late by {counted(tasks_late, 'task')} in all"
    )
    return f"{said}; {never}" if undone else f"{said}."


def _deadline_head(report: DeadlineReport) -> list[str]:
    """How many jobs met their deadline, and the warnings given before they passed."""
    late = [j for j in report.jobs if not j.met_deadline]
    lines = [
        f"**{report.jobs_met_deadline} of {counted(len(report.jobs), 'job')} met their deadline**"
        + (_how_late(late) if late else "."),
        "",
        f"{_spent(report)}, {money(report.unattributed_cost)} of it on machines that ran no task.",
    ]
    warned = [j for j in report.jobs if j.first_warning is not None]
    for j in warned:
        w = j.first_warning
        assert w is not None
        ahead = j.deadline_s - w.at_s
        lines += [
            "",
            f"**Warning at {hms(w.at_s)}** "
            + (f"({hms(ahead)} before its deadline)" if ahead > 0 else "(after its deadline)")
            + f": {w.message}.",
        ]
    for j in report.jobs:
        for n in j.learned:
            lines += ["", f"**Task times learned at {hms(n.at_s)}**: {n.message}."]
    return lines


def _jobs_section(report: DeadlineReport) -> list[str]:
    lines = [
        "",
        "## Jobs",
        "",
        "| job | arrived | deadline | tasks | done | failed | finish | late tasks | "
        "late by | cost | predicted cost | predicted finish | first warning | gave way |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| --- | --- |",
    ]
    for j in report.jobs:
        w = j.first_warning
        warning = (
            "-"
            if w is None
            else f"{hms(w.at_s)}: {counted(w.tasks, 'task')}, {w.seconds:.0f} s ({w.cause})"
        )
        late = f"**{j.tasks_late}**" if j.tasks_late else "0"
        cost_in = _within(j.predicted_cost_interval, money, j.cost_inside)
        finish_in = _within(j.predicted_finish_interval_s, hms, j.finish_inside)
        lines.append(
            f"| {j.name} | {hms(j.at_s)} | {hms(j.deadline_s)} | {j.tasks} | {j.done} | "
            f"{j.failed} | {hms(j.finish_s)} | {late} | {hms(j.seconds_late)} | "
            f"{money(j.cost)} | {money(j.predicted_cost)}{cost_in} | "
            f"{hms(j.predicted_finish_s)}{finish_in} | "
            f"{warning} | {j.gave_way or '-'} |"
        )
    if len(report.jobs) > 1:
        lines += [
            "",
            "A job's cost: each billing unit of a machine is charged to the jobs that had "
            "arrived when it began, by the time the machine ran each one's tasks in it; a "
            "job that ran in time already paid for by another is not charged for it.",
        ]
    return lines


def _within(
    interval: tuple[float, float] | None, show: Callable[[float], str], held: bool | None
) -> str:
    """A forecast's interval after its point, and whether the outcome fell inside it."""
    if interval is None:
        return ""
    mark = "" if held is None else (" ✓" if held else " ✗")
    return f" ({show(interval[0])} – {show(interval[1])}{mark})"


def _tail(report: Report, lines: list[str]) -> str:
    """The report after the machine types: configurations, tasks not done, machines."""
    lines += ["", "## Configurations", "", "| at | machines | why |", "| --- | --- | --- |"]
    for c in report.configurations:
        counts = ", ".join(f"{k}: {v}" for k, v in c.counts.items())
        lines.append(f"| {hms(c.t_s)} | {counts} | {c.reason} |")
    lines += _unfinished_section(report)
    if report.failed_tasks:
        lines += [
            "",
            "## Failed tasks",
            "",
            "| task | attempts | last error |",
            "| --- | ---: | --- |",
        ]
        for f in report.failed_tasks[:_ROWS_SHOWN]:
            lines.append(f"| {f.task} | {f.attempts} | {f.error} |")
        if len(report.failed_tasks) > _ROWS_SHOWN:
            lines.append(
                f"| ... | | {len(report.failed_tasks) - _ROWS_SHOWN} more in {REPORT_JSON} |"
            )
    if report.launch_problems:
        lines += [
            "",
            "## Launches the provider refused",
            "",
            "| at | type | what it meant | provider said |",
            "| ---: | --- | --- | --- |",
        ]
        for p in report.launch_problems[:_ROWS_SHOWN]:
            meaning = _LAUNCH_PROBLEM_MEANING.get(p.kind, p.kind)
            lines.append(f"| {hms(p.t_s)} | {p.type} | {meaning} | {_cell(p.reason)} |")
    lines += _notices_section(report)
    lines += _reclaim_hold_lines(report)
    lines += _outputs_section(report)
    lines += _categories_section(report)
    lines += _machines_section(report)
    return "\n".join(lines) + "\n"


def _machines_section(report: Report) -> list[str]:
    """Every machine's life; with its zone when the provider said where it put any."""
    zones = any(m.zone for m in report.machines)
    zone_head, zone_rule = (" zone |", " --- |") if zones else ("", "")
    lines = [
        "",
        "## Machines",
        "",
        f"| machine | type |{zone_head} slots | start | end | units paid | tasks run "
        "| ended because |",
        f"| --- | --- |{zone_rule} ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for m in report.machines:
        zone = f" {m.zone or '-'} |" if zones else ""
        lines.append(
            f"| {m.id} | {m.type} |{zone} {m.slots} | {hms(m.start_s)} | {hms(m.end_s)} | "
            f"{m.units_paid:g} | {m.tasks_run} | {_cell(m.end_reason)} |"
        )
    return lines


def _outputs_sentence(o: OutputsSummary) -> str:
    """How many bytes came back, and where."""
    where = {s.where.rsplit("/", 2)[0] for s in o.stored} or {"outputs"}
    text = (
        f"Outputs: {counted(o.bytes, 'byte', spec=',')} in {counted(o.files, 'file')} of "
        f"{counted(o.tasks, 'task')}, stored in "
        + ", ".join(f"`{w}/<task>/`" for w in sorted(where))
    )
    if o.empty:
        shown = ", ".join(str(t) for t in o.empty[:_ROWS_SHOWN])
        more = f" and {len(o.empty) - _ROWS_SHOWN} more" if len(o.empty) > _ROWS_SHOWN else ""
        text += f"; the output patterns of {len(o.empty)} matched no file (tasks {shown}{more})"
    return text + "."


def _outputs_section(report: Report) -> list[str]:
    """Each task's outputs: where, how many files and bytes."""
    o = report.outputs
    if o is None or not o.stored:
        return []
    lines = [
        "",
        "## Task outputs",
        "",
        "| task | where | files | bytes |",
        "| ---: | --- | ---: | ---: |",
    ]
    lines += [f"| {s.task} | {s.where} | {s.files} | {s.bytes:,} |" for s in o.stored[:_ROWS_SHOWN]]
    if len(o.stored) > _ROWS_SHOWN:
        lines.append(f"| ... | {len(o.stored) - _ROWS_SHOWN} more in {REPORT_JSON} | | |")
    return lines


def _categories_section(report: Report) -> list[str]:
    """Each category's tasks and what they took on each type (paper 004)."""
    if not report.categories:
        return []
    lines = [
        "",
        "## Categories",
        "",
        "What each category's tasks took on each machine type (the runs that ended there "
        "with a result).",
        "",
        "| category | tasks | done | type | runs | mean | sd |",
        "| --- | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for c in report.categories[:_ROWS_SHOWN]:
        head = f"| {c.name} | {c.tasks} | {c.done} |"
        if not c.on_types:
            lines.append(f"{head} - | 0 | - | - |")
        for i, t in enumerate(c.on_types):
            sd = "-" if t.sd_s is None else _short(t.sd_s)
            lines.append(
                f"{head if i == 0 else '| | | |'} {t.type} | {t.runs} | {_short(t.mean_s)} | {sd} |"
            )
    if len(report.categories) > _ROWS_SHOWN:
        lines.append(f"| ... {len(report.categories) - _ROWS_SHOWN} more in {REPORT_JSON} | |")
    return lines


def _short(seconds: float) -> str:
    """A task's time: ``2.35 s`` under a minute, else as ``hms``."""
    return f"{seconds:.3g} s" if seconds < 60 else hms(seconds)


def _notices_section(report: Report) -> list[str]:
    """Machines their provider took back after a notice (EC2 spot), and what they cost."""
    taken = [m for m in report.machines if NOTICE_REASON in (m.end_reason or "")]
    if not taken:
        return []
    lines = [
        "",
        "## Interruption notices",
        "",
        f"{counted(len(taken), 'machine')} taken back by their provider; each one's tasks in "
        "progress went back to the bag when its notice was read.",
        "",
        "| machine | type | notice at | units paid | cost | tasks it finished | notice |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for m in taken:
        said = (m.end_reason or "").split(NOTICE_REASON, 1)[1].strip(" ()")
        lines.append(
            f"| {m.id} | {m.type} | {hms(m.end_s)} | {m.units_paid:g} | {m.cost:.2f} | "
            f"{m.tasks_run} | {said} |"
        )
    return lines


def _reclaim_hold_lines(report: Report) -> list[str]:
    """One line per type held after repeated reclaims: when, why, where the plan went."""
    lines = []
    for h in report.reclaim_holds or ():
        if h.zone:
            lines.append(
                f"{h.type} in {h.zone} held {hms(h.from_s)}–{hms(h.until_s)} after "
                f"{counted(h.reclaims, 'reclaim')} there in {window_words(h.window_s)}; "
                "its launches went to its other zones."
            )
            continue
        moved = ", ".join(h.moved_to) if h.moved_to else "no other type"
        lines.append(
            f"{h.type} held {hms(h.from_s)}–{hms(h.until_s)} after "
            f"{counted(h.reclaims, 'reclaim')} in {window_words(h.window_s)}; "
            f"plan moved to {moved}."
        )
    return ["", *lines] if lines else []


def _unfinished_sentence(tasks: Sequence[UnfinishedTask]) -> str:
    n = counted(len(tasks), "task")
    if all(t.command is None for t in tasks):
        are, they = ("is", "it") if len(tasks) == 1 else ("are", "they")
        return (
            f"The {n} not done {are} synthetic: `{UNFINISHED_TXT}` lists "
            f"{'its id' if len(tasks) == 1 else 'their ids'}, but {they} cannot be re-run "
            "as commands."
        )
    runnable = sum(_bag_line(t.command) is not None for t in tasks)
    which = "the" if runnable == len(tasks) else f"{runnable} of the"
    return (
        f"The commands of {which} {n} not done are in `{UNFINISHED_TXT}`, a bag file for a new run."
    )


def _unfinished_section(report: Report) -> list[str]:
    """The tasks not done: counts by why, then the first few (the rest are in the file)."""
    tasks = report.unfinished_tasks
    if not tasks:
        return []
    lines = [
        "",
        "## Tasks not done",
        "",
        f"{len(tasks)} of {report.tasks_total}: {_why_counts(tasks)}.",
    ]
    lines += ["", "| task | why | command | last error |", "| ---: | --- | --- | --- |"]
    # Failed and cut-off tasks first: they say more than the many never started.
    order = list(_WHY_WORDS)
    shown = sorted(tasks, key=lambda t: (-order.index(t.why), t.task))[:_UNFINISHED_SHOWN]
    for t in shown:
        lines.append(f"| {t.task} | {_WHY_WORDS[t.why]} | {_cell(t.command)} | {_cell(t.error)} |")
    if len(tasks) > _UNFINISHED_SHOWN:
        lines += ["", f"… and {len(tasks) - _UNFINISHED_SHOWN} more; see {UNFINISHED_TXT}."]
    return lines


def _why_counts(tasks: Sequence[UnfinishedTask]) -> str:
    counts = {why: sum(t.why == why for t in tasks) for why in _WHY_WORDS}
    return ", ".join(f"{n} {_WHY_WORDS[why]}" for why, n in counts.items() if n)


def _cell(text: str | None) -> str:
    """``text`` as one Markdown table cell: one line, its pipes escaped."""
    if text is None:
        return "-"
    return " ".join(text.split()).replace("|", "\\|")


def unfinished_text(report: Report) -> str | None:
    """What ``unfinished.txt`` holds: ``#`` lines saying whose tasks and why, then one
    command per line, so the file is a bag (``bag: {file: unfinished.txt}``); None when
    every task was done.

    A synthetic task has no command: it gets a comment line with its id instead. So
    does a command that spans lines, which a bag file cannot hold.
    """
    tasks = report.unfinished_tasks
    if not tasks:
        return None
    header = [f"Tasks not done in run {report.run_id}: {len(tasks)} of {report.tasks_total}."]
    if report.stop_reason is not None:
        header.append(f"The run stopped early: {report.stop_reason.rstrip('.')}.")
    if report.tasks_failed:
        header.append(f"{report.tasks_failed} failed on every attempt (see {REPORT_MD}).")
    header.append(f"By why: {_why_counts(tasks)}.")
    lines = {t.task: _bag_line(t.command) for t in tasks}
    commands = [line for line in lines.values() if line is not None]
    left_out = [t for t in tasks if lines[t.task] is None]
    if commands:
        header.append(
            f"One command per line: a bag for a new config, bag: {{file: {UNFINISHED_TXT}}}"
        )
        header.append("(give it the original bag's env, max_retries and timeout_s).")
    if all(t.command is None for t in tasks):
        header.append("The tasks are synthetic (bag.synthetic): they have no commands and")
        header.append("cannot be re-run as commands. Their ids follow.")
    elif left_out:
        header.append(f"{len(left_out)} have no command a bag file can hold on one line:")
        header.append("their ids follow, commented out.")
    text = [f"# {' '.join(line.split())}" for line in header]
    text += [f"# task {t.task}: {_WHY_WORDS[t.why]}" for t in left_out]
    return "\n".join(text + commands) + "\n"


def _bag_line(command: str | None) -> str | None:
    """``command`` as a line a bag file gives back (a shell ignores blanks at its ends);
    None for what no line can hold: no command, several lines, or a ``#`` comment."""
    if command is None:
        return None
    line = command.strip()
    if not line or line.startswith("#") or len(line.splitlines()) != 1:
        return None
    return line


def _yes(flag: bool | None) -> str:
    return "-" if flag is None else ("yes" if flag else "**no**")


def render_head(report: Report) -> str:
    """The report's head in Markdown: the outcome, and predicted against actual."""
    return render_markdown(report).split(HEAD_END)[0]
