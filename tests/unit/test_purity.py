"""The pure core stays pure: no clock, sleep, thread, socket, subprocess or file I/O.

The controller, the planner, the estimates, the state, billing and the model take
state, events and ``now`` and return decisions; that is what lets the emulator and the
daemon share them and the journal rebuild the state. This walks their source and the
source of every ``autoscaler`` module they import, transitively, and fails on an import
of a module that reaches the outside world or a call of ``open``. Third-party libraries
(PuLP writes its solver's files) are not walked: only our modules' own imports.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

PURE = [
    "autoscaler.budget.controller",
    "autoscaler.budget.planner",
    "autoscaler.deadline.instance",
    "autoscaler.deadline.patterns",
    "autoscaler.deadline.milp",
    "autoscaler.deadline.assign",
    "autoscaler.deadline.reassign",
    "autoscaler.deadline.deadline_controller",
    "autoscaler.deadline.jobs",
    "autoscaler.deadline.job_sampling",
    "autoscaler.deadline.planning",
    "autoscaler.deadline.forecast",
    "autoscaler.deadline.watch",
    "autoscaler.deadline.ends",
    "autoscaler.deadline.withdraw",
    "autoscaler.budget.frontier",
    "autoscaler.budget.outlook",
    "autoscaler.core.leases",
    "autoscaler.core.solve",
    "autoscaler.core.step",
    "autoscaler.learn.stats",
    "autoscaler.core.state",
    "autoscaler.core.machine_ledger",
    "autoscaler.core.task_ledger",
    "autoscaler.core.money_ledger",
    "autoscaler.core.capacity",
    "autoscaler.core.job_ledger",
    "autoscaler.core.observations",
    "autoscaler.core.decisions",
    "autoscaler.core.billing",
    "autoscaler.core.model",
    "autoscaler.run.hearing",
    "autoscaler.offers.allocation",
    "autoscaler.offers.composition",
    "autoscaler.offers.decide",
    "autoscaler.offers.profile",
    "autoscaler.offers.cluster",
    "autoscaler.offers.cloud",
    "autoscaler.offers.local_load",
    "autoscaler.categories.sort",
    "autoscaler.categories.deployment",
    "autoscaler.categories.resizing",
    "autoscaler.categories.ga",
    "autoscaler.categories.counts",
    "autoscaler.service.alerts",
]

BANNED = {
    "time", "datetime", "threading", "_thread", "socket", "ssl", "select", "selectors",
    "subprocess", "asyncio", "os", "shutil", "pathlib", "tempfile", "glob", "io", "fcntl",
    "sqlite3", "http", "urllib", "requests", "boto3", "botocore", "sched", "signal",
    "multiprocessing", "concurrent", "importlib", "fabric", "paramiko", "apscheduler",
}  # fmt: skip
BANNED_CALLS = {"open", "__import__", "exec", "eval", "breakpoint", "input"}


def _source(module: str) -> str:
    spec = importlib.util.find_spec(module)
    assert spec is not None, f"cannot find {module}"
    assert spec.origin is not None, f"{module} has no source"
    return Path(spec.origin).read_text(encoding="utf-8")


def _imports(tree: ast.AST, module: str) -> list[str]:
    """Every module ``tree`` imports, anywhere in it (inside functions too)."""
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module.rsplit(".", node.level)[0]
                base = f"{package}.{base}" if base else package
            out.append(base)
            # ``from autoscaler import x`` may name a module
            out += [f"{base}.{a.name}" for a in node.names if base == "autoscaler"]
    return out


def impurities(module: str, source: str) -> list[str]:
    """What in ``source`` (the text of ``module``) reaches the outside world."""
    tree = ast.parse(source)
    found = [
        f"{module} imports {name}"
        for name in _imports(tree, module)
        if name.split(".")[0] in BANNED
    ]
    found += [
        f"{module}:{node.lineno} calls {node.func.id}()"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in BANNED_CALLS
    ]
    return found


def walk(start: str) -> dict[str, list[str]]:
    """``start`` and every ``autoscaler`` module it imports, transitively, with their faults."""
    seen: dict[str, list[str]] = {}
    todo = [start]
    while todo:
        module = todo.pop()
        if module in seen or importlib.util.find_spec(module) is None:
            continue
        source = _source(module)
        seen[module] = impurities(module, source)
        todo += [
            name
            for name in _imports(ast.parse(source), module)
            if name.split(".")[0] == "autoscaler" and name != "autoscaler"
        ]
    return seen


@pytest.mark.parametrize("module", PURE)
def test_a_pure_module_and_what_it_imports_touch_no_clock_thread_socket_or_file(
    module: str,
) -> None:
    walked = walk(module)
    assert module in walked
    faults = [fault for faults in walked.values() for fault in faults]
    assert not faults, "the pure core reaches the outside world:\n" + "\n".join(faults)


@pytest.mark.parametrize(
    ("line", "fault"),
    [
        ("import time", "imports time"),
        ("from datetime import datetime", "imports datetime"),
        ("import os.path", "imports os.path"),
        ("from concurrent.futures import ThreadPoolExecutor", "imports concurrent.futures"),
        ("def f():\n    import subprocess", "imports subprocess"),
        ("data = open('x').read()", "calls open()"),
    ],
)
def test_the_check_sees_an_impure_line(line: str, fault: str) -> None:
    source = _source("autoscaler.budget.controller") + "\n" + line + "\n"
    assert any(fault in f for f in impurities("autoscaler.budget.controller", source))
