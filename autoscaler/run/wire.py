"""JSON on the agents' wire: every poll's body read, every answer and result line written.

At thousands of agents these run once per request and once per result, and the stdlib's
``json`` was a sixth of the daemon's CPU (``benchmarks.daemon_scale --profile``): orjson
reads a poll about five times as fast and writes an answer about fifteen times as fast.
What orjson refuses and the stdlib takes (``NaN`` and ``Infinity``, a lone surrogate in a
string, a key that is not a string) goes the stdlib's way, so nothing an agent could send
or the daemon could write before is turned away now. Two differences remain, both in
what is written: no spaces after separators and non-ASCII text as UTF-8 (every file and
answer is UTF-8), and a float that is not finite is written ``null`` (the stdlib's
``NaN`` is not JSON; none is sent).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

_ENCODER = json.JSONEncoder(separators=(",", ":"))  # json.dumps would build one per call


def loads(data: bytes | str) -> Any:
    """The value ``data`` holds; ``json.JSONDecodeError`` or ``UnicodeDecodeError`` (both
    ``ValueError``) if it is not JSON, as ``json.loads`` would raise."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)  # NaN, a lone surrogate, a number past a double: as before


def dumps(value: Any) -> bytes:
    """``value`` as compact JSON in UTF-8."""
    try:
        return orjson.dumps(value)
    except TypeError:  # a key that is not a string, a lone surrogate, an int past 64 bits
        return _ENCODER.encode(value).encode()  # ASCII: a lone surrogate escaped


def dumps_text(value: Any) -> str:
    """``value`` as compact JSON text (a line of a UTF-8 file)."""
    return dumps(value).decode()
