"""JSON on the agents' wire (run/wire.py): the fast codec reads and writes what the
stdlib's did, including what the fast one alone would refuse."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from autoscaler.run import wire
from autoscaler.run.polls import BadRequest, parse_poll


def test_a_poll_reads_as_the_stdlib_reads_it_even_what_orjson_refuses() -> None:
    # a lone surrogate in an output tail, a NaN runtime and a number past a double:
    # orjson refuses each; the stdlib took them, and so do we
    body = (
        b'{"machine": "m1", "results": [{"run": 1, "task": 2, "exit_code": 0,'
        b' "runtime_s": NaN, "error": null, "stdout": "a\\ud800b", "stderr": ""}],'
        b' "running": [], "wait_s": 1e400}'
    )
    poll = parse_poll(body, 0.0)
    assert poll.results[0].stdout == "a\ud800b"
    assert poll.results[0].runtime_s != poll.results[0].runtime_s  # NaN
    assert poll.wait_s == 60.0  # infinity, capped


@pytest.mark.parametrize("body", [b"\xff\xfe", b"{", b"[1, 2", b""])
def test_what_is_not_json_is_a_bad_request_naming_it(body: bytes) -> None:
    with pytest.raises(BadRequest, match="body is not JSON"):
        parse_poll(body, 0.0)


def test_what_orjson_cannot_write_is_written_as_the_stdlib_writes_it() -> None:
    odd = {"env": {1: "a"}, "stdout": "x\udc80y", "big": 1 << 70}
    assert json.loads(wire.dumps(odd)) == json.loads(json.dumps(odd))
    line = wire.dumps_text({"stdout": "x\udc80y"})
    line.encode("utf-8")  # a line of a UTF-8 file: it must encode
    assert json.loads(line) == {"stdout": "x\udc80y"}


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(1 << 63), (1 << 63) - 1)
    | st.text()
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(_values)
def test_every_value_reads_back_as_it_was_written(value: object) -> None:
    assert wire.loads(wire.dumps(value)) == value
    assert json.loads(wire.dumps_text(value)) == value
    assert wire.loads(json.dumps(value)) == value
