"""The cost report of a run: ``report.json`` for programs, ``report.md`` for people,
``gantt.png`` (machines over time with their tasks) and ``spend.png`` (committed and
actual spend against the budget over time).

Costs are recomputed from each machine's launch and end under the billing model, so
the report checks the controller's bookkeeping rather than repeating it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from autoscaler.config.schema import RunConfig
from autoscaler.state import RunState

REPORT_JSON = "report.json"
REPORT_MD = "report.md"
_OUTCOME_COLOURS = (("done", None), ("failed", "red"), ("cancelled", "grey"), ("lost", "black"))
_EPS = 1e-6


def _r(value: float | None, digits: int = 3) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return round(value, digits)


def build_report(
    cfg: RunConfig, state: RunState, *, run_id: str, seed: int, wall_s: float | None = None
) -> dict[str, Any]:
    billing = state.billing
    budget = cfg.constraint.budget
    finish = max((seg.end for seg in state.segments if seg.outcome == "done"), default=0.0)
    makespan = finish if state.finished else state.now
    machines = []
    per_type: dict[str, dict[str, float]] = {
        t.name: {
            "machines": 0,
            "units_paid": 0.0,
            "cost": 0.0,
            "tasks_run": 0,
            "busy_s": 0.0,
            "idle_s": 0.0,
            "boot_s": 0.0,
        }
        for t in cfg.machine_types
    }
    for m in state.machines.values():
        end = m.ended_at if m.ended_at is not None else state.now
        life = end - m.launched_at
        boot = (m.ready_at if m.ready_at is not None else end) - m.launched_at
        cost = billing.cost(m.type.price, life)
        units = billing.paid_units(life)
        idle = max(0.0, life - boot - m.busy_s)
        machines.append(
            {
                "id": m.id,
                "type": m.type.name,
                "start_s": _r(m.launched_at),
                "ready_s": _r(m.ready_at),
                "end_s": _r(end),
                "units_paid": _r(units),
                "cost": _r(cost, 4),
                "tasks_run": m.tasks_done,
                "busy_s": _r(m.busy_s),
                "idle_s": _r(idle),
                "end_reason": m.end_reason,
            }
        )
        agg = per_type[m.type.name]
        agg["machines"] += 1
        agg["units_paid"] += units
        agg["cost"] += cost
        agg["tasks_run"] += m.tasks_done
        agg["busy_s"] += m.busy_s
        agg["idle_s"] += idle
        agg["boot_s"] += boot
    cost = sum(float(t["cost"]) for t in per_type.values())
    configurations = [
        {
            "t_s": _r(t),
            "counts": dict(c.counts),
            "reason": c.reason,
            "predicted_cost": _r(c.predicted_cost, 2),
            "predicted_makespan_s": _r(c.predicted_makespan_s),
        }
        for t, c in state.configurations
    ]
    # Sampling and round robin configurations predict nothing; the first that does is
    # the first plan after sampling.
    first_plan = next((c for c in configurations if c["predicted_cost"] is not None), None)
    predicted = (
        None
        if first_plan is None
        else {
            "cost": first_plan["predicted_cost"],
            "makespan_s": first_plan["predicted_makespan_s"],
            "at_s": first_plan["t_s"],
        }
    )
    failed = [
        {"task": tid, "attempts": state.attempts[tid], "error": state.task_errors.get(tid, "")}
        for tid, st in enumerate(state.task_state)
        if st.value == "failed"
    ]
    return {
        "run_id": run_id,
        "mode": "budget",
        "policy": cfg.policy,
        "provider": cfg.provider,
        "seed": seed,
        "budget": budget,
        "cost": _r(cost, 4),
        "committed": _r(state.committed, 4),
        "within_budget": budget is None or cost <= budget + _EPS,
        "makespan_s": _r(makespan),
        "tasks_total": state.n_tasks,
        "tasks_done": state.done,
        "tasks_failed": state.failed,
        "stop_reason": state.stop_reason,
        "predicted": predicted,
        "billing": {
            "mode": billing.mode,
            "atu_s": billing.atu_s,
            "min_charge_s": billing.min_charge_s if billing.mode == "per_second" else None,
        },
        "configurations": configurations,
        "machine_types": {
            name: {k: (_r(v, 4) if isinstance(v, float) else v) for k, v in agg.items()}
            for name, agg in per_type.items()
        },
        "machines": machines,
        "failed_tasks": failed,
        "launch_problems": [
            {"t_s": _r(t), "type": tname, "kind": kind, "reason": reason}
            for t, tname, kind, reason in state.launch_problems
        ],
        "wall_s": _r(wall_s),
    }


# --- for people -----------------------------------------------------------------------


def hms(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = round(seconds)
    return f"{s // 3600}h{s % 3600 // 60:02d}m{s % 60:02d}s"


def _money(value: float | None) -> str:
    return "-" if value is None else f"{value:,.2f}"


def render_markdown(report: dict[str, Any]) -> str:
    budget = report["budget"]
    lines = [
        f"# Run {report['run_id']}",
        "",
        f"Policy **{report['policy']}** on provider **{report['provider']}**, "
        f"mode {report['mode']}, seed {report['seed']}.",
        "",
    ]
    if report["stop_reason"] is None:
        lines.append(
            f"The bag finished: {report['tasks_done']} of {report['tasks_total']} tasks done"
            + (f", {report['tasks_failed']} failed." if report["tasks_failed"] else ".")
        )
    else:
        lines.append(
            f"**The run stopped early:** {report['stop_reason']}. "
            f"{report['tasks_done']} of {report['tasks_total']} tasks done, "
            f"{report['tasks_failed']} failed."
        )
    within = "within budget" if report["within_budget"] else "**OVER BUDGET**"
    lines += [
        "",
        "| | predicted | actual |",
        "| --- | ---: | ---: |",
    ]
    predicted = report["predicted"] or {}
    lines.append(f"| cost | {_money(predicted.get('cost'))} | {_money(report['cost'])} |")
    lines.append(f"| makespan | {hms(predicted.get('makespan_s'))} | {hms(report['makespan_s'])} |")
    lines += [
        "",
        f"Budget {_money(budget)}; spent {_money(report['cost'])} ({within}).",
    ]
    if predicted:
        lines.append(
            f"Prediction made at {hms(predicted.get('at_s'))}, the first plan after sampling."
        )
    lines += [
        "",
        "## Machine types",
        "",
        "| type | machines | units paid | cost | tasks run | busy | idle |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, t in report["machine_types"].items():
        lines.append(
            f"| {name} | {t['machines']} | {t['units_paid']:g} | {_money(t['cost'])} | "
            f"{t['tasks_run']} | {hms(t['busy_s'])} | {hms(t['idle_s'])} |"
        )
    lines += ["", "## Configurations", "", "| at | machines | why |", "| --- | --- | --- |"]
    for c in report["configurations"]:
        counts = ", ".join(f"{k}: {v}" for k, v in c["counts"].items())
        lines.append(f"| {hms(c['t_s'])} | {counts} | {c['reason']} |")
    if report["failed_tasks"]:
        lines += [
            "",
            "## Failed tasks",
            "",
            "| task | attempts | last error |",
            "| --- | ---: | --- |",
        ]
        for f in report["failed_tasks"][:50]:
            lines.append(f"| {f['task']} | {f['attempts']} | {f['error']} |")
        if len(report["failed_tasks"]) > 50:
            lines.append(f"| ... | | {len(report['failed_tasks']) - 50} more in report.json |")
    if report.get("launch_problems"):
        meaning = {
            "capacity": "type avoided for a while, re-planned without it",
            "limit": "account limit: scale-up held for a while",
            "throttled": "throttled: scale-up paused briefly",
            "error": "launch failed",
        }
        lines += [
            "",
            "## Launches the provider refused",
            "",
            "| at | type | what it meant | provider said |",
            "| ---: | --- | --- | --- |",
        ]
        for p in report["launch_problems"][:50]:
            lines.append(
                f"| {hms(p['t_s'])} | {p['type']} | {meaning.get(p['kind'], p['kind'])} | "
                f"{p['reason']} |"
            )
    lines += [
        "",
        "## Machines",
        "",
        "| machine | type | start | end | units paid | tasks run | ended because |",
        "| --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for m in report["machines"]:
        lines.append(
            f"| {m['id']} | {m['type']} | {hms(m['start_s'])} | {hms(m['end_s'])} | "
            f"{m['units_paid']:g} | {m['tasks_run']} | {m['end_reason'] or '-'} |"
        )
    return "\n".join(lines) + "\n"


# --- plots ----------------------------------------------------------------------------


def plot_gantt(state: RunState, path: Path) -> None:
    """Machines over time (one row each, coloured by type) with their tasks on them."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    machines = sorted(state.machines.values(), key=lambda m: (m.type.name, m.launched_at))
    colours = plt.get_cmap("tab10")
    type_colour = {name: colours(i % 10) for i, name in enumerate(sorted(state.types))}
    by_machine: dict[str, list[tuple[float, float, str]]] = {}
    for seg in state.segments:
        by_machine.setdefault(seg.machine, []).append((seg.start, seg.end, seg.outcome))
    height = min(40.0, 2.0 + 0.12 * len(machines))
    fig, ax = plt.subplots(figsize=(12, height))
    hours = 3600.0
    for row, m in enumerate(machines):
        end = m.ended_at if m.ended_at is not None else state.now
        ax.broken_barh(
            [(m.launched_at / hours, (end - m.launched_at) / hours)],
            (row - 0.45, 0.9),
            facecolors=[(*type_colour[m.type.name][:3], 0.25)],
        )
        segs = by_machine.get(m.id, [])
        for outcome, colour in (
            ("done", None),
            ("failed", "red"),
            ("cancelled", "grey"),
            ("lost", "black"),
        ):
            spans = [(s / hours, (e - s) / hours) for s, e, o in segs if o == outcome]
            if spans:
                ax.broken_barh(
                    spans,
                    (row - 0.35, 0.7),
                    facecolors=colour or type_colour[m.type.name],
                    edgecolors="white",
                    linewidth=0.3,
                )
    ax.set_yticks(range(len(machines)))
    ax.set_yticklabels([m.id for m in machines], fontsize=max(3, 8 - len(machines) // 40))
    ax.set_ylim(-1, len(machines))
    ax.set_xlabel("hours since start")
    ax.set_title(
        "Machines over time: life (pale) and tasks (solid; red failed, grey cancelled, black lost)"
    )
    from matplotlib.patches import Patch

    handles = [Patch(color=type_colour[name]) for name in sorted(state.types)]
    ax.legend(handles, sorted(state.types), loc="upper right", fontsize=8)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def spend_curve(state: RunState, points: int = 400) -> tuple[list[float], list[float]]:
    """Actual spend over time: every machine billed for its life up to each instant."""
    end = max(state.now, 1.0)
    times = [end * i / points for i in range(points + 1)]
    spent = []
    for t in times:
        total = 0.0
        for m in state.machines.values():
            if m.launched_at > t:
                continue
            stop = min(t, m.ended_at if m.ended_at is not None else state.now)
            total += state.billing.cost(m.type.price, stop - m.launched_at)
        spent.append(total)
    return times, spent


def plot_spend(state: RunState, budget: float | None, path: Path) -> None:
    """Committed and actual spend against the budget over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    hours = 3600.0
    t_c = [t / hours for t, _ in state.spend_log] + [state.now / hours]
    v_c = [v for _, v in state.spend_log] + [state.spend_log[-1][1]]
    ax.step(t_c, v_c, where="post", label="committed (paid units incl. the current ones)")
    times, spent = spend_curve(state)
    ax.plot([t / hours for t in times], spent, label="spent by the machines' lives so far")
    if budget is not None:
        ax.axhline(budget, color="red", linestyle="--", label=f"budget {budget:g}")
    ax.set_xlabel("hours since start")
    ax.set_ylabel("money")
    ax.set_title("Spend against budget")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def write_report(
    report: dict[str, Any], state: RunState | None, out_dir: Path, *, plots: bool = True
) -> None:
    (out_dir / REPORT_JSON).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (out_dir / REPORT_MD).write_text(render_markdown(report), encoding="utf-8")
    if plots and state is not None:
        plot_gantt(state, out_dir / "gantt.png")
        plot_spend(state, report["budget"], out_dir / "spend.png")


def read_report(run_dir: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((run_dir / REPORT_JSON).read_text(encoding="utf-8"))
    return data
