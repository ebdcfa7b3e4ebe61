"""Durations as people write them: seconds, or a number with a unit.

``"90s"``, ``"15m"`` (or ``"15min"``), ``"2h"``, ``"1d"``; a bare number is seconds. This
is the one parser of durations: the config's fields, ``update --deadline`` and
``run --job FILE@AT`` all read them here.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

from autoscaler.core.errors import ConfigError

UNITS = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
"""Seconds per unit."""

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(s|m|min|h|d)?\s*$")

_USE = "use seconds or a number with s, m, h or d"


def seconds_in(text: str) -> float | None:
    """The seconds ``text`` gives (``"15m"``: 900.0), or None: it is not a duration."""
    match = _DURATION.match(text)
    if match is None:
        return None
    return float(match.group(1)) * UNITS[match.group(2) or "s"]


def parse_duration(text: str, *, field: str) -> float:
    """The seconds ``text`` gives; a ``ConfigError`` naming ``field`` and the text if it
    is not a duration."""
    seconds = seconds_in(text)
    if seconds is None:
        raise ConfigError(field, [not_a_duration(text)])
    return seconds


def not_a_duration(text: str) -> str:
    """Why ``text`` is refused as a duration, naming it."""
    return f"{text!r} is not a duration: {_USE}"


def _to_seconds(value: object) -> object:
    """A config field's value: a string becomes seconds; anything else is pydantic's."""
    if isinstance(value, str):
        seconds = seconds_in(value)
        if seconds is None:
            raise ValueError(not_a_duration(value))
        return seconds
    return value


Seconds = Annotated[float, BeforeValidator(_to_seconds)]
"""A config field holding a duration in seconds (the field adds its own bounds)."""
