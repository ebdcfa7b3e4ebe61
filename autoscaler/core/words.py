"""How text for people counts things: ``1 task``, ``2 tasks``. Every message, report and
view that puts a number before a noun says it through ``counted``, so none says
"1 tasks late"."""

from __future__ import annotations


def counted(n: int | float, noun: str, plural: str | None = None, spec: str = "") -> str:
    """``n`` and ``noun``, singular for exactly one, else ``plural`` (default: the noun
    with an s); ``spec`` formats the number (``","``: thousands separated)."""
    word = noun if n == 1 else (plural if plural is not None else noun + "s")
    return f"{n:{spec}} {word}"
