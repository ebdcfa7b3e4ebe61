"""The one token check (``autoscaler/run/auth.py``) at both HTTP endpoints: the agents'
dispatcher and the service's API."""

from __future__ import annotations

import json
import queue
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from autoscaler.run.dispatch import POLL_PATH, Dispatcher

pytestmark = [pytest.mark.integration]

TOKEN = "s3cret-token"


@pytest.fixture
def dispatcher() -> Iterator[Dispatcher]:
    d = Dispatcher(TOKEN, queue.SimpleQueue())
    d.start()
    try:
        yield d
    finally:
        d.close()


def _poll(d: Dispatcher, headers: dict[str, str]) -> int:
    body = json.dumps({"machine": "m1", "results": [], "running": [], "wait_s": 0}).encode()
    request = urllib.request.Request(d.url + POLL_PATH, data=body, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as exc:
        return exc.code


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": TOKEN},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": "Bearer s3cret-tokem"},
        {"Authorization": f"Bearer {TOKEN}x"},
        {"Authorization": "Bearer "},
    ],
)
def test_the_dispatcher_refuses_a_poll_without_the_run_s_token(
    dispatcher: Dispatcher, headers: dict[str, str]
) -> None:
    assert _poll(dispatcher, headers) == 401
    assert dispatcher.refused == 1


def test_the_dispatcher_lets_the_run_s_token_through(dispatcher: Dispatcher) -> None:
    """Past the token, a machine the daemon has not heard of yet is told to come back."""
    assert _poll(dispatcher, {"Authorization": f"Bearer {TOKEN}"}) == 503
    assert dispatcher.refused == 0
