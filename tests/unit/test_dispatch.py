"""An agent's results are parsed once, at the dispatcher, into typed records."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.run.polls import AgentResult, BadRequest, _checked_result, parse_poll, parse_result

GOOD = {"run": 4, "task": 2, "exit_code": 0, "runtime_s": 1.5, "stdout": "hi\n", "stderr": ""}


def body(*results: object) -> bytes:
    return json.dumps({"machine": "m", "results": list(results)}).encode()


def test_a_result_becomes_a_record() -> None:
    failed = {"run": 5, "task": 3, "exit_code": None, "runtime_s": 2, "error": "timed out after 2s"}
    poll = parse_poll(body(GOOD, failed), 0.0)
    assert poll.results == [
        AgentResult(4, 2, 0, 1.5, None, "hi\n", ""),
        AgentResult(5, 3, None, 2, "timed out after 2s", "", ""),
    ]
    assert [r.ok for r in poll.results] == [True, False]


def test_an_exit_code_of_zero_with_an_error_is_not_a_success() -> None:
    poll = parse_poll(body({**GOOD, "error": "cannot start: no such file"}), 0.0)
    assert not poll.results[0].ok


@pytest.mark.parametrize(
    ("result", "problem"),
    [
        ("done", r"results\[1\]: must be an object"),
        ({**GOOD, "run": "4"}, r"results\[1\]\.run"),
        ({k: v for k, v in GOOD.items() if k != "task"}, r"results\[1\]\.task"),
        ({**GOOD, "runtime_s": None}, r"results\[1\]\.runtime_s"),
        ({**GOOD, "exit_code": 0.5}, r"results\[1\]\.exit_code"),
        ({**GOOD, "error": 7}, r"results\[1\]\.error"),
        ({**GOOD, "stdout": None}, r"results\[1\]: stdout and stderr"),
    ],
)
def test_a_malformed_result_is_refused_naming_it(result: object, problem: str) -> None:
    with pytest.raises(BadRequest, match=problem):
        parse_poll(body(GOOD, result), 0.0)


_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 3),
    st.floats(allow_nan=False, width=32),
    st.text(max_size=3),
    st.lists(st.integers(0, 2), max_size=2),
)


_FIELDS = ["run", "task", "exit_code", "runtime_s", "error", "stdout", "stderr", "stored", "x"]


@settings(max_examples=500, deadline=None)
@given(
    st.dictionaries(st.sampled_from(_FIELDS), _VALUES, max_size=2),
    st.sets(st.sampled_from(_FIELDS), max_size=2),
)
def test_a_result_read_in_one_pass_is_what_the_field_checks_make_of_it(
    changed: dict[str, object], dropped: set[str]
) -> None:
    """``parse_result`` takes what agents send in one pass and hands anything else to the
    checks field by field: whatever a result holds, both say the same (the same record,
    or the same named refusal). A result is an agent's good one with a field or two
    changed to any JSON value, or left out."""
    r = {k: v for k, v in {**GOOD, "error": None, **changed}.items() if k not in dropped}
    wanted: AgentResult | str
    try:
        wanted = _checked_result(r, 0)
    except BadRequest as exc:
        wanted = str(exc)
    try:
        got: AgentResult | str = parse_result(r, 0)
    except BadRequest as exc:
        got = str(exc)
    assert got == wanted
    assert type(got) is type(wanted)
