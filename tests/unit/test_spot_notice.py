"""Spot interruption notices and rebalance recommendations: the agent's reading of the
instance metadata (against a real HTTP server on loopback, IMDSv2 and v1), the
dispatcher's parsing, and the report."""

from __future__ import annotations

import json

import pytest

from autoscaler.bootstrap.agent import read_notice, read_rebalance, rebalance_url
from autoscaler.run.polls import BadRequest, Notice, parse_poll
from tests.integration.notices import NoticeServer


def test_no_notice_is_a_404_and_a_notice_is_read_with_the_session_token() -> None:
    with NoticeServer() as server:
        url = server.url.replace("{machine}", "i-1")
        assert read_notice(url) is None
        server.notice("i-1", "terminate", "2026-11-26T12:00:00Z")
        assert read_notice(url) == {"action": "terminate", "time": "2026-11-26T12:00:00Z"}
        assert read_notice(server.url.replace("{machine}", "i-2")) is None  # another's
        assert server.reads == {"i-1": 2, "i-2": 1}
        assert server.tokenless == 0


def test_without_imdsv2_the_notice_is_read_without_a_token() -> None:
    """A metadata server with no token endpoint (IMDSv1): the GET goes without one."""
    with NoticeServer(imdsv2=False) as server:
        server.notice("i-1", "stop")
        url = server.url.replace("{machine}", "i-1")
        assert read_notice(url) == {"action": "stop", "time": ""}
        assert server.tokenless == 1


def test_nobody_answering_is_no_notice() -> None:
    with NoticeServer() as server:
        url = server.url.replace("{machine}", "i-1")
    assert read_notice(url, timeout=0.5) is None  # closed: connection refused


def test_the_dispatcher_takes_a_notice_and_names_a_bad_one() -> None:
    body = {"machine": "m", "results": [], "running": [3], "wait_s": 0}
    poll = parse_poll(
        json.dumps({**body, "notice": {"action": "terminate", "time": "T"}}).encode(), 0
    )
    assert poll.notice == Notice("terminate", "T")
    assert parse_poll(json.dumps(body).encode(), 0).notice is None
    with pytest.raises(BadRequest, match="notice"):
        parse_poll(json.dumps({**body, "notice": {"action": 3}}).encode(), 0)


def test_the_rebalance_recommendation_is_read_beside_the_notice() -> None:
    with NoticeServer() as server:
        url = rebalance_url(server.url.replace("{machine}", "i-1"))
        assert url is not None
        assert url.endswith("/i-1/events/recommendations/rebalance")
        assert read_rebalance(url) is None
        server.rebalance("i-1", "2026-11-26T11:58:00Z")
        assert read_rebalance(url) == {"time": "2026-11-26T11:58:00Z"}
        assert read_notice(server.url.replace("{machine}", "i-1")) is None  # no notice yet
        assert server.rebalance_reads == {"i-1": 2}
        assert server.tokenless == 0


def test_a_notice_url_of_another_shape_has_no_rebalance_beside_it() -> None:
    assert rebalance_url("http://127.0.0.1:9/notice") is None


def test_the_dispatcher_takes_a_rebalance_and_names_a_bad_one() -> None:
    body = {"machine": "m", "results": [], "running": [3], "wait_s": 0}
    poll = parse_poll(json.dumps({**body, "rebalance": {"time": "T"}}).encode(), 0)
    assert poll.rebalance == "T"
    assert parse_poll(json.dumps(body).encode(), 0).rebalance is None
    with pytest.raises(BadRequest, match="rebalance"):
        parse_poll(json.dumps({**body, "rebalance": "soon"}).encode(), 0)
