"""An agent's results are parsed once, at the dispatcher, into typed records."""

from __future__ import annotations

import json

import pytest

from autoscaler.run.polls import AgentResult, BadRequest, parse_poll

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
